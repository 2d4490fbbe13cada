"""The native core's failure paths: caller buffers changing under it, threads that cannot start, errors
raised while the GIL is released.

Failures are injected with ``_native._fail_next`` (``_native_fault.h``): the named point throws
``std::bad_alloc`` once, as running out of memory would. The scripts that inject one run in a child
process, so that a crash (``std::terminate``, a Python error set without the GIL) fails the test with its
message instead of ending the test run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import needs_native_core

from pipeline.tokenizer import backend
from pipeline.tokenizer._train_pairs import SEPARATOR_ID

native = backend.native
pytestmark = needs_native_core()


def run_python(script: str) -> str:
    """Run ``script`` in a fresh interpreter; its stdout, after checking it exited cleanly."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit status {done.returncode}\n{done.stderr[-3000:]}"
    return done.stdout


def test_a_layout_changed_by_another_thread_while_the_merger_reads_it_is_refused_or_read_whole():
    """Another thread keeps turning symbols into separators and back while the merge loop is built from the
    buffer without the GIL: one count for one chunk, but the buffer may show thousands. Each value is read
    once and checked as it is read, so the result is a ValueError or a merger of what it read, never a read
    past the counts. The count is the first of an array of negative ones, so that such a read shows as
    "a chunk count is negative" (a check made before the layout was read again said "one count per chunk"
    the first time, then read past the count on the second pass)."""
    symbols = np.full(2_000_001, 97, dtype=np.int32)
    symbols[0] = symbols[-1] = SEPARATOR_ID
    counts = np.array([3] + [-7] * 1_000_000, dtype=np.int64)[:1]
    stop = threading.Event()

    def flip():  # valid and not, a few milliseconds each: long enough to be read whole either way
        while not stop.is_set():
            symbols[1:-1:4] = SEPARATOR_ID
            time.sleep(0.003)
            symbols[1:-1:4] = 97
            time.sleep(0.003)

    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes = set()
    try:
        for _ in range(60):
            try:
                native.PairMerger(symbols, counts, 256, 1, -1)
                outcomes.add("built")
            except ValueError as exc:
                assert "one count per chunk" in str(exc)
                outcomes.add("refused")
    finally:
        stop.set()
        flipper.join()
    assert outcomes <= {"built", "refused"}


def test_threads_that_cannot_start_leave_their_ranges_to_the_calling_thread():
    """A thread of an encode or count call that fails to start (as with std::bad_alloc) after another one
    started: that one is joined, the failed range runs in the calling thread, and the IDs and counts are
    those of one thread (a started thread left joinable would end the process in std::terminate)."""
    out = run_python("""
        from pipeline.tokenizer import Tokenizer, backend
        native = backend.native
        tokenizer = Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98), (256, 256)])
        texts = ["abab" * 50 + str(i) for i in range(40)]
        want = tokenizer.encode_batch(texts)
        native._fail_next("thread_start", 1)
        assert Tokenizer.from_merges(kind="byte", pattern="", merges=[(97, 98), (256, 256)]).encode_batch(
            texts, threads=4) == want, "encode"
        counted = native.ChunkCounter(native.SPLIT_MODES["gpt4"], 1)
        big = ["hello world " * 30_000, "more words here " * 30_000, "x y z " * 30_000]
        counted.add(big)
        counter = native.ChunkCounter(native.SPLIT_MODES["gpt4"], 3)
        native._fail_next("thread_start", 1)
        counter.add(big)
        assert counter.pop_counts() == counted.pop_counts(), "count"
        print("ok")
    """)
    assert out == "ok\n"


def test_an_error_while_the_gil_is_released_is_raised_once_it_is_held_again():
    """A failure in work run without the GIL becomes a MemoryError with the GIL held (the core checks it,
    and a Python error set without the GIL is a fatal error), and the next call works."""
    out = run_python("""
        import numpy as np
        from pipeline.tokenizer import backend
        native = backend.native
        encoder = native.Encoder([97], [98], [256], native.SPLIT_MODES["gpt4"], list(range(256)), 0)
        counter = native.ChunkCounter(native.SPLIT_MODES["gpt2"], 2)
        layout = np.array([0x10FFFF, 97, 98, 0x10FFFF], dtype=np.int32), np.array([2], dtype=np.int64)
        calls = [lambda: encoder.encode("abab"), lambda: encoder.encode_flat(["ab", "abc"], 2),
                 lambda: encoder.encode_lists(["ab"]), lambda: counter.add(["ab ab"]), counter.pop_counts,
                 lambda: native.PairMerger(*layout, 256, 1, -1)]
        for call in calls:
            native._fail_next("without_gil")
            try:
                call()
            except MemoryError:
                pass
            else:
                raise AssertionError(f"{call} did not fail")
            call()
        assert encoder.encode("abab") == np.array([256, 256], dtype=np.uint32).tobytes()
        print("ok")
    """)
    assert out == "ok\n"


def test_fail_next_names_its_points():
    with pytest.raises(ValueError, match="thread_start"):
        native._fail_next("elsewhere")
