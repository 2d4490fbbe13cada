"""Running a stage's partition tasks: a local process pool, or a Dask cluster.

A task is a module-level function applied to one small, picklable item (a
partition's description); it reads its input from storage and writes its own
output files, and returns small metadata (counts, checksums, manifest
entries). The driver therefore moves no corpus text, and results come back in
item order, so outputs do not depend on the number or speed of workers.

Both backends offer the same two operations:

- :meth:`Tasks.map`: every item's result, in order; the progress (:mod:`pipeline.engine.progress`) counts
  finished partitions, and their bytes when the sizes are given.
  Given the items' sizes it starts the largest first, so that a large partition does not start last
  and leave the other workers idle while it runs (the results stay in item order);
- :meth:`Tasks.map_reduce`: the results folded pairwise as a tree (on a cluster the partial results
  move between workers, and only the final one reaches the driver).

A failing task raises in the driver with the partition and the worker named, carrying the traceback its
worker formatted; each finished task's partition, worker, seconds and result summary, and each failed
task's traceback, go to the stage's log (:mod:`pipeline.engine.stage_log`).

On Dask every wait has a deadline, ``executor.timeout``: connecting to the scheduler (its handshake
included), the first worker to join, and any stretch of a stage during which the scheduler has no
worker at all. Losing the scheduler fails the stage in one line, and so does a worker that cannot see
the directory the stage writes into (probed before any task runs).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, NamedTuple, Protocol, TypeVar

from pipeline.engine import dask_watch, locations, memory, retries, stage_log, storage
from pipeline.engine.pool import TreeFold, ctrl_c_held, kill_workers, process_pool, worker_count
from pipeline.engine.progress import Progress
from pipeline.errors import ConfigError, DataError, PipelineError

_T = TypeVar("_T")
_R = TypeVar("_R")
WATCH_SECONDS = 1.0  # on Dask: how often the driver, while no task finishes, checks that the cluster has workers
PROBE_PREFIX = ".lmprep-probe-"  # a file the driver writes for the Dask workers to find: is its output shared?


class ExecutorSettings(Protocol):
    """What the executor reads of its settings (the ``executor`` section of the config); declared here so
    that the engine depends on no schema above it."""

    kind: str
    address: str | None
    workers: int
    timeout: float


class Tasks:
    """Runs partition tasks on a :class:`concurrent.futures.Executor` (a process pool by default)."""

    def __init__(self, executor: Executor, *, in_flight: int = 8):
        self._executor, self._in_flight = executor, max(1, in_flight)

    def map(self, function: Callable[[_T], _R], items: Sequence[_T], *, labels: Sequence[str],
            sizes: Sequence[int] | None = None, desc: str = "", progress: bool = False) -> list[_R]:
        """``function`` applied to every item, results in item order; the largest ``sizes`` are started first."""
        futures: list[Future] = [None] * len(items)  # type: ignore[list-item]
        context = _TaskContext.here()
        for index in largest_first(sizes) if sizes is not None else range(len(items)):
            futures[index] = self._executor.submit(run_task, function, labels[index], items[index], context)
        self._wait(futures, labels, desc=desc, progress=progress, sizes=sizes)
        return [_received(future.result()) for future in futures]

    def map_reduce(self, function: Callable[[_T], _R], combine: Callable[[_R, _R], _R], items: Sequence[_T], *,
                   labels: Sequence[str], desc: str = "", progress: bool = False) -> _R:
        """``combine`` folded over the results as a binary tree whose shape depends on the item count alone.

        Results are folded in item order as they arrive, and no task starts more than ``in_flight`` items
        ahead of the fold, so the driver holds at most ``in_flight`` results and about log2(items) partial
        ones, however many items there are (the tokenizer's chunk counts of every part, held at once, grew
        with the corpus).
        """
        context = _TaskContext.here()
        fold, log = TreeFold(combine), stage_log.current()
        running: dict[int, Future] = {}
        arrived: dict[int, _Done] = {}
        submitted = folded = 0
        with self._stopping(lambda: [(labels[index], future) for index, future in running.items()]), \
                Progress(desc, total=len(items), unit="parts", enabled=progress, leave=False) as bar:
            while folded < len(items):
                for index in range(submitted, min(len(items), folded + self._in_flight)):
                    running[index] = self._executor.submit(run_task, function, labels[index], items[index], context)
                    submitted = index + 1
                finished, _ = wait(list(running.values()), return_when=FIRST_COMPLETED)
                for index in [index for index, future in running.items() if future in finished]:
                    arrived[index] = self._done(running[index])  # a failure raises while its future is tracked
                    del running[index]
                    _log_done(log, labels[index], arrived[index])
                    bar.update()
                while folded in arrived:
                    fold.add(_received(arrived.pop(folded)))
                    folded += 1
        return fold.result()

    def _wait(self, futures: Sequence[Future], labels: Sequence[str], *, desc: str, progress: bool,
              sizes: Sequence[int] | None = None) -> None:
        """Wait for every future, counting finished ones; on the first failure cancel the rest and raise it
        (:meth:`_stopping`)."""
        size_of = dict(zip(futures, sizes)) if sizes is not None else {}
        log = stage_log.current()
        with self._stopping(lambda: list(zip(labels, futures))), \
                Progress(desc, total=len(futures), unit="parts", enabled=progress, leave=False) as bar:
            for future, label in self._completed(futures, labels):
                _log_done(log, label, self._done(future))
                bar.update(nbytes=size_of.get(future, 0))

    @contextlib.contextmanager
    def _stopping(self, tracked: Callable[[], Sequence[tuple[str, Future]]]) -> Iterator[None]:
        """On a failure inside, cancel the tasks ``tracked()`` names (label and future) and raise it.

        On Ctrl-C the local workers are killed rather than awaited (what they write is thrown away), before
        the stage's staging output is deleted; Dask tasks end with the client.
        """
        log = stage_log.current()
        try:
            yield
        except BrokenProcessPool:
            pairs = tracked()
            self._stop([future for _, future in pairs])
            running = next((label for label, f in pairs if f.done() and f.exception()), "?")
            raise PipelineError(f"a worker process died while running partition {running} (killed, or out of "
                                "memory?); its previous output is left as it was, run it again (the tasks that "
                                "finished are not redone where the stage keeps their work)") from None
        except KeyboardInterrupt:  # nothing to wait for: cancelling here races the pool's own clean-up (Python 3.11)
            kill_workers(self._executor)
            raise
        except BaseException:
            pairs = tracked()
            self._stop([future for _, future in pairs])
            _log_failures(log, [future for _, future in pairs], [label for label, _ in pairs])
            raise

    def _done(self, future: Future) -> _Done:
        """A finished task's :class:`_Done` (its failure raises)."""
        return future.result()

    def _stop(self, futures: Sequence[Future]) -> None:
        """Cancel the tasks not started and wait for the running ones, which may still be writing files."""
        for future in futures:
            future.cancel()
        wait(futures)

    def _completed(self, futures: Sequence[Future], labels: Sequence[str]) -> Iterable[tuple[Future, str]]:
        """The futures as they finish, with their labels."""
        label_of = dict(zip(futures, labels))
        return ((future, label_of[future]) for future in as_completed(futures))


