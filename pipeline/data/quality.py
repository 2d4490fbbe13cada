"""Gopher's quality and repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A.1.1
and table A1), C4's rules (Raffel et al. 2020, section 2.2) and FineWeb's (Penedo et al. 2024, section
3.4) as filter steps of prepare, each threshold a key of the step.

Words are the whitespace-separated tokens of the text, as in the paper. datatrove's implementation
tokenizes words with a word tokenizer that splits punctuation into tokens of its own, so that its
"80 % of words contain a letter" rule drops most technical documents; here a word is what the paper
says, and a word such as ``f(x)`` contains a letter. Lines are the non-blank lines; paragraphs are
separated by blank lines; the repetition fractions are of the document's characters. Where the papers
leave a detail open, the rules read it as datatrove's implementations do; docs/curation.md lists the
differences that remain, and tests/data/test_datatrove_parity.py compares the decisions on real text.
Each rule's name is the rejected document's ``rule``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from pipeline.config.schema import bounded
from pipeline.data.record import Answer, Document, Drop, Rewrite, TextRule

_BULLETS = ("•", "●", "◦", "‣", "⁃", "▪", "▫", "-", "*", "·", "–")
_ELLIPSES = ("...", "…")
_PARAGRAPHS = re.compile(r"\n\s*\n")
_LETTER = re.compile(r"[^\W\d_]")
_TERMINAL = (".", "!", "?", '"', "”")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
"""Where a sentence ends: a run of ``.``, ``!`` or ``?`` (and closing quotes or brackets) before whitespace or the
end, where C4 used a sentence tokenizer; the peers' parity runs split sentences with it too."""


@dataclass(frozen=True)
class GopherQualityStep:
    """Gopher's quality rules (Rae et al. 2021, A.1.1): drop a document outside these bounds."""

    min_words: int = bounded(50, low=0)
    max_words: int = bounded(100_000, low=0)
    min_mean_word_length: float = bounded(3.0, low=0.0)
    max_mean_word_length: float = bounded(10.0, low=0.0)
    max_symbol_word_ratio: float = bounded(0.1, low=0.0)  # "#" per word, and "..." per word
    max_bullet_lines: float = bounded(0.9, low=0.0, high=1.0)
    max_ellipsis_lines: float = bounded(0.3, low=0.0, high=1.0)
    min_alphabetic_words: float = bounded(0.8, low=0.0, high=1.0)
    min_stop_words: int = bounded(2, low=0)
    stop_words: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")


class GopherQuality(TextRule):
    name = "gopher_quality"
    Settings = GopherQualityStep

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
        if sum(map(bool, map(_LETTER.search, words))) < rules.min_alphabetic_words * len(words):
            return "alphabetic_words"
        if len(set(rules.stop_words).intersection(map(str.lower, words))) < rules.min_stop_words:
            return "stop_words"
        return None


@dataclass(frozen=True)
class GopherRepetitionStep:
    """Gopher's repetition rules (Rae et al. 2021, table A1): drop a document that repeats itself more."""

    max_duplicate_lines: float = bounded(0.3, low=0.0, high=1.0)
    max_duplicate_paragraphs: float = bounded(0.3, low=0.0, high=1.0)
    max_duplicate_line_chars: float = bounded(0.2, low=0.0, high=1.0)
    max_duplicate_paragraph_chars: float = bounded(0.2, low=0.0, high=1.0)
    max_top_ngram_chars: tuple[float, ...] = (0.20, 0.18, 0.16)  # the n-grams of 2, 3, 4 words
    max_duplicate_ngram_chars: tuple[float, ...] = (0.15, 0.14, 0.13, 0.12, 0.11, 0.10)  # of 5 to 10 words


