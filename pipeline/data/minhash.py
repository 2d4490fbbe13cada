"""MinHash signatures of documents' shingle sets, and their LSH band keys.

A document is the set of its shingles: ``size`` consecutive words (lower-cased,
split at ASCII whitespace, as ``bytes.split`` does: the fastest split, and cleaned
text has no other control characters) or ``size`` consecutive characters
(lower-cased, runs of any whitespace as one space); a document shorter than one
shingle is one shingle. Each
shingle hashes to 32 bits (words through ``xxhash``, then a polynomial over the
shingle's words, mixed). The signature is datasketch's ``affine32`` MinHash of
those hashes, value for value: the MurmurHash3 finalizer, then ``hashes``
permutations ``a·h + b mod 2³²`` (``a`` odd) drawn from ``RandomState(seed)``,
each keeping its minimum. The share of equal values of two signatures estimates
the Jaccard similarity of the two sets.

LSH cuts a signature's first ``bands × rows`` values into ``bands`` bands of
``rows``; two documents whose values agree on a whole band become a candidate
pair, which happens with probability ``1 - (1 - J**rows)**bands`` at Jaccard
``J``: the S-curve whose midpoint is about ``(1 / bands) ** (1 / rows)``.
"""

from __future__ import annotations

import numpy as np
import xxhash

EMPTY = np.uint32(0xFFFFFFFF)
"""Every value of the signature of an empty set (datasketch's too)."""
_CHUNK = 4096  # shingles permuted at a time: bounds the (shingles × hashes) array to ~2 MB per 128 hashes
_POLY = np.uint64(0x9E3779B97F4A7C15)  # odd: the polynomial over a shingle's words mixes them in order


def permutations(hashes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``(a, b)`` of ``hashes`` affine permutations, drawn as datasketch 2's ``affine32`` scheme draws them."""
    generator = np.random.RandomState(seed)
    a = generator.randint(0, 1 << 31, hashes, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, hashes, dtype=np.uint32)
    return a, b


def shingle_hashes(text: str, *, shingle: str, size: int) -> np.ndarray:
    """The 32-bit hashes of the text's shingles (``shingle``: ``words`` or ``chars``), in text order."""
    if shingle == "words":
        units = word_hashes(text.lower().encode("utf-8", "surrogatepass").split())
    else:
        units = np.frombuffer(" ".join(text.lower().split()).encode("utf-32-le", "surrogatepass"),
                              dtype=np.uint32).astype(np.uint64)
    if not len(units):
        return np.zeros(0, dtype=np.uint32)
    return (_mix64(ngram_keys(units, size)) >> np.uint64(32)).astype(np.uint32)


def word_hashes(words: list[bytes]) -> np.ndarray:
    """A 64-bit xxhash of each word."""
    return np.fromiter(map(xxhash.xxh3_64_intdigest, words), dtype=np.uint64, count=len(words))


def ngram_keys(units: np.ndarray, size: int) -> np.ndarray:
    """A 64-bit key per run of ``size`` consecutive units (one run of all of them when fewer): a polynomial
    over their hashes, so equal runs have equal keys and different runs almost never do."""
    count = max(len(units) - size + 1, 1)
    combined = np.zeros(count, dtype=np.uint64)
    for offset in range(min(size, len(units))):
        combined = combined * _POLY + units[offset : offset + count]
    return combined


def signature(hashes: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The MinHash signature (``len(a)`` uint32 values) of a set given by its 32-bit hashes."""
    values = np.full(len(a), EMPTY, dtype=np.uint32)
    mixed = _fmix32(hashes)  # a repeated shingle changes no minimum: not worth a sort to drop
    for start in range(0, len(mixed), _CHUNK):
        np.minimum(values, (mixed[start : start + _CHUNK, None] * a + b).min(axis=0), out=values)
    return values


def band_keys(signature: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One 64-bit key per band: a hash of the band's values, seeded by the band (equal bands of two
    different band indices never collide by construction)."""
    values = np.ascontiguousarray(signature[: bands * rows]).reshape(bands, rows)
    return np.array([xxhash.xxh3_64_intdigest(values[band].tobytes(), seed=band) for band in range(bands)],
                    dtype=np.uint64)


def candidate_probability(jaccard: float, bands: int, rows: int) -> float:
    """The chance that two sets of this Jaccard similarity share at least one band."""
    return 1.0 - (1.0 - jaccard**rows) ** bands


def implied_threshold(bands: int, rows: int) -> float:
    """Where the banding's S-curve rises: about the similarity at which half of the pairs become candidates."""
    return (1.0 / bands) ** (1.0 / rows)


def _fmix32(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer, as datasketch pre-mixes each hash."""
    values = values.astype(np.uint32)
    values ^= values >> np.uint32(16)
    values *= np.uint32(0x85EBCA6B)
    values ^= values >> np.uint32(13)
    values *= np.uint32(0xC2B2AE35)
    values ^= values >> np.uint32(16)
    return values


def _mix64(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: every input bit reaches the high 32 bits the hashes keep."""
    values = values ^ (values >> np.uint64(30))
    values *= np.uint64(0xBF58476D1CE4E5B9)
    values ^= values >> np.uint64(27)
    values *= np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))
