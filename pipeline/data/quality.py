"""Gopher's quality and repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1
and table A1), C4's rules (Raffel et al. 2020, section 2.2) and FineWeb's (Penedo et al. 2024, section
3.4) as filter steps of prepare, each threshold a key of the step.

Words are the whitespace-separated tokens of the text, as in the paper. datatrove's implementation
tokenizes words with a word tokenizer that splits punctuation into tokens of its own, so that its
"80 % of words contain a letter" rule drops most technical documents; here a word is what the paper
says, and a word such as ``f(x)`` contains a letter. Lines are the non-blank lines; paragraphs are
separated by blank lines. Each rule's name is the rejected document's ``rule``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from pipeline.config.schema import C4Step, FineWebStep, GopherQualityStep, GopherRepetitionStep
from pipeline.data import minhash

_BULLETS = ("•", "●", "◦", "‣", "⁃", "▪", "▫", "-", "*", "·", "–")
_ELLIPSES = ("...", "…")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")
_TERMINAL = (".", "!", "?", '"', "”")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]", re.IGNORECASE)
_LINE_END_PUNCTUATION = (".", "!", "?", '"', "'", "”", "’", "…", "。", "！", "？", ")", ":", ";")
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")


_NO_LINES_REMOVED: Mapping[str, int] = MappingProxyType({})


class KeepsText:
    """A filter that only decides: it leaves each document's text as it is."""

    def rewrite(self, text: str) -> tuple[str, Mapping[str, int]]:
        return text, _NO_LINES_REMOVED

    def decide(self, text: str) -> tuple[str | None, tuple[str, float] | None]:
        """The rule that drops ``text`` (None to keep it), and what the step learnt of it: nothing here."""
        return self.reject(text), None  # type: ignore[attr-defined]


@dataclass(frozen=True)
class GopherQuality(KeepsText):
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
class GopherRepetition(KeepsText):
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
        words = text.encode("utf-8", "surrogatepass").split()
        grams = _WordGrams(words, [len(word.decode("utf-8", "surrogatepass")) for word in words])
        total = grams.characters
        for n, limit in enumerate(rules.max_top_ngram_chars, start=2):
            if grams.top_chars(n) > limit * total:
                return f"top_{n}gram"
        for n, limit in enumerate(rules.max_duplicate_ngram_chars, start=5):
            if grams.duplicate_chars(n) > limit * total:
                return f"duplicate_{n}gram"
        return None


@dataclass(frozen=True)
class C4(KeepsText):
    """C4's line rules remove lines (counted by rule); its page rules then drop the document, looking at the
    lines kept, as TensorFlow Datasets' C4 code does. A line ending in an ellipsis has no terminal
    punctuation. Sentences are counted as runs of ``.``, ``!`` or ``?`` (then closing quotes or brackets) before
    whitespace or the end, where C4 used a sentence tokenizer.
    """

    settings: C4Step
    name: str = "c4"

    def rewrite(self, text: str) -> tuple[str, Mapping[str, int]]:
        """The lines C4 keeps, joined by newlines, and how many lines each line rule removed."""
        kept, removed = [], {}
        for line in text.split("\n"):
            line = _CITATION.sub("", line).strip() if self.settings.citations else line.strip()
            if not line:
                continue
            rule = self._line_rule(line)
            if rule is None:
                kept.append(line)
            else:
                removed[rule] = removed.get(rule, 0) + 1
        return "\n".join(kept), removed

    def _line_rule(self, line: str) -> str | None:
        """The rule removing the line, or None. In C4's order: a line that survives the punctuation and
        length rules and holds "lorem ipsum" or "{" is kept, for the page rule to drop the page."""
        rules = self.settings
        words = line.split()
        lowered = line.lower()
        if rules.terminal_punctuation and (not line.endswith(_TERMINAL) or line.endswith(_ELLIPSES)):
            return "no_terminal_punctuation"
        if len(words) < rules.min_words_per_line:
            return "short_line"
        if any(len(word) > rules.max_word_length for word in words):
            return "long_word"
        if (rules.lorem_ipsum and "lorem ipsum" in lowered) or (rules.curly_bracket and "{" in line):
            return None
        if rules.javascript_lines and "javascript" in lowered:
            return "javascript"
        if rules.policy_lines and any(phrase in lowered for phrase in _POLICY):
            return "policy"
        return None

    def reject(self, text: str) -> str | None:
        rules = self.settings
        lowered = text.lower()
        if rules.lorem_ipsum and "lorem ipsum" in lowered:
            return "lorem_ipsum"
        if rules.curly_bracket and "{" in text:
            return "curly_bracket"
        if len(_SENTENCE_END.findall(text)) < rules.min_sentences:
            return "too_few_sentences"
        return None


@dataclass(frozen=True)
class FineWeb(KeepsText):
    """FineWeb's three rules, on the non-blank lines (a document without one has no line to judge)."""

    settings: FineWebStep
    name: str = "fineweb"

    def reject(self, text: str) -> str | None:
        rules = self.settings
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        if not lines:
            return None
        if sum(line.endswith(_LINE_END_PUNCTUATION) for line in lines) <= rules.min_punctuated_lines * len(lines):
            return "punctuated_lines"
        if _duplicates(lines)[1] >= rules.max_duplicate_line_chars * sum(map(len, lines)):
            return "duplicate_line_chars"
        if sum(len(line) < rules.short_line_chars for line in lines) >= rules.max_short_lines * len(lines):
            return "short_lines"
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


class _WordGrams:
    """The n-grams of a document's words, counted with numpy over 64-bit keys (:func:`minhash.ngram_keys`)."""

    def __init__(self, words: list[bytes], lengths: list[int]):
        self._units = minhash.word_hashes(words)
        self._lengths = np.asarray(lengths, dtype=np.int64)
        self._cumulative = np.concatenate([[0], np.cumsum(self._lengths)])
        self.characters = int(self._cumulative[-1])

    def _counted(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Each n-gram's count in the document, and its characters, by start."""
        _, inverse, counts = np.unique(minhash.ngram_keys(self._units, n), return_inverse=True, return_counts=True)
        starts = np.arange(len(self._units) - n + 1)
        return counts[inverse], self._cumulative[starts + n] - self._cumulative[starts]

    def top_chars(self, n: int) -> int:
        """The characters of the most frequent n-gram (the longest of equally frequent ones) times its count;
        0 when no n-gram repeats."""
        if len(self._units) < n:
            return 0
        counts, chars = self._counted(n)
        best = int(counts.max())
        return best * int(chars[counts == best].max()) if best > 1 else 0

    def duplicate_chars(self, n: int) -> int:
        """The characters of the words inside an n-gram that occurs more than once, each word counted once."""
        if len(self._units) < n:
            return 0
        counts, _ = self._counted(n)
        repeated = np.concatenate([[0], np.cumsum(counts > 1)])  # repeated n-grams starting before each index
        words = np.arange(len(self._units))
        first, last = np.maximum(words - n + 1, 0), np.minimum(words, len(counts) - 1)
        inside = repeated[last + 1] - repeated[first] > 0
        return int(self._lengths[inside].sum())
