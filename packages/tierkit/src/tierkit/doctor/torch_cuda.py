"""torch, and the CUDA toolchain as torch sees it."""

from __future__ import annotations

import importlib.util
import os
import re
import runpy
from pathlib import Path

from . import probe
from .report import Check, fail, ok, warn

TORCH_PROBE = r"""
import json, torch
info = {
    "version": torch.__version__,
    "file": torch.__file__,
    "cuda": torch.version.cuda,
    "available": torch.cuda.is_available(),
    "abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    "capabilities": [list(torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())]
                    if torch.cuda.is_available() else [],
}
# How cpp_extension.load() locks a build directory: an OS advisory lock on
# `lock` (FileLock, torch >= 2.14: the file stays and is harmless) or a
# FileBaton, whose lock file's existence blocks every later build.
import inspect, torch.utils.cpp_extension as ce
src = inspect.getsource(ce)
info["jit_lock"] = "advisory" if "FileLock(" in src else ("baton" if "FileBaton(" in src else "unknown")
print(json.dumps(info))
"""


# Where toolkits live when nothing says otherwise: torch's own default
# first, then versioned installs (newest first, by name).
STANDARD_HOMES = ["/usr/local/cuda"]


def standard_homes() -> list[str]:
    return [*STANDARD_HOMES, *sorted((str(p) for p in Path("/usr/local").glob("cuda-*")), reverse=True)]


def tier_defaults() -> dict:
    """tierkit-cuda's build defaults (its cuda_defaults.py), read by path
    without importing torch: from the installed tier, else from the source
    checkout this doctor runs from."""
    candidates = []
    spec = importlib.util.find_spec("tierkit_cuda")
    if spec and spec.submodule_search_locations:
        candidates += [Path(p, "cuda_defaults.py") for p in spec.submodule_search_locations]
    candidates.append(Path(__file__).resolve().parents[4] / "torch-cuda/src/tierkit_cuda/cuda_defaults.py")
    for path in candidates:
        if path.is_file():
            values = runpy.run_path(str(path))
            return {"CUDA_HOME": values["CUDA_HOME"], "TORCH_CUDA_ARCH_LIST": values["TORCH_CUDA_ARCH_LIST"]}
    return {"CUDA_HOME": None, "TORCH_CUDA_ARCH_LIST": None}


def torch_info() -> tuple[dict | None, str]:
    info, result = probe.python_json(TORCH_PROBE)
    return info, probe.tail(result.stderr)


def torch_checks(info: dict | None, error: str) -> list[Check]:
    if info is None:
        if "No module named 'torch'" in error:
            return [
                warn(
                    "torch",
                    "not installed",
                    "pip install torch==2.14.1 (CUDA build) or torch==2.13.0 (CPU) for the torch tiers",
                )
            ]
        return [
            fail(
                "torch",
                f"import failed: {error}",
                "reinstall torch; run `tierkit doctor explain` on the traceback",
            )
        ]
    checks = [
        ok("torch", f"{info['version']} ({Path(info['file']).parent})"),
        ok(
            "torch.version.cuda",
            str(info["cuda"]) + ("" if info["cuda"] else " (CPU-only build: no CUDA tier)"),
        ),
        ok("torch CXX11 ABI", str(info["abi"])),
    ]
    checks.append(
        ok("torch.cuda.is_available", "True")
        if info["available"]
        else warn(
            "torch.cuda.is_available",
            "False",
            "no usable GPU here: CUDA tiers build, but their GPU tests skip",
        )
    )
    return checks


