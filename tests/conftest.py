"""Shared test fixtures."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import strategies as st

# The test files that take longest (summed durations of the fast tier, measured), run first: `make test` gives
# each file to one xdist worker (--dist loadfile), and a long file started last would leave the other workers
# idle at the end of the run. The last two are the slow tier's.
LONGEST_FIRST = ("test_docs.py", "test_odd_outputs.py", "test_dask_faults.py", "test_train_loop.py",
                 "test_s3_faults.py", "test_s3.py", "test_s3_exports.py", "test_s3_encode_resume.py",
                 "test_report_browser.py", "test_s3_commits.py", "test_cli_pipeline.py", "test_cli_data.py",
                 "test_dask.py", "test_checkpoint.py", "test_cli_model.py", "test_prepare_resume.py",
                 "test_benchmarks.py", "test_make_flow.py")


def pytest_configure(config):
    """xdist (3.5 on) hands out --dist loadfile's files by their number of tests unless told not to, which put
    files of a few long tests (test_read_only_project.py, test_s3_encode_resume.py) last: the order of
    :func:`pytest_collection_modifyitems` is kept instead."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest in collection order


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, tmp_path_factory, monkeypatch):
    """Every test runs in its own empty ``tmp_path``, so none depends on the current directory or on what a
    previous ``make`` left in the checkout (``configs/default.yaml``, ``data/``, ``checkpoints/``); and a
    command's search for the project's config never leaves the session's temporary directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LMPREP_CEILING_DIRECTORIES", str(tmp_path_factory.getbasetemp()))


# --- model and checkpoint tests: a minimal stand-in for the tokenizer the guard reads


@dataclass
class FakeTokenizer:
    """The attributes the checkpoint guard and the trainer read, for a byte-level BPE."""

    merges: list[tuple[int, int]]
    kind: str = "byte"
    pattern: str = ""
    special_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges) + len(self.special_tokens)

    @property
    def fingerprint(self) -> str:
        from pipeline.engine.hashing import canonical_hash

        return canonical_hash([self.kind, self.pattern, self.special_tokens, self.merges])

    def token_bytes(self, id: int) -> bytes:
        if id < 256:
            return bytes([id])
        a, b = self.merges[id - 256]
        return self.token_bytes(a) + self.token_bytes(b)


def resave_checkpoint(path, *, metadata=None, tensors=None, target=None) -> None:
    """Re-save a checkpoint file with ``metadata`` applied to its metadata (a function of the JSON document
    without its checksums, returning the new one, or raw text to store as it is) and ``tensors`` to its
    tensors (a function editing the dict in place), with checksums that match: a file as a writer that
    got it wrong would make it."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from pipeline.model import integrity

    with safe_open(str(path), framework="pt") as handle:
        loaded = {name: handle.get_tensor(name) for name in handle.keys()}
        document = json.loads(handle.metadata()["lmprep"])
    original = document.pop(integrity.CHECKSUMS)
    if tensors is not None:
        tensors(loaded)
    edited = metadata(document) if callable(metadata) else metadata if metadata is not None else document
    try:
        text = edited if isinstance(edited, str) else integrity.seal(edited, loaded)
    except ValueError:  # NaN or infinity, which no checksum covers: stored with the checksums of the original
        text = json.dumps({**edited, "checksums": original})
    save_file(loaded, str(target or path), metadata={"lmprep": text})
    if target is not None and Path(target).parent != Path(path).parent:  # the files its checksums cover go with it
        for name in edited.get(integrity.COMPANIONS, {}) if isinstance(edited, dict) else ():
            shutil.copyfile(Path(path).with_name(name), Path(target).with_name(name))


@pytest.fixture
def fake_tokenizer():
    """Factory: ``fake_tokenizer(merges, kind=..., special_tokens=...)``."""
    return FakeTokenizer


# --- tokenizer tests: tiny tokenizers trained once per session on a small multilingual corpus

TOKENIZER_CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!\n"
    "It's 2024 and we're testing 12345 numbers, don't we? I'll see, you've seen.\n",
    "Les élèves étudient; les élèves écrivent; les enseignantes étudient à l'école.\n"
    "Déjà, l’élève québécois écrit à l’hôpital. Über die Brücke gehen Mädchen und Jungen.\n",
    "日本語のテキストも少し入れます。東京は日本の首都です。中文也可以。한국어 문장도 있습니다.\n",
    "Emoji 😀😀 and flags 🇫🇷, combining marks: e\u0301 a\u0308 n\u0303, tabs\tand\r\nwindows lines.\n",
    "def encode(text: str) -> list[int]:\n    return [ord(c) for c in text]  # code\n\n\n    \n",
    "low lower lowest newer newest wider widest " * 3 + "\n",
]
SPECIAL = "<|endoftext|>"


