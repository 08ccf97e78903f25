"""Deploying a model that calls tierkit ops: torch.export -> AOTInductor
package (.pt2) -> run it in a fresh Python process, and from a C++ program
with no Python (examples/aoti-runner), bit for bit equal to eager."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tierkit_torch
import torch
from tensor_files import read_tensors, write_tensors
from tierkit_core.op_table import OPS, ROW_REDUCTIONS
from tierkit_core.op_testing import scalar_values

ops = torch.ops.tierkit
RUNNER = Path(__file__).resolve().parents[1] / "examples" / "aoti-runner"


class Model(torch.nn.Module):
    """Every functional tierkit op of the op table, in one graph: each
    pointwise entry (a second tensor where it takes one, its test scalars),
    then each row reduction with its parameters (and its fused residual form
    where it has one)."""

    def __init__(self):
        super().__init__()
        for entry in ROW_REDUCTIONS:
            for i, p in enumerate(entry.params):
                value = (
                    torch.linspace(0.5, 1.5, 16) if p == "weight" else torch.linspace(-0.2, 0.3, 16) * (i + 1)
                )
                self.register_buffer(f"{entry.name}_{p}", value)

    def forward(self, x, y):
        h = x
        for op in OPS:
            tensors = (h, y)[: len(op.tensors)]
            h = getattr(ops, op.name)(*tensors, *scalar_values(op.name))
        for entry in ROW_REDUCTIONS:
            params = [getattr(self, f"{entry.name}_{p}") for p in entry.params]
            h = getattr(ops, entry.name)(h, *params, 0 if entry.has_dim else 1e-6)
            if entry.fused_add:
                n, r = getattr(ops, entry.add_name)(h, x, *([None] * len(params)), None)
                h = ops.custom_add(n, r)
        return h


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """The packaged model (dynamic batch dim), its inputs at another batch size, and eager's output."""
    tmp = tmp_path_factory.mktemp("aoti")
    gen = torch.Generator().manual_seed(0)
    example = (torch.randn(4, 16, generator=gen), torch.randn(4, 16, generator=gen))
    batch = torch.export.Dim("batch", min=1, max=4096)
    exported = torch.export.export(Model(), example, dynamic_shapes={"x": {0: batch}, "y": {0: batch}})
    path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp / "model.pt2"))
    inputs = (torch.randn(37, 16, generator=gen), torch.randn(37, 16, generator=gen))
    write_tensors(tmp / "inputs.bin", inputs)
    return Path(path), tmp, Model()(*inputs)


LOAD_AND_RUN = textwrap.dedent("""
    import sys, torch
    {imports}
    sys.path.insert(0, {tests!r})
    from tensor_files import read_tensors, write_tensors
    from pathlib import Path
    model = torch._inductor.aoti_load_package(sys.argv[1])
    write_tensors(Path(sys.argv[3]), [model(*read_tensors(Path(sys.argv[2])))])
""")


def unpack_into(tmp: Path, environ) -> dict[str, str]:
    """The environment with TMPDIR set to the test's own folder: torch's
    package loader unpacks each .pt2 into a fresh aotinductor_* folder under
    the temp directory and, when loading fails (the operator library missing),
    never removes it; left to /tmp, every run of these tests left three."""
    return {**environ, "TMPDIR": str(tmp)}


def run_python(package_path: Path, tmp: Path, imports: str):
    code = LOAD_AND_RUN.format(imports=imports, tests=str(Path(__file__).parent))
    return subprocess.run(
        [sys.executable, "-c", code, str(package_path), str(tmp / "inputs.bin"), str(tmp / "py_out.bin")],
        capture_output=True,
        text=True,
        timeout=300,
        env=unpack_into(tmp, os.environ),
    )


def test_package_runs_in_a_fresh_python_process_bit_equal_to_eager(package):
    path, tmp, eager = package
    proc = run_python(path, tmp, "import tierkit_torch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = read_tensors(tmp / "py_out.bin")
    assert got.shape == eager.shape == (37, 16)
    assert torch.equal(got, eager)


def test_without_the_operator_library_the_error_names_it(package):
    path, tmp, _ = package
    proc = run_python(path, tmp, "")
    assert proc.returncode != 0
    # torch's own words; `tierkit doctor explain` recognises them (tools tier, test_explain.py)
    assert "Could not find schema for tierkit::" in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    if not (shutil.which("cmake") and shutil.which("ninja")):
        pytest.skip("cmake and ninja build the C++ runner")
    build = tmp_path_factory.mktemp("runner-build")
    torch_root = os.path.dirname(torch.__file__)
    subprocess.run(
        [
            "cmake",
            "-S",
            str(RUNNER),
            "-B",
            str(build),
            "-G",
            "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DTORCH_ROOT={torch_root}",
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    return build / "aoti_runner"


def test_cpp_runner_without_python_bit_equal_to_eager(package, runner):
    path, tmp, eager = package
    env = unpack_into(tmp, {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    proc = subprocess.run(
        [
            str(runner),
            tierkit_torch.library_path(),
            str(path),
            str(tmp / "inputs.bin"),
            str(tmp / "cpp_out.bin"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (got,) = read_tensors(tmp / "cpp_out.bin")
    assert torch.equal(got, eager)
    maps = subprocess.run(["ldd", str(runner)], capture_output=True, text=True).stdout
    assert "libpython" not in maps and "torch_python" not in maps


def test_cpp_runner_without_the_operator_library_fails_clearly(package, runner):
    path, tmp, _ = package
    proc = subprocess.run(
        [str(runner), str(path), str(tmp / "inputs.bin"), str(tmp / "none.bin")],
        capture_output=True,
        text=True,
        env=unpack_into(tmp, os.environ),
    )
    if proc.returncode == 2:  # usage: only three arguments; pass an unrelated library instead
        libc10 = str(Path(torch.__file__).parent / "lib" / "libc10.so")
        proc = subprocess.run(
            [str(runner), libc10, str(path), str(tmp / "inputs.bin"), str(tmp / "none.bin")],
            capture_output=True,
            text=True,
            env=unpack_into(tmp, os.environ),
        )
    assert proc.returncode == 1
    assert "tierkit::" in proc.stderr, proc.stderr[-2000:]
