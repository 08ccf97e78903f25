"""What `tierkit doctor explain` recognises: one Rule per cause.

A rule names the layer, a pattern for the line that states the cause, and
optionally a pattern the rest of the log must contain (the same words mean
different things in a pytest run and in a pip build). `fix` may be a
function of (the regex match, the whole log): fixes quote the versions, names
and paths the log itself states, so the command works as written there.

`rank` orders causes against consequences. A log is read whole and the
highest-ranked line wins, the earliest among equals:

* CAUSE: the line names why it failed (host compiler too new, killed by the
  OOM killer, built for another torch, ...);
* SPECIFIC: a precise but downstream symptom (a missing header, an undefined
  reference, a library the loader cannot open);
* GENERIC: anything that just says "error".

So `libc10.so: cannot open shared object file` printed first loses to the
C++ ABI mismatch printed after it, and `error: command 'nvcc' failed` never
beats the `#error -- unsupported GNU version` above it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

CAUSE, SPECIFIC, GENERIC = 3, 2, 1

Fix = str | Callable[[re.Match, str], str]


@dataclass(frozen=True)
class Rule:
    layer: str
    pattern: str
    explanation: str
    fix: Fix
    rank: int = CAUSE
    context: str = ""  # the log must also contain this (regex), when set
    not_context: str = ""  # ... and must not contain this

    def fix_for(self, match: re.Match, text: str) -> str:
        return self.fix(match, text) if callable(self.fix) else self.fix


def _first(pattern: str, text: str, default: str) -> str:
    found = re.search(pattern, text)
    return found.group(1) if found else default


def _host_compiler_fix(m: re.Match, text: str) -> str:
    newest = m.group(2)
    if m.group(1) == "GNU" and newest:
        return (
            f"install gcc {newest} or older and point nvcc at it: apt-get install gcc-{newest} g++-{newest}, then "
            f"export CC=gcc-{newest} CXX=g++-{newest} (torch extensions) or pass -ccbin g++-{newest} to nvcc "
            f"(CMake: -DCMAKE_CUDA_HOST_COMPILER=g++-{newest}); or install a CUDA toolkit that supports your gcc"
        )
    return (
        "build with a host compiler this nvcc supports (-ccbin <compiler>, CMake -DCMAKE_CUDA_HOST_COMPILER), "
        "or install a CUDA toolkit that supports yours"
    )


def _arch_fix(m: re.Match, text: str) -> str:
    arch = m.group(1)
    return (
        f"this nvcc does not know {arch}: install a CUDA toolkit that supports it, or build only for "
        'architectures it lists (`nvcc --list-gpu-arch`): export TORCH_CUDA_ARCH_LIST="<capabilities>" '
        f"(CMake: -DCMAKE_CUDA_ARCHITECTURES=...) without {arch}"
    )


def _cuda_mismatch_fix(m: re.Match, text: str) -> str:
    toolkit, rest = m.group(1), text[m.end() :]
    torch_cuda = _first(r"PyTorch \((\d+\.\d+)\)", rest, "torch.version.cuda")
    if toolkit == "%s":  # torch printed the format string and its arguments: ('...', '12.4', '13.0')
        versions = re.search(r"'(\d+\.\d+)', '(\d+\.\d+)'", rest)
        toolkit, torch_cuda = versions.groups() if versions else ("<nvcc's>", torch_cuda)
    wheel = "cu" + toolkit.replace(".", "")
    return (
        f"make them agree: install the torch build for CUDA {toolkit} (pip install torch --index-url "
        f"https://download.pytorch.org/whl/{wheel}, if that build exists), or install a CUDA {torch_cuda} "
        f"toolkit and export CUDA_HOME=/usr/local/cuda-{torch_cuda} before building"
    )


def _python_dev_fix(m: re.Match, text: str) -> str:
    version = _first(r"python(3\.\d+)", text, "3")
    return (
        f"install the C headers of the Python you build with: apt-get install python{version}-dev "
        "(dnf install python3-devel; conda and python.org builds include them); bash ci/system-deps.sh does it here"
    )


def _killed_fix(m: re.Match, text: str) -> str:
    return (
        "give each compiler more memory: fewer parallel jobs, MAX_JOBS=1 pip install --no-build-isolation ... "
        "(torch extensions), make -j1 / ninja -j1 / cmake --build . -j 1 (CMake), or add swap"
    )


def _header_fix(m: re.Match, text: str) -> str:
    header = m.group(1)
    return (
        f"the CUDA toolkit in use lacks {header} (a partial install: a runtime-only or conda cudatoolkit, or a "
        "library's -dev package missing): install the full toolkit matching torch.version.cuda (e.g. "
        "apt-get install cuda-toolkit-<major>-<minor>, or that library's -dev package) and export "
        "CUDA_HOME to its root"
    )


def _cuda_lib_fix(m: re.Match, text: str) -> str:
    return (
        f"lib{m.group(1)}.so is not where the linker looks: export CUDA_HOME=/usr/local/cuda (the toolkit root, "
        f"with lib64/lib{m.group(1)}.so) and rebuild; if the toolkit has no lib{m.group(1)}, install it "
        "(the library's -dev package or the full toolkit)"
    )


def _glibcxx_fix(m: re.Match, text: str) -> str:
    lib = m.group(1) or "libstdc++.so.6"
    return (
        f"{lib} was found first and is older than the {m.group(2)} the library needs: put a newer libstdc++ "
        "first: in a conda env conda install -c conda-forge libstdcxx-ng (or export "
        "LD_LIBRARY_PATH=$CONDA_PREFIX/lib), elsewhere LD_PRELOAD the newer system libstdc++.so.6 "
        "(or import torch first, which loads its own); or rebuild with the older compiler"
    )


def _pyinit_fix(m: re.Match, text: str) -> str:
    name = m.group(2)
    return (
        f"the file is named {name} but defines no PyInit_{name}: the name in PYBIND11_MODULE(<name>, m) "
        "(TORCH_EXTENSION_NAME, PyInit_<name>) must equal the module's file name; rebuild after renaming one "
        "of them, and build for the interpreter that imports it"
    )


def _torch_symbol_fix(m: re.Match, text: str) -> str:
    abi = re.search(r"__cxx11|B5cxx11|Ss", m.group(0))
    flag = (
        " without forcing -D_GLIBCXX_USE_CXX11_ABI (python -c 'import torch; "
        "print(torch._C._GLIBCXX_USE_CXX11_ABI)' says which ABI torch uses)"
        if abi
        else ""
    )
    return (
        "rebuild the extension against the torch installed now, from a clean build: rm -rf build, then "
        f"pip install --no-build-isolation --no-cache-dir --force-reinstall <the extension>{flag}; "
        "or install the torch release it was built for. `tierkit doctor abi <the .so>` lists the torch "
        "symbols it needs"
    )


_CUDA_HEADER = (
    r"(cuda\w*\.h|cu(?:rand|blas|sparse|fft|solver|dnn|tensor)\w*\.h|nvrtc\.h|nvToolsExt\.h|nccl\.h)"
)
_CUDA_LIB = r"(cudart|cuda|curand|cublas\w*|cusparse|cufft|cusolver|nvrtc|nvToolsExt|cudnn|nccl)"
# A torch C++ symbol, mangled: c10::, at::, torch::, caffe2:: (type info too).
_TORCH_SYMBOL = r"undefined symbol: _Z(?:T[IVS])?N?K?(?:3c10|2at|5torch|6caffe2)\d\w*"
# pip/uv building in an isolated environment of their own.
_ISOLATED = (
    r"Getting requirements to build (wheel|editable)|get_requires_for_build|pip-build-env|"
    r"doesn't declare it as a build dependency|Build backend failed to determine"
)
_PYTEST = r"test session starts|ERROR collecting|_pytest"

RULES: list[Rule] = [
    # ---- before any compiler runs: tierkit's own tiers -----------------------------
    Rule(
        "build-isolation",
        r"No matching distribution found for tierkit-",
        "pip built the tier in an isolated environment and looked for its build requirement (another tierkit "
        "tier) on the package index; the tiers are on no index, so it cannot be found there",
        "install the tiers it builds on first and build without isolation: pip install packages/cpp-core && "
        "pip install --no-build-isolation packages/<tier> (or, after `bash ci/nox.sh -s build`, "
        "pip install --find-links dist packages/<tier>); see the tier's README",
    ),
    Rule(
        "environment",
        r"No module named '(tierkit\w*|torch)'",
        "pytest ran in another Python environment than the one the tier is installed in (a pytest found on "
        "PATH belongs to another interpreter)",
        "run pytest with the environment's own interpreter: python -m pytest ... (install it there with "
        "pip install 'packages/<tier>[test]' or pip install pytest)",
        context=_PYTEST,
    ),
    Rule(
        "install-order",
        r"No module named '(tierkit_\w+)'",
        "a tier's build imports the tier below it, which was not installed yet: pip builds every path given "
        "in one command before it installs any of them",
        "install one tier per pip command, in dependency order (core, then torch-cpu, then torch-cuda), "
        "each with --no-build-isolation",
        context=r"Preparing metadata|Getting requirements to build|build_meta|setup\.py",
    ),
    # ---- an extension's setup.py that imports torch ---------------------------------
    Rule(
        "build-isolation",
        r"No module named 'torch'",
        "the extension's setup.py imports torch, but pip (or uv) runs it in an isolated build environment "
        "that has no torch, whether or not torch is installed in yours",
        "install torch first, then build the extension without isolation so it sees that torch: "
        "pip install torch && pip install --no-build-isolation <the extension> "
        "(uv pip install --no-build-isolation ...)",
        context=_ISOLATED,
    ),
    Rule(
        "install-order",
        r"No module named 'torch'",
        "the extension's setup.py imports torch, which was not installed yet: one pip command (a requirements "
        "file listing torch and the extension) runs every setup.py before it installs anything",
        "install torch in its own command first, then the rest: pip install torch (the build you need), then "
        "pip install --no-build-isolation -r requirements.txt (or the extension)",
        context=r"egg_info|Preparing metadata \(setup\.py\)|setup\.py",
    ),
    # ---- the CUDA toolchain ------------------------------------------------------------
    Rule(
        "cuda-toolchain",
        r"unsupported (GNU|clang|Microsoft Visual Studio) version!?(?:.*?later than (\d+))?",
        "nvcc refuses the host compiler: it is newer than this CUDA toolkit supports",
        _host_compiler_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"Unsupported gpu architecture '((?:compute|sm)_\w+)",
        "nvcc was asked for a GPU architecture this CUDA toolkit does not know (too new for an old toolkit, "
        "or dropped by a new one)",
        _arch_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"Value '((?:compute|sm)_\w+)' is not defined for option 'gpu-architecture'",
        "nvcc was asked for a GPU architecture this CUDA toolkit does not know",
        _arch_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"CUDA_HOME environment variable is not set|nvcc not found",
        "torch could not find the CUDA toolkit (no $CUDA_HOME, no nvcc on PATH, no /usr/local/cuda)",
        "export CUDA_HOME=/usr/local/cuda (the directory holding bin/nvcc); if there is no toolkit, install "
        "the one matching torch.version.cuda",
    ),
    Rule(
        "cuda-toolchain",
        r"in _get_cuda_arch_flags",
        "no GPU is visible and TORCH_CUDA_ARCH_LIST is unset, so torch has no CUDA architecture to compile for "
        "(it fails with an IndexError inside _get_cuda_arch_flags)",
        'export TORCH_CUDA_ARCH_LIST="9.0" (your GPUs\' compute capabilities) before building',
    ),
    Rule(
        "cuda-toolchain",
        r"detected CUDA version \((\d+\.\d+|%s)\) mismatches the version that was used to compile",
        "nvcc's CUDA major version differs from the one torch was built with (torch refuses; a minor "
        "difference is only a warning)",
        _cuda_mismatch_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"no kernel image is available for execution on the device",
        "the code that ran has no kernel for this GPU's architecture: it was compiled for other GPUs",
        "rebuild the extension with this GPU's compute capability: export TORCH_CUDA_ARCH_LIST=\"$(python -c "
        '\'import torch; print("%d.%d" % torch.cuda.get_device_capability())\')"; if torch itself fails, '
        "install a torch build that supports this GPU",
    ),
    Rule(
        "cuda-toolchain",
        r"fatal error: " + _CUDA_HEADER + r": No such file or directory",
        "a CUDA library header is missing: the CUDA toolkit in use is incomplete",
        _header_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"cannot find -l" + _CUDA_LIB + r"\b",
        "a CUDA library was not found at link time: CUDA_HOME points at the wrong directory (typically "
        "/usr/local, guessed from a wrapper nvcc in /usr/local/bin) or the toolkit lacks it",
        _cuda_lib_fix,
    ),
    Rule(
        "cuda-toolchain",
        r"lib" + _CUDA_LIB + r"\.so[\d.]*: cannot open shared object file",
        "a CUDA runtime library is not on the loader path",
        "export LD_LIBRARY_PATH=$CUDA_HOME/lib64:$LD_LIBRARY_PATH (CUDA_HOME: the toolkit root, e.g. "
        "/usr/local/cuda), or install the CUDA runtime matching the build",
    ),
    Rule(
        "cuda-toolchain",
        r"nvcc fatal\s*:",
        "nvcc stopped before compiling",
        "read nvcc's message on this line; `tierkit doctor` checks the toolkit and its versions",
        rank=SPECIFIC,
    ),
    # ---- memory ---------------------------------------------------------------------------
    Rule(
        "memory",
        r"Killed signal terminated program|died due to signal 9|terminated with signal 9|^\s*Killed\s*$",
        "the kernel's OOM killer stopped the compiler: parallel compiler jobs used more memory than there is "
        "(CUDA and torch sources take GBs each)",
        _killed_fix,
    ),
    # ---- build tools and Python headers ----------------------------------------------------
    Rule(
        "ninja",
        r"Ninja is required to load C\+\+ extensions|ninja: (command )?not found|No such file or directory: 'ninja'",
        "torch's JIT load() (and BuildExtension with use_ninja) needs the ninja build tool",
        "install ninja in the environment that builds: pip install ninja (or apt-get install ninja-build)",
    ),
    Rule(
        "ninja",
        r"^ninja: error: ",
        "ninja itself failed (its build file or a path it needs), before any compiler ran",
        "read ninja's message; delete the build directory it names and build again",
        rank=SPECIFIC,
    ),
    Rule(
        "python-dev",
        r"fatal error: Python\.h: No such file or directory|Could NOT find Python.*(Development|Python_INCLUDE)",
        "the interpreter's C headers (Python.h) are missing: extensions cannot compile against it",
        _python_dev_fix,
    ),
    # ---- loading: libraries, symbols, ABI --------------------------------------------------
    Rule(
        "loader",
        r"(\S*libstdc\+\+\.so[\d.]*)?:? version `?((?:GLIBCXX|CXXABI)_[\d.]+)'? not found",
        "the libstdc++ the loader found first is older than the one the library was compiled against "
        "(a conda env's or an old system's)",
        _glibcxx_fix,
    ),
    Rule(
        "loader",
        r"dynamic module does not define (module export|init) function \((?:PyInit_|init)(\w+)\)",
        "Python found the file but not its init function: the module name compiled in differs from the file "
        "name (or it was built for another Python)",
        _pyinit_fix,
    ),
    Rule(
        "loader",
        r"undefined symbol: THP\w+",
        "the extension was imported before torch: the Python-binding symbols it uses come from torch's "
        "libraries, which `import torch` loads",
        "import torch before the extension (in the package's __init__.py: `import torch` above `from . import _C`)",
    ),
    Rule(
        "abi",
        _TORCH_SYMBOL,
        "the extension was built against another torch (an older or newer release, or one with the other "
        "C++ standard-library ABI, _GLIBCXX_USE_CXX11_ABI) than the one it is loaded with: a torch C++ "
        "symbol it needs does not exist in this torch",
        _torch_symbol_fix,
    ),
    Rule(
        "loader",
        r"undefined symbol:",
        "the shared library loaded but references a symbol nothing provides: a function declared and never "
        "defined, a library not linked, or an extension built against another torch",
        "define/link the symbol; if it is a torch symbol (c10::, at::, torch::), the library is tied to the torch "
        "it was built against: `tierkit doctor abi <that .so>` lists what it imports; rebuild against the "
        "installed torch with --no-build-isolation, or build on torch's stable C ABI (docs/torch-stable.md)",
        rank=SPECIFIC,
    ),
    Rule(
        "loader",
        r"lib(c10|torch\w*)\.so: cannot open shared object file",
        "a torch library is not on the loader path: the extension was loaded before torch (torch's libraries "
        "are found through `import torch`)",
        "import torch before the extension; a C++ program: add torch's lib directory (python -c 'import torch, "
        'os; print(os.path.dirname(torch.__file__) + "/lib")\') to LD_LIBRARY_PATH',
        rank=SPECIFIC,
    ),
    Rule(
        "loader",
        r"Could not run 'tierkit::\w+' with arguments|Could not find schema for tierkit::|"
        r"tierkit::\w+ (is not|was not) (registered|found)|no attribute '\w+'.*_OpNamespace 'tierkit'",
        "the process ran a tierkit operator whose library was never loaded (an AOTInductor package, "
        "torch.ops.tierkit without `import tierkit_torch`)",
        "import tierkit_torch first (Python), or load its operator library (tierkit_torch.library_path()) "
        "before the package (C++: dlopen / torch::ops::load_library)",
    ),
    Rule(
        "loader",
        r"cannot open shared object file|DLL load failed",
        "the import could not load a shared library",
        "check the library is installed and on the loader path (import torch before the extension; LD_LIBRARY_PATH)",
        rank=SPECIFIC,
    ),
    Rule(
        "loader",
        r"ImportError|ModuleNotFoundError",
        "the import failed",
        "check the module is installed in the Python that runs (python -m pip show <name>)",
        rank=GENERIC,
    ),
    # ---- compiling and linking user code ---------------------------------------------------
    Rule(
        "linker",
        r"undefined reference to|cannot find -l|multiple definition of|relocation .* against",
        "the objects compiled but the linker could not resolve or place a symbol",
        "add the missing source/library to the link (or remove the duplicate definition)",
        rank=SPECIFIC,
    ),
    Rule(
        "compiler",
        r"fatal error: .*: No such file or directory",
        "a header was not found: the include path is missing a directory",
        "add the include directory (e.g. tierkit_core.get_include(), torch include paths) or install the package",
        rank=SPECIFIC,
    ),
    Rule(
        "compiler",
        r"\b(error|Error)( #\d+| C\d+)?:|no matching function for call|was not declared in this scope|expected .* before",
        "the compiler rejected the source: a syntax or type error",
        "fix the code at the file:line quoted",
        rank=GENERIC,
    ),
]

# Lines that only report that something earlier failed, or say that something
# might be wrong: never the cause.
ECHOES = [
    r"ninja: build stopped",
    r"error: command .* failed with exit (code|status)",
    r"Error compiling objects for extension",
    r"subprocess-exited-with-error",
    r"Failed building wheel|Failed to build |Could not build wheels",
    r"failed-wheel-build",
    r"error: metadata-generation-failed",
    r"CalledProcessError",
    r"^\s*\[end of output\]",
    r"collect2: error: ld returned",  # the linker's summary; the cause is on an earlier line
    r"FAILED: ",
    r"^\s*[WI]\d{4} \d\d:\d\d:\d\d",  # torch's logged warnings/info (e.g. "No CUDA runtime is found"): context, not causes
    r"^\s*warnings?\.warn\(|UserWarning|^\s*Warning:",
    r"ImportError while importing test module",  # pytest's announcement; the cause is a later line
    r"did not run successfully|See above for output|Encountered error while",
    r"make(\[\d+\])?: \*\*\*|gmake(\[\d+\])?: \*\*\*|recipe for target",
    r"^CMake Error at .*\(message\):",  # CMake's wrapper around the tool's own message
    r"compilation terminated\.",
]
