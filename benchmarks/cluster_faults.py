"""Faults of a Dask cluster and of an object store, injected into real ``lmprep run`` and ``status`` commands.

    python benchmarks/fault_injection.py --cluster [--trials 2] [--copies 1] [--seed 0]

Each scenario runs ``--trials`` times on a project of ``--copies`` generated corpora, with
``executor.timeout: 2`` and ``storage: {timeout: 2, retries: 3, backoff: 0.1}``:

- Dask addresses that are no scheduler (a socket that never answers, an HTTP server), a scheduler
  with no worker, a ``tls://`` address without TLS settings;
- during ``run prepare tokenizer encode --force`` on a ``dask scheduler`` with ``dask worker``
  processes (no nanny): the only worker killed, one of two workers killed, the scheduler killed, at a
  uniform random time from 2 s (the command's start-up) to 2 s plus the length of an undisturbed local run;
- an object store (moto's S3 server) holding the raw files: frozen (a socket that never answers) for
  ``status`` and ``run``, throttled (every fourth request answered 503 SlowDown, at most 20: the run
  must succeed and count exactly those), denying access.

For each command it checks: no hang (60 s), no traceback, no process left in the command's session,
the exit status (0, or 2 with one ``error:`` line, the last), and that the outputs are byte-identical to those
of an undisturbed run (a failed run keeps the previous ones, a run that succeeds writes the same),
and again once a plain ``lmprep run`` after it has finished.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from fault_injection import REPO, outputs, session_processes, write_corpus

DEADLINE = 60.0
CONFIG = """\
data:
  sources:
    - {glob: "%(raw)s/**/questions.txt", separator: blank_line}
    - {glob: "%(raw)s/**/facts.txt", separator: line}
    - {glob: "%(raw)s/**/*.jsonl.gz", field: text}
