"""Faults on Dask: every wait has a deadline (``executor.timeout``) and each fault is one line, exit 2.

The cluster here is real: a ``dask scheduler`` process and ``dask worker`` processes (no nanny, so a
killed worker stays dead), killed by the tests; ``lmprep`` runs as a command, so its whole stderr is
checked (distributed's own log lines included).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

distributed = pytest.importorskip("distributed")
pytestmark = pytest.mark.slow  # about 50 s of clusters started and killed: the tier CI runs second

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 1.5  # executor.timeout in these tests
DEADLINE = 60.0  # for anything here to happen: a hang fails the test instead of blocking it

# makes prepare's tasks sleep on the worker it runs in, so that a fault lands while they run
# (run on the worker as exec(code, {}): without a namespace of its own, exec ran it in the globals of
# distributed's module that called it, whose ``time`` is the function, and a hang once found that there)
HANG_PREPARE = """\
import pipeline.data.prepare as prepare
def hang(*args):
    import time
    time.sleep(120)
hang.__module__, hang.__qualname__ = prepare._read_documents.__module__, prepare._read_documents.__qualname__
prepare._read_documents = hang
"""
# the same for the tokenizer's counting, a map-reduce
HANG_COUNTING = """\
import pipeline.data.chunk_counts as counting
def hang(pattern, location):
    import time
    time.sleep(120)
hang.__module__, hang.__qualname__ = counting.count_part.__module__, counting.count_part.__qualname__
counting.count_part = hang
"""
HANGING = {"prepare": HANG_PREPARE, "tokenizer": HANG_COUNTING}


@pytest.fixture
def project(tmp_path, tiny_project) -> Path:
    return tiny_project(tmp_path / "project", prepare={"partition_bytes": 200},
                        executor={"kind": "dask", "timeout": 1.5}, train=None)


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def lmprep(project: Path, *args: str, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                          env=environment(), capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen]]:
    """Processes started in the block, each killed (with its group) when it ends."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def start_scheduler(started: list[subprocess.Popen], tmp_path: Path) -> tuple[str, subprocess.Popen]:
    """A ``dask scheduler`` process on 127.0.0.1 and its address."""
    file = tmp_path / "scheduler.json"
    process = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
                               env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    started.append(process)
    wait_until(lambda: file.exists() and file.stat().st_size > 0, "the scheduler to start")
    return json.loads(file.read_text())["address"], process


def start_worker(started: list[subprocess.Popen], address: str, *, wrapper: list[str] = ()) -> subprocess.Popen:
    process = subprocess.Popen([*wrapper, sys.executable, "-m", "distributed.cli.dask_worker", address,
                                "--no-nanny", "--nthreads", "1", "--no-dashboard"],
                               env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    started.append(process)
    return process


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stderr.strip()


def address_option(address: str) -> list[str]:
    return ["--set", f"executor.address={address}"]


# --------------------------------------------------------------------------- connecting


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"],
                         ids=["silent", "http"])
def test_an_address_that_accepts_connections_but_is_no_scheduler_fails_within_the_timeout(project, answer):
    """distributed waits for its handshake without a deadline, and takes an HTTP reply for a frame length.
    Timed from the command's first connection: its start-up, slow on a loaded machine, is not what the
    timeout bounds."""
    server, held, accepted = socket.socket(), [], []
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = server.accept()
                held.append(connection)
                accepted.append(time.monotonic())
                if answer is not None:
                    connection.recv(65536)
                    connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        line = one_error_line(lmprep(project, "run", "prepare", *address_option(address)))
        finished = time.monotonic()
    finally:
        server.close()
        for connection in held:
            connection.close()
    if answer is None:
        assert line.startswith(f"error: executor.address '{address}': no Dask scheduler answered within 1.5 s"), line
    else:
        assert line.startswith(f"error: executor.address '{address}': what answers there is not a Dask scheduler"), line
    assert accepted, "the command never connected"
    assert finished - accepted[0] < TIMEOUT + 15  # the timeout, then the command's exit on a loaded machine


