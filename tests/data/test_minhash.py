"""MinHash signatures against datasketch's, and what their banding and verification imply."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash
from datasketch import MinHash

from pipeline.data import minhash

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "données", "naïve", "café", "東京", "мир",
         "🙂", "a", "an", "of", "to", "in", "non\u00a0breaking"]


def random_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def reference_shingle_hash(unit_values: list[int]) -> int:
    """The documented shingle hash in plain Python: a polynomial over the units mod 2**64, SplitMix64's
    finalizer, the high 32 bits."""
    value, mask = 0, (1 << 64) - 1
    for unit in unit_values:
        value = (value * 0x9E3779B97F4A7C15 + unit) & mask
    value ^= value >> 30
    value = (value * 0xBF58476D1CE4E5B9) & mask
    value ^= value >> 27
    value = (value * 0x94D049BB133111EB) & mask
    return (value ^ (value >> 31)) >> 32


def reference_hash(shingle: str, kind: str) -> int:
    if kind == "words":
        return reference_shingle_hash([xxhash.xxh3_64_intdigest(word.encode()) for word in shingle.split(" ")])
    return reference_shingle_hash([ord(char) for char in shingle])


def shingles(text: str, shingle: str, size: int) -> set[str]:
    """The shingle set as the module documents it, written out plainly."""
    if shingle == "words":
        units = [word.decode() for word in text.lower().encode().split()]
        return {" ".join(units[i : i + size]) for i in range(max(len(units) - size + 1, 1))}
    units = " ".join(text.lower().split())
    return {units[i : i + size] for i in range(max(len(units) - size + 1, 1))}


@pytest.mark.parametrize(("shingle", "size", "hashes", "seed"), [("words", 5, 128, 0), ("words", 1, 64, 7),
                                                                  ("chars", 3, 100, 42), ("chars", 9, 256, 1)])
def test_signatures_are_datasketchs_minhash_of_the_shingle_set(shingle, size, hashes, seed):
    rng = random.Random(seed)
    a, b = minhash.permutations(hashes, seed)
    for _ in range(20):
        text = random_text(rng, rng.randint(1, 60)) + "  \tMIXED Case"
        expected = MinHash(num_perm=hashes, seed=seed, hashfunc=lambda s: reference_hash(s.decode(), shingle))
        expected.update_batch([s.encode() for s in shingles(text, shingle, size)])
        signature = minhash.signature(minhash.shingle_hashes(text, shingle=shingle, size=size), a, b)
        assert signature.dtype == np.uint32 and (signature == expected.hashvalues).all()


def test_a_shingle_hash_stands_for_one_shingle_of_the_text():
    hashes = minhash.shingle_hashes("One two three four", shingle="words", size=2)
    assert len(hashes) == 3 and len(set(hashes.tolist())) == 3
    assert (minhash.shingle_hashes("one  TWO\nthree four", shingle="words", size=2) == hashes).all()
    assert minhash.shingle_hashes("two three", shingle="words", size=2)[0] == hashes[1]
    assert len(minhash.shingle_hashes("short", shingle="words", size=5)) == 1  # shorter than one shingle
    assert len(minhash.shingle_hashes("   ", shingle="chars", size=3)) == 0


def test_the_share_of_equal_values_estimates_the_jaccard_similarity():
    rng = random.Random(3)
    a, b = minhash.permutations(256, 0)
    errors = []
    for _ in range(200):
        words = random_text(rng, 80).split()
        edited = [rng.choice(WORDS) if rng.random() < rng.uniform(0.0, 0.3) else w for w in words]
        one, two = " ".join(words), " ".join(edited)
        exact = len(shingles(one, "words", 3) & shingles(two, "words", 3)) / len(shingles(one, "words", 3)
                                                                                  | shingles(two, "words", 3))
        sig_one, sig_two = (minhash.signature(minhash.shingle_hashes(t, shingle="words", size=3), a, b)
                            for t in (one, two))
        errors.append(np.mean(sig_one == sig_two) - exact)
    assert abs(np.mean(errors)) < 0.01 and np.std(errors) < 0.035  # unbiased; sqrt(J(1-J)/256) <= 0.031


def test_bands_make_candidates_of_similar_signatures_only():
    a, b = minhash.permutations(128, 0)
    rng = random.Random(5)
    text = random_text(rng, 200)
    near = text.replace(text.split()[100], "changed", 1)
    keys = [minhash.band_keys(minhash.signature(minhash.shingle_hashes(t, shingle="words", size=5), a, b), 16, 4)
            for t in (text, near, random_text(rng, 200))]
    assert len(set(keys[0].tolist()) & set(keys[1].tolist())) > 8
    assert not set(keys[0].tolist()) & set(keys[2].tolist())
    assert minhash.candidate_probability(0.8, 16, 4) > 0.999 and minhash.candidate_probability(0.2, 16, 4) < 0.03
    assert minhash.implied_threshold(16, 4) == pytest.approx(0.5)
