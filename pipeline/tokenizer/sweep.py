"""Choosing a vocabulary size: compression against size, from one training run.

BPE's merges are a prefix order: the tokenizer of ``k`` merges is the first ``k`` merges of any longer
run on the same text and settings. So the sweep trains once, to the largest size asked for, and reads
every smaller size off the same merge list; it never retrains.

Each size is measured by the tokens it needs for a text (bytes per token), the gain over the previous
size per 1,000 extra vocabulary entries, and what it costs a model: one embedding row and one output-head
row per entry. :func:`suggest` turns that into a suggested size, with the rule it used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.engine import atomic
from pipeline.errors import TokenizerError
from pipeline.tokenizer.core import Tokenizer
from pipeline.tokenizer.layout import base_id_count

GAIN_PER = 1000  # gains are reported per this many extra vocabulary entries
THUMB_DIVISORS = (500, 100)  # rule of thumb for small data: vocab size ≈ characters ÷ 100–500


@dataclass(frozen=True)
class SweepRow:
    vocab_size: int
    merges: int
    tokens: int
    text_bytes: int

    @property
    def bytes_per_token(self) -> float:
        return self.text_bytes / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Sweep:
    """One row per size, ascending; ``characters`` is the training text's length, for the rule of thumb."""

    rows: list[SweepRow]
    characters: int


@dataclass(frozen=True)
class Suggestion:
    vocab_size: int
    rule: str


def sweep(
    train_texts: Sequence[str],
    *,
    eval_texts: Sequence[str] | None = None,
    vocab_sizes: Sequence[int] | None = None,
    merge_counts: Sequence[int] | None = None,
    kind: str = "byte",
    pattern: str | None = None,
    special_tokens: Sequence[str] = (),
    min_frequency: int = 2,
    merge_newlines: bool | None = None,
    character_coverage: float = 1.0,
    workers: int = 0,
) -> Sweep:
    """Train once on ``train_texts`` and measure every size on ``eval_texts`` (default: the training texts).

    Give exactly one of ``vocab_sizes`` (IDs in all, special tokens included) and ``merge_counts``; either
    must be strictly increasing.
    """
    if (vocab_sizes is None) == (merge_counts is None):
        raise TokenizerError("give either vocabulary sizes or merge counts to sweep")
    if kind == "word":
        raise TokenizerError("the sweep compares BPE merge counts; the word kind has no merges")
    what = "vocabulary sizes" if vocab_sizes is not None else "merge counts"
    sizes = _check_increasing(list(vocab_sizes if vocab_sizes is not None else merge_counts), what)
    if not any(train_texts):
        raise TokenizerError("the training text is empty; there is nothing to learn merges from")
    if vocab_sizes is not None and kind == "byte":  # the base is known before training: fail fast
        _check_base(sizes[0], base_id_count(kind) + len(special_tokens), kind)
    full = Tokenizer.train(
        train_texts, kind=kind, pattern=pattern, special_tokens=special_tokens, min_frequency=min_frequency,
        merge_newlines=merge_newlines, character_coverage=character_coverage, workers=workers,
        **({"vocab_size": sizes[-1]} if vocab_sizes is not None else {"merges": sizes[-1]}),
    )
    base = full.vocab_size - len(full.merges)
    counts = [size - base for size in sizes] if vocab_sizes is not None else sizes
    _check_reachable(full, sizes, counts, base, what)
    texts = list(eval_texts) if eval_texts is not None else list(train_texts)
    text_bytes = sum(len(text.encode("utf-8")) for text in texts)
    rows = [SweepRow(vocab_size=base + k, merges=k, tokens=_count_tokens(_prefix(full, k), texts),
                     text_bytes=text_bytes) for k in counts]
    return Sweep(rows=rows, characters=sum(map(len, train_texts)))


def gain_per_thousand(previous: SweepRow, row: SweepRow) -> float:
    """Percent fewer tokens than ``previous``, per 1,000 extra vocabulary entries."""
    if not previous.tokens or row.vocab_size == previous.vocab_size:
        return 0.0
    saved = (previous.tokens - row.tokens) / previous.tokens * 100
    return saved * GAIN_PER / (row.vocab_size - previous.vocab_size)


