"""Every doctor check, with the environment faked where needed."""

import json
import os
import subprocess
import sys
import time

import pytest
from tierkit.doctor import jit_cache, tiers, toolchain, torch_cuda
from tierkit.doctor.report import Status, exit_code

TORCH_13 = {
    "version": "2.14.1+cu130",
    "file": "/x/torch/__init__.py",
    "cuda": "13.0",
    "available": False,
    "abi": True,
    "capabilities": [],
}


def by_name(checks):
    return {c.name: c for c in checks}


# ---- toolchain -------------------------------------------------------------------


def test_python_checks_ok():
    checks = by_name(toolchain.python_checks())
    assert checks["python"].status == Status.OK and sys.executable in checks["python"].value
    assert checks["free-threaded"].status == Status.OK


def test_compiler_found_and_cxx17_compiles():
    checks = by_name(toolchain.compiler_checks())
    assert checks["c++ compiler"].status == Status.OK
    assert checks["c++17"].status == Status.OK


def test_no_compiler_is_a_fail(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    (check,) = toolchain.compiler_checks()
    assert check.status == Status.FAIL and "g++" in check.fix


def test_compiler_without_cxx17_is_a_fail(fake_bin, monkeypatch):
    fake = fake_bin(
        "old-g++",
        "echo 'old-g++ 4.8'; case \"$1\" in --version) exit 0;; *) echo 'error: unrecognized -std=c++17' >&2; exit 1;; esac",
    )
    monkeypatch.setenv("CXX", str(fake))
    checks = by_name(toolchain.compiler_checks())
    assert checks["c++ compiler"].status == Status.OK
    assert checks["c++17"].status == Status.FAIL and "c++17" in checks["c++17"].value


def test_ninja_and_cmake_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    checks = by_name(toolchain.build_tool_checks())
    assert checks["ninja"].status == Status.FAIL and "load()" in checks["ninja"].fix
    assert checks["cmake"].status == Status.FAIL


def test_ninja_present():
    assert by_name(toolchain.build_tool_checks())["ninja"].status == Status.OK


# ---- torch -------------------------------------------------------------------------


def test_torch_not_installed_is_a_warning():
    (check,) = torch_cuda.torch_checks(None, "ModuleNotFoundError: No module named 'torch'")
    assert check.status == Status.WARN


def test_torch_import_crash_is_a_fail():
    (check,) = torch_cuda.torch_checks(None, "OSError: libc10.so: cannot open shared object file")
    assert check.status == Status.FAIL and "libc10" in check.value


def test_torch_without_gpu_warns():
    checks = by_name(torch_cuda.torch_checks(TORCH_13, ""))
    assert checks["torch"].status == Status.OK
    assert checks["torch.cuda.is_available"].status == Status.WARN


def test_real_torch_probe():
    pytest.importorskip("torch")
    info, _ = torch_cuda.torch_info()
    import torch

    assert info["version"] == torch.__version__ and info["abi"] == bool(torch._C._GLIBCXX_USE_CXX11_ABI)


# ---- CUDA ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toolkit", "torch_cuda_version", "status"),
    [("13.0", "13.0", Status.OK), ("13.1", "13.0", Status.WARN), ("12.4", "13.0", Status.FAIL)],
)
def test_nvcc_vs_torch_rule(toolkit, torch_cuda_version, status, fake_toolkit, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit(toolkit)))
    checks = by_name(torch_cuda.cuda_checks({**TORCH_13, "cuda": torch_cuda_version}))
    assert checks["CUDA_HOME"].status == Status.OK
    assert checks["nvcc vs torch"].status == status, checks["nvcc vs torch"]


def test_wrapper_nvcc_on_path_is_flagged(fake_bin, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    fake_bin("nvcc", 'exec /nonexistent/nvcc "$@"')
    checks = torch_cuda.cuda_checks(TORCH_13)
    wrapper = by_name(checks)["nvcc on PATH"]
    assert wrapper.status == Status.WARN and "CUDA_HOME=/usr/local/cuda" in wrapper.fix


def test_cuda_home_without_nvcc_fails_for_a_cuda_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    checks = by_name(torch_cuda.cuda_checks(TORCH_13))
    assert checks["CUDA_HOME"].status == Status.FAIL
    cpu = by_name(torch_cuda.cuda_checks({**TORCH_13, "cuda": None}))
    assert cpu["CUDA_HOME"].status == Status.WARN


@pytest.mark.parametrize(
    ("arch_list", "status"), [("9.0", Status.FAIL), ("8.0;9.0", Status.OK), ("8.0+PTX", Status.OK)]
)
def test_arch_list_vs_visible_gpus(arch_list, status, fake_toolkit, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit("13.0")))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch_list)
    info = {**TORCH_13, "available": True, "capabilities": [[8, 0]]}
    assert by_name(torch_cuda.cuda_checks(info))["TORCH_CUDA_ARCH_LIST"].status == status


