"""System information: what this build of llamapy can do on this machine."""
from __future__ import annotations

from typing import Any, Optional

from . import _engine


def system_info() -> dict[str, Any]:
    """Return a dict describing the build and the machine.

    Keys: ``version``, ``backends`` (compiled backends: ``cpu``, and ``vulkan``
    in a build with ``CMAKE_ARGS="-DLLAMAPY_VULKAN=ON"``), ``devices`` (the GPU
    devices those backends find: backend, name, type, memory in bytes, fp16 /
    int8 arithmetic, driver; empty without one), ``build`` (native or
    portable), ``compiled_isas`` (SIMD kernel levels compiled in),
    ``cpu_isas`` (those the running CPU supports), ``active_isa`` (the level
    in use: the best of ``cpu_isas``, or lower when the ``LLAMAPY_ISA``
    environment variable caps it), ``isa_cap`` (that cap, ``""`` if unset), ``cpu_features``, ``n_physical_cores``, ``n_logical_cpus`` and
    ``default_n_threads``.
    """
    return dict(_engine.system_info())


def memory_available() -> Optional[int]:
    """Bytes of memory available now (Linux MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            return next((int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")), None)
    except (OSError, ValueError, IndexError):
        return None
