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
    (check,) = tiers.tier_checks(_tier("tierkit_bridge"), TORCH_13)
    assert check.status == Status.WARN and "packages/pybind-bridge" in check.fix
    # The advice is the command that works: tierkit-core is on no index, so the
    # bridge must be built without isolation after core is installed.
    assert "pip install --no-build-isolation packages/pybind-bridge" in check.fix
    assert check.fix.index("packages/cpp-core") < check.fix.index("packages/pybind-bridge")
    (cuda,) = tiers.tier_checks(_tier("tierkit_cuda"), TORCH_13)
    assert "separate command" in cuda.fix and "--no-build-isolation packages/torch-cuda" in cuda.fix


def _tier(module):
    """The doctor's entry for `module` (by name: the list's order is the install order)."""
    return next(t for t in tiers.TIERS if t.module == module)


def test_doctor_says_which_environment_it_examines():
    env = by_name(toolchain.python_checks())["environment"]
    assert sys.prefix in env.value and "runs in" in env.value


def test_without_torch_nvcc_is_not_called_a_cpu_build_mismatch(fake_toolkit, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(fake_toolkit("13.0")))
    checks = torch_cuda.cuda_checks(None)  # torch not importable
    assert not any("CPU-only" in c.value for c in checks)
    assert by_name(checks)["nvcc"].status == Status.OK


def test_cuda_home_is_reported_once(fake_bin, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    fake_bin("nvcc", 'exec /nonexistent/nvcc "$@"')
    names = [c.name for c in torch_cuda.cuda_checks(TORCH_13)]
    assert names.count("CUDA_HOME") <= 1, names


def test_installed_core_imports():
    pytest.importorskip("tierkit_core")
    (check,) = tiers.tier_checks(_tier("tierkit_core"), None)
    assert check.status == Status.OK


def test_torch_tier_built_against_another_torch_fails(monkeypatch):
    pytest.importorskip("tierkit_torch")
    info, _ = torch_cuda.torch_info()
    monkeypatch.setattr(
        tiers, "build_info", lambda module: {"TORCH_VERSION": "2.0.0", "CXX11_ABI": not info["abi"]}
    )
    checks = by_name(tiers.tier_checks(_tier("tierkit_torch"), info))
    assert (
        checks["tier 2 torch-cpu torch"].status == Status.FAIL
        and "no-build-isolation" in checks["tier 2 torch-cpu torch"].fix
    )
    assert checks["tier 2 torch-cpu ABI"].status == Status.FAIL


def test_torch_tier_reports_ops_and_keys():
    pytest.importorskip("tierkit_torch")
    info, _ = torch_cuda.torch_info()
    checks = by_name(tiers.tier_checks(_tier("tierkit_torch"), info))
    ops = checks["tier 2 torch-cpu ops"]
    assert ops.status == Status.OK and "custom_add[CPU/Meta/Autograd" in ops.value
    # The probe reads the op table: every entry of every kind is reported.
    from tierkit_core.op_table import OPS, OUT_WRITERS, ROW_REDUCTIONS

    names = [e.name for e in (*OPS, *OUT_WRITERS)] + [n for r in ROW_REDUCTIONS for n in r.overloads]
    for name in names:
        assert f"{name}[CPU" in ops.value, (name, ops.value)
    assert checks["tier 2 torch-cpu torch"].status == Status.OK


def test_broken_extension_import_is_reported_not_fatal(monkeypatch):
    monkeypatch.setattr(tiers, "_import", lambda module: tiers.probe.Result(139, "", "Segmentation fault"))
    monkeypatch.setattr(tiers.importlib.metadata, "version", lambda name: "0.1.0")
    (check,) = tiers.tier_checks(_tier("tierkit_bridge"), None)
    assert check.status == Status.FAIL and "Segmentation fault" in check.value


# ---- JIT cache --------------------------------------------------------------------------


def make_lock(root, name, age_min, ninja=True):
    """A lock in torch's layout <root>/<tag>/<name>/lock, `age_min` minutes old."""
    d = root / name
    d.mkdir(parents=True)
    if ninja:
        (d / "build.ninja").write_text("# torch's build file\n")
    lock = d / "lock"
    lock.write_text("")
    old = time.time() - age_min * 60
    os.utime(lock, (old, old))
    return lock


def test_baton_torch_stale_lock_found_and_fixed(tmp_path):
    # Older torch (FileBaton): a lock file nobody holds blocks every later load().
    stale = make_lock(tmp_path, "py311_cpu/ext_a", 30)
    fresh = make_lock(tmp_path, "py311_cpu/ext_b", 1)
    # load() locks before it writes build.ninja: a build killed that early
    # leaves a lock alone, and it blocks the next load() all the same.
    early = make_lock(tmp_path, "py311_cpu/killed_early", 30, ninja=False)
    deep = make_lock(tmp_path, "py311_cpu/ext_c/sub", 30)  # not torch's layout
    checks = by_name(
        jit_cache.jit_cache_checks(root=tmp_path, older_than_min=10, torch_lock="baton", held=set())
    )
    assert "3 lock file(s)" in checks["JIT cache"].value  # not the deep one
    value = checks["JIT locks"].value
    assert checks["JIT locks"].status == Status.WARN and str(stale) in value and str(early) in value
    assert str(fresh) not in value and str(deep) not in value
    fixed = by_name(
        jit_cache.jit_cache_checks(fix=True, root=tmp_path, older_than_min=10, torch_lock="baton")
    )
    assert "removed 2" in fixed["JIT locks"].value
    assert not stale.exists() and not early.exists() and fresh.exists() and deep.exists()


def test_lock_counted_without_build_ninja_for_every_torch(tmp_path):
    # A lock alone in an extension folder (an explicit build_directory too) is counted.
    make_lock(tmp_path, "myext", 30, ninja=False)
    for scheme in ("advisory", None):
        (cache,) = jit_cache.jit_cache_checks(root=tmp_path, torch_lock=scheme, held=set())
        assert "1 lock file(s)" in cache.value, cache


def test_advisory_torch_lock_files_are_harmless_and_never_removed(tmp_path):
    # torch 2.14 (FileLock): the file stays after every build and blocks nothing.
    lock = make_lock(tmp_path, "py311_cu130/ext", 60)
    for fix in (False, True):
        checks = jit_cache.jit_cache_checks(fix=fix, root=tmp_path, torch_lock="advisory", held=set())
        assert all(c.status == Status.OK for c in checks), checks
        assert "advisory" in checks[0].value
    assert lock.exists()


def test_unknown_locking_scheme_is_not_judged(tmp_path):
    lock = make_lock(tmp_path, "py311_cpu/ext", 60)
    checks = jit_cache.jit_cache_checks(fix=True, root=tmp_path, torch_lock=None, held=set())
    assert all(c.status == Status.OK for c in checks) and lock.exists()


def test_cannot_tell_who_holds_it_means_no_fix(tmp_path):
    lock = make_lock(tmp_path, "py311_cpu/ext", 60)
    checks = by_name(jit_cache.jit_cache_checks(fix=True, root=tmp_path, torch_lock="baton", held=None))
    assert checks["JIT locks"].status == Status.WARN and "cannot tell" in checks["JIT locks"].value
    assert lock.exists()


def test_lock_held_by_a_live_child_process_is_not_stale(tmp_path):
    lock = make_lock(tmp_path, "py311_cpu/ext_c", 60)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1]); print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert jit_cache.stale_batons(tmp_path, 10, jit_cache.open_files()) == []
    finally:
        holder.kill()
        holder.wait()
    assert jit_cache.stale_batons(tmp_path, 10, jit_cache.open_files()) == [lock]


