"""Fuzzing the tokenizer.json reader: any malformed file is a TokenizerFormatError, never a crash, and any
file it accepts is written out (as the tokenizer stage writes a frozen file) as one that HF ``tokenizers`` loads
and that gives lmprep's IDs; where HF loads the mutated file itself, that gives lmprep's IDs too.

Each file is loaded in a separate process, so that a segfault or a hang shows up as a failure
instead of taking the test run down; one process reads many files in turn and is restarted
after a crash.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.tokenizer import Tokenizer

SAMPLES = ["The quick brown fox, don't we? 12345 numbers!\n\n  two  spaces\ttab",
           "Déjà, l’élève 日本語のテキスト 😀👍🏽 e\u0301 ١٢٣", "<|endoftext|> between <|endoftext|>", "<unk> x", ""]
READER = """
import json, sys, traceback
import tokenizers
from pipeline.errors import TokenizerFormatError
from pipeline.tokenizer import Tokenizer, hf_json

SAMPLES = json.loads(sys.argv[1])


def mismatch(ours, path):
    written = tokenizers.Tokenizer.from_str(hf_json.dumps(ours).decode("utf-8"))
    try:
        original = tokenizers.Tokenizer.from_file(path)
    except BaseException:  # HF refuses the mutated file itself (a Rust panic is a BaseException)
        original = None
    for text in SAMPLES:
        expected = ours.encode(text, allowed_special="all")
        for name, hf in (("lmprep's output", written), ("the input", original)):
            if hf is not None and hf.encode(text).ids != expected:
                return f"HF on {name} gives {hf.encode(text).ids} for {text!r}, lmprep {expected}"
    return None


for line in sys.stdin:
    path = line.rstrip("\\n")
    try:
        ours = Tokenizer.load(path)
    except TokenizerFormatError as exc:
        print("refused " + " ".join(str(exc).split())[:300], flush=True)
        continue
    except BaseException:
        print("crashed " + traceback.format_exc().replace("\\n", " | "), flush=True)
        continue
    try:
        problem = mismatch(ours, path)
    except BaseException:
        problem = "HF cannot load lmprep's output: " + traceback.format_exc().replace("\\n", " | ")
    print("ok" if problem is None else "accepted, but " + problem, flush=True)
"""
TIMEOUT_S = 20


class ReaderProcess:
    """A Python process that loads the tokenizer files whose paths it is given, one answer line each."""

    def __init__(self):
        self.process = None

    def load(self, path: Path) -> str:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, "-c", READER, json.dumps(SAMPLES)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            code = self.process.wait(timeout=TIMEOUT_S)
            return f"died with exit status {code}"
        return answer.rstrip("\n")

    def close(self):
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def reader():
    process = ReaderProcess()
    yield process
    process.close()


@pytest.fixture(scope="module")
def valid_files(char_tokenizer, tokenizer_corpus, tmp_path_factory):
    """Kind → the text of a valid tokenizer.json file: ours of each kind, and a small one HF trained."""
    directory = tmp_path_factory.mktemp("valid")
    small = Tokenizer.train(tokenizer_corpus, vocab_size=270, special_tokens=["<|endoftext|>"], workers=1)
    word = Tokenizer.train(tokenizer_corpus, vocab_size=40, kind="word", special_tokens=["<|endoftext|>"], workers=1)
    for name, tok in [("byte", small), ("char", char_tokenizer), ("word", word)]:
        tok.save(directory / f"{name}.json")
    from test_tokenizer_hf import _hf_trained

    _hf_trained(tokenizer_corpus, directory / "hf.json")
    return {name: json.loads((directory / f"{name}.json").read_text("utf-8"))
            for name in ("byte", "char", "hf", "word")}


NEST = "\u0000nest\u0000"  # stands for a deeply nested array, written into the text
HUGE = "\u0000huge\u0000"  # stands for a 5,000-digit integer (Python's int() refuses over 4,300 digits)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers()
    | st.sampled_from([HUGE, -(10 ** 30), 2 ** 64, 10 ** 400, "\ud800", "(?:" * 50_000 + ")" * 50_000])
    | st.floats() | st.text(max_size=20) | st.just(NEST),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _paths(value, prefix=()):
    """Every (path, value) inside a JSON document, containers first."""
    yield prefix, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        yield from _paths(inner, (*prefix, key))


def _parent(document, path):
    for key in path[:-1]:
        document = document[key]
    return document


@st.composite
def mutated_files(draw, valid):
    """A valid file's text with one mutation: a value replaced or dropped, deep nesting, cut short, bytes."""
    document = json.loads(json.dumps(valid))
    paths = [path for path, _ in _paths(document) if path]
    # half the time a field outside the vocabulary and merges, which otherwise make up nearly every path
    settings_only = [path for path in paths if path[:2] not in (("model", "vocab"), ("model", "merges"))]
    path = draw(st.sampled_from(draw(st.sampled_from([paths, settings_only]))))
    mutation = draw(st.sampled_from(["replace", "replace", "drop", "nest", "truncate", "bytes"]))
    if mutation == "bytes":
        return draw(st.binary(max_size=200))
    parent = _parent(document, path)
    if mutation == "drop":
        del parent[path[-1]]
    else:
        parent[path[-1]] = NEST if mutation == "nest" else draw(JSON_VALUES)
    text = json.dumps(document, ensure_ascii=False)
    if mutation == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    depth = draw(st.sampled_from([1, 50, 100_000]))
    text = text.replace(json.dumps(NEST), "[" * depth + "]" * depth).replace(json.dumps(HUGE), "9" * 5000)
    return text.encode("utf-8", errors="surrogatepass")


@pytest.mark.parametrize("kind", ["byte", "char", "hf", "word"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_tokenizer_json_is_refused_in_one_line_or_loads_in_hf_alike(reader, valid_files, tmp_path_factory,
                                                                              kind, data):
    path = tmp_path_factory.mktemp("fuzz") / "tokenizer.json"
    path.write_bytes(data.draw(mutated_files(valid_files[kind])))
    answer = reader.load(path)
    assert answer.startswith(("ok", "refused")), answer


def test_the_reader_process_reports_crashes(reader, tmp_path):
    (tmp_path / "nested.json").write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}", "utf-8")
    assert reader.load(tmp_path / "nested.json").startswith("refused")
    assert reader.load(tmp_path / "missing.json").startswith("refused")
