"""Language identification as a filter step of prepare, with py3langid (its model ships in the package:
nothing is downloaded at run time).

py3langid scores 97 languages from byte n-grams; with normalised probabilities its score is the chance
of the language it names. It reads about 0.7 MB/s, so only a document's first ``sample_chars``
characters are identified. Its model takes ~3 s to load, once per worker process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pipeline.config.schema import LanguageStep
from pipeline.data.quality import KeepsText


@dataclass(frozen=True)
class LanguageFilter(KeepsText):
    settings: LanguageStep
    name: str = "language"

    def reject(self, text: str) -> str | None:
        return self.decide(text)[0]

    def decide(self, text: str) -> tuple[str | None, tuple[str, float]]:
        """``language=<code>`` for a language not asked for, ``low_score`` for one identified too unsurely (None
        to keep it); and the language identified with its probability, which the kept parts record."""
        language, score = identify(text[: self.settings.sample_chars])
        if self.settings.languages and language not in self.settings.languages:
            return f"language={language}", (language, score)
        if score < self.settings.min_score:
            return "low_score", (language, score)
        return None, (language, score)


def identify(text: str) -> tuple[str, float]:
    """The ISO 639-1 code of the text's most likely language, and its probability."""
    language, score = _identifier().classify(text)
    return language, float(score)


@functools.cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
