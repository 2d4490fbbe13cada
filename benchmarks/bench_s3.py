"""Object storage benchmark against a local S3 server (moto's, on 127.0.0.1; needs ``lmprep[test]``).

1. ``lmprep status`` over ``--objects`` small raw objects after ``prepare`` ran on them: its time and the
   GET-object requests it made (listings only, so 0).
2. ``encode`` throughput (MB of prepared text per second) with the prepared data and the shards on local
   disk, and both on the S3 server: 1-worker process pool, a 512-ID byte-level tokenizer, ``--mb`` of text.

    python benchmarks/bench_s3.py [--objects 10000] [--mb 20] [--smoke]

``--smoke``: 50 objects and 1 MB.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import results
from click.testing import CliRunner
from moto.server import ThreadedMotoServer

from pipeline.config import ExecutorConfig
from pipeline.data import documents
from pipeline.engine import storage
from pipeline.engine.executor import open_tasks
from pipeline.shards.corpus import encode_corpus
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]

class RequestCounter:
    """WSGI middleware counting the GET-object requests (bodies read; listings are GETs of the bucket)."""

    def __init__(self, app):
        self.app, self.object_reads = app, 0

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "GET" and "/" in environ.get("PATH_INFO", "").strip("/"):
            self.object_reads += 1
        return self.app(environ, start_response)


CONFIG = """\
data:
  sources:
    - {{glob: "s3://{bucket}/raw/*.txt"}}
prepare: {{output_dir: out/prepared, val_fraction: 0.1, partition_bytes: 100000000}}
tokenizer: {{output: out/tokenizer.json, vocab_size: 300}}
encode: {{output_dir: out/shards}}
train: {{output_dir: out/ckpt}}
state_dir: state
"""


def bench_status(fs, counter: RequestCounter, objects: int, work: Path) -> None:
    fs.mkdir("status")
    fs.pipe({f"status/raw/doc-{index:05d}.txt": f"document number {index}, a short one.".encode()
             for index in range(objects)})
    (work / "lmprep.yaml").write_text(CONFIG.format(bucket="status"))
    os.chdir(work)
    start = time.perf_counter()
    result = CliRunner().invoke(cli, ["run", "prepare", "--config", "lmprep.yaml"])
    assert result.exit_code == 0, result.output
    print(f"prepare over {objects:,} objects: {time.perf_counter() - start:.1f} s")
    for _ in range(3):
        before = counter.object_reads
        start = time.perf_counter()
        result = CliRunner().invoke(cli, ["status", "--config", "lmprep.yaml"])
        seconds = time.perf_counter() - start
        assert "prepare: up to date" in result.output, result.output
        print(f"status over {objects:,} unchanged objects: {seconds:.2f} s, "
              f"{counter.object_reads - before} GET-object requests")


def bench_encode(megabytes: int, work: Path) -> None:
    text = (ROOT / "data" / "raw").glob("**/*")
    corpus = "".join(path.read_text("utf-8", errors="replace") for path in sorted(text) if path.is_file())
    texts = [part for part in corpus.split("\n\n") if part.strip()]
    repeat = -(-megabytes * 1_000_000 // len(corpus.encode()))
    parts = [[f"{copy} {text}" for text in texts] for copy in range(repeat)]
    local_prepared = work / "prepared"
    documents.write_prepared(local_prepared, {"train": parts})
    size = sum(part.bytes for part in documents.read_parts(local_prepared, "train"))
    tokenizer = Tokenizer.train(texts, vocab_size=512, special_tokens=("<|endoftext|>",))
    tokenizer.save(work / "tokenizer.json")
    with storage.output_dir("s3://encode/prepared") as attempt:
        for path in sorted(local_prepared.rglob("*")):
            if path.is_file():
                storage.put_file(path, f"{attempt}/{path.relative_to(local_prepared).as_posix()}")
    eos = tokenizer.special_tokens["<|endoftext|>"]
    for label, prepared, output in (("local disk", local_prepared, work / "shards"),
                                    ("S3 server", "s3://encode/prepared", "s3://encode/shards")):
        with open_tasks(ExecutorConfig(kind="local", workers=1)) as tasks:
            start = time.perf_counter()
            encode_corpus(prepared, output, tokenizer_path=work / "tokenizer.json", tasks=tasks,
                          shard_tokens=1_000_000, eos_id=eos, splits=("train",))
            seconds = time.perf_counter() - start
        print(f"encode {size / 1e6:.1f} MB, {label}: {seconds:.2f} s, {size / 1e6 / seconds:.1f} MB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=20)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.objects, args.mb = 50, 1
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    server._server.app = counter = RequestCounter(server._server.app)
    host, port = server.get_host_and_port()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=f"http://{host}:{port}")
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.mkdir("encode")
    work = Path(tempfile.mkdtemp(prefix="bench_s3-"))
    try:
        bench_status(fs, counter, args.objects, work)
        bench_encode(args.mb, work)
    finally:
        os.chdir(ROOT)
        shutil.rmtree(work)
        server.stop()


if __name__ == "__main__":
    results.run("bench_s3", main)
