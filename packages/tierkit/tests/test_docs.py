"""Every shell and Python block in README.md, CONTRIBUTING.md, docs/ and the
tiers' READMEs is either run here, as written, or listed in RUN_BY with the CI
session that runs it (checked to be one CI runs): a page can no longer drift
from the code without a test noticing. Figures a page quotes from the
benchmark report are checked against the report, and the example report
against the code that renders it.

Blocks run in a scratch copy of the checkout, so what they build and write
lands there, and fail when they leave a file that git would see or that
counts in a tier's source hash (the next session would rebuild that tier).
They run in an overlay environment: a scratch venv that sees everything the
running environment has installed but installs into itself, so
`pip install packages/...` as the pages write it changes nothing outside the
test. `pip`, `python`, `pytest` and `tierkit` resolve to it. A block whose
modules or programs are not here (a bare venv) is skipped, saying which.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import runpy
import shlex
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = ["README.md", "CONTRIBUTING.md"]
PAGES += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
PAGES += sorted(str(p.relative_to(ROOT)) for p in (ROOT / "packages").glob("*/README.md"))
FENCE = re.compile(r"^```(bash|sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TIERS = runpy.run_path(str(ROOT / "ci" / "nox_support" / "tiers.py"))["TIERS"]
# What tier_digest (ci/nox_support/env.py) leaves out of a tier's source hash.
HASH_SKIPS = {"build", "__pycache__", ".pytest_cache", "dist"}

# (page, first line of the block) -> (the CI sessions that run it, why not here).
RUN_BY = {
    ("README.md", "bash ci/nox.sh -s bench"): (
        "tests-tools",
        "the main job: every tier built, then minutes of benchmarks; "
        "test_bench_smoke.py runs `tierkit bench --quick`; the second line is CI's own command",
    ),
    ("README.md", "bash ci/nox.sh -s tests-core -- -R"): (
        "tests",
        "three sessions CI runs whole; test_workspace.py records that each passes its arguments on",
    ),
    ("CONTRIBUTING.md", "bash ci/nox.sh -s tests-core"): ("tests-core", "the session itself"),
    ("CONTRIBUTING.md", "bash ci/nox.sh -s tests-torch"): ("tests-torch", "the session itself"),
    ("CONTRIBUTING.md", "bash ci/nox.sh -s lint"): ("lint build tests sanitize fuzz", "CI's own command"),
    ("CONTRIBUTING.md", "pip install --no-build-isolation packages/cpp-core"): (
        "build",
        "rebuilds torch-cpu (~1 min): the build session installs core, then builds torch-cpu "
        "without isolation against it; test_install_commands_respect_tier_order checks the order",
    ),
    ("CONTRIBUTING.md", "python -m pip wheel --no-deps -w dist"): (
        "build",
        "the build session does the same from the sdists (isolated, PIP_NO_INDEX=1)",
    ),
    ("docs/benchmarks.md", "bash ci/nox.sh -s bench"): (
        "tests-tools",
        "a full benchmark run (minutes); test_bench_smoke.py runs `tierkit bench --quick`",
    ),
    ("docs/reliability.md", "bash ci/nox.sh -s tests-cross"): (
        "tests-cross",
        "the soak profile, 2000 examples per op (minutes); CI runs the default profile",
    ),
    ("docs/deploy.md", "cd packages/torch-cpu/examples/aoti-runner"): (
        "tests-torch",
        "test_deploy.py builds this runner with the same CMake lines and runs it on a package with these "
        "four arguments (~30 s more here); test_the_runner_block_is_what_test_deploy_runs checks the "
        "block's input writer and argument order against it",
    ),
    ("docs/torch-cuda.md", "bash ci/nox.sh -s tests-cuda"): ("tests-cuda", "the session itself"),
    ("packages/cpp-core/README.md", "bash ci/nox.sh -s tests-core"): ("tests-core sanitize", "the sessions"),
    ("packages/cpp-core/README.md", "cmake -S packages/cpp-core"): (
        "tests-core",
        "the CTest build tests-core does, in build/core-tests",
    ),
    ("packages/pybind-bridge/README.md", "bash ci/nox.sh -s tests-bridge"): (
        "tests-bridge sanitize",
        "the sessions",
    ),
    ("packages/pybind-bridge/README.md", "pip install packages/cpp-core"): (
        "tests-bridge-3.13",
        "the same three steps in a fresh Python 3.13 venv (core's wheel, the bridge without build "
        "isolation, its pytest): a second build of both here would add ~90 s to CI",
    ),
    ("packages/pybind-bridge/README.md", "pip wheel --no-deps -w dist"): (
        "build",
        "the build session does the same from the sdist (isolated, PIP_NO_INDEX=1, find-links dist/)",
    ),
    ("packages/tierkit/README.md", "tierkit doctor"): (
        "tests-tools",
        "a usage summary with placeholders (LOG, `...`); test_checks.py and test_explain.py run each form",
    ),
    ("packages/tierkit/README.md", "bash ci/nox.sh -s tests-tools"): (
        "tests-tools",
        "runs this very suite (its second line is how a bare venv runs it)",
    ),
    ("packages/torch-common/README.md", "pip install packages/cpp-core packages/torch-common"): (
        "tests-common",
        "installs core and this package beside torch and runs its tests: what tests-common does",
    ),
    ("packages/torch-cpu/README.md", "bash ci/nox.sh -s tests-torch"): (
        "tests-torch sanitize",
        "the sessions",
    ),
    ("packages/torch-cpu/README.md", "pip install torch==2.14.1"): (
        "tests-torch",
        "rebuilds torch-cpu AOT and JIT (~3 min) and runs its whole suite: what tests-torch does "
        "(CI's `tests` leaves the JIT build to tests-torch and the on-demand cells)",
    ),
    ("packages/torch-cuda/README.md", "import torch, tierkit_cuda"): (
        "tests-cuda",
        "needs a CUDA tensor (x_cuda); tests-cuda runs the ops on one where a GPU is",
    ),
    ("packages/torch-cuda/README.md", "bash ci/nox.sh -s tests-cuda"): ("tests-cuda", "the session itself"),
    ("packages/torch-cuda/README.md", "export CUDA_HOME"): (
        "tests-cuda",
        "rebuilds torch-cpu and torch-cuda (~3 min) against the 5.5 GB CUDA torch: what tests-cuda does",
    ),
    ("packages/torch-stable/README.md", "bash ci/nox.sh -s tests-stable"): (
        "tests-stable",
        "the session itself",
    ),
    ("packages/torch-stable/README.md", "pip install setuptools wheel"): (
        "tests-stable",
        "tests-stable builds this wheel (from its sdist) and runs the same suite under three torches (2.13.0, 2.14.1, 2.15.0)",
    ),
}

# Fragments of a file, not programs: each is checked by the test named.
FRAGMENTS = {("docs/architecture.md", "Tier("): "test_the_example_tier_entry_is_complete"}

# What a shell block needs besides the overlay's Python ("bin:" = a program on
# PATH). Python blocks need what they import.
NEEDS = {
    ("docs/deploy.md", "cd packages/torch-cpu/examples/aoti-runner"): (
        "torch",
        "numpy",
        "tierkit_torch",
        "bin:cmake",
        "bin:ninja",
    ),
}


def blocks():
    for page in PAGES:
        for match in FENCE.finditer((ROOT / page).read_text()):
            body = match.group(2)
            yield page, match.group(1), body.strip().splitlines()[0].strip(), body


BLOCKS = list(blocks())


def lookup(table: dict, page: str, first: str):
    for (table_page, prefix), value in table.items():
        if page == table_page and first.startswith(prefix):
            return value
    return None


def ci_sessions() -> set[str]:
    """The sessions .ci/run's command runs, `tests` expanded to what it runs."""
    command = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "ci/nox.sh" in line)
    named = shlex.split(command.split("-s", 1)[1])
    sessions = set(named)
    if "tests" in named:
        sessions |= {f"tests-{name}" for name in TIERS} | {"tests-cross"}
        sessions |= {f"tests-{name}-{version}" for name, version in _ci_cells()}
    return sessions


