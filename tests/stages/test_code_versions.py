"""Code versions: an upgrade that changes what a stage writes re-runs that stage.

Each stage module declares ``CODE_VERSION`` and the tokenizer fingerprint hashes
``FINGERPRINT_VERSION``. The goldens below pin the outputs each version makes on a
tiny fixed corpus, so that changing the code that shapes them without bumping the
version fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.engine import atomic
from pipeline.engine.hashing import canonical_hash
from pipeline.engine.runner import Pipeline, Stage
from pipeline.tokenizer import Tokenizer, core, patterns
from stages import encode, prepare, tokenizer
from stages.cli.main import cli


def versioned_stage(root: Path, version: int) -> Stage:
    def run():
        atomic.write_text(root / "out.txt", (root / "in.txt").read_text().upper())
    return Stage("upper", ("in.txt",), ("out.txt",), (), run, code_version=version)


def upper_pipeline(root: Path, version: int, log: list[str]) -> Pipeline:
    return Pipeline([versioned_stage(root, version)], param_value=lambda key: None, state_dir="state",
                    root=root, log=log.append)


def test_a_new_code_version_reruns_the_stage_and_says_so(tmp_path):
    (tmp_path / "in.txt").write_text("hello")
    log: list[str] = []
    assert upper_pipeline(tmp_path, 3, log).run() == ["upper"]
    lock = json.loads((tmp_path / "state" / "lock.json").read_text())
    assert lock["stages"]["upper"]["code_version"] == 3
    assert upper_pipeline(tmp_path, 3, log).run() == []

    [status] = upper_pipeline(tmp_path, 4, log).status()
    assert status.reasons == ("code version changed 3 → 4",)
    assert upper_pipeline(tmp_path, 4, log).run() == ["upper"]
    assert log[-1] == "running 'upper': code version changed 3 → 4"
    assert upper_pipeline(tmp_path, 4, log).run() == []


def test_an_entry_without_a_code_version_reruns(tmp_path):
    """Lock entries written before code versions were recorded cannot say what made their outputs."""
    (tmp_path / "in.txt").write_text("hello")
    upper_pipeline(tmp_path, 1, []).run()
    lock_path = tmp_path / "state" / "lock.json"
    lock = json.loads(lock_path.read_text())
    del lock["stages"]["upper"]["code_version"]
    lock_path.write_text(json.dumps(lock))
    [status] = upper_pipeline(tmp_path, 1, []).status()
    assert status.reasons == ("code version not recorded (now 1)",)


# -- goldens ---------------------------------------------------------------------------------------

CONFIG = """\
data:
  sources:
    - {glob: "raw/*.txt", separator: blank_line}
    - {glob: "raw/*.jsonl", field: text}
