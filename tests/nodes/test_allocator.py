"""A host keeps the memory it frees for its next superstep (nodes/allocator.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a fresh interpreter: touch 48 MiB, free it, and report by how much the RSS fell.
_CYCLE = """
import sys, psutil
from nodes.allocator import keep_freed_memory_if_worth_it
assert not keep_freed_memory_if_worth_it(1 << 20)  # a small superstep leaves glibc's defaults
if sys.argv[1] == "tuned":
    assert keep_freed_memory_if_worth_it(8 << 20)
proc = psutil.Process()
for _ in range(2):  # the second cycle finds whatever the first one left
    block = b"x" * (48 << 20)
    before = proc.memory_info().rss
    del block
    after = proc.memory_info().rss
print((before - after) >> 20)
"""


def _rss_given_back(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _CYCLE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


# decided without tuning this process: keep_freed_memory() here would tune the test worker itself
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_a_host_process_keeps_a_freed_block_instead_of_giving_it_back():
    # glibc's default maps a 48 MiB block and unmaps it when freed: the RSS falls by it
    assert _rss_given_back("default") >= 40
    # tuned, the block comes from the heap and stays there for the next allocation
    assert _rss_given_back("tuned") <= 8


# In a fresh interpreter, tuned: free 192 MiB of small blocks (payload-sized) below one still held,
# then report how far the RSS fell after a superstep that moved `moved` MiB.
_BIG = """
import sys, psutil
from nodes.allocator import keep_freed_memory_if_worth_it
assert keep_freed_memory_if_worth_it(8 << 20)
proc = psutil.Process()
blocks = [bytes(40_000) for _ in range(5_000)]
pin = bytes(40_000)  # held above them: the freed blocks are not at the top of the heap
before = proc.memory_info().rss
del blocks
keep_freed_memory_if_worth_it(int(sys.argv[1]) << 20)
print((before - proc.memory_info().rss) >> 20)
"""


def _rss_given_back_after(moved_mib: int) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _BIG, str(moved_mib)], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the C library is not glibc")
def test_a_superstep_that_moved_more_than_is_kept_gives_the_rest_back():
    assert _rss_given_back_after(16) <= 64  # kept for the next superstep (up to 128 MiB)
    assert _rss_given_back_after(256) >= 64  # beyond what is kept: given back
