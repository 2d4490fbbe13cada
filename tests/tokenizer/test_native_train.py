"""Native training (``_native_train.h``): the same chunk counts as the Python counter, the merges of the reference.

Counting is compared with the Python counter (the ``regex`` split) on random Unicode, lone surrogates
included, for every pattern the core splits by hand and any thread count; training is compared with
``reference.train`` (which is also the Python backend's trainer) on random text, and whole tokenizers
(their ``tokenizer.json`` bytes) across backends.
"""

from __future__ import annotations

import pickle
import struct
import threading
from collections import Counter

import numpy as np
import pytest
from conftest import UNICODE_TEXTS, needs_native_core
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.engine import stage_log
from pipeline.errors import TokenizerError
from pipeline.tokenizer import Tokenizer, _train_count, backend, patterns, reference, trainer
from pipeline.tokenizer._train_pairs import SEPARATOR_ID
from pipeline.tokenizer.trainer import TrainResult, train_merges

native = backend.native
pytestmark = needs_native_core()

NATIVE_PATTERNS = [patterns.GPT4, patterns.GPT2, patterns.WORD, ""]
PATTERN_IDS = ["gpt4", "gpt2", "word", "none"]


def python_counts(texts, pattern, workers=1):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        return _train_count.count_chunks(texts, pattern=pattern, workers=workers)


def python_train(texts, **options):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        return train_merges(texts, **options)


# --- counting ------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(UNICODE_TEXTS, max_size=8), pattern=st.sampled_from(NATIVE_PATTERNS))
def test_native_counts_are_the_python_counts(texts, pattern):
    assert patterns.native_mode(pattern) is not None
    assert _train_count.count_chunks(texts, pattern=pattern, workers=1) == python_counts(texts, pattern)


@pytest.mark.parametrize("pattern", NATIVE_PATTERNS, ids=PATTERN_IDS)
def test_counts_do_not_depend_on_the_threads(tokenizer_corpus, pattern):
    """Enough text that every thread gets a slice (each counts at least 64k characters)."""
    texts = [text + f" {i}\ud800 é\n" for i in range(400) for text in tokenizer_corpus]
    assert sum(map(len, texts)) > 4 * 65_536
    expected = python_counts(texts, pattern)
    for threads in (1, 2, 3, 4):
        counter = native.ChunkCounter(patterns.native_mode(pattern), threads)
        counter.add(texts[:7])
        counter.add(texts[7:])
        assert counter.pop_counts() == expected
        assert counter.pop_counts() == {}  # it starts over


def test_a_custom_pattern_is_counted_in_python():
    assert patterns.native_mode(r"\S+|\s+") is None
    assert _train_count.count_chunks(["ab ab"], pattern=r"\S+|\s+") == {"ab": 2, " ": 1}


def test_the_counter_refuses_what_is_not_text():
    gpt4 = native.SPLIT_MODES["gpt4"]
    counter = native.ChunkCounter(gpt4, 2)
    with pytest.raises(TypeError, match="got bytes at position 1"):
        counter.add(["a", b"b"])
    with pytest.raises(ValueError, match="split mode"):
        native.ChunkCounter(max(native.SPLIT_MODES.values()) + 1, 1)
    with pytest.raises(ValueError, match="threads"):
        native.ChunkCounter(gpt4, 0)
    with pytest.raises(RuntimeError, match="once"):
        counter.__init__(gpt4, 1)
    assert counter.pop_counts() == {}


