"""tests-models' version matrix: one cell per transformers/kernels pair
(ci/requirements-models-<cell>.txt), each in its own venv, .nox/_models_<cell>.

torch (5.5 GB) and the tiers are installed once, in .nox/_env. A cell's venv
reads them through a .pth that adds .nox/_env's site-packages after its own
(``site.addsitedir``, so .nox/_env's own .pth files, editable installs
included, are processed too): pip in the cell sees torch as installed and
puts only transformers, kernels, peft and what they need (~230 MB) in the
cell, and the cell's versions come first on sys.path. Two transformers, one
torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .env import BASE_PYTHON, BUILD_ENV, ENV_DIR, ROOT, shared_env

if TYPE_CHECKING:
    import nox

CELLS = ("oldest", "newest")
TESTS = ROOT / "packages/torch-cpu/tests-models"
# What the `tests` session (CI) leaves out of a cell, to keep within its 30
# minutes; `nox -s tests-models` runs every cell whole. The oldest cell's
# compile-and-export test runs for one family per casting convention (Llama's
# "llama", Gemma 3's "gemma"), the newest for all nine: the first cell to run
# fills the inductor cache cold, and these tests were ~60 of its 97 s on a
# fresh clone. Every eager test still runs in both cells.
CI_SELECTION = {
    "oldest": ("-k", "not test_compile_fullgraph_and_export_dynamic_batch or llama- or gemma3_text-"),
}


def requirements(cell: str) -> str:
    return f"ci/requirements-models-{cell}.txt"


def _site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python3*/site-packages"))


def cell_env(session: nox.Session, cell: str) -> str:
    """.nox/_models_<cell> up to date over .nox/_env; its python."""
    env = ROOT / ".nox" / f"_models_{cell}"
    if not (env / "bin" / "python").exists():
        session.run(BASE_PYTHON, "-m", "venv", str(env), external=True)
    pth = _site_packages(env) / "_tierkit_shared_env.pth"
    line = f"import site; site.addsitedir({str(_site_packages(ENV_DIR))!r})\n"
    if not pth.exists() or pth.read_text() != line:
        pth.write_text(line)
    return shared_env(session, requirements(cell), env_dir=env)


def run(
    session: nox.Session, args: tuple[str, ...], cells: tuple[str, ...] = CELLS, in_ci: bool = False
) -> None:
    """The suite in each cell (`-- --cell newest` for one); `in_ci` (the
    `tests` session) leaves out each cell's CI_SELECTION."""
    args = list(args)
    if "--cell" in args:
        i = args.index("--cell")
        cells = (args[i + 1],)
        del args[i : i + 2]
    for cell in cells:
        py = cell_env(session, cell)
        session.log(f"tests-models [{cell}]: {Path(requirements(cell)).name}")
        selection = CI_SELECTION.get(cell, ()) if in_ci else ()
        if selection:
            session.log(f"tests-models [{cell}]: CI's part, {' '.join(selection)} (nox -s tests-models: all)")
        # One worker: two (-n 2) took 81 -> 54 s a cell with a warm compile cache, but on a fresh clone
        # 70 -> 78 s and 46 -> 59 s (both workers compile the same graphs into a cold cache).
        session.run(
            py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *selection, str(TESTS), *args,
            external=True, env={**BUILD_ENV, "HF_HUB_OFFLINE": "1", "TIERKIT_MODELS_CELL": cell},
        )  # fmt: skip