def embedding_parameters(vocab_size: int, dim: int, *, tie_weights: bool) -> int:
    """Token embedding plus output head (one table when tied): the part of a model the vocabulary sizes."""
    return vocab_size * dim * (1 if tie_weights else 2)


def suggest(result: Sweep, *, min_gain: float) -> Suggestion:
    """The largest size before the gain per 1,000 extra entries falls below ``min_gain`` percent, capped by
    the rule of thumb for small data (characters ÷ 100). The rule only caps: a suggestion below its range says
    so, and why. A suggestion, not a measurement of model quality."""
    rows = result.rows
    chosen = rows[0]
    for previous, row in zip(rows, rows[1:]):
        if gain_per_thousand(previous, row) < min_gain:
            break
        chosen = row
    low, high = (result.characters // divisor for divisor in THUMB_DIVISORS)
    rule = (f"the largest size before the gain falls below {min_gain:g}% fewer tokens per {GAIN_PER:,} extra "
            "entries")
    thumb = f"the rule of thumb for small data (characters ÷ 100–500 = {low:,}–{high:,})"
    within = [row for row in rows if row.vocab_size <= high]
    if chosen.vocab_size > high and within:
        return Suggestion(within[-1].vocab_size, f"{rule}, capped at {high:,} by {thumb}")
    if chosen.vocab_size > high:
        return Suggestion(rows[0].vocab_size, f"every size tried is above {thumb}, so the smallest: the text is "
                                              "small for these sizes")
    if chosen.vocab_size >= low:
        return Suggestion(chosen.vocab_size, f"{rule}; within {thumb}")
    if chosen is rows[-1]:
        return Suggestion(chosen.vocab_size, f"{rule}: the largest size tried, below {thumb}; sweep larger sizes")
    return Suggestion(chosen.vocab_size, f"{rule}; below {thumb}, which only caps a suggestion: larger sizes "
                                         "compress this text too little more")


def plot(result: Sweep, path: str | os.PathLike[str], *, title: str) -> None:
    """Bytes per token against vocabulary size (log x) as a PNG, drawn with Agg (no pyplot state)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), dpi=100)
    axes = figure.add_subplot()
    axes.plot([row.vocab_size for row in result.rows], [row.bytes_per_token for row in result.rows], marker="o")
    axes.set_xscale("log")
    axes.set(xlabel="vocabulary size (log scale)", ylabel="bytes per token", title=title)
    axes.grid(True, which="both", alpha=0.3)
    with atomic.atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")


def _check_increasing(sizes: list[int], what: str) -> list[int]:
    if not sizes:
        raise TokenizerError(f"no {what} to sweep")
    for previous, size in zip(sizes, sizes[1:]):
        if size <= previous:
            raise TokenizerError(f"{what} must increase: {size} follows {previous}")
    if sizes[0] < 0:
        raise TokenizerError(f"{what} must be >= 0, got {sizes[0]}")
    return sizes


def _check_reachable(full: Tokenizer, sizes: list[int], counts: list[int], base: int, what: str) -> None:
    """Every size must lie between the base vocabulary and what training reached."""
    if what == "vocabulary sizes":
        _check_base(sizes[0], base, full.kind)
    if counts[-1] > len(full.merges):
        reached = base + len(full.merges) if what == "vocabulary sizes" else len(full.merges)
        raise TokenizerError(f"{what[:-1]} {sizes[-1]} is above what training reached ({reached}: "
                             f"{full.stop_reason}); drop the sizes above {reached} or lower the minimum frequency")


def _check_base(smallest: int, base: int, kind: str) -> None:
    if smallest < base:
        raise TokenizerError(f"vocabulary size {smallest} is below the {base} IDs a {kind} tokenizer of this text "
                             "has before any merge (base tokens and special tokens); start the sizes there")


def _prefix(full: Tokenizer, merges: int) -> Tokenizer:
    """The tokenizer made of the first ``merges`` merges of ``full`` (a trainer-layout tokenizer)."""
    return Tokenizer.from_merges(kind=full.kind, pattern=full.pattern, merges=full.merges[:merges],
                                 alphabet=full.alphabet, special_tokens=list(full.special_tokens),
                                 merge_newlines=full.merge_newlines)


def _count_tokens(tokenizer: Tokenizer, texts: list[str]) -> int:
    return int(tokenizer.encode_batch_flat(texts)[0].size)