@pytest.fixture(scope="session")
def tokenizer_corpus() -> list[str]:
    return list(TOKENIZER_CORPUS)


@pytest.fixture(scope="session")
def byte_tokenizer():
    """Byte kind, GPT-4 pattern, one special token, 400 IDs."""
    from pipeline.tokenizer import Tokenizer

    return Tokenizer.train(TOKENIZER_CORPUS * 2, vocab_size=400, special_tokens=[SPECIAL], workers=1)


@pytest.fixture(scope="session")
def char_tokenizer():
    """Char kind, no pre-split, newline never merged, one special token."""
    from pipeline.tokenizer import Tokenizer

    return Tokenizer.train(TOKENIZER_CORPUS * 2, vocab_size=300, kind="char", special_tokens=[SPECIAL], workers=1)


@pytest.fixture(scope="session")
def trained_tokenizers(byte_tokenizer, char_tokenizer):
    """Every supported kind/pattern combination (for parity tests)."""
    from pipeline.tokenizer import Tokenizer

    extra = [
        Tokenizer.train(TOKENIZER_CORPUS, vocab_size=350, pattern=pattern, kind=kind, workers=1,
                        special_tokens=[SPECIAL, "<|pad|>"])
        for kind, pattern in [("byte", "gpt2"), ("byte", "none"), ("byte", r"\w+"), ("char", "gpt4")]
    ]
    return [byte_tokenizer, char_tokenizer, *extra]


# --- native tokenizer tests: random text for the pre-tokenizer and the encoders

# Pieces the patterns treat specially, mixed with any character at all (every general category,
# surrogates included): contractions in any case, the long s that (?i:s) matches, CR/LF runs,
# white space of every kind, digits of several scripts, combining marks, letters of several scripts.
SPLIT_PIECES = [
    "'s", "'S", "'t", "'T", "'d", "'D", "'m", "'M", "'ll", "'LL", "'lL", "'ve", "'VE", "'vE", "'re", "'RE", "'Re",
    "'\u017f", "'", "''", "\r", "\n", "\r\n", "\n\r", " \n", "\t", " ", "  ", "\u00a0", "\u3000", "\u2028", "\u0085",
    "\x0b", "\x0c", "\x1c", "\u200b", "7", "123", "\u0663", "\u096b", "\u2167", "\u00bd", "\uff11", "\U0001d7ce",
    "e\u0301", "a\u0308", "\u0301", "é", "ß", "Ω", "ж", "日本", "한", "ا", "😀", "🇫🇷", ".", ",", "!?", "-", "_",
    "\ud800", "\udfff", "\x00", "x", "X",
]
ANY_CHARACTER = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
UNICODE_TEXTS = st.lists(st.one_of(st.sampled_from(SPLIT_PIECES), ANY_CHARACTER), max_size=60).map("".join)


def needs_native_core():
    """A skip mark for tests of the native core itself: it is off when not built or with LMPREP_BACKEND=python."""
    from pipeline.tokenizer import backend

    return pytest.mark.skipif(backend.native is None,
                              reason="the native tokenizer core is off (not built, or LMPREP_BACKEND=python)")


class StartOrder(ThreadPoolExecutor):
    """One thread, so partition tasks start in submission order; records each task's label as submitted."""

    def __init__(self) -> None:
        super().__init__(1)
        self.labels: list[str] = []

    def submit(self, function, /, *args, **kwargs):
        self.labels.append(args[1])  # run_task(function, label, item)
        return super().submit(function, *args, **kwargs)


@pytest.fixture
def start_order():
    """An executor for ``Tasks`` that records the order in which the tasks start."""
    with StartOrder() as executor:
        yield executor


# --- CLI tests: a tiny project in a temp directory


def running(pid: int) -> bool:
    """Whether process ``pid`` runs; a zombie (dead, not yet reaped by whoever adopted it) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def make_project(root: Path, config: str) -> Path:
    """A project in ``root``: 40 question/answer documents in ``raw/a.txt`` and ``config`` as ``lmprep.yaml``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "raw").mkdir()
    (root / "raw" / "a.txt").write_text("\n\n".join(f"Q: what is {i}?\nA: it is {i}." for i in range(40)))
    (root / "lmprep.yaml").write_text(config)
    return root


# The tiny project's config: every stage on the 40 documents of ``make_project``, in well under a second each.
TINY_CONFIG = {
    "data": {"sources": [{"glob": "raw/*.txt", "separator": "blank_line"}]},
    "prepare": {"output_dir": "out/prepared", "val_fraction": 0.2},
    "tokenizer": {"output": "out/tokenizer.json", "vocab_size": 300},
    "encode": {"output_dir": "out/shards"},
    "train": {"output_dir": "out/ckpt", "steps": 2, "eval_every": 1, "eval_batches": 1, "batch_size": 2,
              "context": 8, "dim": 8},
    "state_dir": "state",
}