def test_symlinked_cache_dir_is_compared_by_canonical_path(tmp_path):
    real = tmp_path / "real"
    lock = make_lock(real, "py311_cpu/ext", 60)
    link = tmp_path / "link"
    link.symlink_to(real)
    linked_lock = link / "py311_cpu/ext/lock"
    with open(lock):  # held through the real path, looked up through the link
        assert jit_cache.stale_batons(link, 10, jit_cache.open_files()) == []
    assert jit_cache.stale_batons(link, 10, jit_cache.open_files()) == [linked_lock]


def test_the_installed_torch_reports_its_locking_scheme():
    info, _ = torch_cuda.torch_info()
    if info is None:
        pytest.skip("torch is not importable here")
    assert info["jit_lock"] in ("advisory", "baton")
    if info["version"].startswith("2.14."):
        assert info["jit_lock"] == "advisory"


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


def test_without_tier_defaults_the_fix_names_a_real_toolkit(fake_bin, fake_toolkit, monkeypatch):
    # A bare venv (no tierkit-cuda, no checkout beside it): the fix used to say
    # `export CUDA_HOME=None` and call the machine toolkit-less.
    toolkit = fake_toolkit("13.0")
    monkeypatch.setattr(
        torch_cuda, "tier_defaults", lambda: {"CUDA_HOME": None, "TORCH_CUDA_ARCH_LIST": None}
    )
    monkeypatch.setattr(torch_cuda, "standard_homes", lambda: [str(toolkit)])
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    fake_bin("nvcc", f'exec {toolkit}/bin/nvcc "$@"')
    checks = torch_cuda.cuda_checks(None)  # torch not importable
    assert not any("None" in c.fix or "=None" in c.value for c in checks), checks
    named = by_name(checks)
    assert f"export CUDA_HOME={toolkit}" in named["nvcc on PATH"].fix
    assert named["CUDA_HOME"].status == Status.WARN and str(toolkit) in named["CUDA_HOME"].value
    assert named["nvcc"].status == Status.OK


def test_no_toolkit_anywhere_says_so_without_none(fake_bin, monkeypatch, tmp_path):
    monkeypatch.setattr(
        torch_cuda, "tier_defaults", lambda: {"CUDA_HOME": None, "TORCH_CUDA_ARCH_LIST": None}
    )
    monkeypatch.setattr(torch_cuda, "standard_homes", lambda: [str(tmp_path / "nowhere")])
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    fake_bin("nvcc", 'exec /nonexistent/nvcc "$@"')
    checks = torch_cuda.cuda_checks(None)
    assert not any("None" in c.fix for c in checks), checks
    assert "export CUDA_HOME=<toolkit root>" in by_name(checks)["nvcc on PATH"].fix


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    # `tierkit doctor ... | head`: the reader is gone before the doctor writes.
    log = tmp_path / "build.log"
    log.write_text("/usr/bin/ld: cannot find -lfoo\n" * 2000)
    with open(log) as stdin:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tierkit", "doctor", "explain", "-"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdout.close()  # before the child can write: its first write meets EPIPE
        _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err
    assert proc.returncode == 141
