"""Language identification with py3langid on real multilingual text: Article 1 of the Universal
Declaration of Human Rights in its official translations."""

from __future__ import annotations

import pytest

from pipeline.data.language import LanguageFilter, LanguageStep, identify

ARTICLE_1 = {
    "en": "All human beings are born free and equal in dignity and rights. They are endowed with reason and "
          "conscience and should act towards one another in a spirit of brotherhood.",
    "fr": "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de raison et de "
          "conscience et doivent agir les uns envers les autres dans un esprit de fraternité.",
    "de": "Alle Menschen sind frei und gleich an Würde und Rechten geboren. Sie sind mit Vernunft und Gewissen "
          "begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
    "es": "Todos los seres humanos nacen libres e iguales en dignidad y derechos y, dotados como están de razón y "
          "conciencia, deben comportarse fraternalmente los unos con los otros.",
    "it": "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti. Essi sono dotati di ragione e di "
          "coscienza e devono agire gli uni verso gli altri in spirito di fratellanza.",
    "ru": "Все люди рождаются свободными и равными в своем достоинстве и правах. Они наделены разумом и совестью "
          "и должны поступать в отношении друг друга в духе братства.",
    "ja": "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。人間は、理性と良心とを"
          "授けられており、互いに同胞の精神をもって行動しなければならない。",
}


@pytest.mark.parametrize("language", ARTICLE_1)
def test_each_translation_is_identified_surely(language):
    found, score = identify(ARTICLE_1[language])
    assert found == language and score > 0.9


def test_the_filter_keeps_the_languages_asked_for_and_names_the_others():
    keep = LanguageFilter(LanguageStep(languages=("en", "fr")))
    assert [keep.reject(text) for text in ARTICLE_1.values()] == [
        None, None, "language=de", "language=es", "language=it", "language=ru", "language=ja"]
    assert LanguageFilter(LanguageStep(languages=())).reject(ARTICLE_1["ru"]) is None


def test_an_unsure_identification_is_its_own_rule():
    assert LanguageFilter(LanguageStep(languages=(), min_score=0.5)).reject("x = f(y) + 1") == "low_score"


def test_only_the_sample_is_identified():
    mixed = ARTICLE_1["de"] + " " + ARTICLE_1["en"] * 20
    assert LanguageFilter(LanguageStep(languages=("de",), sample_chars=150)).reject(mixed) is None
    assert LanguageFilter(LanguageStep(languages=("de",), sample_chars=5000)).reject(mixed) == "language=en"