# ``data=`` for a tiny project whose raw files hold one document a line
ONE_A_LINE = {"sources": [{"glob": "raw/*.txt", "separator": "line"}]}


def tiny_config(**sections) -> str:
    """The tiny project's ``lmprep.yaml``, one line per section: a keyword naming a section updates its keys
    (a dict: ``tokenizer={"workers": 1}``, a key given ``None`` left out), replaces it (any other value) or
    leaves it out (``None``)."""
    import yaml

    config = {key: dict(value) if isinstance(value, dict) else value for key, value in TINY_CONFIG.items()}
    for key, value in sections.items():
        if value is None:
            config.pop(key, None)
        elif isinstance(value, dict):
            section = config.setdefault(key, {})
            section.update(value)
            for name in [name for name, given in value.items() if given is None]:
                del section[name]
        else:
            config[key] = value
    if "state_dir" in config:  # last, as in the shipped configs
        config["state_dir"] = config.pop("state_dir")
    return "".join(f"{key}: {yaml.safe_dump(value, default_flow_style=True, width=1 << 16, sort_keys=False)}"
                   .removesuffix("...\n") for key, value in config.items())


@pytest.fixture
def tiny_project(tmp_path):
    """``tiny_project(root=tmp_path, **sections)``: :func:`make_project` in ``root`` with :func:`tiny_config`
    of ``sections``; returns ``root``. Tests run in ``tmp_path``, so the default is the current directory."""

    def make(root: Path | None = None, **sections) -> Path:
        return make_project(root or tmp_path, tiny_config(**sections))

    return make


# --- object storage: a real S3 API (moto's server on 127.0.0.1) with s3fs as the client

_BUCKETS = (f"bucket-{n}" for n in itertools.count())


class RequestCounter:
    """WSGI middleware counting the S3 operations the server answers, by (method, kind)."""

    def __init__(self, app):
        self.app = app
        self.counts: Counter[tuple[str, str]] = Counter()
        self.largest_body = 0  # bytes: the largest request body the server was sent (an upload's PUT or part)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "").strip("/")
        kind = "object" if "/" in path else "bucket"
        self.counts[(environ["REQUEST_METHOD"], kind)] += 1
        self.largest_body = max(self.largest_body, int(environ.get("CONTENT_LENGTH") or 0))
        return self.app(environ, start_response)

    @property
    def object_reads(self) -> int:
        """GET requests for an object (GetObject): reading a body; listings are GETs of the bucket."""
        return self.counts[("GET", "object")]


@pytest.fixture(scope="session")
def s3_server():
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    server._server.app = counter = RequestCounter(server._server.app)
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}", counter
    server.stop()


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket on the local server; credentials and endpoint only in the environment, as AWS tools read them."""
    with fresh_bucket(s3_server, monkeypatch) as store:
        yield store


@contextlib.contextmanager
def fresh_bucket(s3_server, monkeypatch):
    """:func:`s3` for fixtures of a wider scope, which give their own ``pytest.MonkeyPatch.context()``."""
    s3fs = pytest.importorskip("s3fs")

    endpoint, counter = s3_server
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(use_listings_cache=False)  # the tests observe the store as it is, never a cached listing
    bucket = next(_BUCKETS)
    fs.mkdir(bucket)
    yield Store(fs, bucket, counter)
    s3fs.S3FileSystem.clear_instance_cache()


class Store:
    def __init__(self, fs, bucket: str, counter: RequestCounter):
        self.fs, self.bucket, self.counter = fs, bucket, counter

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def put(self, key: str, data: bytes) -> str:
        self.fs.pipe_file(self.url(key), data)
        return self.url(key)


def gz(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), mtime=0)


def jsonl(texts) -> str:
    return "".join(json.dumps({"text": text}) + "\n" for text in texts)


def write_store_config(root: Path, **paths: str) -> None:
    """``root/lmprep.yaml`` for a tiny project reading ``raw`` (a glob); any output may be given as a URL
    (``prepared``, ``tokenizer``, ``shards``, ``ckpt``, ``export``, ``stats``; the last two only when given)."""
    optional = "".join(f"{stage}: {{output_dir: {paths[stage]}}}\n" for stage in ("export", "stats") if stage in paths)
    (root / "lmprep.yaml").write_text(f"""\
data:
  sources:
    - {{glob: "{paths['raw']}"}}