def test_a_scheduler_that_never_had_a_worker_fails_within_the_timeout(project, tmp_path):
    with processes() as started:
        address, _ = start_scheduler(started, tmp_path)
        line = one_error_line(lmprep(project, "run", "prepare", *address_option(address)))
    assert line == (f"error: executor.address '{address}': the Dask scheduler has no worker (none joined within "
                    f"1.5 s, executor.timeout); start workers for it with dask worker {address}")
    assert not (project / "out" / "prepared").exists()


def test_a_tls_address_without_tls_settings_is_refused_in_one_line(project, monkeypatch):
    for name in [name for name in os.environ if name.startswith("DASK_DISTRIBUTED__COMM__TLS")]:
        monkeypatch.delenv(name)
    line = one_error_line(lmprep(project, "run", "prepare", *address_option("tls://127.0.0.1:8786")))
    assert line.startswith("error: executor.address 'tls://127.0.0.1:8786' is a TLS address but Dask's config sets "
                           "no distributed.comm.tls.ca-file"), line


def test_a_tls_address_takes_its_certificates_from_dasks_config(project, tmp_path):
    """The settings a Dask client reads (here as DASK_* variables) let the stage run on a TLS-only cluster."""
    from distributed.security import Security

    security = Security.temporary()
    files = {}
    for name in ("tls_ca_file", "tls_client_cert", "tls_client_key"):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(getattr(security, name))
    settings = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": files["tls_ca_file"],
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": files["tls_client_cert"],
                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": files["tls_client_key"]}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tls://",
                                  host="127.0.0.1", security=security, dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        result = subprocess.run([sys.executable, "-m", "stages", "run", "prepare", "--config", "lmprep.yaml",
                                 *address_option(cluster.scheduler_address)], cwd=project, capture_output=True,
                                text=True, timeout=DEADLINE,
                                env={**environment(), **{key: str(value) for key, value in settings.items()}})
    assert result.returncode == 0, result.stderr
    assert (project / "out" / "prepared" / "stats.json").exists()


# --------------------------------------------------------------------------- faults while a stage runs


