"""Fuzz the shard/manifest reader and the checkpoint reader with damaged copies of real files.

Hypothesis draws batches of mutations (flipped, overwritten or truncated
bytes; a JSON value of a manifest, of a shard's schema metadata or of a
checkpoint's metadata replaced by another, deep or huge one). Each batch runs
in one child process (this file run as a script), so a segfault or an abort
is caught as a signal instead of killing the test run. Every mutation must
end in success or a PipelineError: no other exception, no signal.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

SHARD_FILES = ("train-00000.arrow", "train-00001.arrow", "train.manifest.json")
CHECKPOINT_FILE = "checkpoint.safetensors"
# JSON text that Python's json module cannot turn into a value: too deep, too many digits, infinite.
RAW_VALUES = {"deep": "[" * 5000 + "]" * 5000, "digits": "9" * 5000, "huge": "1e400", "nan": "NaN"}
_PLACEHOLDER = "\0raw\0"


# --------------------------------------------------------------------------- mutations (run in the child)


def mutate_bytes(data: bytes, mutation: list) -> bytes:
    """Flip, overwrite or truncate at a position given as a fraction of the length."""
    kind, fraction, value = mutation
    position = min(int(fraction * len(data)), len(data) - 1)
    if kind == "truncate":
        return data[:position]
    changed = bytearray(data)
    changed[position] = changed[position] ^ value if kind == "flip" else value
    return bytes(changed)


def replace_json_value(text: str, path: list[int], value) -> str:
    """Replace the node that ``path`` leads to (indices taken modulo each container's size)."""
    document = json.loads(text)
    if not path:
        return render_json(value)
    parent, key = None, None
    node = document
    for step in path:
        if not isinstance(node, (dict, list)) or not node:
            break
        keys = sorted(node) if isinstance(node, dict) else range(len(node))
        parent, key = node, list(keys)[step % len(node)]
        node = node[key]
    if parent is None:
        return render_json(value)
    parent[key] = _PLACEHOLDER
    return json.dumps(document).replace(json.dumps(_PLACEHOLDER), render_json(value))


def render_json(value) -> str:
    return RAW_VALUES[value["raw"]] if isinstance(value, dict) and set(value) == {"raw"} else json.dumps(value)


def rewrite_shard_metadata(path: Path, path_in_value: list[int], value, key_index: int) -> None:
    """Replace a JSON value inside one ``lmprep.*`` entry of a shard's schema metadata."""
    import pyarrow as pa

    table = pa.ipc.open_stream(path.read_bytes()).read_all()  # in memory: the file is rewritten below
    metadata = dict(table.schema.metadata)
    key = sorted(metadata)[key_index % len(metadata)]
    metadata[key] = replace_json_value(metadata[key].decode(), path_in_value, value).encode()
    table = table.replace_schema_metadata(metadata)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def rewrite_checkpoint_metadata(path: Path, path_in_value: list[int], value) -> None:
    """Replace a JSON value inside the checkpoint's metadata, rewriting the safetensors header around it."""
    data = path.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header["__metadata__"]["lmprep"] = replace_json_value(header["__metadata__"]["lmprep"], path_in_value, value)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(len(encoded).to_bytes(8, "little") + encoded + data[8 + length :])


def apply(case: dict, directory: Path) -> None:
    target = directory / case["file"]
    if case["kind"] == "bytes":
        target.write_bytes(mutate_bytes(target.read_bytes(), case["mutation"]))
    elif case["file"].endswith(".json"):
        target.write_text(replace_json_value(target.read_text(), case["path"], case["value"]))
    elif case["file"].endswith(".arrow"):
        rewrite_shard_metadata(target, case["path"], case["value"], case["key"])
    else:
        rewrite_checkpoint_metadata(target, case["path"], case["value"])


def read_shards(directory: Path, *, verify: bool) -> None:
    """Open the set and touch every buffer the reader exposes."""
    from pipeline.shards.format import ShardSet

    shard_set = ShardSet.open(directory, "train", verify=verify)
    sum(int(document.sum()) for document in shard_set.documents())
    sum(int(shard.offsets.sum()) for shard in shard_set.shards)
    shard_set.sample_batch(np.random.default_rng(0), 4, 3)


def read_checkpoint(directory: Path, *, header_only: bool) -> None:
    from conftest import FakeTokenizer

    from pipeline.model import checkpoint

    tokenizer = FakeTokenizer(merges=[(116, 104), (256, 101)])
    if header_only:
        checkpoint.check_tokenizer(checkpoint.read_header(directory / CHECKPOINT_FILE), tokenizer)
    else:
        checkpoint.load_checkpoint(directory / CHECKPOINT_FILE, tokenizer)


READERS = {
    "shards": [functools.partial(read_shards, verify=True), functools.partial(read_shards, verify=False)],
    "checkpoint": [functools.partial(read_checkpoint, header_only=True),
                   functools.partial(read_checkpoint, header_only=False)],
}


def verdict(read, directory: Path) -> str:
    """``ok``, ``error`` (a one-line PipelineError) or what else happened."""
    from pipeline.errors import PipelineError

    try:
        read(directory)
        return "ok"
    except PipelineError as exc:
        return "error" if "\n" not in str(exc) else f"multi-line {type(exc).__name__}"
    except Exception as exc:  # noqa: BLE001 - what the test is looking for
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def child(reader: str, pristine: Path) -> None:
    """Run every case read from stdin against a fresh copy of ``pristine``; print one line of verdicts per case."""
    for case in json.loads(sys.stdin.read()):
        with tempfile.TemporaryDirectory() as scratch:
            directory = Path(scratch) / "copy"
            shutil.copytree(pristine, directory)
            apply(case, directory)
            print(" ".join(verdict(read, directory) for read in READERS[reader]), flush=True)


# --------------------------------------------------------------------------- the tests

BATCH = 40


def fuzz(batches: int):
    """Few batches, each one child: the child's imports (torch for checkpoints) dominate the time.

    No shrinking: a failure already names its case, and each shrinking step would start a child.
    """
    return settings(max_examples=batches, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

json_values = st.one_of(
    st.fixed_dictionaries({"raw": st.sampled_from(sorted(RAW_VALUES))}),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
        max_leaves=6,
    ),
)
byte_mutations = st.tuples(st.sampled_from(["flip", "set", "truncate"]), st.floats(0, 1), st.integers(1, 255))


def cases(files: tuple[str, ...]):
    """Batches of mutations of ``files`` (``key`` picks the shard metadata entry a JSON mutation edits)."""
    bytes_case = st.fixed_dictionaries(
        {"kind": st.just("bytes"), "file": st.sampled_from(files), "mutation": byte_mutations})
    json_case = st.fixed_dictionaries({
        "kind": st.just("json"), "file": st.sampled_from(files), "value": json_values,
        "path": st.lists(st.integers(0, 50), max_size=4), "key": st.integers(0, 20),
    })
    return st.lists(st.one_of(bytes_case, json_case), min_size=BATCH, max_size=BATCH)


def run_batch(reader: str, pristine: Path, batch: list[dict]) -> None:
    result = subprocess.run([sys.executable, __file__, reader, str(pristine)], input=json.dumps(batch),
                            capture_output=True, text=True, timeout=300)
    verdicts = result.stdout.splitlines()
    if result.returncode != 0:
        case = batch[len(verdicts)] if len(verdicts) < len(batch) else None
        pytest.fail(f"the reader died (status {result.returncode}) on {case}: {result.stderr[-2000:]}")
    bad = [(line, case) for line, case in zip(verdicts, batch) if set(line.split(" ")) - {"ok", "error"}]
    assert not bad, bad[0]
    assert len(verdicts) == len(batch)


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    from pipeline.shards.format import ShardWriter
    from pipeline.shards.manifest import ShardStamp
    from pipeline.shards.origins import Origins

    directory = tmp_path_factory.mktemp("shards")
    stamp = ShardStamp(split="train", tokenizer_fingerprint="f" * 64, vocab_size=1000,
                       special_ids={"bos": None, "eos": 999}, prepared_fingerprint="p" * 64)
    writer = ShardWriter(directory, stamp, shard_tokens=40)
    docs = [list(range(start, start + 7)) for start in range(0, 70, 7)]
    writer.write(np.array([i for doc in docs for i in doc], np.uint32), np.arange(0, 71, 7), Origins.numbered(10))
    assert len(writer.close().shards) == 2
    return directory


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory) -> Path:
    import torch
    from conftest import FakeTokenizer

    from pipeline.model.bigram import BigramLM, ModelConfig
    from pipeline.model.checkpoint import save_checkpoint

    directory = tmp_path_factory.mktemp("checkpoint")
    tokenizer = FakeTokenizer(merges=[(116, 104), (256, 101)])
    model = BigramLM(ModelConfig(vocab_size=tokenizer.vocab_size, dim=4))
    optimizer = torch.optim.AdamW(model.parameters())
    model.loss(torch.tensor([[1, 2]]), torch.tensor([[2, 3]])).backward()
    optimizer.step()
    save_checkpoint(directory, model=model, step=3, tokenizer=tokenizer, shard_fingerprint="s" * 64,
                    train_config={"lr": 0.01}, optimizer=optimizer,
                    numpy_rng_state={"bit_generator": "PCG64", "state": {"state": 5, "inc": 7}})
    return directory


@fuzz(batches=3)
@given(batch=cases(SHARD_FILES))
def test_the_shard_reader_raises_only_project_errors(shard_dir, batch):
    run_batch("shards", shard_dir, batch)


@fuzz(batches=2)
@given(batch=cases((CHECKPOINT_FILE,)))
def test_the_checkpoint_reader_raises_only_project_errors(checkpoint_dir, batch):
    run_batch("checkpoint", checkpoint_dir, batch)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # conftest's FakeTokenizer
    child(sys.argv[1], Path(sys.argv[2]))
