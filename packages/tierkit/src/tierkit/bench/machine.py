"""What the numbers were measured on."""

from __future__ import annotations

import datetime
import os
import platform


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def info() -> dict:
    data = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    for module in ("numpy", "torch", "tierkit_core", "tierkit_bridge", "tierkit_torch"):
        try:
            mod = __import__(module)
            data[module] = getattr(mod, "__version__", "?")
        except ImportError:
            data[module] = None
    try:
        import torch

        data["torch_threads"] = torch.get_num_threads()
        data["cuda_available"] = torch.cuda.is_available()
    except ImportError:
        pass
    return data
