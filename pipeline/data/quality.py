"""Gopher's quality and repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1
and table A1) as filter steps of prepare, each threshold a key of the step.

Words are the whitespace-separated tokens of the text, as in the paper. datatrove's implementation
tokenizes words with a word tokenizer that splits punctuation into tokens of its own, so that its
"80 % of words contain a letter" rule drops most technical documents; here a word is what the paper
says, and a word such as ``f(x)`` contains a letter. Lines are the non-blank lines; paragraphs are
separated by blank lines. Each rule's name is the rejected document's ``rule``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from pipeline.config.schema import GopherQualityStep, GopherRepetitionStep

_BULLETS = ("•", "●", "◦", "‣", "⁃", "▪", "▫", "-", "*", "·", "–")
_ELLIPSES = ("...", "…")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class GopherQuality:
    settings: GopherQualityStep
    name: str = "gopher_quality"

    def reject(self, text: str) -> str | None:
        rules = self.settings
        words = text.split()
        if not rules.min_words <= len(words) <= rules.max_words:
            return "word_count"
        if not rules.min_mean_word_length <= sum(map(len, words)) / max(len(words), 1) <= rules.max_mean_word_length:
            return "mean_word_length"
        if text.count("#") > rules.max_symbol_word_ratio * len(words):
            return "hash_ratio"
        if sum(text.count(ellipsis) for ellipsis in _ELLIPSES) > rules.max_symbol_word_ratio * len(words):
            return "ellipsis_ratio"
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if sum(line.startswith(_BULLETS) for line in lines) > rules.max_bullet_lines * len(lines):
            return "bullet_lines"
        if sum(line.endswith(_ELLIPSES) for line in lines) > rules.max_ellipsis_lines * len(lines):
            return "ellipsis_lines"
        if sum(1 for word in words if _LETTER.search(word)) < rules.min_alphabetic_words * len(words):
            return "alphabetic_words"
        if len(set(rules.stop_words).intersection(word.lower() for word in words)) < rules.min_stop_words:
            return "stop_words"
        return None


@dataclass(frozen=True)
class GopherRepetition:
    settings: GopherRepetitionStep
    name: str = "gopher_repetition"

    def reject(self, text: str) -> str | None:
        rules = self.settings
        lines = [line for line in text.split("\n") if line.strip()]
        paragraphs = [paragraph for paragraph in _PARAGRAPHS.split(text.strip()) if paragraph.strip()]
        for kind, elements, share, characters in (  # paragraphs first: their copies are copies of lines too
                ("paragraphs", paragraphs, rules.max_duplicate_paragraphs, rules.max_duplicate_paragraph_chars),
                ("lines", lines, rules.max_duplicate_lines, rules.max_duplicate_line_chars)):
            count, chars = _duplicates(elements)
            if count > share * len(elements):
                return f"duplicate_{kind}"
            if chars > characters * sum(map(len, elements)):
                return f"duplicate_{kind[:-1]}_chars"
        words = text.split()
        total = sum(map(len, words))
        for n, limit in enumerate(rules.max_top_ngram_chars, start=2):
            if _top_ngram_chars(words, n) > limit * total:
                return f"top_{n}gram"
        for n, limit in enumerate(rules.max_duplicate_ngram_chars, start=5):
            if _duplicate_ngram_chars(words, n) > limit * total:
                return f"duplicate_{n}gram"
        return None


def _duplicates(elements: list[str]) -> tuple[int, int]:
    """How many elements repeat an earlier one, and their characters."""
    seen: set[str] = set()
    count = chars = 0
    for element in elements:
        if element in seen:
            count += 1
            chars += len(element)
        seen.add(element)
    return count, chars


def _top_ngram_chars(words: list[str], n: int) -> int:
    """The characters of the most frequent n-gram's words, times its count (0 if none repeats)."""
    counts = Counter(zip(*(words[i:] for i in range(n))))
    if not counts:
        return 0
    gram, count = counts.most_common(1)[0]
    return sum(map(len, gram)) * count if count > 1 else 0


def _duplicate_ngram_chars(words: list[str], n: int) -> int:
    """The characters of the words inside an n-gram that occurs more than once, each word counted once."""
    grams = list(zip(*(words[i:] for i in range(n))))
    counts = Counter(grams)
    covered = [False] * len(words)
    for start, gram in enumerate(grams):
        if counts[gram] > 1:
            covered[start : start + n] = [True] * n
    return sum(len(word) for word, inside in zip(words, covered) if inside)
