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
    data: dict[str, object] = {
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
    from . import limit, stream_lib

    data["caches"] = limit.caches()
    try:
        data["stream_simd"] = stream_lib.simd()  # builds (or finds) the compiled limit kernel
        data["stream_build"] = stream_lib.BUILD_COMMAND
    except stream_lib.BuildError as exc:
        data["stream_build"] = None
        data["stream_error"] = str(exc)
    try:
        import torch

        data["torch_threads"] = torch.get_num_threads()
        data["cuda_available"] = torch.cuda.is_available()
    except ImportError:
        pass
    return data