class GopherRepetition(TextRule):
    name = "gopher_repetition"
    Settings = GopherRepetitionStep

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
            if chars > characters * len(text):
                return f"duplicate_{kind[:-1]}_chars"
        grams = _WordGrams(text)
        for n, limit in enumerate(rules.max_top_ngram_chars, start=2):
            if grams.top_chars(n) > limit * len(text):
                return f"top_{n}gram"
        limits = rules.max_duplicate_ngram_chars
        for n, limit in enumerate(limits, start=5):
            chars = grams.duplicate_chars(n)
            if chars > limit * len(text):
                return f"duplicate_{n}gram"
            if chars <= min(limits[n - 4 :], default=-1) * len(text):
                break  # the words of a repeating n-gram are inside repeating (n-1)-grams: no longer one drops it
        return None


@dataclass(frozen=True)
class C4Step:
    """C4's rules (Raffel et al. 2020, section 2.2): lines kept only when they end in terminal punctuation,
    have ``min_words_per_line`` words and mention neither JavaScript nor a cookie or terms policy; pages
    dropped with fewer than ``min_sentences`` sentences left, "lorem ipsum" or a curly bracket."""

    min_words_per_line: int = bounded(3, low=0)
    min_sentences: int = bounded(5, low=0)
    max_word_length: int = bounded(1000, low=1)
    terminal_punctuation: bool = True
    javascript_lines: bool = True  # drop the lines that mention javascript
    policy_lines: bool = True  # drop the lines that mention terms of use, privacy or cookie policies
    lorem_ipsum: bool = True  # drop the pages with "lorem ipsum"
    curly_bracket: bool = True  # drop the pages with "{" (code)
    citations: bool = True  # remove citation markers such as [1] and [citation needed] from lines


class C4(TextRule):
    """C4's line rules remove lines (counted by rule); its page rules then drop the document, looking at the
    lines kept, as TensorFlow Datasets' C4 code does. A line ending in an ellipsis has no terminal
    punctuation. Sentences are counted as runs of ``.``, ``!`` or ``?`` (then closing quotes or brackets) before
    whitespace or the end, where C4 used a sentence tokenizer.
    """

    name = "c4"
    Settings = C4Step
    rewrites = True

    def apply(self, document: Document) -> Answer:
        """The lines kept, or the page rule that drops what they make (with the lines removed either way)."""
        text, removed = self.rewrite(document.text)
        rule = self.reject(text)
        return Rewrite(text, removed) if rule is None else Drop(rule, removed, text)

    def rewrite(self, text: str) -> tuple[str, dict[str, int]]:
        """The lines C4 keeps, joined by newlines, and how many lines each line rule removed."""
        kept, removed = [], {}
        for line in text.split("\n"):
            line = line.strip()
            if not line:
                continue
            rule, line = self._line_rule(line)
            if rule is None:
                kept.append(line)
            else:
                removed[rule] = removed.get(rule, 0) + 1
        return "\n".join(kept), removed

    def _line_rule(self, line: str) -> tuple[str | None, str]:
        """The rule removing the (stripped) line, or None and the line kept, its citation markers removed.
        In the order of C4's code: a line that survives the rules before it and holds "lorem ipsum" (or,
        after the JavaScript rule, "{") is kept, for the page rule to drop the page."""
        rules = self.settings
        if any(len(word) > rules.max_word_length for word in line.split()):
            return "long_word", line
        if rules.citations:
            line = _CITATION.sub("", line)
        if rules.terminal_punctuation and (not line.endswith(_TERMINAL) or line.endswith(_ELLIPSES)):
            return "no_terminal_punctuation", line
        if len(line.split()) < rules.min_words_per_line:
            return "short_line", line
        lowered = line.lower()
        if rules.lorem_ipsum and "lorem ipsum" in lowered:
            return None, line
        if rules.javascript_lines and "javascript" in lowered:
            return "javascript", line
        if rules.curly_bracket and "{" in line:
            return None, line
        if rules.policy_lines and any(phrase in lowered for phrase in _POLICY):
            return "policy", line
        return None, line

    def reject(self, text: str) -> str | None:
        rules = self.settings
        lowered = text.lower()
        if rules.lorem_ipsum and "lorem ipsum" in lowered:
            return "lorem_ipsum"
        if rules.curly_bracket and "{" in text:
            return "curly_bracket"
        if sum(max(len(SENTENCE_END.findall(line)), 1) for line in text.split("\n") if line) < rules.min_sentences:
            return "too_few_sentences"
        return None