class DaskTasks(Tasks):
    """The same operations on a Dask ``Client``, reduced on the workers.

    A task whose worker dies is run again elsewhere by the scheduler (up to its
    ``distributed.scheduler.allowed-failures``); a task that raises is not retried. While no task
    finishes the driver watches the cluster: a scheduler without workers for ``timeout`` seconds, or a
    lost scheduler, fails the stage in one line instead of a wait without end.
    """

    def __init__(self, client: Any, *, address: str, timeout: float):
        super().__init__(client.get_executor(pure=False))
        self._client, self._address, self._timeout = client, address, timeout
        self._heartbeats = dask_watch.Heartbeats()

    def map_reduce(self, function, combine, items, *, labels, desc="", progress=False):
        client = self._client
        submit = functools.partial(client.submit, pure=False)
        context = _TaskContext.here()
        leaves = [submit(run_task, function, label, item, context) for label, item in zip(labels, items)]
        fold = TreeFold(functools.partial(submit, _combine_done, combine))
        for leaf in leaves:
            fold.add(leaf)
        root = fold.result()
        self._wait([_DaskStatus(leaf, report=submit(_report, leaf)) for leaf in leaves], labels, desc=desc,
                   progress=progress)
        return _received(root.result())

    def _done(self, future: Future) -> _Done:
        """A leaf of a map-reduce stays on its worker: its report (its result left out) comes instead."""
        future.result()
        return future.report.result() if isinstance(future, _DaskStatus) else future.result()

    def check_shared(self, directory: str | os.PathLike[str]) -> None:
        """Raise unless every worker sees ``directory`` as the driver does: a file written there by the
        driver must be found, with its content, by each worker. A worker with a directory of its own at
        that path would write its part of the output where the driver never looks."""
        directory = os.path.abspath(directory)
        os.makedirs(directory, exist_ok=True)
        token = uuid.uuid4().hex
        probe = os.path.join(directory, f"{PROBE_PREFIX}{token}")
        with open(probe, "w", encoding="ascii") as file:
            file.write(token)
        try:
            seen = self._client.run(_holds_token, probe, token, on_error="return")
        finally:
            os.unlink(probe)
        blind = sorted(worker for worker, answer in seen.items() if answer is not True)
        if blind:
            raise PipelineError(f"the Dask worker {blind[0]} cannot see {directory}, where this stage writes "
                                f"({len(blind)} of {len(seen)} workers); {storage.SHARED_STORAGE_HINT}")

    def _completed(self, futures: Sequence[Future], labels: Sequence[str]) -> Iterator[tuple[Future, str]]:
        """The futures as they finish, with their labels; a lost scheduler or a cluster without workers for
        ``timeout`` s raises."""
        label_of = dict(zip(futures, labels))
        pending, total, idle_since = set(futures), len(futures), None
        while pending:
            done, pending = wait(pending, timeout=WATCH_SECONDS, return_when=FIRST_COMPLETED)
            for future in done:
                if future.cancelled() or self._client.status != "running":
                    raise self._lost(unfinished=len(pending) + 1, total=total)
                yield future, label_of[future]
            idle_since = None if done or self._workers() else idle_since or time.monotonic()
            silent = None if done else self._heartbeats.silent_holder(self._client, self._timeout)
            if silent is not None:
                raise PipelineError(f"executor.address {self._address!r}: the Dask worker {silent} has sent no "
                                    f"heartbeat for {self._timeout:g} s (executor.timeout; stopped or frozen?) "
                                    f"while running this stage's tasks, with {len(pending)} of {total} partitions "
                                    "unfinished; resume or restart it and run again")
            if idle_since is not None and time.monotonic() - idle_since >= self._timeout:
                raise PipelineError(f"executor.address {self._address!r}: the Dask scheduler has had no worker for "
                                    f"{self._timeout:g} s (executor.timeout), with {len(pending)} of {total} "
                                    "partitions unfinished; start workers for it and run again")

    def _stop(self, futures: Sequence[Future]) -> None:
        """Cancel every task on the cluster, waiting at most ``timeout`` for them to end: a cluster that lost
        its workers or its scheduler cannot say when a running one will."""
        for future in futures:
            future.cancel()
        wait(futures, timeout=self._timeout)

    def _workers(self) -> int:
        """How many workers the scheduler has (a lost scheduler raises)."""
        if self._client.status != "running":
            raise self._lost(unfinished=None, total=None)
        with contextlib.suppress(TimeoutError, OSError):
            return len(self._client.nthreads(callback_timeout=self._timeout))
        raise self._lost(unfinished=None, total=None)

    def _lost(self, *, unfinished: int | None, total: int | None) -> PipelineError:
        counts = f", with {unfinished} of {total} partitions unfinished" if total is not None else ""
        return PipelineError(f"executor.address {self._address!r}: lost the Dask scheduler{counts}; the stage did "
                             "not finish, run it again once the scheduler is back")


