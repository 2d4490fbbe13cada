"""Gopher's quality and repetition rules, each on a document made to break it and only it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.config.schema import PrepareConfig, SourceConfig, StepConfig
from pipeline.data.prepare import prepare_corpus
from pipeline.data.quality import (
    C4,
    C4Step,
    FineWeb,
    FineWebStep,
    GopherQuality,
    GopherQualityStep,
    GopherRepetition,
    GopherRepetitionStep,
)
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks

PROSE = ("The history of the town is told in the old records of the parish, and the people who have lived "
         "there with their families kept them safe. Each spring the river rises to the edge of the fields, "
         "so the farmers plant late and harvest in the autumn when the water has gone back to its bed. "
         "Travellers who come to see the bridge often stay a night at the inn that stands beside it.")
DUPLICATE_LINES = "\n".join(["ok"] * 4 + PROSE.split(". "))  # 3 of 7 lines repeat one, 6 of their ~380 characters
QUALITY = GopherQuality(GopherQualityStep())
REPETITION = GopherRepetition(GopherRepetitionStep())


def test_prose_passes_every_rule():
    assert QUALITY.reject(PROSE) is None and REPETITION.reject(PROSE) is None


@pytest.mark.parametrize(("text", "rule"), [
    (" ".join(PROSE.split()[:40]), "word_count"),
    (" ".join(["a"] * 60 + ["the", "of"]), "mean_word_length"),
    (" ".join(["incomprehensibilities"] * 30 + ["the", "of"] * 10), "mean_word_length"),
    (PROSE + " #tag" * 12, "hash_ratio"),
    (PROSE + " wait..." * 12, "ellipsis_ratio"),
    ("\n".join(f"- {line}." for line in PROSE.split(". ")), "bullet_lines"),
    ("\n".join(f"{line}…" for line in PROSE.split(". ")), "ellipsis_lines"),
    (PROSE + " " + " ".join(["1234", "5678", "=="] * 10), "alphabetic_words"),
    (PROSE.replace(" the ", " a ").replace(" of ", " in ").replace(" and ", " or ").replace(" to ", " at ")
     .replace(" have ", " had ").replace(" with ", " by ").replace(" that ", " which ").replace("The ", "A "),
     "stop_words"),
])
def test_each_quality_rule_drops_what_breaks_it(text, rule):
    assert QUALITY.reject(text) == rule


def test_a_word_with_punctuation_still_contains_a_letter():
    """The paper's words are whitespace-separated: 'f(x),' is a word with letters (datatrove splits it)."""
    code = PROSE + " " + " ".join(["f(x),", "g(y);", "h[z]."] * 20)
    assert QUALITY.reject(code) is None


@pytest.mark.parametrize(("text", "rule"), [
    (DUPLICATE_LINES, "duplicate_lines"),
    ("\n".join([PROSE[:60]] * 3 + [f"line {i} of the text, about other things entirely" for i in range(4)]),
     "duplicate_line_chars"),
    ("\n\n".join([PROSE] + [f"paragraph {i} is its own, with words of its own" for i in range(3)] + [PROSE]),
     "duplicate_paragraph_chars"),
    (PROSE + " " + " ".join(["buy now"] * 40), "top_2gram"),
    (PROSE + "\n" + PROSE, "duplicate_lines"),
    (PROSE.replace(". ", ".\n") + " " + " ".join(PROSE.split()[:20]), "duplicate_5gram"),
])
def test_each_repetition_rule_drops_what_breaks_it(text, rule):
    assert REPETITION.reject(text) == rule


def test_thresholds_are_the_step_keys():
    assert GopherRepetition(GopherRepetitionStep(max_duplicate_lines=0.5)).reject(DUPLICATE_LINES) is None
    assert GopherQuality(GopherQualityStep(min_words=10)).reject(" ".join(PROSE.split()[:40])) is None