@contextlib.contextmanager
def stage_running_on_a_worker(project: Path, tmp_path: Path,
                              stage: str = "prepare") -> Iterator[tuple[subprocess.Popen, dict]]:
    """``lmprep run STAGE`` on a real scheduler and worker, its tasks hanging on the worker: yields the
    command (running) and the cluster's processes and address (``scheduler``, ``worker``, ``address``)."""
    if stage != "prepare":
        assert lmprep(project, "run", "prepare", "--executor", "local").returncode == 0
    with processes() as started:
        address, scheduler = start_scheduler(started, tmp_path)
        worker = start_worker(started, address)
        with distributed.Client(address, timeout=DEADLINE) as client:
            client.wait_for_workers(1, timeout=DEADLINE)
            client.run(exec, HANGING[stage], {})
            command = subprocess.Popen([sys.executable, "-m", "stages", "run", stage, "--config", "lmprep.yaml",
                                        *address_option(address)], cwd=project, env=environment(),
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
            started.append(command)
            wait_until(lambda: any(client.processing().values()), "a task to start")
        yield command, {"scheduler": scheduler, "worker": worker, "address": address}


def finished(command: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = command.communicate(timeout=DEADLINE)
    return subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)


@pytest.mark.parametrize("stage", ["prepare", "tokenizer"])  # a map, and a map-reduce
def test_losing_every_worker_mid_stage_fails_within_the_timeout(project, tmp_path, stage):
    with stage_running_on_a_worker(project, tmp_path, stage) as (command, cluster):
        cluster["worker"].kill()
        killed = time.monotonic()
        line = one_error_line(finished(command))
        elapsed = time.monotonic() - killed
    address = cluster["address"]
    assert re.fullmatch(rf"error: executor\.address '{re.escape(address)}': the Dask scheduler has had no worker "
                        r"for 1\.5 s \(executor\.timeout\), with \d+ of \d+ partitions unfinished; start workers "
                        r"for it and run again", line), line
    assert elapsed < TIMEOUT + 10
    assert not (project / "out" / ("prepared" if stage == "prepare" else "tokenizer.json")).exists()


def test_losing_the_scheduler_mid_stage_is_one_line_without_a_traceback(project, tmp_path):
    with stage_running_on_a_worker(project, tmp_path) as (command, cluster):
        cluster["scheduler"].kill()
        line = one_error_line(finished(command))
    assert re.fullmatch(rf"error: executor\.address '{re.escape(cluster['address'])}': lost the Dask scheduler, "
                        r"with \d+ of \d+ partitions unfinished; the stage did not finish, run it again once the "
                        r"scheduler is back", line), line
    assert not (project / "out" / "prepared").exists()


def _private_mounts_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _private_mounts_work(), reason="needs unshare -rm (a private mount namespace)")
def test_a_worker_that_cannot_see_the_output_directory_fails_before_any_task(project, tmp_path):
    """The worker runs in its own mount namespace with an empty file system over the project's output
    directory (it sees the raw files): the same path, another directory, as on a machine that mounts its
    own disk where the driver's outputs go."""
    (project / "out").mkdir()
    hidden = ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs none "{project / "out"}" && exec "$0" "$@"']
    with processes() as started:
        address, _ = start_scheduler(started, tmp_path)
        start_worker(started, address, wrapper=hidden)
        line = one_error_line(lmprep(project, "run", "prepare", *address_option(address)))
    assert re.fullmatch(rf"error: the Dask worker tcp://127\.0\.0\.1:\d+ cannot see {re.escape(str(project / 'out'))}, "
                        r"where this stage writes \(1 of 1 workers\); every worker must see the input and output "
                        r"paths .*", line), line
    assert not list((project / "out").iterdir())  # the probe is gone, nothing was written


# --------------------------------------------------------------------------- a LocalCluster's start


def start_up_preload(tmp_path: Path, code: str) -> dict[str, str]:
    """The environment of a command whose LocalCluster workers run ``code`` as they start (a Dask preload)."""
    preload = tmp_path / "preload.py"
    preload.write_text(code)
    return {**environment(), "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}


def held_until(release: Path) -> str:
    """Preload code that holds a worker's start until ``release`` exists (``DEADLINE`` at most): a test's Ctrl-C
    lands while the workers start, and they go on once it was sent (a fixed sleep kept the driver waiting for
    them for seconds after it)."""
    return (f"import os, time\ndeadline = time.monotonic() + {DEADLINE}\n"
            f"while not os.path.exists({str(release)!r}) and time.monotonic() < deadline:\n    time.sleep(0.02)\n")


def test_a_local_cluster_worker_that_dies_as_it_starts_is_one_line(project, tmp_path):
    """It used to be distributed's "Nanny failed to start." traceback, exit 1."""
    result = subprocess.run([sys.executable, "-m", "stages", "run", "prepare", "--config", "lmprep.yaml",
                             *address_option("local")], cwd=project, capture_output=True, text=True,
                            env=start_up_preload(tmp_path, "import os\nos._exit(1)\n"), timeout=DEADLINE)
    line = one_error_line(result)
    assert line.startswith("error: executor.address 'local': a worker of the Dask LocalCluster died as it started "
                           "(Nanny failed to start"), line
    assert not (project / "out" / "prepared").exists()


def test_ctrl_c_while_the_local_cluster_starts_is_the_interrupted_line_and_130(project, tmp_path):
    """The driver's Ctrl-C used to land inside distributed's start-up, which then closed a half-started cluster
    and failed an assertion (a traceback) as the interpreter exited."""
    release = tmp_path / "release"
    command = subprocess.Popen([sys.executable, "-m", "stages", "run", "prepare", "--config", "lmprep.yaml",
                                *address_option("local")], cwd=project, stderr=subprocess.PIPE, text=True,
                               env=start_up_preload(tmp_path, held_until(release)))
    try:
        wait_until(lambda: subprocess.run(["pgrep", "-P", str(command.pid)], capture_output=True).stdout,
                   "the cluster's first worker process")
        time.sleep(0.5)
        command.send_signal(signal.SIGINT)
        release.touch()
        _, stderr = command.communicate(timeout=DEADLINE)
    finally:
        release.touch()
        command.kill()
    assert command.returncode == 130, stderr
    assert stderr == "interrupted; the previous outputs are intact\n"


def worker_processes(pid: int) -> list[str]:
    """The processes multiprocessing spawned from ``pid`` for its LocalCluster (not its resource tracker)."""
    return subprocess.run(["pgrep", "-P", str(pid), "-f", "spawn_main"], capture_output=True, text=True).stdout.split()


def ignores_sigint(pid: str) -> bool:
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid}/status") as status:
            ignored = next(line for line in status if line.startswith("SigIgn:")).split()[1]
        return bool(int(ignored, 16) & 1 << (signal.SIGINT - 1))
    return False