def nvcc_version(nvcc: str) -> str | None:
    match = re.search(r"release (\d+)\.(\d+)", probe.run([nvcc, "--version"]).stdout)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def resolve_cuda_home() -> tuple[str | None, str]:
    """As torch.utils.cpp_extension does: CUDA_HOME/CUDA_PATH, else the
    parent of the nvcc on PATH, else /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var], f"${var}"
    nvcc = probe.which("nvcc")
    if nvcc:
        return str(Path(os.path.realpath(nvcc)).parent.parent), f"from nvcc on PATH ({nvcc})"
    if Path("/usr/local/cuda").exists():
        return "/usr/local/cuda", "default /usr/local/cuda"
    return None, "not found"


def is_toolkit(home: str | None) -> bool:
    """A CUDA toolkit root: bin/nvcc and the runtime library to link."""
    return (
        home is not None and Path(home, "bin", "nvcc").exists() and any(Path(home).glob("lib*/libcudart.so*"))
    )


def is_wrapper_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def compare_versions(toolkit: str, torch_cuda: str) -> tuple[str, str]:
    """torch's rule (cpp_extension._check_cuda_version): a major mismatch is an
    error, a minor one a warning."""
    t_major, t_minor = toolkit.split(".")[:2]
    c_major, c_minor = torch_cuda.split(".")[:2]
    if t_major != c_major:
        return "fail", f"nvcc {toolkit} vs torch CUDA {torch_cuda}: major versions differ"
    if t_minor != c_minor:
        return "warn", f"nvcc {toolkit} vs torch CUDA {torch_cuda}: minor versions differ"
    return "ok", f"nvcc {toolkit} matches torch CUDA {torch_cuda}"


def cuda_checks(info: dict | None) -> list[Check]:
    torch_cuda = info.get("cuda") if info else None
    checks: list[Check] = []
    defaults = tier_defaults()
    # tierkit-cuda's default, else (neither installed nor in this checkout,
    # e.g. a bare venv without torch) the first real toolkit where toolkits
    # usually live: the fix must name a directory, never "None".
    default_home = next(
        (h for h in [defaults["CUDA_HOME"], *standard_homes()] if h and is_toolkit(h)),
        defaults["CUDA_HOME"],
    )
    export_home = f"export CUDA_HOME={default_home}" if default_home else "export CUDA_HOME=<toolkit root>"
    default_arch = defaults["TORCH_CUDA_ARCH_LIST"] or "torch's guess"
    home, how = resolve_cuda_home()
    on_path = probe.which("nvcc")
    if on_path and not os.environ.get("CUDA_HOME") and is_wrapper_script(on_path):
        checks.append(
            warn(
                "nvcc on PATH",
                f"{on_path} is a wrapper script; torch would take CUDA_HOME={home}",
                f"{export_home} (the toolkit root); otherwise linking fails with `cannot find -lcudart`",
            )
        )
    if not is_toolkit(home) and not os.environ.get("CUDA_HOME") and default_home and is_toolkit(default_home):
        checks.append(
            warn(
                "CUDA_HOME",
                f"unset; torch alone would use {home} ({how}), which has no lib64/libcudart.so; "
                f"a toolkit is at {default_home}",
                f"{export_home} so torch extensions (tierkit's included) link",
            )
        )
        home, how = default_home, "found where toolkits are installed"
        reported_home = True
    else:
        reported_home = False
    if not is_toolkit(home):
        status = fail if torch_cuda else warn
        checks.append(
            status(
                "CUDA_HOME",
                f"{home} ({how}): no bin/nvcc with lib64/libcudart.so beside it",
                "install the CUDA toolkit and export CUDA_HOME=<root with bin/nvcc>",
            )
        )
        return checks
    assert home is not None  # is_toolkit(None) is False
    nvcc = str(Path(home, "bin", "nvcc"))
    if not reported_home:  # (the warning above already named the toolkit tierkit will use)
        checks.append(ok("CUDA_HOME", f"{home} ({how})"))
    toolkit = nvcc_version(nvcc)
    if toolkit is None:
        checks.append(fail("nvcc", f"{nvcc} --version printed no release", "reinstall the CUDA toolkit"))
        return checks
    if torch_cuda:
        level, text = compare_versions(toolkit, torch_cuda)
        if level == "ok":
            checks.append(ok("nvcc vs torch", text))
        else:
            fix = f"use a CUDA {torch_cuda} toolkit, or the torch build for CUDA {toolkit}"
            checks.append((fail if level == "fail" else warn)("nvcc vs torch", text, fix))
    elif info is None:
        checks.append(ok("nvcc", f"{toolkit} (torch not importable here: nothing to compare it with)"))
    else:
        checks.append(
            warn(
                "nvcc",
                f"{toolkit}, but torch is a CPU-only build",
                "install the CUDA build of torch for the CUDA tier",
            )
        )

    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    caps = [f"{a}.{b}" for a, b in (info or {}).get("capabilities", [])]
    if caps:
        wanted = set(
            (arch_list or defaults["TORCH_CUDA_ARCH_LIST"] or "")
            .replace(";", " ")
            .replace("+PTX", "")
            .split()
        )
        missing = sorted(set(caps) - wanted)
        checks.append(
            ok(
                "TORCH_CUDA_ARCH_LIST",
                f"{arch_list or f'(unset: tiers default to {default_arch})'} covers GPUs {caps}",
            )
            if not missing
            else fail(
                "TORCH_CUDA_ARCH_LIST",
                f"{arch_list or f'{default_arch} (default)'} lacks {missing} of the visible GPUs {caps}",
                f'export TORCH_CUDA_ARCH_LIST="{";".join(sorted(wanted | set(caps)))}" and rebuild (else: no kernel image is available)',
            )
        )
    else:
        checks.append(
            ok(
                "TORCH_CUDA_ARCH_LIST",
                f"{arch_list or f'(unset: tiers default to {default_arch})'}; no GPU visible to compare",
            )
        )

    smi = probe.which("nvidia-smi")
    driver = re.search(r"CUDA Version:\s*([\d.]+)", probe.run([smi]).stdout) if smi else None
    if driver is None:
        checks.append(
            warn(
                "driver",
                "no nvidia-smi / NVIDIA driver",
                "no GPU here: building works, running CUDA kernels needs a driver",
            )
        )
    else:
        # The driver's "CUDA Version" is the newest runtime it can serve, not
        # an installed toolkit; it must be >= the toolkit torch was built with.
        drv = driver.group(1)
        newer = tuple(map(int, drv.split("."))) >= tuple(map(int, (torch_cuda or toolkit).split(".")[:2]))
        checks.append(
            ok("driver", f"supports CUDA {drv} (a driver capability, not the toolkit {toolkit})")
            if newer
            else fail("driver", f"supports CUDA {drv} < {torch_cuda or toolkit}", "update the NVIDIA driver")
        )
    return checks
