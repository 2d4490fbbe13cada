"""Object-store faults: a store that freezes has a deadline, transient errors are retried, permanent ones not.

The store is moto's S3 server on 127.0.0.1 (tests/conftest.py), with a WSGI layer in front of it that
answers the next requests with an error of the test's choosing; the frozen store is a socket that
accepts connections and never answers.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import lmprep_in_cwd as lmprep
from conftest import put_corpus, write_store_config

from pipeline.engine import retries, storage

pytest.importorskip("s3fs")

REPO = Path(__file__).resolve().parents[2]
STORAGE = "storage: {timeout: 1, retries: 3, backoff: 0.05}\n"

SLOW_DOWN = (503, "SlowDown", "Please reduce your request rate.")
ACCESS_DENIED = (403, "AccessDenied", "Access Denied")


class Failing:
    """WSGI middleware: the next ``count`` requests (of ``method`` on an object, when given) get ``error``."""

    def __init__(self, app, error: tuple[int, str, str], count: int, *, method: str | None = None,
                 copies: bool = False):
        self.app, self.error, self.left, self.method, self.copies = app, error, count, method, copies
        self.failed = 0
        self._lock = threading.Lock()

    def __call__(self, environ, start_response):
        with self._lock:
            wanted = self.method is None or (environ["REQUEST_METHOD"] == self.method
                                             and "/" in environ.get("PATH_INFO", "").strip("/"))
            wanted = wanted and (not self.copies or "HTTP_X_AMZ_COPY_SOURCE" in environ)
            fail = wanted and self.left > 0
            if fail:
                self.left -= 1
                self.failed += 1
        if not fail:
            return self.app(environ, start_response)
        status, code, message = self.error
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
                "<RequestId>test</RequestId></Error>").encode()
        start_response(f"{status} {code}", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]  # an answer to HEAD has no body


@contextlib.contextmanager
def failing(s3_server, error: tuple[int, str, str], count: int, *, method: str | None = None,
            copies: bool = False) -> Iterator[Failing]:
    """The server's next ``count`` requests (copies of an object only, with ``copies``) answered with ``error``
    while in the block."""
    _, counter = s3_server
    layer = counter.app = Failing(counter.app, error, count, method=method, copies=copies)
    try:
        yield layer
    finally:
        counter.app = layer.app


@pytest.fixture
def project(s3, tmp_path, monkeypatch) -> Path:
    """Raw files and the shards in the bucket, the rest local; quick deadlines."""
    monkeypatch.chdir(tmp_path)
    put_corpus(s3)
    write_store_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"), shards=s3.url("shards"))
    with (tmp_path / "lmprep.yaml").open("a") as config:
        config.write(STORAGE)
    return tmp_path


def committed_files(s3, name: str) -> dict[str, bytes]:
    root = storage.committed(s3.url(name))
    return {file: storage.read_bytes(f"{root}/{file}") for file in sorted(storage.list_files(root))}


def test_transient_errors_are_retried_counted_and_change_no_byte(s3, s3_server, project):
    first = lmprep("run", "encode")
    assert first.exit_code == 0, first.output
    expected = committed_files(s3, "shards")
    with failing(s3_server, SLOW_DOWN, 3) as driver_side, failing(s3_server, SLOW_DOWN, 2, method="GET") as reads:
        result = lmprep("run", "encode", "--force", "prepare")
    assert result.exit_code == 0, result.output
    assert (driver_side.failed, reads.failed) == (3, 2)
    assert "storage: 5 storage requests retried after transient failures (SlowDown (HTTP 503) ×5)\n" in result.stderr
    assert committed_files(s3, "shards") == expected


def test_transient_errors_of_the_drivers_copies_into_the_output_are_retried(s3, s3_server, project):
    """The driver gives each finished part's shards their names in the new output by copies the store makes:
    a 503 there failed the run after every task had succeeded."""
    first = lmprep("run", "encode")
    assert first.exit_code == 0, first.output
    expected = committed_files(s3, "shards")
    with failing(s3_server, SLOW_DOWN, 2, copies=True) as copies:
        result = lmprep("run", "encode", "--force", "prepare")
    assert result.exit_code == 0, result.output
    assert copies.failed == 2
    assert committed_files(s3, "shards") == expected


def test_retries_made_by_pool_workers_are_counted_by_the_driver(s3, s3_server, project):
    """Only object reads fail, and prepare's tasks, in worker processes, make them."""
    with failing(s3_server, SLOW_DOWN, 2, method="GET") as reads:
        result = lmprep("run", "prepare")
    assert result.exit_code == 0, result.output
    assert reads.failed == 2
    assert "storage: 2 storage requests retried after transient failures (SlowDown (HTTP 503) ×2)" in result.stderr


