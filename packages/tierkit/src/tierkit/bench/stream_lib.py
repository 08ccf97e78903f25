"""The compiled STREAM kernel (stream_kernel.cpp): built at bench time into a
cached shared library with the compiler and flags core's consumers use,
loaded with ctypes.

Toolchain: ``$CXX``, else ``c++`` — what CMake (core, the bridge) and
torch's cpp_extension (the torch tiers) pick. Flags: ``-O3 -DNDEBUG`` (the
tiers' Release / ``-O3`` builds), ``-std=c++17``, and
``tierkit_core.cxx_flags()`` (``-fopenmp-simd -ffp-contract=off``). No
``-march``: no tier uses one; like core's kernels, the source compiles its
vector loops for AVX2 and AVX-512 with target attributes and picks one at
run time (``TIERKIT_SIMD`` caps it, as for core). Threads: core's ThreadPool
with core's grain, sized by the caller to the thread count of the op it is
compared with.

The library is cached under ``$TIERKIT_CACHE_DIR`` (default
``$XDG_CACHE_HOME/tierkit`` or ``~/.cache/tierkit``), keyed by the source,
core's headers, the compiler's identity and the flags.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from .limit import KERNELS

SOURCE = Path(__file__).with_name("stream_kernel.cpp")
BEST_OF = 3  # runs a limit sample, the fastest kept (see Stream.timer)
FLAGS = ["-O3", "-DNDEBUG", "-std=c++17", "-fPIC", "-shared", "-pthread"]


class BuildError(RuntimeError):
    """The kernel could not be compiled or loaded here; the message says why."""


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CXX") or "c++")


def flags() -> list[str]:
    try:
        import tierkit_core
    except ImportError as exc:
        raise BuildError("tierkit_core is not installed (the kernel includes core's headers)") from exc
    return [*FLAGS, *tierkit_core.cxx_flags(), "-I", tierkit_core.get_include()]


def cache_dir() -> Path:
    if os.environ.get("TIERKIT_CACHE_DIR"):
        return Path(os.environ["TIERKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tierkit"


def _key(cxx: list[str], args: list[str]) -> str:
    h = hashlib.sha256()
    h.update(SOURCE.read_bytes())
    include = Path(args[args.index("-I") + 1])
    for header in sorted(include.rglob("*.h")):
        h.update(header.name.encode() + header.read_bytes())
    try:
        version = subprocess.run([*cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"compiler {cxx} cannot run: {exc}") from exc
    h.update(" ".join([*cxx, *args, version]).encode())
    return h.hexdigest()[:16]


def build() -> tuple[Path, str]:
    """The cached library's path (compiling it if needed) and the command."""
    cxx, args = compiler(), flags()
    target = cache_dir() / f"tierkit_stream-{_key(cxx, args)}.so"
    command = [*cxx, *args, str(SOURCE), "-o"]
    shown = shlex.join([*command, str(target)])
    if target.exists():
        return target, shown
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final name, then renamed: two benches never load half a file.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([*command, tmp], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise BuildError(f"{shown} failed: {proc.stderr[-1500:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, shown


_LIB: ctypes.CDLL | None = None
BUILD_COMMAND = ""


def library() -> ctypes.CDLL:
    global _LIB, BUILD_COMMAND
    if _LIB is None:
        path, BUILD_COMMAND = build()
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise BuildError(f"cannot load {path}: {exc}") from exc
        lib.tk_stream_new.restype = ctypes.c_void_p
        lib.tk_stream_new.argtypes = [ctypes.c_int64, ctypes.c_int]
        lib.tk_stream_free.argtypes = [ctypes.c_void_p]
        lib.tk_stream_array.restype = ctypes.POINTER(ctypes.c_float)
        lib.tk_stream_array.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.tk_stream_threads.restype = ctypes.c_int
        lib.tk_stream_threads.argtypes = [ctypes.c_void_p]
        lib.tk_stream_run.restype = ctypes.c_double
        lib.tk_stream_run.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int64,
            ctypes.c_double,
        ]
        lib.tk_stream_simd.restype = ctypes.c_char_p
        lib.tk_stream_default_threads.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def available() -> bool:
    """Whether the kernel builds and loads here (building it if needed)."""
    try:
        library()
        return True
    except BuildError:
        return False


def simd() -> str:
    return library().tk_stream_simd().decode()


def default_threads() -> int:
    """core's ThreadPool::default_threads(): the bridge's thread count."""
    return int(library().tk_stream_default_threads())


class Stream:
    """Three float32 arrays a, b, c of n elements (a = 1, b = 2, c = 0),
    first touched by `threads` threads of core's pool, and the kernels over
    them. ``run`` returns the seconds a call, timed inside the library."""

    def __init__(self, n: int, threads: int):
        self._lib = library()
        self.n = n
        self._h = self._lib.tk_stream_new(n, threads)
        if not self._h:
            raise BuildError(f"tk_stream_new({n}, {threads}) failed (memory?)")
        self.threads = int(self._lib.tk_stream_threads(self._h))

    def run(self, kernel: str, store: str, calls: int = 1, scalar: float = 3.0) -> float:
        seconds = self._lib.tk_stream_run(self._h, KERNELS[kernel][0], store == "non-temporal", calls, scalar)
        if seconds < 0:
            raise BuildError(f"{kernel} with {store} stores is not available here")
        return seconds

    def has(self, store: str) -> bool:
        try:
            self.run("copy", store, 1)
            return True
        except BuildError:
            return False

    def array(self, which: str):
        """a, b or c as a numpy array over the library's memory (a view:
        valid while this Stream lives)."""
        import numpy as np

        return np.ctypeslib.as_array(self._lib.tk_stream_array(self._h, "abc".index(which)), (self.n,))

    def timer(self, kernel: str, store: str, scalar: float = 3.0):
        """A self-timed implementation (store: "ordinary", "non-temporal", or
        "fastest": per sample, the faster of the two) for timing.interleaved: each sample is
        the best of BEST_OF runs of the sample's calls, back to back in its
        slot of the repetition (STREAM reports its best time too). A time can
        only be inflated by another process, never deflated: one interrupted
        limit sample would otherwise put an op "above its limit"."""
        from .timing import SelfTimed

        if store == "fastest":
            # Each sample the faster of the store forms (as the kernels section's limit): a kernel
            # that streams its output (the row kernels beyond the cache do) is held to the
            # non-temporal copy, which moves no read for ownership.
            forms = ["ordinary"] + (["non-temporal"] if self.has("non-temporal") else [])
            return SelfTimed(
                lambda calls: min(self.run(kernel, f, calls, scalar) for f in forms for _ in range(BEST_OF))
            )
        return SelfTimed(lambda calls: min(self.run(kernel, store, calls, scalar) for _ in range(BEST_OF)))

    def close(self) -> None:
        if self._h:
            self._lib.tk_stream_free(self._h)
            self._h = None

    def __del__(self):
        self.close()
