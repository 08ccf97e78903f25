"""What the wheel records about its build, and what it promises to load on."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import tierkit_torch_stable
import torch
from tierkit_torch_stable import _build_info


def test_target_version_recorded_and_consistent():
    assert _build_info.STABLE_ABI is True
    assert _build_info.TORCH_TARGET_VERSION == tierkit_torch_stable.MIN_TORCH


def test_metadata_requires_torch_from_the_target_on():
    requires = importlib.metadata.requires("tierkit-torch-stable") or []
    assert f"torch>={tierkit_torch_stable.MIN_TORCH}" in requires


def test_runs_on_a_torch_at_or_after_the_target():
    running = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    assert running >= tuple(int(p) for p in tierkit_torch_stable.MIN_TORCH.split("."))


def test_library_has_no_python_in_it():
    text = Path(tierkit_torch_stable.library_path()).read_bytes()
    assert b"libpython" not in text and b"libtorch_python" not in text
    assert re.search(rb"PyInit_", text) is None


def test_same_schemas_as_tierkit_torch():
    pytest.importorskip("tierkit_torch", reason="tierkit-torch not installed here (e.g. the torch 2.13 env)")
    for name in ("custom_add", "mul", "muladd", "scale_shift", "add_out"):
        for overload in ("default", "out"):
            theirs = getattr(getattr(torch.ops.tierkit, name), overload, None)
            ours = getattr(getattr(torch.ops.tierkit_stable, name), overload, None)
            assert (theirs is None) == (ours is None), (name, overload)
            if theirs is not None:
                assert str(ours._schema).replace("tierkit_stable::", "") == str(theirs._schema).replace(
                    "tierkit::", ""
                )
