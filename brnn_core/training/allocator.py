"""Keep glibc from handing CPU training memory back to the OS after every step.

A CPU training step allocates and frees the same few-MB buffers over and over; with glibc's defaults the top of
the heap is trimmed and buffers above the adaptive mmap threshold are mapped and unmapped, so every step touches
fresh pages the kernel must zero-fill. `tune_malloc()` fixes both thresholds so the buffers are reused; freed
memory then stays in the process, a slightly higher peak RSS (docs/decisions/002-allocator-tuning.md). Called
for CPU runs; a no-op outside glibc Linux, with BRNN_MALLOC_TUNING=0, or when glibc's MALLOC_* are set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's maximum for the dynamic threshold on 64-bit
TRIM_THRESHOLD = 1 << 30

_applied: bool | None = None


def tune_malloc() -> bool:
    """Apply the thresholds once per process; True when they are in effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or os.environ.get("BRNN_MALLOC_TUNING", "1") == "0":
        return False
    if any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return False  # the user tuned glibc already
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    return _applied

