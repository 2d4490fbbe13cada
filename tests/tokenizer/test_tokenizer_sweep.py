"""``lmprep tokenizer sweep``: vocabulary sizes compared from one training run."""

from __future__ import annotations

import pytest

from pipeline.errors import TokenizerError
from pipeline.tokenizer import Tokenizer, sweep

# A question/answer text with 27 distinct characters: newline, space, period, colon, A, Q and 21 lowercase
# letters, so a char tokenizer without special tokens starts at 1 + 27 = 28 IDs.
QA = (
    "Q: what do cats eat.\nA: cats eat fish and mice.\n"
    "Q: what do dogs eat.\nA: dogs eat meat and bones.\n"
    "Q: where do birds live.\nA: birds live in trees and build nests.\n"
    "Q: what color is the sea.\nA: the sea is blue on a sunny day.\n"
    "Q: how many legs has a spider.\nA: a spider has eight legs.\n"
)


@pytest.fixture
def qa_project(tmp_path):
    """The QA text and a config for a char tokenizer without special tokens."""
    (tmp_path / "qa.txt").write_text(QA, "utf-8")
    (tmp_path / "char.yaml").write_text(
        "tokenizer: {kind: char, special_tokens: [], workers: 1}\nencode: {eos_token: null}\ntrain: {dim: 8}\n")
    return tmp_path


def table_rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("vocab "))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("suggested"):
            break
        rows.append(line.split())
    return rows


def test_merge_counts_give_vocab_sizes_from_28_and_fewer_tokens_each_step(run, qa_project):
    plot = qa_project / "sweep.png"
    result = run("tokenizer", "sweep", qa_project / "qa.txt", "--merges", "0,6,12,24,48",
                 "--config", qa_project / "char.yaml", "--plot", plot)
    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    assert [(r[0], r[1]) for r in rows] == [("28", "0"), ("34", "6"), ("40", "12"), ("52", "24"), ("76", "48")]
    tokens = [int(r[2].replace(",", "")) for r in rows]
    assert tokens[0] == len(QA)  # no merge: one token per character
    assert tokens == sorted(tokens, reverse=True)
    # embedding + head at dim 8: 2 tables of vocab × 8
    assert [r[-1] for r in rows] == ["448", "544", "640", "832", "1,216"]
    assert "suggested vocab size:" in result.output and "a suggestion" in result.output
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_sizes_and_merges_give_the_same_rows(run, qa_project):
    common = ("--config", qa_project / "char.yaml", "--plot", qa_project / "s.png")
    by_merges = run("tokenizer", "sweep", qa_project / "qa.txt", "--merges", "0,6,12,24,48", *common)
    by_sizes = run("tokenizer", "sweep", qa_project / "qa.txt", "--sizes", "28,34,40,52,76", *common)
    assert table_rows(by_sizes.output) == table_rows(by_merges.output)


def test_each_size_is_what_training_to_that_size_gives(monkeypatch):
    """The premise: merges are a prefix, so one run serves every size (and the sweep trains once)."""
    expected = {k: len(Tokenizer.train([QA], merges=k, kind="byte", workers=1).encode(QA)) for k in (0, 5, 20, 40)}
    calls = []
    original = Tokenizer.train.__func__
    counting = classmethod(lambda cls, *a, **kw: calls.append(kw) or original(cls, *a, **kw))
    monkeypatch.setattr(Tokenizer, "train", counting)
    result = sweep.sweep([QA], merge_counts=[0, 5, 20, 40], kind="byte", workers=1)
    assert {row.merges: row.tokens for row in result.rows} == expected
    assert len(calls) == 1


def test_eval_files_are_counted_instead_of_the_training_files(run, qa_project):
    held_out = qa_project / "held_out.txt"
    held_out.write_text("Q: what do cats eat.\n", "utf-8")
    result = run("tokenizer", "sweep", qa_project / "qa.txt", "--merges", "0,6", "--eval", held_out,
                 "--config", qa_project / "char.yaml", "--plot", qa_project / "s.png")
    assert table_rows(result.output)[0][2] == "21"


def test_suggestion_stops_where_the_gain_falls_below_the_threshold():
    rows = [sweep.SweepRow(vocab_size=v, merges=v - 256, tokens=t, text_bytes=10_000)
            for v, t in [(256, 10_000), (1256, 8_000), (2256, 7_500), (3256, 7_400)]]
    # gains per 1,000 entries: 20%, 6.25%, 1.3%
    result = sweep.Sweep(rows=rows, characters=1_000_000)
    assert sweep.suggest(result, min_gain=5).vocab_size == 2256
    assert sweep.suggest(result, min_gain=1).vocab_size == 3256
    capped = sweep.suggest(sweep.Sweep(rows=rows, characters=250_000), min_gain=1)
    assert capped.vocab_size == 2256 and "capped at 2,500" in capped.rule


def test_a_suggestion_below_the_rule_of_thumb_says_the_rule_only_caps():
    """Not 'suggested 4,096 (...; rule of thumb: 53,000–266,000)' as if the rule had agreed."""
    rows = [sweep.SweepRow(vocab_size=v, merges=v - 256, tokens=t, text_bytes=10_000)
            for v, t in [(256, 10_000), (1256, 8_000), (2256, 7_500), (3256, 7_400)]]
    large = sweep.Sweep(rows=rows, characters=26_000_000)
    below = sweep.suggest(large, min_gain=5)
    assert below.vocab_size == 2256 and below.rule == (
        "the largest size before the gain falls below 5% fewer tokens per 1,000 extra entries; below the rule of "
        "thumb for small data (characters ÷ 100–500 = 52,000–260,000), which only caps a suggestion: larger sizes "
        "compress this text too little more")
    assert sweep.suggest(large, min_gain=1).rule.endswith(
        ": the largest size tried, below the rule of thumb for small data (characters ÷ 100–500 = 52,000–260,000); "
        "sweep larger sizes")
    assert sweep.suggest(sweep.Sweep(rows=rows, characters=1_000_000), min_gain=5).rule.endswith(
        "; within the rule of thumb for small data (characters ÷ 100–500 = 2,000–10,000)")


@pytest.mark.parametrize("options, message", [
    (("--sizes", "512,300"), "vocabulary sizes must increase: 300 follows 512"),
    (("--merges", "6,6"), "merge counts must increase: 6 follows 6"),
    (("--sizes", "28,5000"), "vocabulary size 5000 is above what training reached"),
    (("--merges", "0,5000"), "merge count 5000 is above what training reached"),
    (("--sizes", "10,40"), "vocabulary size 10 is below the 28 IDs"),
    (("--sizes", "1,x"), "is not a comma-separated list of integers"),
    ((), "give either --sizes or --merges"),
    (("--sizes", "40", "--merges", "6"), "give either --sizes or --merges"),
])
def test_bad_sizes_are_one_line_errors(run, qa_project, options, message):
    result = run("tokenizer", "sweep", qa_project / "qa.txt", *options, "--config", qa_project / "char.yaml",
                 "--plot", qa_project / "s.png")
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1


def test_empty_text_is_a_one_line_error(run, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = run("tokenizer", "sweep", empty, "--sizes", "300,400", "--plot", tmp_path / "s.png")
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {empty}: no text to train on (the files are empty)"
    with pytest.raises(TokenizerError, match="empty"):
        sweep.sweep([""], vocab_sizes=[300])
