"""The native core encodes exactly as the Python path and ``reference.encode``, on any text.

Each tokenizer (byte and char kinds, every named pattern and a custom one, special tokens) is built
twice, once with the native core and once with the Python path forced, and both must give the IDs of
the plain reference (or both refuse the text, as the byte kind refuses a lone surrogate, which UTF-8
cannot hold).
"""

from __future__ import annotations

import random
from array import array
from functools import partial
from itertools import chain

import numpy as np
import pytest
import regex
from conftest import SPECIAL, UNICODE_TEXTS, needs_native_core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import TokenizerError
from pipeline.tokenizer import Tokenizer, backend, reference

native = backend.native
pytestmark = needs_native_core()


def rebuilt(tokenizer: Tokenizer) -> Tokenizer:
    return Tokenizer.from_merges(kind=tokenizer.kind, pattern=tokenizer.pattern, merges=tokenizer.merges,
                                 alphabet=tokenizer.alphabet, special_tokens=list(tokenizer.special_tokens),
                                 merge_newlines=tokenizer.merge_newlines)


@pytest.fixture(scope="module")
def twins(trained_tokenizers):
    """(native, python) builds of every trained kind and pattern."""
    pairs = []
    for tokenizer in trained_tokenizers:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(backend, "native", None)
            python = rebuilt(tokenizer)
        pairs.append((rebuilt(tokenizer), python))
    return pairs


def outcome(function, *args):
    """What ``function(*args)`` returns, or the kind of error it raises."""
    try:
        result = function(*args)
    except (TokenizerError, UnicodeEncodeError):
        return "refused"
    return result.tolist() if isinstance(result, np.ndarray) else result


def reference_ids(tokenizer: Tokenizer, text: str):
    return outcome(lambda t: reference.encode(t, kind=tokenizer.kind, pattern=tokenizer.pattern,
                                              merges=tokenizer.merges, alphabet=tokenizer.alphabet), text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=UNICODE_TEXTS)
def test_both_backends_give_the_reference_ids(twins, text):
    for fast, python in twins:
        want = reference_ids(fast, text)
        assert outcome(fast.encode_ordinary, text) == want, fast
        assert outcome(python.encode_ordinary, text) == want, python


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.one_of(UNICODE_TEXTS, st.sampled_from([SPECIAL, "<|pad|>", "<|endof", "text|>"])),
                       max_size=6))
def test_special_tokens_cut_the_text_alike_on_both_backends(twins, pieces):
    """Special tokens allowed: each one becomes its ID, the text between is encoded as the reference does."""
    text = "".join(pieces)
    for fast, python in twins:
        want = outcome(partial(python.encode, allowed_special="all"), text)
        assert outcome(partial(fast.encode, allowed_special="all"), text) == want, fast
        if want != "refused" and set(fast.special_tokens) == {SPECIAL, "<|pad|>"}:
            plain = [piece for piece in regex_split_specials(text) if piece]
            assert want == list(chain.from_iterable(
                [fast.special_tokens[p]] if p in fast.special_tokens else reference_ids(fast, p) for p in plain))


def regex_split_specials(text: str) -> list[str]:
    return regex.split(f"({regex.escape(SPECIAL)}|{regex.escape('<|pad|>')})", text)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(UNICODE_TEXTS, max_size=8))
def test_both_backends_give_the_same_flat_arrays(twins, texts):
    for fast, python in twins:
        got, want = outcome(fast.encode_batch_flat, texts), outcome(python.encode_batch_flat, texts)
        if want == "refused":
            assert got == "refused"
        else:
            assert [a.tolist() for a in got] == [a.tolist() for a in want], fast


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(UNICODE_TEXTS, max_size=12), threads=st.integers(1, 5))
def test_threads_and_lists_give_the_ids_of_one_text_at_a_time(twins, texts, threads):
    for fast, python in twins:
        want = [outcome(python.encode_ordinary, text) for text in texts]
        lists = outcome(partial(fast.encode_batch, threads=threads), texts)
        flat = outcome(partial(fast.encode_batch_flat, threads=threads), texts)
        if "refused" in want:
            assert lists == flat == "refused"
            continue
        assert lists == want, fast
        assert all(type(i) is int for ids in lists for i in ids)
        ids, offsets = flat
        assert [ids[a:b].tolist() for a, b in zip(offsets, offsets[1:])] == want, fast


def test_threads_with_thousands_of_new_chunks_each_give_the_ids_of_one_text_at_a_time(twins):
    """Texts of thousands of distinct words each: the cache's tables grow many times over while the threads
    add their new chunks to them and read them, and a second call reads them from it."""
    rng = random.Random(5)
    texts = [" ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9))) for _ in range(3000))
             for _ in range(6)]
    for fast, python in twins:
        want = python.encode_batch(texts)
        for threads in (2, 3):
            assert fast.encode_batch(texts, threads=threads) == want, (fast, threads)
        assert fast.encode_batch(texts[::-1], threads=2) == want[::-1]  # from the cache the calls filled