def _ci_cells() -> tuple:
    """The matrix cells the `tests` session runs (ci/nox_support/matrix.py's
    CI_CELLS, read without importing the nox support package)."""
    tree = ast.parse((ROOT / "ci" / "nox_support" / "matrix.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CI_CELLS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("ci/nox_support/matrix.py defines no CI_CELLS")


def test_every_table_entry_names_a_real_block():
    for table in (RUN_BY, FRAGMENTS, NEEDS):
        found = {
            (page, prefix)
            for page, _, first, _ in BLOCKS
            for (p, prefix) in table
            if page == p and first.startswith(prefix)
        }
        assert set(table) == found, f"stale entries: {set(table) - found}"


def test_every_block_not_run_here_names_a_session_ci_runs():
    sessions = ci_sessions()
    assert {"build", "lint", "tests-core", "tests-tools", "tests-cross"} <= sessions
    for (page, prefix), (run_by, _) in RUN_BY.items():
        assert set(run_by.split()) <= sessions, f"{page}: `{prefix}`: CI runs none of {run_by!r}"


def _local_packages(command: str) -> list[str]:
    return [word.rstrip("/") for word in shlex.split(command, comments=True) if word.startswith("packages/")]


def test_install_commands_respect_tier_order():
    # pip builds every local path of one command before installing any, so a
    # tier built without isolation cannot see a tier it needs named beside it
    # (`tierkit doctor explain` calls this install-order).
    by_path = {tier.path: tier for tier in TIERS.values()}
    by_name = {tier.name: tier for tier in TIERS.values()}
    for page, kind, _, body in BLOCKS:
        if kind == "python":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if "pip install" not in line or "--no-build-isolation" not in line:
                continue
            named = [by_path[p] for p in _local_packages(line) if p in by_path]
            for tier in named:
                needed = {by_name[n].path for n in tier.needs} & {t.path for t in named}
                assert not needed, f"{page}: `{line.strip()}` builds {tier.path} before installing {needed}"


def _source_files(tree: Path) -> dict[str, str]:
    """What a documented command must leave unchanged in a checkout: the files
    git sees (not ignored) and, under packages/, every file a tier's source hash
    counts. Maps path -> size and mtime."""
    seen = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=tree, capture_output=True, check=True
    ).stdout.decode()
    paths = {p for p in seen.split("\0") if p}
    for path in (tree / "packages").rglob("*"):
        rel = path.relative_to(tree)
        if path.is_file() and not HASH_SKIPS.intersection(rel.parts):
            if not any(part.endswith(".egg-info") for part in rel.parts):
                paths.add(str(rel))
    out = {}
    for rel in paths:
        stat = (tree / rel).stat() if (tree / rel).exists() else None
        out[rel] = f"{stat.st_size}:{stat.st_mtime_ns}" if stat else "gone"
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """A copy of the checkout's files as they are now (committed or not, not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (to copy its files)")
    tree = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_symlink():  # VERSION and LICENSE link to the root's
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).symlink_to(os.readlink(src))
        elif src.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)  # so git can tell ignored from seen
    return tree


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> Path:
    """A venv layered over the running environment (see the module docstring)."""
    env = tmp_path_factory.mktemp("overlay") / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    site_dir = next((env / "lib").glob("python3*/site-packages"))
    (site_dir / "_tierkit_overlay.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    bindir = env / "bin"
    for name, module in (("pip", "pip"), ("pytest", "pytest"), ("tierkit", "tierkit")):
        shim = bindir / name
        shim.write_text(f'#!/bin/sh\nexec "{bindir / "python"}" -m {module} "$@"\n')
        shim.chmod(0o755)
    return env


def _missing(needs, overlay: Path) -> list[str]:
    programs = [n.removeprefix("bin:") for n in needs if n.startswith("bin:")]
    modules = [n for n in needs if not n.startswith("bin:")]
    code = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if not importlib.util.find_spec(m)))"
    found = subprocess.run(
        [str(overlay / "bin" / "python"), "-c", code, *modules], capture_output=True, text=True, check=True
    )
    return found.stdout.split() + [p for p in programs if shutil.which(p) is None]


def _imports(body: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(body)):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return sorted(set(names))


@pytest.mark.parametrize(
    ("page", "kind", "first", "body"), BLOCKS, ids=[f"{b[0]}:{b[2][:40]}" for b in BLOCKS]
)
def test_documented_block_runs_as_written(page, kind, first, body, scratch, overlay):
    run_by = lookup(RUN_BY, page, first)
    if run_by:
        pytest.skip(f"not run here: CI's {run_by[0]} (see RUN_BY): {run_by[1]}")
    if lookup(FRAGMENTS, page, first):
        pytest.skip(f"a fragment, checked by {lookup(FRAGMENTS, page, first)}")
    needs = _imports(body) if kind == "python" else lookup(NEEDS, page, first) or ()
    missing = _missing(needs, overlay)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed here")
    env = {**os.environ, "PATH": f"{overlay / 'bin'}:{os.environ['PATH']}", "PYTHONNOUSERSITE": "1"}
    env.pop("PYTHONPATH", None)
    if kind == "python":
        cmd = [str(overlay / "bin" / "python"), "-c", body]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", body]
    before = _source_files(scratch)
    proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (
        f"{page}: `{first}` failed (rc={proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    after = _source_files(scratch)
    touched = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert not touched, (
        f"{page}: `{first}` changed files git sees or a tier's source hash counts "
        f"(write into an ignored build/ folder instead): {touched}"
    )


def test_the_runner_block_is_what_test_deploy_runs(tmp_path):
    # docs/deploy.md's C++ runner block is run by tests-torch's test_deploy.py
    # (RUN_BY): its parts are checked against that test here. Its inputs
    # writer must produce the file test_deploy's reader (and main.cpp) reads...
    (body,) = [
        b for page, _, first, b in BLOCKS if page == "docs/deploy.md" and first.startswith("cd packages")
    ]
    writer = re.search(r"python - <<'EOF'[^\n]*\n(.*?)\nEOF\n", body, re.S).group(1)
    torch = pytest.importorskip("torch")
    (tmp_path / "build").mkdir()
    subprocess.run([sys.executable, "-c", writer], cwd=tmp_path, check=True)
    sys.path.insert(0, str(ROOT / "packages" / "torch-cpu" / "tests"))
    try:
        from tensor_files import read_tensors
    finally:
        sys.path.pop(0)
    tensors = read_tensors(tmp_path / "build" / "inputs.bin")
    assert [tuple(t.shape) for t in tensors] == [(7, 16), (7, 16)] and tensors[0].dtype == torch.float32
    # ... its CMake lines are test_deploy's, and the runner gets test_deploy's
    # four arguments in test_deploy's order: operator library, package, inputs, outputs.
    deploy = (ROOT / "packages" / "torch-cpu" / "tests" / "test_deploy.py").read_text()
    assert re.search(r"cmake -S \. -B build -G Ninja -DTORCH_ROOT=", body)
    assert all(f'"{arg}"' in deploy for arg in ("-S", "-B", "-G", "Ninja")) and "-DTORCH_ROOT=" in deploy
    assert "cmake --build build" in body and '"cmake", "--build"' in deploy
    joined = re.sub(r"\\\n\s*", " ", body)  # backslash-continued lines as one
    assert re.search(
        r'build/aoti_runner \$\(python -c "import tierkit_torch; print\(tierkit_torch\.library_path\(\)\)"\)'
        r"\s+/tmp/tierkit_model\.pt2 build/inputs\.bin build/outputs\.bin",
        joined,
    ), joined
    order = re.search(
        r"str\(runner\),\s*tierkit_torch\.library_path\(\),\s*str\(path\),\s*"
        r"str\(tmp / \"inputs\.bin\"\),\s*str\(tmp / \"cpp_out\.bin\"\)",
        deploy,
    )
    assert order, "test_deploy.py no longer runs the runner as (library, package, inputs, outputs)"


def test_the_example_tier_entry_is_complete():
    # docs/architecture.md's "Adding a tier" entry, built against the real
    # Tier: a torch tier's entry must give the build session what it needs to
    # try the wheel alone (its smoke code, and torch in that venv).
    namespace = runpy.run_path(str(ROOT / "ci" / "nox_support" / "tiers.py"))
    (body,) = [b for page, _, first, b in BLOCKS if lookup(FRAGMENTS, page, first)]
    tier = eval(body, namespace)  # the page's own text, as tiers.py would hold it
    assert isinstance(tier, namespace["Tier"])
    assert tier.module and tier.smoke, "the build session runs `smoke` beside the wheel alone"
    assert set(tier.needs) <= set(TIERS)
    for entry in [tier, *TIERS.values()]:  # the same rule for the real table
        if "torch" in _imports(entry.smoke):
            assert entry.runtime_torch, f"{entry.name}: its smoke imports torch: runtime_torch=True"


# ---- figures that come from the benchmark report ----

EXAMPLE = ROOT / "docs" / "benchmarks-example"
# page -> (where its quotes of the example report begin, where they end,
# whether only its table rows quote it).
QUOTES_REPORT = {
    "docs/torch-stable.md": ("## Measured", "\n(Cold builds", True),
    "docs/benchmarks.md": ("* **Interleaved.**", "So each", False),
}


def _example_results() -> dict:
    results = json.loads((EXAMPLE / "results.json").read_text())
    from tierkit.bench import settle, targets

    # by today's code, from the run's rows; what the run measured again kept
    results["targets"] = settle.keep_settle_record(results.get("targets", []), targets.evaluate(results))
    return results


def test_example_report_is_what_the_code_renders_from_its_results():
    from tierkit.bench import report

    rendered = report.markdown(_example_results())
    digest = hashlib.sha256(rendered.encode()).hexdigest()[:12]
    assert (EXAMPLE / "report.md").read_text() == rendered, (
        f"docs/benchmarks-example/report.md is stale (rendered: {digest}); regenerate it: "
        "results = json.load(results.json); results['targets'] = tierkit.bench.settle.keep_settle_record("
        "results['targets'], tierkit.bench.targets.evaluate(results)); report.write(results, 'docs/benchmarks-example')"
    )


def test_target_names_spell_the_sizes_measured():
    # `n = 2e+07` once named a target measured at 1.6e7.
    results = _example_results()
    sizes = {
        r["n"]
        for s in results["sections"].values()
        for r in s["rows"]
        if isinstance(r.get("n"), (int, float))
    }
    for t in results["targets"]:
        for n in re.findall(r"\bn ?= ?([0-9][0-9.,e+]*[0-9])", f"{t['target']} {t['detail']}"):
            assert float(n.replace(",", "")) in sizes, f"{t['target']!r}: no size {n} was measured"


_FIGURE = re.compile(r"(\d+(?:\.\d+)?) ?(µs|us|ms|s|GB/s)(?![\w/])")


def _report_figures() -> set[tuple[str, float]]:
    """(unit, value) of every figure in the example report: written with its
    unit, or in a column headed by it (GB/s)."""
    report = (EXAMPLE / "report.md").read_text()
    figures = {(unit.replace("µs", "us"), float(v)) for v, unit in _FIGURE.findall(report)}
    header: list[str] = []
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            header = []
        elif not header:
            header = cells
        elif "GB/s" in header and re.fullmatch(r"\d+(\.\d+)?", cells[header.index("GB/s")]):
            figures.add(("GB/s", float(cells[header.index("GB/s")])))
    return figures


@pytest.mark.parametrize("page", sorted(QUOTES_REPORT))
def test_figures_quoted_from_the_report_are_the_reports(page):
    begin, end, tables_only = QUOTES_REPORT[page]
    quotes = (ROOT / page).read_text().split(begin, 1)[1].split(end, 1)[0]
    if tables_only:
        quotes = "\n".join(line for line in quotes.splitlines() if line.startswith("|"))
    measured = _report_figures()
    quoted = _FIGURE.findall(quotes.replace("–", " – "))
    ranges = re.findall(r"(\d+(?:\.\d+)?)–(\d+(?:\.\d+)?) ?(GB/s|ms|us|µs|s)\b", quotes)
    quoted += [(low, unit) for low, _, unit in ranges]
    assert quoted, f"{page}: no figures found after {begin!r}"
    for value, unit in quoted:
        decimals = len(value.split(".")[1]) if "." in value else 0
        unit = unit.replace("µs", "us")
        assert any(u == unit and round(m, decimals) == float(value) for u, m in measured), (
            f"{page}: {value} {unit} is not in docs/benchmarks-example/report.md"
        )


def test_no_table_row_stands_outside_its_table():
    # A row once sat after a new section's prose, cut off from its table.
    for page in PAGES:
        lines = (ROOT / page).read_text().splitlines()
        fenced = False
        for i, line in enumerate(lines):
            fenced ^= line.startswith("```")
            if fenced or not line.startswith("|"):
                continue
            in_table = (i > 0 and lines[i - 1].startswith("|")) or (
                i + 1 < len(lines) and re.match(r"^\|[-| :]+\|$", lines[i + 1])
            )
            assert in_table, f"{page}:{i + 1}: a table row outside any table: {line[:60]}"


def test_readme_names_every_session_that_takes_pytest_options():
    text = " ".join((ROOT / "README.md").read_text().split())
    sentence = re.search(r"The (`tests-[^.]*?) sessions take pytest options; (.*?) takes CTest's", text)
    assert sentence, "README.md: the sentence naming which sessions take pytest options"
    pytest_sessions = set(re.findall(r"`(tests-[a-z]+)`", sentence.group(1)))
    ctest_sessions = set(re.findall(r"`(tests-[a-z]+)`", sentence.group(2)))
    assert pytest_sessions == {f"tests-{n}" for n, t in TIERS.items() if t.kind != "ctest"} | {"tests-cross"}
    assert ctest_sessions == {f"tests-{n}" for n, t in TIERS.items() if t.kind == "ctest"}


def test_schema_tables_are_core_op_schemas():
    # A schema table in a page quotes the op table's list (tierkit/op_table.h,
    # generated), which both torch tiers register; add_out's return once drifted from it.
    header = (ROOT / "packages/cpp-core/include/tierkit/op_table.h").read_text()
    schemas = set(re.findall(r'^\s*"([^"]+)",', header, re.MULTILINE))
    assert "custom_add(Tensor a, Tensor b) -> Tensor" in schemas
    quoted = 0
    for page in PAGES:
        for row in re.findall(
            r"^\| `\w+` \| `([a-z_.]+\(.*?\) -> [^`]*)`", (ROOT / page).read_text(), re.MULTILINE
        ):
            quoted += 1
            assert row in schemas, f"{page}: `{row}` is not in core's op_table.h"
    assert quoted >= 5


def _named_by(name: str) -> list[str] | None:
    """The files outside tests and .md pages that name `name`, as
    docs/adding-an-op.md counts them; None without git."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    out = subprocess.run(
        ["git", "grep", "-il", name, "--", "packages", "ci", "noxfile.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    test_path = re.compile(r"(^|/)tests?/|(^|/)test_[^/]*$|\.md$")
    return sorted(f for f in out if not test_path.search(f))


def test_adding_an_op_counts_the_files_that_name_each_op():
    # The page said 8/5/3/4 files where the code had 10/6/7/10 (#53): each row
    # of its table is now the grep's file list, file by file.
    text = (ROOT / "docs" / "adding-an-op.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \([^)]*\) \| (\d+) \| (.*)$", text, re.MULTILINE)
    assert len(rows) >= 5, "docs/adding-an-op.md: the counted table is missing"
    for name, count, rest in rows:
        files = _named_by(name)
        if files is None:
            pytest.skip("not a git checkout")
        listed = set(re.findall(r"`([\w./]+\.\w+)`", rest))
        found = {Path(f).name for f in files}
        assert int(count) == len(files), f"{name}: the page says {count} files, git grep lists {files}"
        assert listed == found, f"{name}: the page lists {sorted(listed)}, git grep {sorted(found)}"
