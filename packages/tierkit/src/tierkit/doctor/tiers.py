"""Each tier: installed? version; imports (in a subprocess)? ops and dispatch
keys; built against the torch now installed?"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from . import probe
from .report import Check, fail, ok, warn


@dataclass(frozen=True)
class TierInfo:
    label: str
    distribution: str
    module: str
    torch: bool = False
    # The commands that install it from a checkout, as its README gives them:
    # tierkit-* are on no index, so inter-tier build requirements must already
    # be installed and pip must not isolate the build; one tier per command,
    # in dependency order (pip builds all the paths of one command first).
    install: str = ""
    namespace: str = "tierkit"  # the torch operator namespace it registers


TIERS = [
    TierInfo("tier 0 core", "tierkit-core", "tierkit_core", install="pip install packages/cpp-core"),
    TierInfo(
        "tier 1 bridge",
        "tierkit-bridge",
        "tierkit_bridge",
        install="pip install scikit-build-core 'pybind11>=3.0' packages/cpp-core && "
        "pip install --no-build-isolation packages/pybind-bridge",
    ),
    TierInfo(
        "tier 2c torch-common",
        "tierkit-torch-common",
        "tierkit_torch_common",
        install="pip install packages/cpp-core packages/torch-common",
    ),
    TierInfo(
        "tier 2 torch-cpu",
        "tierkit-torch",
        "tierkit_torch",
        torch=True,
        install="pip install torch==2.14.1 setuptools wheel packages/cpp-core packages/torch-common && "
        "pip install --no-build-isolation packages/torch-cpu",
    ),
    TierInfo(
        "tier 3 torch-cuda",
        "tierkit-cuda",
        "tierkit_cuda",
        torch=True,
        install="(tier 2 first, as above) then, in a separate command: "
        "pip install --no-build-isolation packages/torch-cuda",
    ),
    TierInfo(
        "tier 2s torch-stable",
        "tierkit-torch-stable",
        "tierkit_torch_stable",
        torch=True,
        install="pip install 'torch>=2.13' setuptools wheel packages/cpp-core packages/torch-common && "
        "pip install --no-build-isolation packages/torch-stable",
        namespace="tierkit_stable",
    ),
]

KEYS = ["CPU", "CUDA", "Meta", "Autograd"]

# Which kernels each op of the op table (tierkit_core.op_table, installed
# with every torch tier) has, asked of the loaded library in a subprocess:
# every kind (pointwise entries, out writers, row reductions, row maps).
OPS_PROBE = r"""
import json, torch, {module}
from tierkit_core import op_table as t
ops = [op.name for op in t.OPS] + [w.name for w in t.OUT_WRITERS] + [n for r in t.ROW_REDUCTIONS for n in r.overloads]
ops += [n for m in getattr(t, "ROW_MAPS", ()) for n in (m.name, m.backward_name)]
has = torch._C._dispatch_has_kernel_for_dispatch_key
keys = {{op: [k for k in {keys!r} if has("{ns}::" + op, k)] for op in ops if torch._C._dispatch_has_kernel("{ns}::" + op) or hasattr(torch.ops.{ns}, op)}}
print(json.dumps({{"ops": ops, "keys": keys}}))
"""


def build_info(module: str) -> dict | None:
    """The `_build_info.py` a torch tier recorded, read without importing the
    extension (which may be exactly what is broken)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), "_build_info.py")
    if not path.exists():
        return None
    info = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            info[node.targets[0].id] = ast.literal_eval(node.value)
    return info


def tier_checks(tier: TierInfo, torch_info: dict | None) -> list[Check]:
    name = tier.label
    try:
        version = importlib.metadata.version(tier.distribution)
    except importlib.metadata.PackageNotFoundError:
        return [
            warn(
                name,
                "not installed",
                f"{tier.install} (from the repository root; see packages/{_dir(tier)}/README.md)",
            )
        ]
    imported = _import(tier.module)  # in a subprocess: a crashing extension is a finding
    if not imported.ok:
        return [
            fail(
                name,
                f"{version} installed but `import {tier.module}` failed: {probe.tail(imported.stderr)}",
                f"run `tierkit doctor explain` on the error; rebuild with `pip install --no-build-isolation packages/{_dir(tier)}`",
            )
        ]
    checks = [ok(name, f"{tier.distribution} {version} imports")]
    if not tier.torch:
        return checks
    info = build_info(tier.module)
    if info and torch_info and info.get("STABLE_ABI"):
        target = str(info.get("TORCH_TARGET_VERSION"))
        running = tuple(int(p) for p in torch_info["version"].split("+")[0].split(".")[:2])
        if running >= tuple(int(p) for p in target.split(".")):
            checks.append(
                ok(
                    f"{name} torch",
                    f"stable ABI: loads on torch >= {target}; running {torch_info['version']}",
                )
            )
        else:
            checks.append(
                fail(
                    f"{name} torch",
                    f"stable ABI for torch >= {target}, running {torch_info['version']}",
                    f"pip install 'torch>={target}'",
                )
            )
    elif info and torch_info:
        if info.get("TORCH_VERSION") != torch_info["version"]:
            checks.append(
                fail(
                    f"{name} torch",
                    f"built against torch {info.get('TORCH_VERSION')}, running {torch_info['version']}",
                    f"rebuild against the installed torch: pip install --no-build-isolation packages/{_dir(tier)} "
                    "(build isolation installs a second torch to build against)",
                )
            )
        else:
            checks.append(ok(f"{name} torch", f"built against the installed torch {info['TORCH_VERSION']}"))
        if info.get("CXX11_ABI") != torch_info["abi"]:
            checks.append(
                fail(
                    f"{name} ABI",
                    f"built with CXX11 ABI {info.get('CXX11_ABI')}, torch uses {torch_info['abi']}",
                    "rebuild without overriding -D_GLIBCXX_USE_CXX11_ABI",
                )
            )
        else:
            checks.append(ok(f"{name} ABI", f"CXX11 ABI {info['CXX11_ABI']} (same as torch)"))
    found, result = probe.python_json(OPS_PROBE.format(module=tier.module, keys=KEYS, ns=tier.namespace))
    if found is None:
        checks.append(fail(f"{name} ops", probe.tail(result.stderr), "reinstall the tier"))
    else:
        keys = found["keys"]
        summary = ", ".join(f"{op}[{'/'.join(k)}]" for op, k in keys.items())
        missing = [op for op in found["ops"] if op not in keys]
        expected_key = "CUDA" if tier.module == "tierkit_cuda" else "CPU"
        lacking = [op for op, k in keys.items() if expected_key not in k]
        if missing or lacking:
            checks.append(
                fail(
                    f"{name} ops",
                    f"{summary}; missing {missing or lacking} for {expected_key}",
                    "reinstall the tier",
                )
            )
        else:
            checks.append(ok(f"{name} ops", summary))
    return checks


def _import(module: str) -> probe.Result:
    import sys

    return probe.run([sys.executable, "-c", f"import {module}"], timeout=120)


def _dir(tier: TierInfo) -> str:
    return {
        "tierkit_core": "cpp-core",
        "tierkit_bridge": "pybind-bridge",
        "tierkit_torch_common": "torch-common",
        "tierkit_torch": "torch-cpu",
        "tierkit_cuda": "torch-cuda",
        "tierkit_torch_stable": "torch-stable",
    }[tier.module]
