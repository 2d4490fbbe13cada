"""The ID layout: which IDs come before the first merge (the one place of the base-ID rule), and the
checked table of every ID's bytes and of what each merge makes.

Byte kind: IDs 0–255 are the byte values. Char kind: ID 0 is the unknown token, then one ID per
character of the alphabet (code-point order). Merges follow, then the special tokens.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
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
    try:  # n distinct keys that include each of 0..n-1 are exactly those
        return list(map(table.__getitem__, range(len(table))))
    except KeyError:
        missing = min(set(range(len(table))) - set(table))
        raise TokenizerFormatError(
            f"token IDs are not contiguous: ID {missing} is missing (there are {len(table)} tokens)"
        ) from None


def results_of_merges(table: list[bytes], merges: Sequence[tuple[int, int]], tokens: Mapping[int, bytes],
                      unk_id: int | None) -> list[int]:
    """The ID each merge produces: the regular token whose bytes are the two parts joined.

    Each check is a pass of builtins over all the merges; the loops that name the token or merge at fault run
    only when a check fails.
    """
    by_bytes = {data: token_id for token_id, data in tokens.items() if token_id != unk_id}
    if len(by_bytes) != len(tokens) - (unk_id in tokens):
        _raise_first_repeated_token(tokens, unk_id)
    if (in_order := _results_in_merge_order(table, merges, tokens, unk_id)) is not None:
        return in_order
    regular = tokens.keys() - {unk_id}
    found = by_bytes.get
    firsts, seconds = map(table.__getitem__, _parts(merges, 0)), map(table.__getitem__, _parts(merges, 1))
    results = (list(map(found, map(bytes.__add__, firsts, seconds)))
               if regular.issuperset(itertools.chain.from_iterable(merges)) else [None])
    if None in results:  # a merge of an ID that is not a regular token, or one that makes no token: say which
        _raise_first_bad_merge(table, merges, tokens, unk_id, by_bytes)
    if len(set(results)) != len(results):
        raise TokenizerFormatError("two merges make the same token; each merge must create a new token")
    _check_merge_order(merges, results)
    return results


def _results_in_merge_order(table: list[bytes], merges: Sequence[tuple[int, int]], tokens: Mapping[int, bytes],
                             unk_id: int | None) -> list[int] | None:
    """The results in the trainer's layout, where merge k makes the k-th of the last ``len(merges)`` regular IDs
    from parts below it, checked without a lookup by bytes (what a file lmprep wrote, or ``from_merges``, gives);
    None when the merges are not in that layout, for :func:`results_of_merges` to find each result by its bytes.
    The caller has checked that no two regular tokens share their bytes."""
    first = len(tokens) - len(merges)
    made = range(first, len(tokens))
    if first < 0 or max(tokens, default=-1) != len(tokens) - 1:  # some regular ID is past a special token's
        return None
    lefts, rights = list(_parts(merges, 0)), list(_parts(merges, 1))
    parts = itertools.chain(lefts, rights)
    if (min(parts, default=0) < 0 or unk_id in lefts or unk_id in rights
            or not all(map(operator.lt, lefts, made)) or not all(map(operator.lt, rights, made))):
        return None
    joined = map(bytes.__add__, map(table.__getitem__, lefts), map(table.__getitem__, rights))
    return list(made) if all(map(operator.eq, joined, itertools.islice(table, first, None))) else None


def _parts(merges: Sequence[tuple[int, int]], side: int) -> Iterable[int]:
    """Each merge's left (``side`` 0) or right (1) part."""
    return map(operator.itemgetter(side), merges)


def _raise_first_repeated_token(tokens: Mapping[int, bytes], unk_id: int | None) -> None:
    by_bytes: dict[bytes, int] = {}
    for token_id, data in tokens.items():
        if token_id == unk_id:
            continue
        if data in by_bytes:
            raise TokenizerFormatError(f"IDs {by_bytes[data]} and {token_id} are the same token {data!r}")
        by_bytes[data] = token_id


def _raise_first_bad_merge(table: list[bytes], merges: Sequence[tuple[int, int]], tokens: Mapping[int, bytes],
                           unk_id: int | None, by_bytes: Mapping[bytes, int]) -> None:
    for rank, (a, b) in enumerate(merges):
        if a not in tokens or b not in tokens or unk_id in (a, b):
            raise TokenizerFormatError(f"merge #{rank} ({a}, {b}) uses an ID that is not a regular token")
        joined = table[a] + table[b]
        if joined not in by_bytes:
            raise TokenizerFormatError(f"merge #{rank} ({a}, {b}) makes {joined!r}, which is not in the vocabulary")


def _check_merge_order(merges: Sequence[tuple[int, int]], results: list[int]) -> None:
    """Replaying merges in order needs each part to exist before the merge that uses it: a part that some merge
    makes must be made at a lower rank than the merge that uses it (a token no merge makes is there from the
    start, rank -1)."""
    made_at = dict(zip(results, itertools.count()))
    if all(all(map(operator.lt, map(made_at.get, _parts(merges, side), itertools.repeat(-1)), itertools.count()))
           for side in (0, 1)):
        return
    for rank, pair in enumerate(merges):
        late = next((part for part in pair if made_at.get(part, -1) >= rank), None)
        if late is not None:
            raise TokenizerFormatError(f"merge #{rank} {pair} uses token {late} before the merge that makes it")
