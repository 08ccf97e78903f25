"""The raw tensor files the deploy test and the C++ runner exchange: an int64
count, then per tensor an int64 rank, int64 sizes and float32 data. Imports
no tierkit, so a process that must not load the operator library can use it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def write_tensors(path: Path, tensors) -> None:
    with open(path, "wb") as f:
        np.array([len(tensors)], np.int64).tofile(f)
        for t in tensors:
            np.array([t.dim(), *t.shape], np.int64).tofile(f)
            t.contiguous().numpy().astype(np.float32).tofile(f)


def read_tensors(path: Path) -> list[torch.Tensor]:
    data = path.read_bytes()
    pos, out = 8, []
    for _ in range(int(np.frombuffer(data, np.int64, 1)[0])):
        rank = int(np.frombuffer(data, np.int64, 1, pos)[0])
        shape = np.frombuffer(data, np.int64, rank, pos + 8).tolist()
        pos += 8 * (rank + 1)
        n = int(np.prod(shape))
        out.append(torch.from_numpy(np.frombuffer(data, np.float32, n, pos).reshape(shape).copy()))
        pos += 4 * n
    return out