def test_threads_counting_into_one_counter_one_at_a_time_or_refused():
    """A second thread calling the same counter while it counts is refused, never a crash; the counts of
    the calls that ran add up."""
    counter = native.ChunkCounter(native.SPLIT_MODES["gpt4"], 1)
    texts = ["hello world " * 20_000] * 4
    refused = []

    def add():
        try:
            counter.add(texts)
        except RuntimeError as exc:
            refused.append(str(exc))

    workers = [threading.Thread(target=add) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert all("in use by another thread" in message for message in refused)
    calls = 4 - len(refused)  # the first to start always runs
    per_text = {"hello": 1, " hello": 19_999, " world": 20_000, " ": 1}
    assert counter.pop_counts() == {chunk: count * 4 * calls for chunk, count in per_text.items()}


def counted(texts, pattern=patterns.GPT4, threads=1):
    counter = native.ChunkCounter(patterns.native_mode(pattern), threads)
    counter.add(texts)
    return counter


@settings(max_examples=100, deadline=None)
@given(left=st.lists(UNICODE_TEXTS, max_size=6), right=st.lists(UNICODE_TEXTS, max_size=6),
       pattern=st.sampled_from(NATIVE_PATTERNS))
def test_serialised_counts_round_trip_and_add_up_as_the_texts_joined(left, right, pattern):
    """The serialised form reads back as the same counts, lone surrogates included; adding two counters (as
    bytes, as counters, or pickled) gives the counts of both lists of texts counted together."""
    whole = python_counts(left + right, pattern)
    restored = native.ChunkCounter(patterns.native_mode(pattern), 1)
    restored.add_serialized(counted(left, pattern).serialize())
    assert restored.pop_counts() == python_counts(left, pattern)
    into_bytes = counted(left, pattern, threads=2)
    into_bytes.add_serialized(counted(right, pattern).serialize())
    assert into_bytes.pop_counts() == whole
    absorbing, absorbed = counted(left, pattern), counted(right, pattern, threads=3)
    absorbing.absorb(absorbed)
    assert len(absorbed) == 0 and len(absorbing) == len(whole)
    assert absorbing.pop_counts() == whole
    assert pickle.loads(pickle.dumps(counted(left + right, pattern))).pop_counts() == whole


def test_serialised_counts_are_one_buffer_of_lengths_keys_and_counts():
    data = counted(["ab ab é"]).serialize()
    magic, mode, entries = struct.unpack_from("=2IQ", data)
    assert (mode, entries) == (native.SPLIT_MODES["gpt4"], 3)
    lengths = struct.unpack_from("=3I", data, 16)
    keys = data[28:28 + sum(lengths)]
    counts = struct.unpack_from("=3q", data, 28 + sum(lengths))
    assert len(data) == 28 + sum(lengths) + 3 * 8
    at = np.cumsum((0, *lengths))
    assert {keys[at[i]:at[i + 1]].decode(): counts[i] for i in range(3)} == {"ab": 1, " ab": 1, " é": 1}


def test_a_counter_sums_itself_up_for_a_task_log_line_as_a_dict_does():
    texts = ["x" * (i + 1) for i in range(1_500)]  # one chunk each
    assert stage_log.describe_result(counted(texts)) == stage_log.describe_result(python_counts(texts, patterns.GPT4))
    assert stage_log.describe_result(counted(texts)) == "1,500 entries"


def test_serialise_keeps_the_counts():
    counter = counted(["x y"])
    assert counter.serialize() == counter.serialize()
    assert counter.pop_counts() == {"x": 1, " y": 1}


def test_the_counter_refuses_what_is_not_its_serialised_counts():
    data = counted(["ab ab cd"]).serialize()
    counter = counted(["kept"])
    for damaged in (b"", data[:-1], data + b"\0", b"\0" + data[1:], data[:16] + b"\0\0\0\0" + data[20:]):
        with pytest.raises(ValueError, match="add_serialized"):
            counter.add_serialized(damaged)
    with pytest.raises(ValueError, match="another split mode"):
        counter.add_serialized(counted(["ab"], pattern=patterns.GPT2).serialize())
    with pytest.raises(ValueError, match="another split mode"):
        counter.absorb(counted(["ab"], pattern=patterns.GPT2))
    with pytest.raises(ValueError, match="itself"):
        counter.absorb(counter)
    with pytest.raises(TypeError, match="ChunkCounter"):
        counter.absorb({"ab": 1})
    assert counter.pop_counts() == {"kept": 1}  # nothing of the refused data was added


@pytest.mark.parametrize("native_left", [True, False])
def test_add_counts_sums_a_counter_and_a_native_counter(native_left):
    """A worker without the native core sends a Counter: the sum is then a Counter, the same counts."""
    native_counts, python = counted(["ab ab cd"]), Counter(python_counts(["ab ef"], patterns.GPT4))
    left, right = (native_counts, python) if native_left else (python, native_counts)
    assert _train_count.add_counts(left, right) == {"ab": 2, " ab": 1, " cd": 1, " ef": 1}


def test_merges_from_a_native_counter_are_those_from_its_dict(tokenizer_corpus):
    for kind in ("byte", "char"):
        expected = trainer.merges_from_counts(counted(tokenizer_corpus).pop_counts(), kind=kind, num_merges=50)
        assert trainer.merges_from_counts(counted(tokenizer_corpus), kind=kind, num_merges=50) == expected


def test_a_native_counter_with_a_lone_surrogate_is_refused_for_the_byte_kind():
    with pytest.raises(TokenizerError, match="lone surrogate"):
        trainer.merges_from_counts(counted(["ab \ud800x ab"]), kind="byte", num_merges=5)


# --- the merge loop ------------------------------------------------------------------------------

train_texts = st.lists(st.one_of(UNICODE_TEXTS, st.text(alphabet="ab \n\u00e9\u4e2d", max_size=40)), max_size=8)


@settings(max_examples=150, deadline=None)
@given(
    texts=train_texts,
    kind=st.sampled_from(["byte", "char"]),
    pattern=st.sampled_from([patterns.GPT4, patterns.GPT2, "", r"\S+|\s+"]),
    num_merges=st.integers(0, 40),
    min_frequency=st.integers(1, 3),
    merge_newlines=st.booleans(),
)
def test_native_training_is_the_reference_training(texts, kind, pattern, num_merges, min_frequency,
                                                                   merge_newlines):
    if kind == "byte":  # the byte kind refuses lone surrogates (tested below)
        texts = [text.encode("utf-8", "replace").decode() for text in texts]
    options = dict(kind=kind, pattern=pattern, num_merges=num_merges, min_frequency=min_frequency,
                   merge_newlines=merge_newlines)
    expected = TrainResult(*reference.train(texts, **options))
    assert python_train(texts, workers=1, **options) == expected
    assert train_merges(texts, workers=2, **options) == expected


def test_lone_surrogates_train_the_char_kind_and_are_refused_by_the_byte_kind_alike():
    texts = ["a\ud800b a\ud800b \udfff\udfff\udfff x"] * 3  # two chunks hold surrogates: the smaller is named
    options = dict(pattern=patterns.GPT4, num_merges=10, workers=1)
    assert train_merges(texts, kind="char", **options) == python_train(texts, kind="char", **options)
    messages = set()
    for train in (train_merges, python_train):
        with pytest.raises(TokenizerError, match="lone surrogate") as error:
            train(texts, kind="byte", **options)
        messages.add(str(error.value))
    assert messages == {"training text contains '\\udfff' in the chunk ' \\udfff\\udfff\\udfff', which is not "
                        "encodable as UTF-8 (a lone surrogate): the byte kind cannot train on it; clean the text first"}


def test_progress_batches_give_the_same_merges(monkeypatch, tokenizer_corpus):
    options = dict(kind="byte", pattern=patterns.GPT4, num_merges=300, workers=1)
    whole = train_merges(tokenizer_corpus, **options)
    monkeypatch.setattr(trainer, "PROGRESS_MERGES", 7)
    assert train_merges(tokenizer_corpus, progress=True, **options) == whole
    assert whole == python_train(tokenizer_corpus, **options)


@pytest.mark.parametrize("kind", ["byte", "char"])
def test_a_layout_past_the_native_loops_reach_is_refused(monkeypatch, tokenizer_corpus, kind):
    """Past 2**32 - 2 positions the merge loop's 32-bit positions end: a TokenizerError, never a wrong merge."""
    monkeypatch.setattr(trainer, "NATIVE_MAX_SYMBOLS", 10)
    with pytest.raises(TokenizerError, match="more than the 10 the merge loop indexes"):
        train_merges(tokenizer_corpus, kind=kind, pattern=patterns.GPT4, num_merges=20, workers=1)


@pytest.mark.parametrize("kind, pattern", [("byte", "gpt4"), ("byte", "gpt2"), ("byte", "none"), ("char", None),
                                           ("char", "gpt4"), ("word", None), ("byte", r"\w+")])
def test_tokenizer_files_are_byte_identical_across_backends(tmp_path, tokenizer_corpus, kind, pattern):
    options = dict(vocab_size=400, kind=kind, pattern=pattern, special_tokens=["<|endoftext|>"], workers=2)
    Tokenizer.train(tokenizer_corpus, **options).save(tmp_path / "native.json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        Tokenizer.train(tokenizer_corpus, **options).save(tmp_path / "python.json")
    assert (tmp_path / "native.json").read_bytes() == (tmp_path / "python.json").read_bytes()


def layout(*chunks: list[int]) -> np.ndarray:
    symbols = [SEPARATOR_ID]
    for chunk in chunks:
        symbols += [*chunk, SEPARATOR_ID]
    return np.array(symbols, dtype=np.int32)


def test_the_merger_reads_the_layout_of_train_pairs():
    merger = native.PairMerger(layout([97, 97, 97, 98], [97, 98]), np.array([1, 2], dtype=np.int64), 256, 1, -1)
    assert merger.merge(1) == [(97, 98)]  # (a, b) occurs 3 times, (a, a) twice
    assert merger.merge(10) == [(97, 97), (257, 256)]  # fewer than asked: no pair is left
    assert reference.train_from_counts({"aaab": 1, "ab": 2}, kind="byte", num_merges=10, min_frequency=1)[0] == [
        (97, 98), (97, 97), (257, 256)]
    assert merger.merge(10) == []
    empty = native.PairMerger(layout(), np.array([], dtype=np.int64), 256, 2, -1)
    assert empty.merge(5) == []


@pytest.mark.parametrize(("symbols", "counts", "message"), [
    (layout([97, 98]), [1, 2], "one count per chunk"),
    (np.array([97, SEPARATOR_ID], dtype=np.int32), [1], "start and end with a separator"),
    (layout([97, 0xD800]), [1], "surrogates"),
    (layout([97, -5]), [1], "surrogates"),
    (layout([97, 98]), [-1], "negative"),
])
def test_the_merger_refuses_a_layout_that_does_not_fit(symbols, counts, message):
    with pytest.raises(ValueError, match=message):
        native.PairMerger(symbols, np.array(counts, dtype=np.int64), 256, 1, -1)


def test_the_merger_refuses_buffers_of_the_wrong_size_and_a_second_init():
    with pytest.raises(ValueError, match="int32 symbols and int64 counts"):
        native.PairMerger(b"\x00" * 7, b"", 256, 1, -1)
    with pytest.raises(ValueError, match="min_frequency"):
        native.PairMerger(layout(), b"", 256, 0, -1)
    merger = native.PairMerger(layout([97, 98]), np.array([2], dtype=np.int64), 256, 1, -1)
    with pytest.raises(RuntimeError, match="once"):
        merger.__init__(layout(), b"", 256, 1, -1)
    with pytest.raises(ValueError, match="not initialised"):
        native.PairMerger.__new__(native.PairMerger).merge(1)
    assert merger.merge(3) == [(97, 98)]
