"""What machine a benchmark ran on, for the JSON report (shared by bench/*.py)."""

from __future__ import annotations

import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from google.protobuf.internal import api_implementation

    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "protobuf_backend": api_implementation.Type(),
    }


def peak_rss_mib() -> float:
    """This process's own peak RSS in MiB: VmHWM, which exec resets, where /proc has it.

    Not ``ru_maxrss``: Linux carries that over fork and exec, so a child that a bench
    spawned after generating its inputs reports at least the bench's own peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
