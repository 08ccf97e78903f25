"""``tierkit doctor abi PATH``: is a torch extension tied to one torch release?

Lists the torch symbols a shared library imports (its undefined dynamic
symbols), demangled, split into torch's stable C ABI -- the C shim functions
``aoti_torch_*`` and ``torch_*`` that keep their meaning across releases --
and the rest: C++ symbols of c10/at/torch/caffe2, whose mangled names and
layouts change between releases. A library importing only the first kind is
"stable ABI" and loads on every torch from the TORCH_TARGET_VERSION it was
built for (recorded by the stable tier in ``_build_info.py``); any of the
second kind ties it to the torch it was compiled against.

PATH is a ``.so``, a wheel (its libraries are read from the archive), or an
installed distribution / import name (``tierkit-torch``, ``tierkit_torch_stable``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import runpy
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

STABLE_C = re.compile(r"^(aoti_torch_|torch_)\w+$")
TORCH_CPP = re.compile(r"_ZN?K?\d*(3c10|2at|5torch|6caffe2)|^_ZN(3c10|2at|5torch|6caffe2)")
TORCH_DEMANGLED = re.compile(r"\b(c10|at|torch|caffe2)::")


@dataclass
class LibraryReport:
    path: str
    stable: list[str] = field(default_factory=list)
    unstable: list[str] = field(default_factory=list)
    other: int = 0
    target_version: str | None = None  # from _build_info.TORCH_TARGET_VERSION
    built_with: str | None = None  # from _build_info.TORCH_VERSION

    @property
    def verdict(self) -> str:
        if self.unstable:
            torch = self.built_with.split("+")[0] if self.built_with else "the torch it was built against"
            examples = "; ".join(self.unstable[:3])
            return f"tied to torch {torch}: {len(self.unstable)} unstable symbols, e.g. {examples}"
        if self.target_version:
            return f"stable ABI: loads on torch >= {self.target_version}"
        if self.stable:
            return "stable ABI (no TORCH_TARGET_VERSION recorded beside it: loads on the torch it targets and later)"
        return "imports no torch symbol"

    def as_dict(self) -> dict:
        return {**asdict(self), "verdict": self.verdict}


def undefined_symbols(library: Path) -> list[str]:
    """The library's undefined dynamic symbols, as mangled names (no @VERSION)."""
    nm = shutil.which("nm")
    if nm is None:
        raise RuntimeError("`nm` (binutils) is needed to read a library's symbols: apt-get install binutils")
    out = subprocess.run([nm, "-D", "--undefined-only", str(library)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"nm could not read {library}: {out.stderr.strip()}")
    return [line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()]


def demangle(names: list[str]) -> list[str]:
    cxxfilt = shutil.which("c++filt")
    if not names or cxxfilt is None:
        return names
    out = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def _build_info(library: Path) -> dict:
    info = library.parent / "_build_info.py"
    return runpy.run_path(str(info)) if info.is_file() else {}


def analyse(library: Path, build_info: dict | None = None) -> LibraryReport:
    info = _build_info(library) if build_info is None else build_info
    report = LibraryReport(
        str(library), target_version=info.get("TORCH_TARGET_VERSION"), built_with=info.get("TORCH_VERSION")
    )
    names = undefined_symbols(library)
    cpp = [n for n in names if TORCH_CPP.search(n)]
    for plain, pretty in zip(cpp, demangle(cpp)):
        if TORCH_DEMANGLED.search(pretty) or TORCH_CPP.search(plain):
            report.unstable.append(pretty)
    report.stable = sorted(n for n in names if STABLE_C.match(n))
    report.other = len(names) - len(report.stable) - len(report.unstable)
    report.unstable.sort()
    return report


def _libraries_in_wheel(wheel: Path, into: Path) -> list[tuple[Path, dict]]:
    found = []
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith(".so") or ".so." in member:
                target = Path(archive.extract(member, into))
                info_member = str(Path(member).parent / "_build_info.py")
                info: dict = {}
                if info_member in archive.namelist():
                    info = runpy.run_path(archive.extract(info_member, into))
                found.append((target, info))
    return found


def _libraries_installed(name: str) -> list[Path]:
    try:
        files = importlib.metadata.files(name) or []
        return [Path(f.locate()) for f in files if f.name.endswith(".so")]
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec(name.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"{name}: not a file, and no installed distribution or package of that name in this Python"
        )
    return sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.so"))


def reports_for(target: str) -> list[LibraryReport]:
    path = Path(target)
    if path.suffix == ".whl" and path.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            reports = [analyse(lib, info) for lib, info in _libraries_in_wheel(path, Path(tmp))]
            for r in reports:
                r.path = f"{path.name}:{Path(r.path).relative_to(tmp)}"
            return reports
    if path.is_file():
        return [analyse(path)]
    libraries = _libraries_installed(target)
    if not libraries:
        raise FileNotFoundError(f"{target}: installed, but holds no shared library")
    return [analyse(lib) for lib in libraries]


def render(reports: list[LibraryReport], show_all: bool = False) -> str:
    lines = []
    for r in reports:
        lines.append(f"{r.path}")
        lines.append(
            f"  torch symbols imported: {len(r.stable) + len(r.unstable)} "
            f"(stable C ABI: {len(r.stable)}, other torch/c10 C++: {len(r.unstable)}); other symbols: {r.other}"
        )
        limit = None if show_all else 8
        if r.stable:
            shown = r.stable[:limit]
            more = "" if limit is None or len(r.stable) <= limit else f", ... ({len(r.stable) - limit} more)"
            lines.append("  stable C ABI: " + ", ".join(shown) + more)
        for name in r.unstable[:limit]:
            lines.append(f"  unstable: {name}")
        if limit is not None and len(r.unstable) > limit:
            lines.append(f"  ... {len(r.unstable) - limit} more (--all lists them)")
        lines.append(f"  {r.verdict}")
    return "\n".join(lines)