prepare: {output_dir: out/prepared, partition_bytes: 100000}
tokenizer: {output: out/tokenizer/tokenizer.json, vocab_size: 512}
encode: {output_dir: out/shards, shard_tokens: 50000}
executor: {timeout: 2}
storage: {timeout: 2, retries: 3, backoff: 0.1}
state_dir: state
"""
STAGES = ("prepare", "tokenizer", "encode")


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def command(project: Path, *args: str, env: dict[str, str] | None = None,
            before_end=None) -> dict[str, object]:
    """Run ``lmprep ARGS``; ``before_end(process)`` runs while it does. The checks of one command."""
    process = subprocess.Popen([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                               env=env or environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    if before_end is not None:
        before_end(process)
    try:
        _, err = process.communicate(timeout=DEADLINE)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        _, err = process.communicate()
        hung = True
    time.sleep(0.5)
    orphans = session_processes(process.pid)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    lines = err.strip().splitlines()  # a run's earlier stages may have said something first
    one_line = bool(lines) and lines[-1].startswith("error: ") and sum(line.startswith("error") for line in lines) == 1
    if "Traceback" in err or not (process.returncode == 0 or one_line):
        print(f"--- stderr of lmprep {' '.join(args)}:\n{err[-3000:]}", flush=True)
    return {"returncode": process.returncode, "hung": hung, "orphans": len(orphans), "traceback": "Traceback" in err,
            "clean_exit": process.returncode == 0 or (process.returncode == 2 and one_line),
            "line": err.strip().splitlines()[-1][:160] if err.strip() else ""}


@contextlib.contextmanager
def socket_server(answer: bytes | None):
    """A TCP server on 127.0.0.1 that accepts connections and answers ``answer`` to each, or never."""
    server, held = socket.socket(), []
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection = server.accept()[0]
                held.append(connection)
                if answer is not None:
                    connection.recv(65536)
                    connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for connection in held:
            connection.close()


@contextlib.contextmanager
def cluster(scratch: Path, workers: int):
    """A ``dask scheduler`` and ``workers`` ``dask worker`` processes (no nanny): (address, processes)."""
    started: list[subprocess.Popen] = []
    file = scratch / f"scheduler-{time.monotonic_ns()}.json"
    quiet = {"env": environment(), "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
             "start_new_session": True}
    try:
        started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                         "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                                         str(file)], **quiet))
        deadline = time.monotonic() + DEADLINE
        while not (file.exists() and file.stat().st_size):
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.05)
        address = json.loads(file.read_text())["address"]
        for _ in range(workers):
            started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                                             "--no-nanny", "--nthreads", "1", "--no-dashboard"], **quiet))
        if workers:
            from distributed import Client

            with Client(address, timeout=DEADLINE) as client:
                client.wait_for_workers(workers, timeout=DEADLINE)
        yield address, started
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def dask_run(project: Path, address: str, **options) -> dict[str, object]:
    return command(project, "run", *STAGES, "--force", "--executor", "dask", "--set",
                   f"executor.address={address}", **options)


def kill_after(victim: subprocess.Popen, seconds: float, landed: list[bool]):
    """Kill ``victim`` ``seconds`` after the command started; ``landed`` says whether the command still ran."""
    def kill(process: subprocess.Popen) -> None:
        time.sleep(seconds)
        landed.append(process.poll() is None)
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim.pid, signal.SIGKILL)
    return kill


def dask_scenarios(project: Path, scratch: Path, randomness: random.Random, span: float):
    """(scenario, its checks) for every Dask fault."""
    with socket_server(None) as port:
        yield "address that never answers", dask_run(project, f"tcp://127.0.0.1:{port}")
    with socket_server(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") as port:
        yield "HTTP server as the address", dask_run(project, f"tcp://127.0.0.1:{port}")
    yield "tls:// without TLS settings", dask_run(project, "tls://127.0.0.1:8786")
    with cluster(scratch, workers=0) as (address, _):
        yield "scheduler without workers", dask_run(project, address)
    for scenario, workers, victim in (("the only worker killed", 1, 1), ("one of two workers killed", 2, 1),
                                      ("the scheduler killed", 1, 0)):
        with cluster(scratch, workers=workers) as (address, started):
            landed: list[bool] = []
            result = dask_run(project, address, before_end=kill_after(started[victim], randomness.uniform(2, span + 2),
                                                                      landed))
            yield f"{scenario}{'' if landed[0] else ' (after the run)'}", result


@contextlib.contextmanager
def s3_store():
    """moto's S3 server with a layer that can answer the next requests with an error: (endpoint, layer)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # its line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    layer = server._server.app = ErrorLayer(server._server.app)
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}", layer
    finally:
        server.stop()


class ErrorLayer:
    """WSGI middleware answering one request in ``every`` with ``error`` (status, code), ``left`` times."""

    def __init__(self, app):
        self.app, self.left, self.every, self.error = app, 0, 1, (503, "SlowDown")
        self.seen, self.failed, self._lock = 0, 0, threading.Lock()

    def __call__(self, environ, start_response):
        with self._lock:
            self.seen += 1
            fail = self.left > 0 and self.seen % self.every == 0
            self.left -= fail
            self.failed += fail
        if not fail:
            return self.app(environ, start_response)
        status, code = self.error
        body = f"<Error><Code>{code}</Code><Message>{code}</Message></Error>".encode()
        start_response(f"{status} {code}", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]  # an answer to HEAD has no body


