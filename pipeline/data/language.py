"""Language identification as a filter step of prepare, with py3langid (its model ships in the package:
nothing is downloaded at run time).

py3langid scores 97 languages from byte n-grams; with normalised probabilities its score is the chance
of the language it names. It reads about 0.7 MB/s, so only a document's first ``sample_chars``
characters are identified. Its model takes ~3 s to load, once per worker process. The step records the
language and its probability as the documents' ``language`` and ``language_score`` metadata.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pipeline.config.schema import bounded
from pipeline.data.record import KEEP, Answer, Document, Drop, FilterStep, MetadataField


@dataclass(frozen=True)
class LanguageStep:
    """Keep documents whose language (identified by py3langid on the first ``sample_chars`` characters)
    is one of ``languages`` (any when empty) with a probability of at least ``min_score``."""

    languages: tuple[str, ...] = ("en",)
    min_score: float = bounded(0.5, low=0.0, high=1.0)
    sample_chars: int = bounded(2000, low=1)


class LanguageFilter(FilterStep):
    name = "language"
    Settings = LanguageStep
    metadata = (MetadataField("language"), MetadataField("language_score", "float64"))

    def apply(self, document: Document) -> Answer:
        language, score = identify(document.text[: self.settings.sample_chars])
        document.metadata.update(language=language, language_score=score)
        rule = self.reject_identified(language, score)
        return KEEP if rule is None else Drop(rule)

    def reject(self, text: str) -> str | None:
        """The rule that drops ``text``: ``language=<code>`` for a language not asked for, ``low_score`` for one
        identified too unsurely; None to keep it."""
        return self.reject_identified(*identify(text[: self.settings.sample_chars]))

    def reject_identified(self, language: str, score: float) -> str | None:
        if self.settings.languages and language not in self.settings.languages:
            return f"language={language}"
        if score < self.settings.min_score:
            return "low_score"
        return None


def identify(text: str) -> tuple[str, float]:
    """The ISO 639-1 code of the text's most likely language, and its probability."""
    language, score = _identifier().classify(text)
    return language, float(score)


@functools.cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
