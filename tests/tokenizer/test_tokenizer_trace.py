"""``lmprep tokenizer trace``: BPE replayed merge by merge on one text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.trace import piece, trace

LOW = "low lower lowest"


def train_low(run, tmp_path, *options: str):
    text = tmp_path / "low.txt"
    text.write_text(LOW, "utf-8")
    out = tmp_path / "tok.json"
    result = run("tokenizer", "train", text, "--merges", 4, "--out", out, "--workers", 1, *options)
    assert result.exit_code == 0, result.output
    return out


# Derived by hand: l+o and o+w both occur 3 times and the smaller pair (l, o) wins the tie; then lo+w (3);
# then ' '+low and low+e occur twice each and (' ', low) is the smaller pair; then ' low'+e (2).
LOW_STEPS = [
    "start: l|o|w| |l|o|w|e|r| |l|o|w|e|s|t  (16 tokens)",
    "merge 0: 'l' + 'o' -> lo|w| |lo|w|e|r| |lo|w|e|s|t  (13 tokens)",
    "merge 1: 'lo' + 'w' -> low| |low|e|r| |low|e|s|t  (10 tokens)",
    "merge 2: ' ' + 'low' -> low| low|e|r| low|e|s|t  (8 tokens)",
    "merge 3: ' low' + 'e' -> low| lowe|r| lowe|s|t  (6 tokens)",
]


def test_char_kind_trace_of_low_lower_lowest_goes_from_16_to_6_tokens(run, tmp_path):
    # alphabet ' ' e l o r s t w = IDs 1..8, merges make 9..12: low = 10, ' lowe' = 12
    tokenizer = train_low(run, tmp_path, "--kind", "char", "--pattern", "none")
    result = run("tokenizer", "trace", LOW, "--tokenizer", tokenizer)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == LOW_STEPS + ["IDs: 10 12 5 12 6 7  (6 tokens)"]


def test_byte_kind_trace_with_gpt4_pattern_makes_the_same_merges(run, tmp_path):
    # the pattern cuts "low", " lower", " lowest": no pair crossed a space, so the same four merges apply
    tokenizer = train_low(run, tmp_path, "--kind", "byte")
    result = run("tokenizer", "trace", LOW, "--tokenizer", tokenizer)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == LOW_STEPS + ["IDs: 257 259 114 259 115 116  (6 tokens)"]


def test_max_steps_shows_the_first_merges_and_still_the_full_ids(run, tmp_path):
    tokenizer = train_low(run, tmp_path, "--kind", "char", "--pattern", "none")
    result = run("tokenizer", "trace", LOW, "--max-steps", 2, "--tokenizer", tokenizer)
    assert result.output.splitlines() == LOW_STEPS[:3] + [
        "... 2 more merges apply (not shown: --max-steps 2)",
        "IDs: 10 12 5 12 6 7  (6 tokens)",
    ]


def test_json_trace(run, tmp_path):
    tokenizer = train_low(run, tmp_path, "--kind", "char", "--pattern", "none")
    result = run("tokenizer", "trace", "lowe", "--json", "--tokenizer", tokenizer)
    data = json.loads(result.output)
    assert data["start"] == {"ids": [3, 4, 8, 2], "pieces": ["l", "o", "w", "e"]}
    assert [(s["merge"], s["parts"], s["ids"]) for s in data["steps"]] == [
        (0, ["l", "o"], [9, 8, 2]), (1, ["lo", "w"], [10, 2]),
    ]
    assert data["total_steps"] == 2 and data["ids"] == [10, 2]


def test_partial_utf8_bytes_are_shown_in_angle_brackets():
    # 日 is e6 97 a5; the merge (e6, 97) makes a token that is not a whole character
    tokenizer = Tokenizer.from_merges(kind="byte", pattern="", merges=[(0xE6, 0x97)])
    result = trace(tokenizer, "日\n")
    assert [piece(tokenizer, i) for i in result.start] == ["<e6>", "<97>", "<a5>", "\\n"]
    assert [piece(tokenizer, i) for i in result.ids] == ["<e6><97>", "<a5>", "\\n"]


def test_unknown_characters_of_the_char_kind_show_as_the_replacement_character():
    tokenizer = Tokenizer.from_merges(kind="char", pattern="", merges=[], alphabet=["a"])
    assert [piece(tokenizer, i) for i in trace(tokenizer, "aé").ids] == ["a", "\ufffd"]


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="lowers \nétude日本😀", max_size=40))
def test_trace_ends_with_the_ids_of_encode(byte_tokenizer, char_tokenizer, text):
    for tokenizer in (byte_tokenizer, char_tokenizer):
        result = trace(tokenizer, text)
        assert result.ids == tokenizer.encode_ordinary(text)
        ranks = [step.rank for step in result.steps]
        assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