def store_scenarios(scratch: Path, copies: Path):
    """(scenario, its checks) for every object-store fault, on a project whose raw files are in S3."""
    project = scratch / "s3-project"
    project.mkdir(parents=True)
    bucket = f"raw-{scratch.name}"  # moto's servers in one process share their buckets
    (project / "lmprep.yaml").write_text(CONFIG % {"raw": f"s3://{bucket}"})
    with s3_store() as (endpoint, layer):
        store = environment(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                            AWS_DEFAULT_REGION="us-east-1")
        import s3fs

        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
        fs.mkdir(bucket)
        fs.put(str(copies) + "/", f"{bucket}/", recursive=True)
        assert command(project, "run", *STAGES, env=store)["returncode"] == 0
        reference = outputs(project)
        for scenario, args in (("frozen store: status", ["status"]), ("frozen store: run", ["run", *STAGES])):
            with socket_server(None) as port:
                result = command(project, *args, env={**store, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
            yield scenario, {**result, "identical": outputs(project) == reference}
        layer.left, layer.every, layer.failed, layer.error = 20, 4, 0, (503, "SlowDown")
        result = command(project, "run", *STAGES, "--force", env=store)
        counted = str(result["line"]).startswith(f"storage: {layer.failed} storage request")
        yield "throttled store (every 4th request 503 SlowDown)", {
            **result, "identical": outputs(project) == reference, "injected": layer.failed,
            "clean_exit": result["returncode"] == 0 and counted}
        layer.left, layer.every, layer.error = 1000, 1, (403, "AccessDenied")
        result = command(project, "run", *STAGES, "--force", env=store)
        layer.left = 0
        yield "store denying access", {**result, "identical": outputs(project) == reference}


def committed(project: Path) -> dict[str, str]:
    return {name: digest for name, digest in outputs(project).items() if ".partial/" not in name}


def recovery(project: Path, reference: dict[str, str]) -> dict[str, bool]:
    """Whether the outputs are the undisturbed run's, and again after a plain ``lmprep run``. A failed
    encode's finished parts, kept aside in ``<output_dir>.partial`` for the next encode to reuse, are no
    output: they stay until an encode finishes or ``lmprep clean``."""
    intact = committed(project) == reference
    again = command(project, "run", *STAGES)
    now = committed(project)
    return {"identical": intact and again["returncode"] == 0 and now == reference,
            "differ": sorted(name for name in {*now, *reference} if now.get(name) != reference.get(name))[:5],
            "next_run": again["line"]}


def main(trials: int, copies: int, seed: int, smoke: bool = False) -> None:
    """``smoke``: a tiny corpus, and the first scenario of each kind."""
    randomness = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="lmprep-cluster-faults-") as scratch_name:
        scratch = Path(scratch_name)
        project, raw = scratch / "project", scratch / "project" / "raw"
        for copy in range(copies):
            write_corpus(raw / f"copy-{copy}", copy, smoke)
        (project / "lmprep.yaml").write_text(CONFIG % {"raw": "raw"})
        began = time.monotonic()
        assert command(project, "run", *STAGES)["returncode"] == 0
        span = time.monotonic() - began
        reference = outputs(project)
        print(f"reference run (local processes): {span:.1f} s, {len(reference)} output files", flush=True)
        outcomes = []
        for _ in range(trials):
            for scenario, result in itertools.islice(dask_scenarios(project, scratch, randomness, span),
                                                     1 if smoke else None):
                outcomes.append((scenario, {**result, **recovery(project, reference)}))
                print(scenario, outcomes[-1][1], flush=True)
            for scenario, result in itertools.islice(store_scenarios(scratch / f"store-{len(outcomes)}", raw),
                                                     1 if smoke else None):
                outcomes.append((scenario, result))
                print(scenario, result, flush=True)
    bad = Counter()
    for _, result in outcomes:
        bad["hangs"] += result["hung"]
        bad["tracebacks"] += result["traceback"]
        bad["orphan processes"] += result["orphans"]
        bad["exits other than 0 or 2 with one line"] += not result["clean_exit"]
        bad["outputs not identical"] += not result["identical"]
    print(f"{len(outcomes)} faulty commands, by outcome: "
          f"{dict(Counter((scenario, result['returncode']) for scenario, result in outcomes))}")
    print(", ".join(f"{count} {name}" for name, count in bad.items()))
