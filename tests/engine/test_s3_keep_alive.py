"""S3 behind an endpoint that keeps connections alive, as real S3 does (moto's server closes each one).

A worker forked from the driver inherited the driver's event loop with its epoll instance, and the file
systems it inherited, collected, unregistered the driver's idle keep-alive connections from it: the
driver's next request then waited for ever in fsspec's ``sync()`` (``lmprep run tokenizer`` hung 4 of 4
times, writing tokenizer.json). The endpoint here is a small pass-through proxy in front of moto that
keeps every client connection open for the next request.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import put_corpus, write_store_config

pytest.importorskip("s3fs")

REPO = Path(__file__).resolve().parents[2]


def _read_until(sock, buffer: bytearray, marker: bytes) -> bytes | None:
    while marker not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    at = buffer.index(marker) + len(marker)
    head = bytes(buffer[:at])
    del buffer[:at]
    return head


def _read_exactly(sock, buffer: bytearray, size: int) -> bytes:
    while len(buffer) < size:
        data = sock.recv(65536)
        if not data:
            break
        buffer += data
    body = bytes(buffer[:size])
    del buffer[:size]
    return body


def _headers(head: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    pairs = [tuple(part.strip() for part in line.split(b":", 1)) for line in lines[1:] if b":" in line]
    return lines[0], pairs


def _request_body(sock, buffer: bytearray, headers) -> bytes:
    found = {name.lower(): value for name, value in headers}
    if found.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = bytearray()
        while True:
            line = _read_until(sock, buffer, b"\r\n")
            size = int(line.split(b";")[0], 16)
            chunk = _read_exactly(sock, buffer, size + 2)
            if size == 0:
                return bytes(body)
            body += chunk[:-2]
    return _read_exactly(sock, buffer, int(found.get(b"content-length", b"0")))


@contextlib.contextmanager
def keep_alive_proxy(upstream: str):
    """(endpoint): each request forwarded to ``upstream`` on a connection of its own, each answer sent back on
    the client's connection, which stays open for the next request."""
    host, port = upstream.rsplit("//", 1)[1].split(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    stop = threading.Event()

    def serve_client(client: socket.socket) -> None:
        with contextlib.suppress(OSError, ValueError), client:
            forward(client)

    def forward(client: socket.socket) -> None:
        buffer = bytearray()
        while not stop.is_set():
            head = _read_until(client, buffer, b"\r\n\r\n")
            if head is None:
                return
            request_line, headers = _headers(head)
            if any(n.lower() == b"expect" and v.lower() == b"100-continue" for n, v in headers):
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            body = _request_body(client, buffer, headers)
            kept = [(n, v) for n, v in headers if n.lower() not in (b"connection", b"transfer-encoding",
                                                                     b"content-length", b"expect")]
            kept += [(b"Content-Length", str(len(body)).encode()), (b"Connection", b"close")]
            with socket.create_connection((host, int(port))) as server:
                server.sendall(request_line + b"\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in kept)
                               + b"\r\n" + body)
                answer = bytearray()
                while data := server.recv(65536):
                    answer += data
            at = answer.index(b"\r\n\r\n") + 4
            status_line, answer_headers = _headers(bytes(answer[:at]))
            answer_body = bytes(answer[at:])
            out = [(n, v) for n, v in answer_headers if n.lower() not in (b"connection", b"keep-alive",
                                                                          b"transfer-encoding")]
            if not any(n.lower() == b"content-length" for n, _ in out):
                out.append((b"Content-Length", str(len(answer_body)).encode()))
            out += [(b"Connection", b"keep-alive"), (b"Keep-Alive", b"timeout=60")]
            status_line = status_line.replace(b"HTTP/1.0", b"HTTP/1.1")
            client.sendall(status_line + b"\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in out)
                           + b"\r\n" + answer_body)

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve_client, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def run_through(endpoint: str, project: Path, *args: str) -> subprocess.CompletedProcess:
    """``lmprep ARGS`` as its own process talking to ``endpoint``; a minute is far beyond what it takes."""
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, "PYTHONPATH": str(REPO), "AWS_ENDPOINT_URL": endpoint})


@pytest.mark.slow  # about 14 s: every stage through a proxy that holds connections open
def test_a_keep_alive_endpoint_never_hangs_a_run(s3, s3_server, tmp_path):
    put_corpus(s3)
    write_store_config(tmp_path, raw=s3.url("raw/*.jsonl.gz"), prepared=s3.url("prepared"),
                       tokenizer=s3.url("tok/tokenizer.json"), shards=s3.url("shards"))
    with keep_alive_proxy(s3_server[0]) as endpoint:
        for args in (("run", "encode"), ("run", "encode", "--force"), ("status",)):
            result = run_through(endpoint, tmp_path, *args)
            assert result.returncode == 0, result.stderr
            for noise in ("Traceback", "attached to a different loop", "Unclosed", "never retrieved"):
                assert noise not in result.stderr, result.stderr
    assert s3.fs.exists(s3.url("tok/tokenizer.json"))