prepare: {{output_dir: {paths.get('prepared', 'out/prepared')}, val_fraction: 0.2, partition_bytes: 2000}}
tokenizer: {{output: {paths.get('tokenizer', 'out/tokenizer.json')}, vocab_size: 300}}
encode: {{output_dir: {paths.get('shards', 'out/shards')}, shard_tokens: 500}}
train: {{output_dir: {paths.get('ckpt', 'out/ckpt')}, steps: 2, eval_every: 1, eval_batches: 1, batch_size: 2,
        context: 8, dim: 8}}
{optional}state_dir: state
""")


@pytest.fixture
def run():
    """``run(*args)``: ``lmprep ARGS`` through click's runner, exceptions raised (a traceback is a failure)."""
    from stages.cli.main import cli

    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return invoke


def lmprep_in_cwd(*args: str):
    """``lmprep ARGS --config lmprep.yaml`` through click's runner, in the current directory."""
    from stages.cli.main import cli

    return CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])


def put_corpus(s3, files: int = 3, documents: int = 30) -> None:
    for index in range(files):
        texts = [f"Q: what is {index}.{i}?\nA: it is {i * index} and {i + index}." for i in range(documents)]
        s3.put(f"raw/part-{index}.jsonl.gz", gz(jsonl(texts)))


def reference_ids(tokenizer, text: str) -> list[int]:
    """The IDs the reference BPE (``pipeline.tokenizer.reference``) gives ``text``, for a tokenizer in the
    trainer's ID layout."""
    from pipeline.tokenizer import reference

    return reference.encode(text, kind=tokenizer.kind, pattern=tokenizer.pattern, merges=tokenizer.merges,
                            alphabet=tokenizer.alphabet)


# --- a real ``lmprep`` process, stopped inside a task to be killed there

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 10.0  # seconds for anything a killed run must do; a hang fails the test instead of blocking it

HANG_WRAPPER = """\
import importlib, os, sys, time

module = importlib.import_module({module!r})

real = getattr(module, {name!r})

def hang(*args):
    if not ({condition}):  # the other tasks run as usual
        return real(*args)
    print(f"task in pid {{os.getpid()}}", flush=True)
    time.sleep(120)

hang.__module__, hang.__qualname__ = {module!r}, {name!r}  # pickled by that name, found patched in the worker
setattr(module, {name!r}, hang)
sys.argv = ["lmprep", *sys.argv[1:]]
from stages.__main__ import main
main()
"""


def lmprep_environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def lmprep_process(project: Path, *args: str) -> subprocess.CompletedProcess:
    """``lmprep ARGS --config lmprep.yaml`` as a process of its own in ``project``."""
    return subprocess.run([sys.executable, "-m", "stages", *args, "--config", "lmprep.yaml"], cwd=project,
                          env=lmprep_environment(), capture_output=True, text=True, timeout=120)


def files_under(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def workers_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wait_until(condition, what: str) -> float:
    """Seconds until ``condition()`` held; fails after DEADLINE."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < DEADLINE, f"{what} after {DEADLINE:g} s"
        time.sleep(0.05)
    return time.monotonic() - start


class HangingRun:
    """``lmprep ARGS`` in its own session, stopped inside the task function ``module.name`` when called with
    ``args`` for which the Python expression ``condition`` holds (the other calls run as usual)."""

    def __init__(self, project: Path, module: str, name: str, *args: str, condition: str = "True"):
        (project / "hang.py").write_text(HANG_WRAPPER.format(module=module, name=name, condition=condition))
        self.outputs_before = files_under(project / "out") if (project / "out").exists() else {}
        self.process = subprocess.Popen([sys.executable, "hang.py", *args, "--config", "lmprep.yaml"],
                                        cwd=project, env=lmprep_environment(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.output = self._read_until_a_task_runs()
        self.workers = workers_of(self.process.pid)

    def _read_until_a_task_runs(self) -> list[str]:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("task in pid"):
            line = self.process.stdout.readline()
            assert line, f"the run ended before a task started: {lines} {self.process.stderr.read()}"
            lines.append(line)
        return lines

    def kill(self) -> None:
        """SIGKILL to the driver alone, as ``kill -9`` does; its workers die with it."""
        self.process.send_signal(signal.SIGKILL)
        assert self.process.wait(DEADLINE) == -signal.SIGKILL

    def kill_group(self) -> None:
        """Whatever is left of the run, its workers included (they stay in its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(DEADLINE)
        self.process.stdout.close()
        self.process.stderr.close()


@pytest.fixture
def hanging_runs():
    """``hanging_runs(project, module, name, *args, condition=...)``: a :class:`HangingRun`, killed at the end."""
    runs: list[HangingRun] = []

    def start(*args, **options) -> HangingRun:
        runs.append(HangingRun(*args, **options))
        return runs[-1]

    yield start
    for run in runs:
        run.kill_group()