prepare: {output_dir: out/prepared, val_fraction: 0.25, min_chars: 2}
tokenizer: {output: out/tokenizer.json, vocab_size: 320, min_frequency: 1, workers: 1}
encode: {output_dir: out/shards, shard_tokens: 400, workers: 1}
state_dir: state
"""

QA = "\n\n".join(f"Q: what is {i} + {i}?\r\nA: it is {2 * i}.\u0000" for i in range(30))
DIALOGUES = [
    {"text": "Caf\u0065\u0301 au lait, s'il vous pla\u00eet. \u2014 Bien s\u00fbr !"},
    {"text": "\u6f22\u5b57\u3068\u304b\u306a\u3001\u0645\u0631\u062d\u0628\u0627 \U0001f600  tabs\tand   spaces"},
    {"text": "Q: what is 3 + 3?\nA: it is 6."},  # a duplicate once cleaned
    {"text": "x"},  # shorter than min_chars
]

# stage: (its CODE_VERSION, hash of its inputs, hash of its outputs), the hashes as the lock records them
GOLDEN_STAGES = {
    "prepare": (10, "6a346d19b3a8c634", "7539a8e3ea0e67b1"),
    "tokenizer": (4, "b7899ee9b068c280", "848d8c846ecfe4b3"),
    "encode": (4, "509265bc123c516a", "73233a797bb7499e"),
}
STAGE_MODULES = {"prepare": prepare, "tokenizer": tokenizer, "encode": encode}


@pytest.fixture(scope="module")
def golden_lock(tmp_path_factory) -> dict:
    """The lock entries of a run of prepare, tokenizer and encode on the fixed corpus."""
    root = tmp_path_factory.mktemp("golden")
    (root / "raw").mkdir()
    (root / "raw" / "qa.txt").write_text(QA, encoding="utf-8", newline="")
    (root / "raw" / "dialogues.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DIALOGUES))
    (root / "lmprep.yaml").write_text(CONFIG)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(root)
        result = CliRunner().invoke(cli, ["run", "encode", "--config", "lmprep.yaml"])
    assert result.exit_code == 0, result.output
    return json.loads((root / "state" / "lock.json").read_text())["stages"]


@pytest.mark.parametrize("name", GOLDEN_STAGES)
def test_stage_outputs_match_the_golden_of_their_code_version(golden_lock, name):
    entry, module = golden_lock[name], STAGE_MODULES[name]
    inputs_recorded = [entry["deps"], entry["globs"]] if "globs" in entry else entry["deps"]  # globs: a digest each
    made = (module.CODE_VERSION, canonical_hash(inputs_recorded)[:16], canonical_hash(entry["outs"])[:16])
    version, inputs, _ = GOLDEN_STAGES[name]
    if made[:2] == (version, inputs):
        advice = (f"the same inputs now give other outputs: if on purpose, bump CODE_VERSION in {module.__name__} "
                  f"(every project then re-runs the stage) and put the new version and output hash here")
    else:
        advice = ("its inputs changed (an upstream golden fails too): put the new hashes here, and bump "
                  f"CODE_VERSION in {module.__name__} only if this stage's own code changed as well")
    assert made == GOLDEN_STAGES[name], f"stage '{name}': {advice}"


# The same tokenizer file must encode and decode alike for as long as FINGERPRINT_VERSION stays the same.
ENCODE_TEXTS = [
    "the cat sat on the mat; the hat is flat",
    "a long ASCII run that takes the fast path: the the the the the 1234567 theatre",
    "\u00fcber caf\u00e9 \u6f22\u5b57 \U0001f600\r\n\r\n  \t x  ",
    "special <|endoftext|> text",
]
GOLDEN_TOKENIZERS = {  # kind: (FINGERPRINT_VERSION, fingerprint, hash of the IDs and of the decoding table)
    "byte": (2, "d8daa88acd451fc70fdc5db6d377674605e9f28615ac9c5b5a362326a54ac2a5",
             "ccf22cd885758da48516904cc535448cd70907cfe47224bb30fc1a0355a6b21b"),
    "char": (2, "704ff96f93e7f555ab42b6c337aa5565fdb219cd02f05a45eb0dca94766a6bd6",
             "b28595305a3b844e032d75048af28f07c4d897d67b8582de217ceb95f2b7ec16"),
}


def fixed_tokenizer(kind: str) -> Tokenizer:
    """A tokenizer built from fixed merges, independent of the trainer."""
    if kind == "byte":
        t, h, e, a, space, one, two = map(ord, "thea 12")
        # "th", "the", " the", "at", "ü", " at", "12"
        merges = [(t, h), (256, e), (space, 257), (a, t), (0xC3, 0xBC), (space, 259), (one, two)]
        return Tokenizer.from_merges(kind="byte", pattern=patterns.resolve_pattern("gpt4", kind="byte"),
                                     merges=merges, special_tokens=["<|endoftext|>"])
    alphabet = sorted(set("the cat sat on mat;hisflAL"))
    t, h, e, space = (alphabet.index(c) + 1 for c in "the ")
    merges = [(t, h), (len(alphabet) + 1, e), (space, len(alphabet) + 2)]
    return Tokenizer.from_merges(kind="char", pattern="", merges=merges, alphabet=alphabet,
                                 special_tokens=["<|endoftext|>"], merge_newlines=False)


def encoding_digest(tokenizer: Tokenizer) -> str:
    ids = [tokenizer.encode(text) for text in ENCODE_TEXTS]
    ids += [tokenizer.encode(ENCODE_TEXTS[-1], allowed_special="all")]
    table = [tokenizer.decode_bytes([i]).hex() for i in range(tokenizer.vocab_size)]
    return canonical_hash([ids, table])


@pytest.mark.parametrize("kind", GOLDEN_TOKENIZERS)
def test_tokenizer_file_encodes_as_pinned_for_its_fingerprint_version(tmp_path, kind):
    fixed_tokenizer(kind).save(tmp_path / "tokenizer.json")
    tokenizer = Tokenizer.load(tmp_path / "tokenizer.json")
    made = (core.FINGERPRINT_VERSION, tokenizer.fingerprint, encoding_digest(tokenizer))
    assert made == GOLDEN_TOKENIZERS[kind], (
        f"the {kind} tokenizer file now encodes or decodes differently (or its fingerprint changed): if on "
        f"purpose, bump FINGERPRINT_VERSION in pipeline/tokenizer/core.py (so that shards and checkpoints made "
        f"before are refused) and the encode stage's CODE_VERSION, and put the new values in GOLDEN_TOKENIZERS")
