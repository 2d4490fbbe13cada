"""Decontamination: 13-gram overlap with named evaluation sets, drop or remove the span, the report."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.data.web.decontam import Decontaminator, EvalSet, load_eval_sets, ngram_hashes
from pipeline.errors import DataError

QUESTION = "Which lantern did Ada repair near the harbor of Eastport before the quiet festival began at dawn"
WORDS = ["river", "stone", "garden", "lamp", "quiet", "swift", "early", "bright", "the", "a", "of", "and", "to",
         "in", "on", "at", "by", "with", "for", "kettle"]


def filler(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


@pytest.fixture
def sets(tmp_path):
    (tmp_path / "trivia.jsonl").write_text(json.dumps({"question": QUESTION, "answer": "The red one.", "id": 3})
                                           + "\n\n" + json.dumps({"question": "Too short to match."}) + "\n")
    (tmp_path / "stories.txt").write_text("once upon a time a small otter built a raft of reeds and sailed it "
                                          "down the long river to the sea\n")
    pq.write_table(pa.table({"text": ["the parquet item has more than thirteen words so that one of its "
                                      "windows can be planted here"], "n": [1]}), tmp_path / "p.parquet")
    return load_eval_sets([("trivia", tmp_path / "trivia.jsonl"), ("stories", tmp_path / "stories.txt"),
                           ("parquet", tmp_path / "p.parquet")])


def test_a_planted_13_gram_is_found_whatever_its_case_and_punctuation(sets):
    decontaminator = Decontaminator(sets)
    planted = "Which LANTERN did Ada repair, near the harbor of Eastport; before the quiet festival"
    verdict = decontaminator.check("doc-1", f"Some words first. {planted}! And after.")
    assert verdict.matches == {"trivia": 2} and verdict.text is None  # 14 words: two 13-grams
    report = decontaminator.reports["trivia"]
    assert (report.items, report.too_short, report.documents, report.matched, report.examples) == (
        2, 1, 1, 2, ["doc-1"])


def test_twelve_words_are_not_an_overlap(sets):
    decontaminator = Decontaminator(sets)
    twelve = " ".join(QUESTION.split()[:12])
    assert decontaminator.check("d", f"{twelve} and then something else entirely").matches == {}
    assert decontaminator.reports["trivia"].documents == 0


def test_each_set_is_counted_by_its_name(sets):
    decontaminator = Decontaminator(sets)
    text = ("a small otter built a raft of reeds and sailed it down the long river ... "
            "more than thirteen words so that one of its windows can be planted here")
    assert decontaminator.check("d", text).matches == {"stories": 3, "parquet": 2}


def test_remove_span_cuts_the_overlapping_words_only(sets):
    decontaminator = Decontaminator(sets, mode="remove_span")
    verdict = decontaminator.check("d", f"Before it. {QUESTION[:-len(' at dawn')]}. After it.")
    assert verdict.matches == {"trivia": 3} and verdict.text == "Before it. . After it."


def test_no_false_positives_on_random_text(sets):
    decontaminator = Decontaminator(sets)
    rng = random.Random(0)
    assert not any(decontaminator.check(str(i), filler(rng, 400)).matches for i in range(300))


def test_ngram_hashes_are_positional_and_distinct():
    words = ["a", "b", "c", "d", "e", "f"]
    assert len(ngram_hashes(words, 3)) == 4 and len(set(ngram_hashes(words, 3).tolist())) == 4
    assert ngram_hashes(words, 7).size == 0
    assert ngram_hashes(["b", "a", "c"], 3)[0] != ngram_hashes(["a", "b", "c"], 3)[0]


def test_bad_sets_are_refused_in_one_line(tmp_path):
    with pytest.raises(DataError, match=r"nope\.jsonl: evaluation set 'x' does not exist$"):
        Decontaminator([EvalSet("x", tmp_path / "nope.jsonl")])
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match=r"empty\.txt: evaluation set 'e' has no item of 13 words or more \(0 items\)"):
        Decontaminator([EvalSet("e", tmp_path / "empty.txt")])
    (tmp_path / "bad.jsonl").write_text('{"q": "fine"}\n{"q": \n')
    with pytest.raises(DataError, match=r"bad\.jsonl: line 2 is not JSON"):
        Decontaminator([EvalSet("b", tmp_path / "bad.jsonl")])
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"is not \.txt, \.jsonl or \.parquet"):
        Decontaminator([EvalSet("c", tmp_path / "x.csv")])
    with pytest.raises(DataError, match=r"name 'a' is given twice"):
        load_eval_sets([("a", "x.txt"), ("a", "y.txt")])
    with pytest.raises(DataError, match=r"mode 'cut' is not one of drop, remove_span"):
        Decontaminator([], mode="cut")


def test_fields_choose_the_text_of_a_record(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"question": QUESTION, "answer": "x"}) + "\n")
    only_answer = EvalSet("t", tmp_path / "t.jsonl", fields=("answer",))
    with pytest.raises(DataError, match="has no item of 13 words"):
        Decontaminator([only_answer])
    with pytest.raises(DataError, match=r"line 1 has no field 'label'"):
        Decontaminator([EvalSet("t", tmp_path / "t.jsonl", fields=("label",))])
