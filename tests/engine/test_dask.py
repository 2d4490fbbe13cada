"""The pipeline on a 2-worker Dask cluster (processes on 127.0.0.1): the same bytes as local processes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import threading
import time
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

distributed = pytest.importorskip("distributed")

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
         "données", "naïve", "café", "東京", "мир", "🙂"]


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=40) as local_cluster, \
            distributed.Client(local_cluster) as client:
        yield local_cluster.scheduler_address, client


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """Six raw files (one .jsonl big enough to be cut into byte ranges), duplicates across them."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) for _ in range(1500)]
    texts += texts[:200]  # copies in later files
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:700]))
    for n, start in enumerate(range(700, len(texts), 200)):
        (raw / f"b{n}.txt").write_text("\n".join(texts[start : start + 200]))
    (tmp_path / "lmprep.yaml").write_text(
        "data: {sources: [{glob: 'raw/*.jsonl'}, {glob: 'raw/*.txt', separator: line}]}\n"
        "prepare: {partition_bytes: 20000, steps: [exact_dedup: {buckets: 3}]}\n"
        "tokenizer: {vocab_size: 400}\n"
        "encode: {shard_tokens: 300}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMPREP_CONFIG", "lmprep.yaml")
    return tmp_path


def lmprep(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["run", "encode", "--force", *args])
    return result.exit_code, result.stderr


def outputs(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}


def run_everything(*args: str) -> None:
    result = CliRunner().invoke(cli, ["run", "--force", "prepare", "tokenizer", "encode", *args])
    assert result.exit_code == 0, result.output


def test_prepare_tokenizer_encode_on_a_cluster_are_byte_identical_to_local(project, cluster):
    address, _ = cluster
    run_everything("--executor", "dask", "--set", f"executor.address={address}")
    on_cluster = outputs(project)
    assert sum(name.startswith("data/prepared/train/part-") for name in on_cluster) > 5
    assert sum(name.startswith("data/shards/train-") for name in on_cluster) > 5  # several per part
    for workers in (2, 1):
        run_everything("--executor", "local", "--set", f"executor.workers={workers}")
        assert outputs(project) == on_cluster


def test_a_run_starts_one_local_cluster_for_all_its_stages_and_closes_it(project, monkeypatch):
    started = []

    def local_cluster(*args, **kwargs):
        started.append(real_local_cluster(*args, **kwargs))
        return started[-1]

    real_local_cluster = distributed.LocalCluster
    monkeypatch.setattr(distributed, "LocalCluster", local_cluster)
    dask = ("--executor", "dask", "--set", "executor.address=local", "--set", "executor.workers=2")
    good = (project / "raw" / "b0.txt").read_bytes()
    (project / "raw" / "b0.txt").write_bytes(b"fine\nbroken \xfe\n")
    result = CliRunner().invoke(cli, ["run", "--force", "prepare", "tokenizer", "encode", *dask])
    assert result.exit_code == 2 and "invalid UTF-8" in result.stderr
    assert len(started) == 1 and started[0].status.name == "closed"  # closed on the error too
    (project / "raw" / "b0.txt").write_bytes(good)
    run_everything(*dask)
    assert len(started) == 2 and started[1].status.name == "closed"
    on_cluster = outputs(project)
    run_everything("--executor", "local")
    assert outputs(project) == on_cluster


def test_a_worker_killed_during_encode_is_retried_or_fails_cleanly(project, cluster):
    address, client = cluster
    dask = ("--executor", "dask", "--set", f"executor.address={address}", "--set", "encode.shard_tokens=20")
    assert lmprep(*dask)[0] == 0
    expected = outputs(project)
    result: list[tuple[int, str]] = []
    encode = threading.Thread(target=lambda: result.append(lmprep(*dask)))
    encode.start()
    victim = _busy_worker(client, encode)
    if victim is not None:
        os.kill(client.run(os.getpid)[victim], signal.SIGKILL)
    encode.join()
    code, output = result[0]
    if code != 0:  # a clean failure: one line; the next run completes
        assert output.startswith("error: ") and output.count("\n") == 1, output
        assert lmprep(*dask)[0] == 0
    assert outputs(project) == expected
    tokenizer = Tokenizer.load(project / "data/tokenizer/tokenizer.json")
    assert ShardSet.open(project / "data/shards", "train", tokenizer=tokenizer, verify=True).num_documents > 0


def _busy_worker(client, encode: threading.Thread) -> str | None:
    """The address of a worker running an encode task, as soon as there is one."""
    while encode.is_alive():
        busy = [worker for worker, keys in client.processing().items()
                if any("run_task" in str(key) for key in keys)]
        if busy:
            return busy[0]
        time.sleep(0.01)
    return None


