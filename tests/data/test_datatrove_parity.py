"""lmprep's Gopher, C4 and FineWeb steps decide as datatrove's filters do on real documents, once the
differences documented in docs/curation.md ("lmprep and datatrove") are translated.

The documents are the text installed beside the test's own libraries (package descriptions, licences,
documentation, Python sources, the message catalogues of ~40 languages, and the Debian changelogs and
copyright files where the system has them), cut at blank lines into pieces of 0.6-2.4 KB, cleaned as
prepare cleans them, each distinct piece once: which ones depends on what is installed, the agreement
required does not. Each translation makes datatrove's filter apply lmprep's reading of one rule, through
datatrove's own parameters, a constant or function of its module, a splitter of the filter, or the text
it is given; a rule not listed there is compared as datatrove has it.
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import sysconfig
from collections import Counter
from pathlib import Path

import datatrove.pipeline.filters.c4_filters as datatrove_c4
import datatrove.pipeline.filters.gopher_quality_filter as datatrove_quality
import datatrove.pipeline.filters.gopher_repetition_filter as datatrove_repetition
import pytest
from datatrove.data import Document
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)
from datatrove.utils.word_tokenizers import WordTokenizer

from pipeline.data import record
from pipeline.data.cleaning import clean_text
from pipeline.data.quality import (
    C4,
    SENTENCE_END,
    C4Step,
    FineWeb,
    FineWebStep,
    GopherQuality,
    GopherQualityStep,
    GopherRepetition,
    GopherRepetitionStep,
)

AGREEMENT = 0.999
EPSILON = 1e-9
PIECE_CHARS = (600, 2400)
DOCUMENTS = 3000
BULLETS = ("•", "●", "◦", "‣", "⁃", "▪", "▫", "-", "*", "·", "–")  # lmprep's bullet points
TERMINAL = (".", "!", "?", '"', "”")  # lmprep's terminal punctuation: C4's code's, and the closing ”


def pieces(text: str) -> list[str]:
    """The text cut at blank lines into pieces of at least ``PIECE_CHARS[0]`` characters, those over
    ``PIECE_CHARS[1]`` cut at the last line break before it."""
    found, current = [], ""
    for paragraph in re.split(r"\n[ \t]*\n", text):
        current = f"{current}\n\n{paragraph}" if current else paragraph
        while len(current) > PIECE_CHARS[1]:
            cut = current.rfind("\n", 0, PIECE_CHARS[1]) + 1 or PIECE_CHARS[1]
            found.append(current[:cut])
            current = current[cut:]
        if len(current) >= PIECE_CHARS[0]:
            found.append(current)
            current = ""
    return [*found, current] if current.strip() else found


KINDS = {  # where each kind of text is: files of the installed packages, or of the system's documentation
    "descriptions": "METADATA", "licences": "LICENSE", "documentation": (".md", ".rst"), "sources": ".py",
    "catalogues": ".po", "copyrights": "/usr/share/doc/*/copyright",
    "changelogs": "/usr/share/doc/*/changelog.Debian.gz",
}


def installed_files() -> dict[str, list[str]]:
    """The sorted paths of each kind of text."""
    found: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for directory, _, names in os.walk(sysconfig.get_paths()["purelib"]):
        licences = ".dist-info" in directory and ("licenses" in directory or "LICENSE" in directory)
        for name in names:
            path = os.path.join(directory, name)
            if name == "METADATA" and directory.endswith(".dist-info"):
                found["descriptions"].append(path)
            elif licences or (name.startswith("LICENSE") and directory.endswith(".dist-info")):
                found["licences"].append(path)
            else:
                for kind in ("documentation", "sources", "catalogues"):
                    found[kind] += [path] if name.endswith(KINDS[kind]) else []
    for kind in ("copyrights", "changelogs"):
        found[kind] = glob.glob(KINDS[kind])
    return {kind: sorted(paths) for kind, paths in found.items()}


def read_text(path: str) -> str:
    data = Path(path).read_bytes()
    text = gzip.decompress(data).decode("utf-8", "replace") if path.endswith(".gz") else data.decode("utf-8", "replace")
    return text.partition("\n\n")[2] if path.endswith("METADATA") else text  # a description follows its headers


def spread_pieces(paths: list[str], files: int) -> list[str]:
    """The pieces of about ``files`` files spread evenly over ``paths``, spread in turn (the n-th piece is
    ``n × 0.618...`` of the way round the list, so that any first few come from all over)."""
    found = [piece for path in paths[:: max(len(paths) // files, 1)] for piece in pieces(read_text(path))]
    return [found[index] for index in sorted(range(len(found)), key=lambda index: index * 0.6180339887 % 1)]


def real_documents(count: int = DOCUMENTS) -> list[str]:
    """``count`` distinct cleaned pieces of installed text, each kind in turn while it has pieces left."""
    kinds = [spread_pieces(paths, count // len(KINDS) // 2) for paths in installed_files().values()]
    chosen, seen = [], set()
    for rank in range(max(map(len, kinds))):
        for kind in kinds:
            piece = clean_text(kind[rank]) if rank < len(kind) else ""
            if piece.strip() and piece not in seen and len(chosen) < count:
                seen.add(piece)
                chosen.append(piece)
    return chosen


@pytest.fixture(scope="module")
def documents() -> list[str]:
    found = real_documents()
    assert len(found) >= DOCUMENTS * 0.9, f"only {len(found)} documents found in {sysconfig.get_paths()['purelib']}"
    assert sum(len(re.findall(r"[^\x00-\x7f]", piece)) > 50 for piece in found) >= 30, "too few non-ASCII texts"
    return found


class PaperWords(WordTokenizer):
    """The words and sentences lmprep counts: words are the whitespace-separated tokens (Gopher's paper),
    sentences end at runs of ``.``, ``!`` or ``?`` before whitespace (where datatrove uses spaCy's
    sentencizer and C4 used NLTK's punkt)."""

    def __init__(self):
        super().__init__("en")

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text[start:end] for start, end in self.span_tokenize(text)]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        ends = [match.end() for match in SENTENCE_END.finditer(text)][:-1]  # the last sentence ends the text
        return list(zip([0, *ends], [*ends, len(text)]))


def paper_lines(text: str) -> str:
    """The text datatrove's Gopher quality rules are given: lower-cased (lmprep's stop words match in any
    case), its non-blank lines only (lmprep's line fractions are of those), lmprep's bullet points as •."""
    lines = [line for line in text.lower().splitlines() if line.strip()]
    return "\n".join("•" + line.lstrip()[1:] if line.lstrip().startswith(BULLETS) else line for line in lines)


def repeated_word_chars(words: list[str], n: int) -> int:
    """lmprep's duplicate n-gram characters: the words inside an n-gram that repeats an earlier one, each word
    once (datatrove skips the n words after each repeat, and so misses the end of a repeated passage)."""
    seen: set[tuple[str, ...]] = set()
    inside = [False] * len(words)
    for start in range(len(words) - n + 1):
        gram = tuple(words[start : start + n])
        if gram in seen:
            inside[start : start + n] = [True] * n
        seen.add(gram)
    return sum(len(word) for word, counted in zip(words, inside) if counted)


def repeated_top_chars(grams: list[str]) -> int:
    """lmprep's top n-gram characters: 0 unless the most frequent n-gram occurs more than once."""
    (gram, count), = Counter(grams).most_common(1)
    return len(gram) * count if count > 1 else 0


class NonBlankParts:
    """Splits as lmprep's lines (at newlines) and paragraphs (at blank lines) are split: the blank parts left
    out (datatrove splits at runs of newlines, so that a document's leading and trailing newlines make
    two empty lines, one a duplicate of the other)."""

    def __init__(self, separator: str):
        self._separator = re.compile(separator)

    def split(self, text: str) -> list[str]:
        return [part for part in self._separator.split(text) if part.strip()]


@pytest.fixture
def translated(monkeypatch):
    """datatrove's four filters, each reading its rules as lmprep does where docs/curation.md says they
    differ; and the text each is given."""
    monkeypatch.setattr(datatrove_quality, "PUNCTUATION_SET", frozenset())  # a token of punctuation is a word
    monkeypatch.setattr(datatrove_repetition, "find_all_duplicate", repeated_word_chars)
    monkeypatch.setattr(datatrove_repetition, "find_top_duplicate", repeated_top_chars)
    monkeypatch.setattr(datatrove_c4, "END_PUNCTUATION", TERMINAL)
    words = PaperWords()
    repetition = GopherRepetitionFilter(language=words)
    repetition._line_splitter, repetition.paragraph_exp = NonBlankParts("\n"), NonBlankParts(r"\n\s*\n")
    return {
        "gopher_quality": (GopherQualityFilter(language=words), paper_lines),
        "gopher_repetition": (repetition, str),
        "c4": (C4QualityFilter(language=words), str),
        "fineweb": (FineWebQualityFilter(  # "at most" and "at least" where datatrove has "below" and "over"
            language=words, line_punct_thr=0.12 + EPSILON, short_line_length=29, short_line_thr=0.67 - EPSILON,
            char_duplicates_ratio=0.1 - EPSILON, new_line_ratio=float("inf")), str),
    }


LMPREP = {"gopher_quality": GopherQuality(GopherQualityStep()), "gopher_repetition": GopherRepetition(
    GopherRepetitionStep()), "c4": C4(C4Step()), "fineweb": FineWeb(FineWebStep())}


@pytest.mark.parametrize("step", LMPREP)
def test_keeps_and_drops_what_datatrove_does(step, documents, translated):
    ours, (theirs, given) = LMPREP[step], translated[step]
    disagreements, texts_differ, dropped = [], [], 0
    for index, text in enumerate(documents):
        answer = ours.apply(record.Document(text, 0, str(index)))
        rule = answer.rule if isinstance(answer, record.Drop) else None
        kept_text = answer.text if isinstance(answer, record.Rewrite) else text
        document = Document(text=given(text), id=str(index))
        verdict = theirs.filter(document)
        dropped += rule is not None
        if (rule is None) != (verdict is True):
            disagreements.append((index, rule, verdict))
        elif rule is None and step == "c4" and document.text != kept_text:
            texts_differ.append(index)
    share = 1 - len(disagreements) / len(documents)
    assert share >= AGREEMENT, f"{step}: {share:.4%} of {len(documents)} agree; first: {disagreements[:5]}"
    assert not texts_differ, f"c4 keeps other lines than datatrove in documents {texts_differ[:5]}"
    assert 0.05 < dropped / len(documents) < 0.95, f"{step} drops {dropped} of {len(documents)}: a vacuous comparison"
