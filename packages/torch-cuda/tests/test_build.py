"""Checks that run everywhere, GPU or not: the tier built, links, imports and
registered a CUDA kernel for every op; the .so holds sm_90 device code."""

import os
import subprocess
from pathlib import Path

import pytest
import tierkit_cuda
import torch
from conftest import OPS


def test_imports_without_a_gpu():
    assert tierkit_cuda.__version__
    assert tierkit_cuda.ops.custom_add is not None


@pytest.mark.parametrize("op", OPS)
def test_cuda_kernel_registered(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"tierkit::{op}", "CUDA")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(
        f"tierkit::{op}", "CPU"
    )  # tierkit_torch's, untouched


def test_timing_op_registered():
    assert torch._C._dispatch_has_kernel("tierkit_cuda::time_op")


def test_build_info_matches_running_torch():
    from tierkit_cuda import _build_info

    assert _build_info.TORCH_VERSION == torch.__version__
    assert _build_info.CUDA_VERSION == torch.version.cuda
    assert _build_info.CXX11_ABI == bool(torch._C._GLIBCXX_USE_CXX11_ABI)


def cuobjdump() -> Path | None:
    try:
        import triton
    except ImportError:
        return None
    exe = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return exe if exe.exists() else None


def test_shared_object_holds_requested_device_code():
    exe = cuobjdump()
    if exe is None:
        pytest.skip("no cuobjdump: it ships in the `triton` package, which is not installed")
    from tierkit_cuda import _build_info

    so = Path(tierkit_cuda.library_path())
    listing = subprocess.run(
        [str(exe), "--list-elf", str(so)], capture_output=True, text=True, check=True
    ).stdout
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST", _build_info.TORCH_CUDA_ARCH_LIST)
    for arch in archs.replace(";", " ").split():
        sm = "sm_" + arch.replace(".", "").replace("+PTX", "")
        assert sm in listing, f"{sm} missing from:\n{listing}"
    print(listing)


def test_cpu_tensors_still_take_the_cpu_kernel():
    a = torch.arange(4.0)
    assert torch.equal(torch.ops.tierkit.scale_shift(a, 2.0, 1.0), 2 * a + 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_cuda_call_without_gpu_fails_cleanly():
    with pytest.raises((RuntimeError, AssertionError)):
        torch.ops.tierkit.custom_add(torch.ones(2, device="cuda"), torch.ones(2, device="cuda"))


def test_kernel_library_has_no_python_dependency():
    from tierkit_torch_common.build import python_dependencies

    assert python_dependencies(tierkit_cuda.library_path()) == []