def _holds_token(path: str, token: str) -> bool:
    """On a worker: whether ``path`` holds ``token`` (the driver's probe file)."""
    try:
        with open(path, encoding="ascii") as file:
            return file.read() == token
    except (OSError, ValueError):
        return False


def largest_first(sizes: Sequence[int]) -> list[int]:
    """Item indices by decreasing size, ties in item order: the longest-processing-time-first order.

    >>> largest_first([3, 9, 1, 9])
    [1, 3, 0, 2]
    """
    return sorted(range(len(sizes)), key=lambda index: -sizes[index])


class _TaskContext(NamedTuple):
    """What a task takes from its driver: the storage deadlines in force and the driver's process ID."""

    deadlines: retries.Deadlines
    driver: int

    @classmethod
    def here(cls) -> _TaskContext:
        return cls(retries.current(), os.getpid())


class _Done(NamedTuple):
    """A task's result, with the storage retries its worker made for it (none when it ran in the driver,
    which counted them already), and for the stage's log its worker, seconds and result's summary."""

    value: Any
    retried: dict[str, int]
    worker: str = ""
    seconds: float = 0.0
    summary: str = ""


def _log_done(log: stage_log.StageLog, label: str, done: _Done) -> None:
    log.task_done(label, worker=done.worker, seconds=done.seconds, summary=done.summary,
                  retried=sum(done.retried.values()))