def test_a_transient_error_that_lasts_fails_after_the_bounded_retries_in_one_line(s3, s3_server, project):
    with failing(s3_server, SLOW_DOWN, 1000) as layer:
        result = lmprep("status")
    assert result.exit_code == 2
    assert layer.failed == 4  # one attempt and storage.retries more
    assert result.stderr == (f"error: {s3.url('raw/*.jsonl.gz')}: SlowDown (HTTP 503) on each of 4 attempts "
                             "(storage.timeout 1 s, storage.retries 3); the store is down, unreachable or "
                             "throttling, try again later\n")


def test_a_permanent_error_fails_at_once(s3, s3_server, project):
    with failing(s3_server, ACCESS_DENIED, 1000) as layer:
        result = lmprep("status")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "access denied" in result.stderr
    assert layer.failed == 1


@contextlib.contextmanager
def frozen_store() -> Iterator[tuple[str, list[float]]]:
    """An endpoint that accepts connections and never answers, as a store that froze for good: (its URL, the
    ``time.monotonic()`` of each connection it accepted)."""
    server, held, accepted = socket.socket(), [], []
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])
                accepted.append(time.monotonic())

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        server.close()
        for connection in held:
            connection.close()


@pytest.mark.parametrize("command", [["status"], ["run"]])
def test_a_store_that_freezes_fails_status_and_run_within_the_deadline(s3, project, command):
    """Timed from the command's first request to the store: its start-up, slow on a loaded machine, is not
    what the deadline bounds."""
    with frozen_store() as (endpoint, accepted):
        result = subprocess.run([sys.executable, "-m", "stages", *command, "--config", "lmprep.yaml",
                                 "--set", "storage.retries=1"], cwd=project, capture_output=True, text=True,
                                timeout=60, env={**os.environ, "PYTHONPATH": str(REPO), "AWS_ENDPOINT_URL": endpoint})
        finished = time.monotonic()
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"error: {s3.url('raw/*.jsonl.gz')}: read timeout on each of 2 attempts "
                             "(storage.timeout 1 s, storage.retries 1); the store is down, unreachable or "
                             "throttling, try again later\n")
    assert accepted, "the command never reached the store"
    assert finished - accepted[0] < 2 * 1 + 15  # two reads' deadlines, the back-off and the command's exit