def test_a_local_cluster_warns_of_no_dashboard_port_in_use():
    """distributed's scheduler serves HTTP on 8787 by default and warns when another cluster holds it."""
    from pipeline.config import ExecutorConfig
    from pipeline.engine.executor import open_tasks

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    with holder, warnings.catch_warnings(record=True) as caught:
        with contextlib.suppress(OSError):  # already held by another cluster: in use all the same
            holder.bind(("127.0.0.1", 8787))
            holder.listen()
        warnings.simplefilter("always")
        with open_tasks(ExecutorConfig(kind="dask", address="local", workers=1)) as tasks:
            assert tasks.map(abs, [-1, -2], labels=["a", "b"], desc="abs", progress=False) == [1, 2]
    assert [str(warning.message) for warning in caught if "in use" in str(warning.message)] == []


def test_a_scheduler_that_does_not_answer_is_one_line_and_exit_2(project):
    result = CliRunner().invoke(cli, ["run", "prepare", "--executor", "dask", "--set", "executor.address=tcp://127.0.0.1:1",
                                      "--set", "executor.timeout=0.5"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: executor.address 'tcp://127.0.0.1:1': no Dask scheduler answered within 0.5 s")
    assert result.stderr.count("\n") == 1


def test_a_task_failure_names_the_partition_and_the_worker(project, cluster):
    address, _ = cluster
    (project / "raw" / "b0.txt").write_bytes(b"fine\nbroken \xfe\n")
    result = CliRunner().invoke(cli, ["run", "prepare", "--executor", "dask", "--set", f"executor.address={address}"])
    assert result.exit_code == 2
    assert "b0.txt: invalid UTF-8 at byte offset 12" in result.stderr
    assert "b0.txt, 2 files), on worker tcp://127.0.0.1:" in result.stderr, result.stderr


def test_near_dedup_on_a_cluster_is_byte_identical_to_local(project, cluster):
    """Near-duplicates planted across files: the signature, bucket and cluster tasks give the same parts."""
    address, _ = cluster
    texts = [json.loads(line)["text"].split() for line in (project / "raw" / "a.jsonl").read_text().splitlines()]
    edited = [" ".join([*words[:-1], "édité"]) for words in texts if len(words) >= 30]
    (project / "raw" / "c.txt").write_text("\n".join(edited))
    config = (project / "lmprep.yaml").read_text().replace(
        "steps: [exact_dedup: {buckets: 3}]", "steps: [{exact_dedup: {buckets: 3}}, {near_dedup: {buckets: 3}}]")
    (project / "near.yaml").write_text(config)
    prepare = ["run", "--force", "prepare", "--config", "near.yaml"]
    result = CliRunner().invoke(cli, [*prepare, "--executor", "dask", "--set", f"executor.address={address}"])
    assert result.exit_code == 0, result.output
    on_cluster = outputs(project)
    stats = json.loads(on_cluster["data/prepared/stats.json"])
    assert stats["dropped"]["near_duplicate"] >= len(edited) * 0.9
    for workers in (2, 1):
        result = CliRunner().invoke(cli, [*prepare, "--executor", "local", "--set", f"executor.workers={workers}"])
        assert result.exit_code == 0, result.output
        assert outputs(project) == on_cluster


FAIL_COUNTING = """\
import pipeline.data.chunk_counts as counting
counting.real_count_part = counting.count_part
def failing(pattern, location):
    from pipeline.errors import DataError
    raise DataError("the disk went away")
counting.count_part = failing
"""
RESTORE_COUNTING = "import pipeline.data.chunk_counts as counting\ncounting.count_part = counting.real_count_part\n"


def test_a_failed_task_of_a_map_reduce_fails_the_stage_in_one_line_without_hanging(project, cluster):
    """The tokenizer's counting is a map-reduce: its failed leaf once left the driver waiting for ever."""
    address, client = cluster
    options = ["--executor", "dask", "--set", f"executor.address={address}"]
    assert CliRunner().invoke(cli, ["run", "prepare", *options]).exit_code == 0
    client.run(exec, FAIL_COUNTING)
    result = {}
    try:
        worker = threading.Thread(target=lambda: result.update(run=CliRunner().invoke(cli, ["run", "tokenizer",
                                                                                           *options])), daemon=True)
        worker.start()
        worker.join(60)
        assert not worker.is_alive(), "the run hangs"
    finally:
        client.run(exec, RESTORE_COUNTING)
    failed = result["run"]
    assert failed.exit_code == 2, failed.output
    assert re.fullmatch(r"error: the disk went away \(partition \S+part-\d+\.arrow, on worker tcp://127\.0\.0\.1:\d+\) "
                        r"\(details in \.lmprep/logs/tokenizer\.log\)\n", failed.stderr), failed.stderr