def _log_failures(log: stage_log.StageLog, futures: Sequence[Future], labels: Sequence[str]) -> None:
    """Each task that raised (a failure that :func:`run_task` formatted), with its worker's traceback."""
    for future, label in zip(futures, labels):
        if future.done() and not future.cancelled():
            failure = future.exception()
            if failure is not None and hasattr(failure, stage_log.TRACEBACK_ATTRIBUTE):
                log.task_failed(label, failure)


def _report(done: _Done) -> _Done:
    """On a Dask worker: a leaf's :class:`_Done` without its result, for the stage's log."""
    return done._replace(value=None)


def _received(done: _Done) -> Any:
    """The result of a task, its worker's retries counted as the driver's."""
    retries.add_retried(done.retried)
    return done.value


def _combine_done(combine: Callable[[Any, Any], Any], left: _Done, right: _Done) -> _Done:
    """``combine`` of two task results, on a Dask worker, their retries added up."""
    return _Done(combine(left.value, right.value), dict(Counter(left.retried) + Counter(right.retried)))


def run_task(function: Callable[[_T], _R], label: str, item: _T, context: _TaskContext | None = None) -> _Done:
    """Run one task under the driver's storage deadlines; a failure names the partition and the worker
    (and keeps its type). On a worker, what the allocators hold free is then given back once it has grown
    (:func:`pipeline.engine.memory.release_after_task`), so that a worker's heap is that of its task.

    A failure the user can fix is raised anew outside the handler, so that it carries no chain of causes
    to the driver: once ``distributed`` is imported, tblib pickles an exception's whole chain, and a store
    client's error in it (aiohttp's headers) cannot be pickled, which killed the pool's worker instead.
    """
    context = context or _TaskContext.here()
    before, started = retries.retried(), time.monotonic()
    try:
        with retries.using(context.deadlines), _released_after(context):
            value = function(item)
    except PipelineError as exc:
        failure = stage_log.with_traceback(type(exc)(f"{exc} (partition {label}, on {worker_name()})"), exc)
    except FileNotFoundError as exc:
        failure = stage_log.with_traceback(DataError(f"partition {label}, on {worker_name()}: {exc.filename}: no "
                                                     f"such file; {storage.SHARED_STORAGE_HINT}"), exc)
    except Exception as exc:
        exc.add_note(f"partition {label}, on {worker_name()}")
        stage_log.with_traceback(exc, exc)
        raise
    else:
        return _Done(value, retries.since(before) if os.getpid() != context.driver else {}, worker_name(),
                     time.monotonic() - started, stage_log.describe_result(value))
    raise failure


@contextlib.contextmanager
def _released_after(context: _TaskContext) -> Iterator[None]:
    """Release the allocators' free memory when the task ends, unless it ran in the driver (a thread pool)."""
    try:
        yield
    finally:
        if os.getpid() != context.driver:
            memory.release_after_task()


def worker_name() -> str:
    """The Dask worker's address, or host and process ID (``distributed`` is imported only where it is
    already: on a Dask worker)."""
    if "distributed" in sys.modules:
        with contextlib.suppress(ValueError):
            from distributed import get_worker

            return f"worker {get_worker().address}"
    return f"{socket.gethostname()} pid {os.getpid()}"


_run_clusters: contextlib.ExitStack | None = None  # set while a run shares its LocalCluster (share_local_cluster)
_local_clients: dict[int, Any] = {}  # worker count -> the Client of the run's LocalCluster