def test_the_filters_run_as_steps_of_prepare_and_say_why(tmp_path):
    (tmp_path / "raw").mkdir()
    documents = [PROSE, "too short to be a page", PROSE + " " + " ".join(["buy now"] * 40)]
    (tmp_path / "raw" / "d.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in documents))
    steps = (StepConfig("gopher_quality", GopherQualityStep()), StepConfig("gopher_repetition", GopherRepetitionStep()))
    with ThreadPoolExecutor(1) as pool:
        stats = prepare_corpus(expand_sources([SourceConfig("raw/*.jsonl")], root=tmp_path),
                               PrepareConfig(steps=steps, val_fraction=0.0), tmp_path / "out", tasks=Tasks(pool))
    assert stats.to_dict()["sources"][0]["dropped"] == {"gopher_quality/word_count": 1,
                                                        "gopher_repetition/top_2gram": 1}
    assert stats.documents_kept == 1


PAGE = "\n".join([
    "Home | About | Contact",
    "Please enable JavaScript to view the comments powered by our widget.",
    "The bridge was built in 1820 by the town's masons.[1] It still carries traffic today.",
    "By using this site you agree to our privacy policy and terms.",
    "Read more",
    "The river floods the lower fields each spring. Farmers plant late because of it.",
    "",
    "Visitors often stay at the inn beside the bridge. Its rooms look over the water!",
])
C4_RULES = C4(C4Step())


def test_c4_keeps_the_lines_of_prose_and_counts_the_others_by_rule():
    text, removed = C4_RULES.rewrite(PAGE)
    assert text.splitlines() == [
        "The bridge was built in 1820 by the town's masons. It still carries traffic today.",
        "The river floods the lower fields each spring. Farmers plant late because of it.",
        "Visitors often stay at the inn beside the bridge. Its rooms look over the water!"]
    assert removed == {"no_terminal_punctuation": 2, "javascript": 1, "policy": 1}
    assert C4_RULES.reject(text) is None  # six sentences left


@pytest.mark.parametrize(("text", "rule"), [
    (PAGE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem_ipsum"),
    (PAGE + "\nThe code reads f() { return 1; } here.", "curly_bracket"),
    (PAGE + "\nfunction f() { return 1; }", None),  # a line without terminal punctuation is gone first
    (PAGE + "\nPlease enable JavaScript { now }.", None),  # C4's code removes the JavaScript line first
    ("One sentence here. Two sentences here. Three sentences, and no more.", "too_few_sentences"),
])
def test_c4_page_rules(text, rule):
    assert C4_RULES.reject(C4_RULES.rewrite(text)[0]) == rule


def test_c4_rules_can_be_turned_off_one_by_one():
    lenient = C4(C4Step(terminal_punctuation=False, min_words_per_line=0, javascript_lines=False, policy_lines=False,
                        citations=False, min_sentences=0))
    assert lenient.rewrite(PAGE) == ("\n".join(line for line in PAGE.splitlines() if line), {})


def test_lines_removed_show_in_the_stats_of_their_source(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "d.jsonl").write_text(json.dumps({"text": PAGE}) + "\n" + json.dumps({"text": "menu"}) + "\n")
    with ThreadPoolExecutor(1) as pool:
        stats = prepare_corpus(expand_sources([SourceConfig("raw/*.jsonl")], root=tmp_path),
                               PrepareConfig(steps=(StepConfig("c4", C4Step()),), val_fraction=0.0), tmp_path / "out",
                               tasks=Tasks(pool))
    source = stats.to_dict()["sources"][0]
    assert source["lines_removed"] == {"c4/javascript": 1, "c4/no_terminal_punctuation": 3, "c4/policy": 1}
    assert source["dropped"] == {"c4/too_few_sentences": 1} and stats.documents_kept == 1
    assert "lines removed: 1 c4/javascript, 3 c4/no_terminal_punctuation, 1 c4/policy" in stats.summary()
    assert source["characters_kept"] == len(C4_RULES.rewrite(PAGE)[0])


FINEWEB = FineWeb(FineWebStep())


def test_fineweb_keeps_prose_lines():
    assert FINEWEB.reject(PROSE.replace(". ", ".\n")) is None


@pytest.mark.parametrize(("text", "rule"), [
    ("\n".join(f"Menu entry number {i} of the site navigation" for i in range(20)) + "\nThe end.", "punctuated_lines"),
    (PROSE.replace(". ", ".\n") + "\n" + PROSE.split(". ")[0] + ".", "duplicate_line_chars"),
    ("\n".join(["Short line.", "Another one.", "Third.", PROSE]), "short_lines"),
])
def test_each_fineweb_rule_drops_what_breaks_it(text, rule):
    assert FINEWEB.reject(text) == rule


def test_fineweb_thresholds_are_the_step_keys():
    text = "\n".join(["Short line.", "Another one.", "Third.", PROSE])
    assert FineWeb(FineWebStep(max_short_lines=0.8)).reject(text) is None
    assert FineWeb(FineWebStep(short_line_chars=5)).reject(text) is None
