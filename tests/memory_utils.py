"""Resident-memory measurement for tests: VmRSS from /proc, glibc thresholds pinned."""

from __future__ import annotations

import ctypes
import gc

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def pin_malloc_thresholds() -> None:
    """Large blocks (>= 64 KiB) get their own mmap and go back to the OS on free, and the heap
    top is trimmed at once, so RSS deltas show exactly what was allocated and freed (glibc's
    dynamic threshold would otherwise reuse freed memory unseen)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)


def status_bytes(key: str) -> int:
    """A size field of /proc/self/status (VmRSS, VmHWM, ...) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not found")


def rss_bytes() -> int:
    gc.collect()
    return status_bytes("VmRSS")