@pytest.mark.parametrize(("driver", "status"), [("13.2", Status.OK), ("12.2", Status.FAIL)])
def test_driver_cuda_version_is_not_the_toolkit(driver, status, fake_bin, fake_toolkit, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit("13.0")))
    fake_bin("nvidia-smi", f"echo '| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: {driver} |'")
    check = by_name(torch_cuda.cuda_checks(TORCH_13))["driver"]
    assert check.status == status
    if status == Status.OK:
        assert "not the toolkit" in check.value


def test_no_driver_is_a_warning(fake_toolkit, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit("13.0")))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert by_name(torch_cuda.cuda_checks(TORCH_13))["driver"].status == Status.WARN


# ---- tiers ------------------------------------------------------------------------------


def test_tier_not_installed_is_a_warning(monkeypatch):
    def missing(name):
        raise tiers.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(tiers.importlib.metadata, "version", missing)
    (check,) = tiers.tier_checks(tiers.TIERS[1], TORCH_13)
    assert check.status == Status.WARN and "packages/pybind-bridge" in check.fix


def test_installed_core_imports():
    pytest.importorskip("tierkit_core")
    (check,) = tiers.tier_checks(tiers.TIERS[0], None)
    assert check.status == Status.OK


def test_torch_tier_built_against_another_torch_fails(monkeypatch):
    pytest.importorskip("tierkit_torch")
    info, _ = torch_cuda.torch_info()
    monkeypatch.setattr(
        tiers, "build_info", lambda module: {"TORCH_VERSION": "2.0.0", "CXX11_ABI": not info["abi"]}
    )
    checks = by_name(tiers.tier_checks(tiers.TIERS[2], info))
    assert (
        checks["tier 2 torch-cpu torch"].status == Status.FAIL
        and "no-build-isolation" in checks["tier 2 torch-cpu torch"].fix
    )
    assert checks["tier 2 torch-cpu ABI"].status == Status.FAIL


def test_torch_tier_reports_ops_and_keys():
    pytest.importorskip("tierkit_torch")
    info, _ = torch_cuda.torch_info()
    checks = by_name(tiers.tier_checks(tiers.TIERS[2], info))
    ops = checks["tier 2 torch-cpu ops"]
    assert ops.status == Status.OK and "custom_add[CPU/Meta/Autograd" in ops.value
    assert checks["tier 2 torch-cpu torch"].status == Status.OK


def test_broken_extension_import_is_reported_not_fatal(monkeypatch):
    monkeypatch.setattr(tiers, "_import", lambda module: tiers.probe.Result(139, "", "Segmentation fault"))
    monkeypatch.setattr(tiers.importlib.metadata, "version", lambda name: "0.1.0")
    (check,) = tiers.tier_checks(tiers.TIERS[1], None)
    assert check.status == Status.FAIL and "Segmentation fault" in check.value


# ---- JIT cache --------------------------------------------------------------------------


def make_lock(root, name, age_min):
    d = root / name
    d.mkdir(parents=True)
    lock = d / "lock"
    lock.write_text("")
    old = time.time() - age_min * 60
    os.utime(lock, (old, old))
    return lock


def test_stale_lock_found_and_fixed(tmp_path):
    stale = make_lock(tmp_path, "py311_cpu/ext_a", 30)
    fresh = make_lock(tmp_path, "py311_cpu/ext_b", 1)
    checks = by_name(jit_cache.jit_cache_checks(root=tmp_path, older_than_min=10))
    assert checks["JIT locks"].status == Status.WARN and str(stale) in checks["JIT locks"].value
    assert str(fresh) not in checks["JIT locks"].value
    fixed = by_name(jit_cache.jit_cache_checks(fix=True, root=tmp_path, older_than_min=10))
    assert "removed 1" in fixed["JIT locks"].value
    assert not stale.exists() and fresh.exists()


def test_lock_held_open_by_a_live_process_is_not_stale(tmp_path):
    lock = make_lock(tmp_path, "py311_cpu/ext_c", 60)
    with open(lock):  # a running build holds its lock open
        assert jit_cache.stale_locks(tmp_path, 10) == []
    assert jit_cache.stale_locks(tmp_path, 10) == [lock]


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert jit_cache.cache_dir() == tmp_path


# ---- the command --------------------------------------------------------------------------


def test_doctor_json_and_exit_code(tmp_path):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "tierkit", "doctor", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    checks = json.loads(result.stdout)
    names = {c["name"] for c in checks}
    assert {"python", "c++17", "ninja", "cmake", "JIT cache"} <= names
    assert all(c["status"] in ("ok", "warn", "fail") for c in checks)
    assert result.returncode == (1 if any(c["status"] == "fail" for c in checks) else 0)


def test_exit_code_rule():
    from tierkit.doctor.report import fail, ok, warn

    assert exit_code([ok("a", "x"), warn("b", "y", "z")]) == 0
    assert exit_code([ok("a", "x"), fail("b", "y", "z")]) == 1
