"""The build facts both torch tiers record in their ``_build_info.py`` (read by
``tierkit doctor``): which torch, which C++ ABI, which CUDA. torch-cpu's
setup.py loads this file by path (the package is not installed yet while it
builds); torch-cuda's imports it from the installed tierkit_torch."""

from __future__ import annotations


def torch_facts(torch, **extra: object) -> str:
    """The text of a ``_build_info.py``: torch's facts, then ``extra``."""
    lines = [
        '"""Recorded when this package was built (read by `tierkit doctor`)."""',
        "",
        f"TORCH_VERSION = {torch.__version__!r}",
        f"CXX11_ABI = {bool(torch._C._GLIBCXX_USE_CXX11_ABI)!r}",
        f"CUDA_VERSION = {torch.version.cuda!r}",
    ]
    lines += [f"{key} = {value!r}" for key, value in extra.items()]
    return "\n".join(lines) + "\n"