@contextlib.contextmanager
def share_local_cluster() -> Iterator[None]:
    """Within this block, the stages that ask for ``executor.address: local`` share one Dask LocalCluster.

    Starting one takes seconds (each worker process imports lmprep), so a run of several partitioned
    stages starts it once, at the first stage that needs it, and closes it when the block ends, error
    or Ctrl-C included. Outside such a block each :func:`open_tasks` starts and closes its own. Workers
    keep no state between tasks that could change an output (the tokenizer they cache is checked by
    fingerprint, as on any long-lived cluster). A nested block shares the outer one's cluster.
    """
    global _run_clusters
    if _run_clusters is not None:
        yield
        return
    with contextlib.ExitStack() as stack:
        _run_clusters = stack
        try:
            yield
        finally:
            _run_clusters = None
            _local_clients.clear()


@contextlib.contextmanager
def open_tasks(settings: ExecutorSettings, *, workers: int = 0,
               writes: Sequence[str | os.PathLike[str]] = ()) -> Iterator[Tasks]:
    """The configured backend; ``workers`` (a stage's own setting) overrides ``settings.workers`` locally.

    ``writes``: the stage's outputs that its tasks write into; on Dask every worker must see the local
    ones' directories (:meth:`DaskTasks.check_shared`), which is checked before any task runs.
    """
    if settings.kind == "local":
        count = worker_count(workers or settings.workers)
        stage_log.note(f"executor: local process pool of {count} workers")
        with process_pool(count) as pool:
            yield Tasks(pool, in_flight=2 * count)
        return
    with _dask_client(settings) as client:
        address = client.scheduler.address if settings.address == "local" else settings.address
        tasks = DaskTasks(client, address=address, timeout=settings.timeout)
        stage_log.note(f"executor: Dask scheduler {address} with {len(client.nthreads())} workers")
        for output in writes:
            if not locations.is_url(output):
                tasks.check_shared(os.path.dirname(os.path.abspath(output)))
        yield tasks


@contextlib.contextmanager
def _dask_client(settings: ExecutorSettings) -> Iterator[Any]:
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ConfigError("executor.kind is 'dask' but Dask is not installed; pip install 'lmprep[dask]'") from None
    if settings.address is None:
        raise ConfigError("executor.kind is 'dask' but executor.address is null; set it to a scheduler's "
                          "tcp://host:8786 or to 'local' for a cluster on this machine")
    if settings.address == "local":
        count = worker_count(settings.workers)
        if _run_clusters is None:
            with _local_client(count) as client:
                yield client
            return
        if count not in _local_clients:
            _local_clients[count] = _run_clusters.enter_context(_local_client(count))
        yield _local_clients[count]
        return
    with _remote_client(settings.address, settings.timeout) as client:
        yield client


@contextlib.contextmanager
def _remote_client(address: str, timeout: float) -> Iterator[Any]:
    """A Client of the scheduler at ``address`` that has a worker, each wait bounded by ``timeout``.

    The Dask settings for TLS come from Dask's own config, as for any Dask client. distributed's log
    lines (a lost connection, a failed reconnection) are held back while the client is open: the
    stage's one error line says what happened.
    """
    from distributed import Client

    security = _security(address)
    _check_handshake(address, timeout, security)
    try:
        client = Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(f"executor.address {address!r}: no Dask scheduler answered within "
                          f"{timeout:g} s ({' '.join(str(exc).split())})") from None
    with _quiet("distributed"), client:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError:
            raise PipelineError(f"executor.address {address!r}: the Dask scheduler has no worker (none joined "
                                f"within {timeout:g} s, executor.timeout); start workers for it with "
                                f"dask worker {address}") from None
        yield client


def _security(address: str) -> Any:
    """The TLS settings of Dask's config (``distributed.comm.tls.*``), required for a ``tls://`` address."""
    from distributed.security import Security

    security = Security()
    if address.lower().startswith("tls://") and not security.tls_ca_file:
        raise ConfigError(f"executor.address {address!r} is a TLS address but Dask's config sets no "
                          "distributed.comm.tls.ca-file (and client.cert, client.key); set them in "
                          "~/.config/dask/distributed.yaml or as DASK_DISTRIBUTED__COMM__TLS__CA_FILE, ...")
    return security


