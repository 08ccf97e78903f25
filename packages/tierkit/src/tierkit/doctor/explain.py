"""``tierkit doctor explain LOG``: which layer of a build or import broke.

Reads the log top to bottom and stops at the first *decisive* line — the
one that names the cause — skipping the generic echoes that follow it
("ninja: build stopped", "error: command ... failed", "Error compiling
objects for extension"). The first real error is the cause; everything
after it is a consequence.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import asdict, dataclass


@dataclass
class Diagnosis:
    layer: str
    line: str
    line_number: int
    explanation: str
    fix: str

    def as_dict(self) -> dict:
        return asdict(self)


# Lines that only report that something earlier failed.
ECHOES = [
    r"ninja: build stopped",
    r"error: command .* failed with exit (code|status)",
    r"Error compiling objects for extension",
    r"subprocess-exited-with-error",
    r"Failed building wheel",
    r"failed-wheel-build",
    r"error: metadata-generation-failed",
    r"CalledProcessError",
    r"^\s*\[end of output\]",
    r"collect2: error: ld returned",  # the linker's summary; the cause is on an earlier line
    r"FAILED: ",
    r"^[WI]\d{4} \d\d:\d\d:\d\d",  # torch's logged warnings/info (e.g. "No CUDA runtime is found"): context, not causes
    r"^\s*warnings?\.warn\(|UserWarning",
    r"ImportError while importing test module",  # pytest's announcement; the cause is a later line
]

# Failures a newcomer meets before any compiler runs, recognised by a line
# *and* the kind of log around it: (layer, pattern, context, explanation, fix).
# They are tried on every line before the generic RULES.
CONTEXT_RULES: list[tuple[str, str, str, str, str]] = [
    (
        "build-isolation",
        r"No matching distribution found for tierkit-",
        r"",
        "pip built the tier in an isolated environment and looked for its build requirement (another tierkit "
        "tier) on the package index; the tiers are on no index, so it cannot be found there",
        "install the tiers it builds on first and build without isolation: pip install packages/cpp-core && "
        "pip install --no-build-isolation packages/<tier> (or, after `bash ci/nox.sh -s build`, "
        "pip install --find-links dist packages/<tier>); see the tier's README",
    ),
    (
        "install-order",
        r"No module named '(tierkit_\w+)'",
        r"Preparing metadata|Getting requirements to build|build_meta|setup\.py",
        "a tier's build imports the tier below it, which was not installed yet: pip builds every path given "
        "in one command before it installs any of them",
        "install one tier per pip command, in dependency order (core, then torch-cpu, then torch-cuda), "
        "each with --no-build-isolation",
    ),
    (
        "python-dev",
        r"fatal error: Python\.h: No such file or directory|Could NOT find Python.*(Development|Python_INCLUDE)",
        r"",
        "the interpreter's C headers (Python.h) are missing: extensions cannot compile against it",
        "install the development headers of the Python you build with: apt-get install python3-dev for "
        "Debian's python3 (bash ci/system-deps.sh does it); pyenv and python.org builds include them",
    ),
    (
        "environment",
        r"No module named '(tierkit\w*|torch)'",
        r"test session starts|ERROR collecting|_pytest",
        "pytest ran in another Python environment than the one the tier is installed in (a pytest found on "
        "PATH belongs to another interpreter)",
        "run pytest with the environment's own interpreter: python -m pytest ... (install it there with "
        "pip install 'packages/<tier>[test]' or pip install pytest)",
    ),
    (
        "loader",
        r"Could not run 'tierkit::\w+' with arguments|Could not find schema for tierkit::|"
        r"tierkit::\w+ (is not|was not) (registered|found)|no attribute '\w+'.*_OpNamespace 'tierkit'",
        r"",
        "the process ran a tierkit operator whose library was never loaded (an AOTInductor package, "
        "torch.ops.tierkit without `import tierkit_torch`)",
        "import tierkit_torch first (Python), or load its operator library (tierkit_torch.library_path()) "
        "before the package (C++: dlopen / torch::ops::load_library)",
    ),
]

# (layer, pattern, explanation, fix), most specific first.
RULES: list[tuple[str, str, str, str]] = [
    (
        "ninja",
        r"Ninja is required to load C\+\+ extensions|ninja: (command )?not found|No such file or directory: 'ninja'",
        "torch's JIT load() (and BuildExtension with use_ninja) needs the ninja build tool",
        "install ninja: apt-get install ninja-build, or pip install ninja",
    ),
    (
        "cuda-toolchain",
        r"CUDA_HOME environment variable is not set|nvcc not found",
        "torch could not find the CUDA toolkit",
        "export CUDA_HOME=/usr/local/cuda (the directory holding bin/nvcc)",
    ),
    (
        "cuda-toolchain",
        r"in _get_cuda_arch_flags",
        "no GPU is visible and TORCH_CUDA_ARCH_LIST is unset, so torch has no CUDA architecture to compile for "
        "(it fails with an IndexError inside _get_cuda_arch_flags)",
        'export TORCH_CUDA_ARCH_LIST="9.0" (your GPUs\' compute capabilities) before building',
    ),
    (
        "cuda-toolchain",
        r"detected CUDA version \(.*\) mismatches the version that was used to compile",
        "nvcc's CUDA major version differs from the one torch was built with",
        "use the CUDA toolkit matching torch.version.cuda, or install the torch build for your toolkit",
    ),
    (
        "cuda-toolchain",
        r"no kernel image is available for execution on the device",
        "the extension has no code for this GPU's architecture",
        "rebuild with TORCH_CUDA_ARCH_LIST including this GPU's compute capability (torch.cuda.get_device_capability())",
    ),
    (
        "cuda-toolchain",
        r"cannot find -lcudart|cannot find -lcuda\b|libcudart\.so.*cannot open",
        "the CUDA runtime library was not found at link time: CUDA_HOME points at the wrong directory "
        "(typically /usr/local, guessed from a wrapper nvcc in /usr/local/bin)",
        "export CUDA_HOME=/usr/local/cuda (the toolkit root, with lib64/libcudart.so) and rebuild",
    ),
    (
        "abi",
        r"undefined symbol: .*(__cxx11|_ZN3c10.*Ss|_ZN2at.*Ss|_ZN5torch.*Ss)",
        "the extension and torch disagree on the C++ standard-library ABI (_GLIBCXX_USE_CXX11_ABI): "
        "std::string symbols are mangled differently",
        "rebuild without forcing -D_GLIBCXX_USE_CXX11_ABI, against the installed torch (pip install --no-build-isolation)",
    ),
    (
        "loader",
        r"undefined symbol:",
        "the shared library loaded but references a symbol nothing provides: a function declared and never defined, "
        "a library not linked, or an extension built against another torch",
        "define/link the symbol; if it is a torch symbol (c10::, at::, torch::), the library is tied to the torch "
        "it was built against: `tierkit doctor abi <that .so>` lists what it imports; rebuild against the "
        "installed torch with --no-build-isolation, or build on torch's stable C ABI (docs/torch-stable.md)",
    ),
    (
        "loader",
        r"cannot open shared object file|ImportError|ModuleNotFoundError|DLL load failed",
        "the import could not load a shared library or module",
        "check the library is installed and on the loader path (import torch before the extension; LD_LIBRARY_PATH)",
    ),
    (
        "linker",
        r"undefined reference to|cannot find -l|multiple definition of|relocation .* against",
        "the objects compiled but the linker could not resolve or place a symbol",
        "add the missing source/library to the link (or remove the duplicate definition)",
    ),
    (
        "compiler",
        r"fatal error: .*: No such file or directory",
        "a header was not found: the include path is missing a directory",
        "add the include directory (e.g. tierkit_core.get_include(), torch include paths) or install the package",
    ),
    (
        "compiler",
        r"\b(error|Error)( #\d+)?:|no matching function for call|was not declared in this scope|expected .* before",
        "the compiler rejected the source: a syntax or type error",
        "fix the code at the file:line quoted",
    ),
]


def _demangle(line: str) -> str:
    symbols = re.findall(r"_Z[\w$.]+", line)
    if not symbols or not shutil.which("c++filt"):
        return ""
    out = subprocess.run(["c++filt", *symbols], capture_output=True, text=True).stdout.strip()
    return out.replace("\n", "; ")


def explain(text: str) -> Diagnosis | None:
    echo = re.compile("|".join(ECHOES))
    context_rules = [r for r in CONTEXT_RULES if re.search(r[2], text)]
    for number, line in enumerate(text.splitlines(), 1):
        for layer, pattern, _, explanation, fix in context_rules:
            if re.search(pattern, line):
                return Diagnosis(layer, line.strip(), number, explanation, fix)
        if echo.search(line):
            continue
        for layer, pattern, explanation, fix in RULES:
            if re.search(pattern, line):
                demangled = _demangle(line) if layer in ("abi", "loader", "linker") else ""
                if demangled:
                    explanation += f" (symbol: {demangled})"
                return Diagnosis(layer, line.strip(), number, explanation, fix)
    return None


def render(d: Diagnosis | None) -> str:
    if d is None:
        return "no known failure pattern found; the first 'error' line in the log is the place to start"
    return f"layer: {d.layer}\nline {d.line_number}: {d.line}\nwhy: {d.explanation}\nfix: {d.fix}"