@dataclass(frozen=True)
class FineWebStep:
    """FineWeb's own rules (Penedo et al. 2024, section 3.4): drop a document when at most
    ``min_punctuated_lines`` of its lines end in punctuation, at least ``max_duplicate_line_chars`` of its
    characters are in repeated lines, or at least ``max_short_lines`` of its lines are shorter than
    ``short_line_chars``."""

    min_punctuated_lines: float = bounded(0.12, low=0.0, high=1.0)
    max_duplicate_line_chars: float = bounded(0.1, low=0.0, high=1.0)
    max_short_lines: float = bounded(0.67, low=0.0, high=1.0)
    short_line_chars: int = bounded(30, low=0)


class FineWeb(TextRule):
    """FineWeb's three rules, on the non-blank lines (a document without one has no line to judge)."""

    name = "fineweb"
    Settings = FineWebStep

    def reject(self, text: str) -> str | None:
        rules = self.settings
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return None
        punctuated = sum(_sentence_terminal().match(line[-1]) is not None for line in lines)
        if punctuated <= rules.min_punctuated_lines * len(lines):
            return "punctuated_lines"
        if _duplicates(lines)[1] >= rules.max_duplicate_line_chars * (len(text) - text.count("\n")):
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


@functools.cache
def _sentence_terminal():
    """FineWeb's "punctuation" that ends a line: a character of Unicode's Sentence_Terminal (``regex``, which
    the standard ``re`` cannot express, imported when a FineWeb step first runs)."""
    import regex

    return regex.compile(r"\p{Sentence_Terminal}")


class _WordGrams:
    """The n-grams of a document's words, counted with numpy over 64-bit keys (:func:`minhash.ngram_keys`)."""

    def __init__(self, text: str):
        """The whitespace-separated words of ``text``: of its bytes when it is ASCII, the common case (cleaned
        text has no ``\\x1c``-``\\x1f``, the only ASCII characters ``str.split`` takes for whitespace and
        ``bytes.split`` does not)."""
        import numpy as np

        from pipeline.data import minhash

        if text.isascii():
            words = text.encode("ascii").split()
            lengths = map(len, words)
        else:
            strings = text.split()
            words = [word.encode("utf-8", "surrogatepass") for word in strings]
            lengths = map(len, strings)
        self._units = minhash.word_hashes(words)
        self._lengths = np.fromiter(lengths, dtype=np.int64, count=len(words))
        self._cumulative = np.concatenate([[0], np.cumsum(self._lengths)])

    def top_chars(self, n: int) -> int:
        """The characters of the most frequent n-gram (its words and the spaces between them; of equally frequent
        ones, the first in the text) times its count; 0 when no n-gram repeats."""
        import numpy as np

        from pipeline.data import minhash

        if len(self._units) < n:
            return 0
        _, first, counts = np.unique(minhash.ngram_keys(self._units, n), return_index=True, return_counts=True)
        best = int(counts.max())
        if best == 1:
            return 0
        start = int(first[counts == best].min())
        return best * int(self._cumulative[start + n] - self._cumulative[start] + n - 1)

    def duplicate_chars(self, n: int) -> int:
        """The characters of the words inside an n-gram that repeats an earlier one, each word counted once
        (the first occurrence of an n-gram is not a duplicate, as the first copy of a line is not)."""
        import numpy as np

        from pipeline.data import minhash

        if len(self._units) < n:
            return 0
        keys = minhash.ngram_keys(self._units, n)
        repeats = np.ones(len(keys), dtype=bool)
        repeats[np.unique(keys, return_index=True)[1]] = False
        repeated = np.concatenate([[0], np.cumsum(repeats)])  # repeating n-grams starting before each index
        words = np.arange(len(self._units))
        first, last = np.maximum(words - n + 1, 0), np.minimum(words, len(keys) - 1)
        inside = repeated[last + 1] - repeated[first] > 0
        return int(self._lengths[inside].sum())