@pytest.mark.parametrize("when", ["as the workers import", "as the workers start"])
def test_ctrl_c_at_the_terminal_during_a_local_cluster_is_the_driver_line_alone(project, tmp_path, when):
    """A terminal's Ctrl-C reaches the workers too (the driver's process group): each printed a traceback of its
    own (asyncio's KeyboardInterrupt, or one from within an import), 50 to 67 lines before the driver's."""
    (tmp_path / "started").mkdir()
    release = tmp_path / "release"
    preload = f"import os\nopen(os.path.join({str(tmp_path / 'started')!r}, str(os.getpid())), 'w')\n" \
              + held_until(release)
    lmprep_command = Path(sys.executable).with_name("lmprep")  # python -m stages: see stages/__main__.py
    command = subprocess.Popen([lmprep_command, "run", "prepare", "--config", "lmprep.yaml",
                                *address_option("local"), "--set", "executor.workers=2"], cwd=project,
                               stderr=subprocess.PIPE, text=True, env=start_up_preload(tmp_path, preload),
                               start_new_session=True,  # its own process group, as a terminal's foreground job
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        if when == "as the workers import":  # distributed, once lmprep's script has run (the one moment not held)
            wait_until(lambda: sum(map(ignores_sigint, worker_processes(command.pid))) == 2,
                       "two worker processes that ignore SIGINT")
        else:
            wait_until(lambda: len(os.listdir(tmp_path / "started")) == 2, "both workers' preloads")
        os.killpg(command.pid, signal.SIGINT)
        release.touch()
        _, stderr = command.communicate(timeout=DEADLINE)
    finally:
        release.touch()
        command.kill()
    assert command.returncode == 130, stderr
    assert stderr == "interrupted; the previous outputs are intact\n"


def test_a_stopped_worker_fails_the_stage_within_the_timeout(project, tmp_path):
    """A worker stopped with SIGSTOP keeps its connection open and stays listed until distributed's worker-ttl
    (5 minutes) while its tasks wait: the only one stopped took 586 s to report. It sends no heartbeat, and
    that is what the driver watches."""
    with stage_running_on_a_worker(project, tmp_path) as (command, cluster):
        cluster["worker"].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            line = one_error_line(finished(command))
        finally:
            cluster["worker"].send_signal(signal.SIGCONT)
        elapsed = time.monotonic() - stopped
    assert re.fullmatch(rf"error: executor\.address '{re.escape(cluster['address'])}': the Dask worker \S+ has sent "
                        r"no heartbeat for 1\.5 s \(executor\.timeout; stopped or frozen\?\) while running this "
                        r"stage's tasks, with \d+ of \d+ partitions unfinished; resume or restart it and run again",
                        line), line
    assert elapsed < TIMEOUT + 15
    assert not (project / "out" / "prepared").exists()