def _check_handshake(address: str, timeout: float, security: Any) -> None:
    """Raise in one line unless a Dask scheduler at ``address`` completes distributed's handshake within
    ``timeout`` seconds. distributed waits for the handshake without a deadline (a server that accepts
    connections and never answers hung the driver for ever) and reads any first bytes as a frame's
    length (an HTTP server's answer raised MemoryError)."""
    import asyncio  # only here: its import is a tenth of a local run's start

    from distributed.comm import connect

    async def handshake() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **security.get_connection_args("client")),
                                      timeout)
        await comm.close()

    try:
        asyncio.run(handshake())
    except (OSError, TimeoutError) as exc:
        detail = " ".join(str(exc).split()) or "no answer"
        raise ConfigError(f"executor.address {address!r}: no Dask scheduler answered within {timeout:g} s "
                          f"(executor.timeout; {detail})") from None
    except (ValueError, TypeError, MemoryError, EOFError) as exc:
        raise ConfigError(f"executor.address {address!r}: what answers there is not a Dask scheduler (its reply "
                          f"does not follow Dask's protocol: {type(exc).__name__})") from None


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Hold back what a logger's handlers write, below CRITICAL, within the block; its child loggers (with
    levels of their own, as distributed configures them) write through the same handlers."""
    handlers = logging.getLogger(logger).handlers
    levels = [handler.level for handler in handlers]
    for handler in handlers:
        handler.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for handler, level in zip(handlers, levels):
            handler.setLevel(level)


@contextlib.contextmanager
def _local_client(workers: int) -> Iterator[Any]:
    """A Client of a new LocalCluster of ``workers`` single-threaded processes, both closed on exit.

    The scheduler serves HTTP even without a dashboard, on port 8787 unless told otherwise, and warns
    when that port is taken (by another cluster); a free port of this host only, and no dashboard.

    Ctrl-C is held back while the cluster starts (:func:`pipeline.engine.pool.ctrl_c_held`), so that a
    half-started cluster is never closed (distributed then failed an assertion, with a traceback); the held
    Ctrl-C is raised once the cluster runs, which closes it. A worker that dies as it starts is one line.
    """
    from distributed import Client, LocalCluster

    with ctrl_c_held() as release:
        try:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address="127.0.0.1:0", scheduler_kwargs={"dashboard": False},
                                   silence_logs=logging.ERROR)
        except RuntimeError as exc:  # LocalCluster closes what it started before raising
            raise PipelineError(f"executor.address 'local': a worker of the Dask LocalCluster died as it started "
                                f"({_causes(exc)}); run again, or run with executor.kind: local") from None
        with cluster, Client(cluster) as client:
            release()  # a Ctrl-C held back is raised here, and closes both
            yield client


def _causes(exc: BaseException) -> str:
    """``exc``'s message and its causes', on one line: distributed's "Nanny failed to start." says why in its
    cause."""
    texts = []
    while exc is not None:
        texts.append(" ".join(str(exc).split()).rstrip(".") or type(exc).__name__)
        exc = exc.__cause__
    return ": ".join(texts)


class _DaskStatus(Future):
    """The end of a Dask task as a running ``concurrent.futures.Future``, which settles when the task ends,
    fails or is cancelled.

    Running from the start: a pending Future cancelled outside an executor is never counted done by
    ``concurrent.futures.wait``, which then waits for ever (a failed task of a map-reduce on Dask hung the
    driver so). Cancelling one cancels the Dask task, and the future settles when the task is cancelled.
    ``report`` is the Dask future of the task's :func:`_report`, for the stage's log.
    """

    def __init__(self, task: Any, *, report: Any):
        super().__init__()
        self._task, self.report = task, report
        self.set_running_or_notify_cancel()
        task.add_done_callback(self._settle)

    def cancel(self) -> bool:
        """Cancel the Dask task (it then settles this future); this future itself stays running until it does."""
        with contextlib.suppress(Exception):  # a client without its scheduler: the task is lost already
            self.report.cancel()
            self._task.cancel()
        return False

    def _settle(self, done: Any) -> None:
        if self.done():
            return
        if done.status == "finished":
            self.set_result(None)
        elif done.status == "error":
            self.set_exception(done.exception())
        else:  # cancelled, or lost with the scheduler
            self.set_exception(PipelineError(f"a task was {done.status} before it finished"))
