"""BPE at work on one text: the starting pieces, every merge that applies to it in training order, the IDs.

Each step is the reference encoder's (``reference.py``): the lowest-ranked pair of any chunk merges,
left to right without overlap, in every chunk at once. That is the order of replaying merges in
training order and gives exactly the IDs of :meth:`Tokenizer.encode_ordinary`, so a trace ends where
encoding ends. Merges never cross the pattern's chunks.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from pipeline.errors import TokenizerError
from pipeline.tokenizer import reference
from pipeline.tokenizer.core import Tokenizer

_ANGLE_BYTES = "lmprep.angle_bytes"


def _angle_bytes(error: UnicodeError) -> tuple[str, int]:
    """Bytes that are not whole UTF-8 characters, shown as ``<e6>`` each."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return "".join(f"<{byte:02x}>" for byte in error.object[error.start:error.end]), error.end


codecs.register_error(_ANGLE_BYTES, _angle_bytes)


@dataclass(frozen=True)
class TraceStep:
    """One merge that applied: its rank in training order, its pair, the ID it made, and the IDs after it."""

    rank: int
    pair: tuple[int, int]
    result: int
    ids: list[int]


@dataclass(frozen=True)
class Trace:
    """``steps`` holds at most ``max_steps`` merges; ``total_steps`` counts all that applied."""

    start: list[int]
    steps: list[TraceStep]
    total_steps: int
    ids: list[int]


def trace(tokenizer: Tokenizer, text: str, *, max_steps: int | None = None) -> Trace:
    """Encode ``text`` (special-token strings are plain text) one merge at a time."""
    if max_steps is not None and max_steps < 0:
        raise TokenizerError(f"max_steps must be >= 0, got {max_steps}")
    chunks = tokenizer.split_base_ids(text)
    start = _flatten(chunks)
    rank_of = {pair: rank for rank, pair in enumerate(tokenizer.merges)}
    results = tokenizer.merge_results
    steps: list[TraceStep] = []
    total = 0
    while (pair := _lowest_ranked_pair(chunks, rank_of)) is not None:
        rank = rank_of[pair]
        result = results[rank]
        chunks = [reference.merge(chunk, pair, result) for chunk in chunks]
        total += 1
        if max_steps is None or len(steps) < max_steps:
            steps.append(TraceStep(rank=rank, pair=pair, result=result, ids=_flatten(chunks)))
    return Trace(start=start, steps=steps, total_steps=total, ids=_flatten(chunks))


def piece(tokenizer: Tokenizer, token_id: int) -> str:
    """A token's text for a trace: partial UTF-8 bytes as ``<e6>``, control characters escaped (``\\n``)."""
    text = tokenizer.token_bytes(token_id).decode("utf-8", errors=_ANGLE_BYTES)
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def format_text(tokenizer: Tokenizer, result: Trace) -> list[str]:
    """The trace as lines for people: ``start``, one line per merge shown, then the IDs."""
    lines = [f"start: {_pieces(tokenizer, result.start)}  ({len(result.start):,} tokens)"]
    for step in result.steps:
        left, right = (piece(tokenizer, part) for part in step.pair)
        lines.append(f"merge {step.rank}: '{left}' + '{right}' -> {_pieces(tokenizer, step.ids)}  "
                     f"({len(step.ids):,} tokens)")
    hidden = result.total_steps - len(result.steps)
    if hidden:
        lines.append(f"... {hidden} more merges apply (not shown: --max-steps {len(result.steps)})")
    lines.append(f"IDs: {' '.join(map(str, result.ids))}  ({len(result.ids):,} tokens)")
    return lines


def to_json(tokenizer: Tokenizer, text: str, result: Trace) -> dict:
    """The trace as plain data for tools; ``pieces`` are rendered as :func:`piece` does."""
    return {
        "kind": tokenizer.kind,
        "text": text,
        "start": {"ids": result.start, "pieces": [piece(tokenizer, i) for i in result.start]},
        "steps": [{"merge": step.rank, "pair": list(step.pair), "result": step.result,
                   "parts": [piece(tokenizer, part) for part in step.pair],
                   "ids": step.ids, "tokens": len(step.ids)} for step in result.steps],
        "total_steps": result.total_steps,
        "ids": result.ids,
    }


def _pieces(tokenizer: Tokenizer, ids: list[int]) -> str:
    return "|".join(piece(tokenizer, i) for i in ids)


def _lowest_ranked_pair(chunks: list[list[int]], rank_of: dict[tuple[int, int], int]) -> tuple[int, int] | None:
    """The pair that merges next: the lowest-ranked of the chunks' own next pairs."""
    firsts = (reference.lowest_ranked_pair(chunk, rank_of) for chunk in chunks)
    return min((pair for pair in firsts if pair is not None), key=rank_of.__getitem__, default=None)


def _flatten(chunks: list[list[int]]) -> list[int]:
    return [token for chunk in chunks for token in chunk]
