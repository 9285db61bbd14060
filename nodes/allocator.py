"""The host process's memory allocator, tuned for supersteps that move tens of MB each.

glibc's malloc gives memory back to the system as soon as 128 KiB lie free at the top of its heap,
and maps every block above its mmap threshold (at most 32 MiB) afresh. A host allocates and frees
the same few tens of MB each superstep (payloads, batches, decoded arrays), so by default every
superstep page-faults all of it in again: a third of an echo round at 1,000 clients. Keeping up to
128 MiB free and serving blocks up to 64 MiB from the heap removes most of that for a few tens of
MiB of peak RSS per host. A host tunes once a superstep moves _MALLOC_WORTH_IT bytes through it
(batches in + out): small deployments (the test suite's) keep glibc's defaults, which cost them
nothing.
"""

from __future__ import annotations

import ctypes

_MALLOC_TRIM, _MALLOC_MMAP, _MALLOC_WORTH_IT = 128 << 20, 64 << 20, 8 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)
_malloc_tuned: bool | None = None  # None: not tried yet in this process


def keep_freed_memory() -> bool:
    """Tune this process's glibc malloc as above, once; False where the C library is not glibc."""
    global _malloc_tuned
    if _malloc_tuned is None:
        try:
            libc = ctypes.CDLL(None)
            _malloc_tuned = bool(
                libc.mallopt(_M_TRIM_THRESHOLD, _MALLOC_TRIM)
                and libc.mallopt(_M_MMAP_THRESHOLD, _MALLOC_MMAP)
            )
        except (OSError, AttributeError):  # not glibc (macOS, musl): its own defaults stand
            _malloc_tuned = False
    return _malloc_tuned


def keep_freed_memory_if_worth_it(moved: int) -> bool:
    """Tune (:func:`keep_freed_memory`) once a superstep has moved ``moved`` ≥ _MALLOC_WORTH_IT
    bytes through this process; whether it is tuned. A superstep that moved more than the
    _MALLOC_TRIM kept (10,000 echo clients: 200 MB a host) gives what it freed beyond that back
    at once (``malloc_trim``): the heap keeps at most _MALLOC_TRIM idle between supersteps."""
    if _malloc_tuned is None and moved >= _MALLOC_WORTH_IT:
        keep_freed_memory()
    if _malloc_tuned and moved > _MALLOC_TRIM:
        ctypes.CDLL(None).malloc_trim(ctypes.c_size_t(_MALLOC_TRIM))
    return bool(_malloc_tuned)