def test_cold_calls_with_more_threads_than_cores_give_the_ids_of_one_thread(twins):
    """A cold cache misses nearly every chunk while the other threads add theirs to it: a lookup that missed
    must not take the entry another thread adds at the slot where its probe ended (the shared cache once did,
    for about 1 cold two-thread call in 100 under load). The custom pattern hands the native encoder each
    chunk as a text of its own; more threads than cores are switched in the midst of lookups."""
    fast, python = next((fast, python) for fast, python in twins if fast.pattern.startswith(r"\w+|"))
    rng = random.Random(11)
    texts = [" ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(5, 9))) for _ in range(2000))
             for _ in range(4)]
    want = python.encode_batch(texts)
    for call in range(150):
        assert rebuilt(fast).encode_batch(texts, threads=8) == want, call


def test_a_large_call_with_threads_in_rounds_gives_the_ids_of_one_text_at_a_time(byte_tokenizer, tmp_path):
    """A call over megabytes of text, in many pieces handed out as threads come free: the IDs and the offsets
    are those of one thread, and a refusal names the text's character."""
    from pipeline.tokenizer import Tokenizer

    byte_tokenizer.save(tmp_path / "tokenizer.json")
    fresh = partial(Tokenizer.load, tmp_path / "tokenizer.json")  # an empty cache each
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 12))) for _ in range(4000)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(200, 3000))) for _ in range(600)]
    assert sum(map(len, texts)) > 3 * 2**20 and len(texts) > 3 * 64  # dozens of pieces of about 64K characters
    ids, offsets = fresh().encode_batch_flat(texts, threads=1)
    for threads in (2, 3):
        got_ids, got_offsets = fresh().encode_batch_flat(texts, threads=threads)
        assert np.array_equal(got_ids, ids) and np.array_equal(got_offsets, offsets), threads
    refused = texts[:500] + ["x\ud800"] + texts[500:550] + ["y \udfff"] + texts[550:]  # two, in two pieces
    for threads in (2, 3):
        with pytest.raises(TokenizerError, match=r"'\\ud800' at character 1,"):
            fresh().encode_batch_flat(refused, threads=threads)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_threads_name_the_first_text_that_cannot_be_encoded(byte_tokenizer, threads):
    texts = ["plain text"] * 9 + ["x\ud800"] + ["more"] * 5 + ["y \udfff"] + ["end"] * 9
    for call in (byte_tokenizer.encode_batch, byte_tokenizer.encode_batch_flat):
        with pytest.raises(TokenizerError, match=r"'\\ud800' at character 1,"):
            call(texts, threads=threads)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_threads_must_be_a_whole_number_of_at_least_one(twins, threads):
    for fast, python in twins:
        for tokenizer in (fast, python):
            for call in (tokenizer.encode_batch, tokenizer.encode_batch_flat):
                with pytest.raises(TokenizerError, match=f"threads must be .*got {threads!r}"):
                    call(["abc"], threads=threads)


def test_corpus_ids_match_across_backends(twins, tokenizer_corpus):
    for fast, python in twins:
        assert fast.encode_batch_flat(tokenizer_corpus)[0].tolist() == \
            python.encode_batch_flat(tokenizer_corpus)[0].tolist(), fast


@pytest.mark.parametrize("seed", range(20))
def test_native_merges_match_the_reference_on_random_merge_tables(seed):
    """A random merge table (not one a trainer would learn) on short and long chunks: the heap path too."""
    rng = random.Random(seed)
    base = rng.randint(2, 6)
    pairs = list({(rng.randrange(base + i), rng.randrange(base + i)) for i in range(rng.randint(0, 40))})
    rank_of = {pair: rank for rank, pair in enumerate(pairs)}
    result_of = [base + 50 + rank for rank in range(len(pairs))]
    whole = native.Encoder([a for a, _ in pairs], [b for _, b in pairs], result_of, native.SPLIT_MODES["none"],
                           list(range(256)), 0)
    chunks = [[rng.randrange(base) for _ in range(rng.choice([1, 2, 5, 63, 64, 65, 200, 300]))] for _ in range(30)]
    ids, offsets = whole.encode_flat(["".join(map(chr, chunk)) for chunk in chunks])
    ids, offsets = array("I", ids).tolist(), np.frombuffer(offsets, dtype=np.int64).tolist()
    for chunk, start, end in zip(chunks, offsets, offsets[1:]):
        assert ids[start:end] == reference.encode_chunk(chunk, rank_of, result_of)


def test_native_objects_refuse_to_be_initialised_twice():
    """An encoder may be reading its merge table without the GIL: the table is never replaced."""
    encoder_ = native.Encoder([97], [98], [256], native.SPLIT_MODES["gpt4"], list(range(256)), 0)
    with pytest.raises(RuntimeError, match="once"):
        encoder_.__init__([], [], [], 0, list(range(256)), 0)
    assert array("I", encoder_.encode("abab")).tolist() == [256, 256]


@pytest.mark.parametrize("kind, pattern", [("byte", "gpt4"), ("byte", "gpt2"), ("char", "gpt4"), ("word", None)])
def test_training_learns_the_same_on_both_backends(tokenizer_corpus, kind, pattern):
    """Training cuts its chunks with the native pre-tokenizer where it can: the same merges and vocabulary."""
    options = dict(vocab_size=320, kind=kind, pattern=pattern, workers=1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backend, "native", None)
        python = Tokenizer.train(tokenizer_corpus, **options)
    fast = Tokenizer.train(tokenizer_corpus, **options)
    assert fast.fingerprint == python.fingerprint
