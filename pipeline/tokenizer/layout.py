"""The ID layout: which IDs come before the first merge (the one place of the base-ID rule), and the
checked table of every ID's bytes and of what each merge makes.

Byte kind: IDs 0–255 are the byte values. Char kind: ID 0 is the unknown token, then one ID per
character of the alphabet (code-point order). Merges follow, then the special tokens.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.errors import TokenizerFormatError

if TYPE_CHECKING:
    import numpy as np

UINT16_VOCAB_LIMIT = 1 << 16


def ids_dtype(vocab_size: int) -> np.dtype:
    """The narrowest unsigned dtype that holds every ID of a ``vocab_size`` vocabulary: what encoded IDs are
    stored in (shards, exports). numpy is imported here, not with the module: ``status`` reads the layout alone."""
    import numpy as np

    return np.dtype(np.uint16) if vocab_size <= UINT16_VOCAB_LIMIT else np.dtype(np.uint32)


BYTE_IDS = 256
UNKNOWN_ID = 0  # the char kind's


def base_id_count(kind: str, alphabet_size: int = 0) -> int:
    """How many IDs precede the first merge of a ``kind`` tokenizer whose alphabet has ``alphabet_size``
    characters (the char kind's alphabet is known only after counting: 0 gives the floor, the unknown token)."""
    return BYTE_IDS if kind == "byte" else UNKNOWN_ID + 1 + alphabet_size


def token_table(tokens: Mapping[int, bytes], special_tokens: Mapping[str, int]) -> list[bytes]:
    """Bytes of every ID in ID order; IDs must be exactly ``0..n-1`` with no ID used twice."""
    table: dict[int, bytes] = dict(tokens)
    for name, token_id in special_tokens.items():
        if token_id in table:
            raise TokenizerFormatError(f"special token {name!r} reuses ID {token_id}, which is already a token")
        table[token_id] = name.encode("utf-8")
    missing = sorted(set(range(len(table))) - set(table))
    if missing:
        raise TokenizerFormatError(
            f"token IDs are not contiguous: ID {missing[0]} is missing (there are {len(table)} tokens)"
        )
    return [table[i] for i in range(len(table))]


def results_of_merges(table: list[bytes], merges: Sequence[tuple[int, int]], tokens: Mapping[int, bytes],
                   unk_id: int | None) -> list[int]:
    """The ID each merge produces: the regular token whose bytes are the two parts joined."""
    by_bytes: dict[bytes, int] = {}
    for token_id, data in tokens.items():
        if token_id == unk_id:
            continue
        if data in by_bytes:
            raise TokenizerFormatError(f"IDs {by_bytes[data]} and {token_id} are the same token {data!r}")
        by_bytes[data] = token_id
    regular = tokens.keys() - {unk_id}
    found = by_bytes.get
    results = ([found(table[a] + table[b]) for a, b in merges]
               if regular.issuperset(itertools.chain.from_iterable(merges)) else [None])
    if None in results:  # a merge of an ID that is not a regular token, or one that makes no token: say which
        _raise_first_bad_merge(table, merges, tokens, unk_id, by_bytes)
    if len(set(results)) != len(results):
        raise TokenizerFormatError("two merges make the same token; each merge must create a new token")
    _check_merge_order(merges, results, tokens)
    return results


def _raise_first_bad_merge(table: list[bytes], merges: Sequence[tuple[int, int]], tokens: Mapping[int, bytes],
                           unk_id: int | None, by_bytes: Mapping[bytes, int]) -> None:
    for rank, (a, b) in enumerate(merges):
        if a not in tokens or b not in tokens or unk_id in (a, b):
            raise TokenizerFormatError(f"merge #{rank} ({a}, {b}) uses an ID that is not a regular token")
        joined = table[a] + table[b]
        if joined not in by_bytes:
            raise TokenizerFormatError(f"merge #{rank} ({a}, {b}) makes {joined!r}, which is not in the vocabulary")


def _check_merge_order(merges: Sequence[tuple[int, int]], results: list[int], tokens: Mapping[int, bytes]) -> None:
    """Replaying merges in order needs each part to exist before the merge that uses it."""
    available = set(tokens) - set(results)
    for rank, (pair, result) in enumerate(zip(merges, results)):
        if pair[0] not in available or pair[1] not in available:
            late = next(part for part in pair if part not in available)
            raise TokenizerFormatError(f"merge #{rank} {pair} uses token {late} before the merge that makes it")
        available.add(result)