@contextlib.contextmanager
def resetting_proxy(upstream: str, resets: int) -> Iterator[tuple[str, list[int]]]:
    """A TCP proxy to ``upstream`` that resets (RST) its first ``resets`` connections as they arrive:
    (its endpoint, [connections reset so far])."""
    host, port = upstream.rsplit("//", 1)[1].split(":")
    server, reset, open_sockets = socket.socket(), [0], []
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def pipe(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                client = server.accept()[0]
                open_sockets.append(client)
                if reset[0] < resets:
                    reset[0] += 1
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client.close()
                    continue
                target = socket.create_connection((host, int(port)))
                open_sockets.append(target)
                threading.Thread(target=pipe, args=(client, target), daemon=True).start()
                threading.Thread(target=pipe, args=(target, client), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", reset
    finally:
        server.close()
        for open_socket in open_sockets:
            open_socket.close()


def test_reset_connections_are_retried(s3, s3_server, project, monkeypatch):
    import s3fs

    with resetting_proxy(s3_server[0], resets=2) as (endpoint, reset):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        s3fs.S3FileSystem.clear_instance_cache()
        result = lmprep("run", "prepare")
    assert result.exit_code == 0, result.output
    assert reset[0] == 2  # a reset may land on a request whose failure s3fs swallows (a bucket probe): 1 or 2
    assert re.search(r"storage: [12] storage requests? retried after transient failures \(connection \w+ ×[12]\)\n",
                     result.stderr), result.stderr


@pytest.mark.parametrize("error, kind", [
    (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
    (TimeoutError("timed out"), "timeout"),
    (FileNotFoundError("no such key"), None),
    (PermissionError("denied"), None),
])
def test_which_errors_are_transient(error, kind):
    assert retries.transient_kind(error) == kind


def test_botocore_errors_are_classified_through_the_cause_s3fs_gives_them():
    from botocore.exceptions import ClientError, ReadTimeoutError

    def answer(status: int, code: str) -> OSError:
        translated = OSError(16, code)
        translated.__cause__ = ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                                           "GetObject")
        return translated

    assert retries.transient_kind(answer(503, "SlowDown")) == "SlowDown (HTTP 503)"
    assert retries.transient_kind(answer(500, "InternalError")) == "InternalError (HTTP 500)"
    assert retries.transient_kind(answer(503, "503")) == "HTTP 503"  # the answer to a HEAD request has no body
    assert retries.transient_kind(answer(403, "AccessDenied")) is None
    assert retries.transient_kind(answer(404, "NoSuchBucket")) is None
    assert retries.transient_kind(ReadTimeoutError(endpoint_url="http://x")) == "read timeout"


def test_the_back_off_doubles_with_a_jitter_fixed_by_the_url():
    delays = [retries.delay("s3://b/k", attempt, 0.5) for attempt in (1, 2, 3)]
    assert delays == [retries.delay("s3://b/k", attempt, 0.5) for attempt in (1, 2, 3)]
    assert all(0.5 * 2 ** (n - 1) * 0.5 <= value < 0.5 * 2 ** (n - 1) for n, value in enumerate(delays, 1))
    assert retries.delay("s3://b/other", 1, 0.5) != delays[0]


def test_deadlines_hold_for_the_block_that_chose_them(tmp_path, monkeypatch):
    """A command's storage settings end with it: a later command (or test) in the process starts from the
    defaults again, and a failed command does not leave its settings behind either."""
    defaults = retries.current()
    with retries.using(retries.Deadlines(timeout=1.0, retries=0, backoff=0.0)):
        assert retries.current() == retries.Deadlines(timeout=1.0, retries=0, backoff=0.0)
        assert retries.filesystem_options("s3")["config_kwargs"]["read_timeout"] == 1.0
    assert retries.current() == defaults
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lmprep.yaml").write_text("storage: {timeout: 2, retries: 1}\ndata: {sources: [{glob: 'none/*'}]}\n")
    assert lmprep("run", "prepare").exit_code == 2  # no files: it fails, under its own deadlines
    assert retries.current() == defaults


def test_a_remote_stream_retries_a_read_at_the_same_position():
    """fsspec moves a file's position only once bytes arrive, so a failed read is made again as it was."""

    class Flaky(io.BytesIO):
        failures = 1

        def read(self, size=-1):
            if self.failures:
                self.failures -= 1
                raise ConnectionResetError(104, "Connection reset by peer")
            return super().read(size)

    before = retries.retried()
    with io.BufferedReader(retries.RetryingReader("s3://b/k", Flaky(b"0123456789"))) as stream:
        stream.seek(3)
        assert stream.read(4) == b"3456"
    assert retries.since(before) == {"connection reset": 1}
