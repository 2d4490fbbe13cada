"""Encoding throughput of lmprep's native core beside every peer, in one run (MB of UTF-8 per second).

Three corpora, built here from what is installed on the machine (no network), each with every
repeated line dropped so that a chunk cache helps as little as it does on web text:

- ``english``: the docstrings of the Python standard library;
- ``multilingual``: the translated messages of the gettext catalogs (``*.mo``) under /usr/share, in
  many scripts (the script mix and the number of scripts are printed);
- ``code``: the Python standard library's sources.

A byte tokenizer (GPT-4 pattern, ``<|endoftext|>`` as its one special token) is trained on each corpus
once and kept in ``benchmarks/.data``. The engines, all from that one tokenizer: lmprep on the native
core and on the Python path; tiktoken and riptoken built from its exported ranks and pattern; HF
``tokenizers``, fastokens and gigatok loading its ``tokenizer.json`` (gigatok a copy whose GPT-4 split is
spelled as HF's files spell it, the one form it recognises). Every engine's IDs are checked identical to
tiktoken's.

Each measurement (engine, API, threads) runs in a fresh process, so that its peak RSS is its own and the
thread count of the Rust peers (their global rayon pool, sized by ``RAYON_NUM_THREADS``) can be set:

- ``flat``: the encode stage's path, every ID of the corpus in one ``uint32`` array
  (``encode_batch_flat``; the peers' batch call, then numpy);
- ``list``: one list of IDs per document (``encode_batch``; tiktoken ``encode_ordinary_batch``,
  riptoken ``encode_ordinary_batch``, HF ``encode_batch_fast`` and ``.ids``, fastokens ``encode_batch`` and
  ``.ids``, gigatok ``encode_batch``, whose lists are an awkward array: its flat row is its content);
- 1 and 2 threads (lmprep: ``threads=``; tiktoken: ``num_threads=``; riptoken, HF, gigatok and fastokens:
  rayon, and ``FASTOKENS_BPE_THREADS``).

Each is timed in ``--repeats`` rounds, every engine in turn within a round (so that a busy spell
hits them alike), each time in a fresh process, which first encodes a few texts with a throwaway
engine (so that what a process does once, such as starting a thread pool, is not timed), then from a
cold start (a freshly loaded tokenizer: lmprep's cache holds only the tokens' own texts, as gigatok's
does; HF's is empty); best of the rounds, in wall-clock seconds and in CPU seconds (all threads of the
process, which a busy machine disturbs less). ``× gigatok`` is the ratio of CPU seconds to gigatok's
with the same API and threads, the fastest peer's, best against best; beside it the same ratio round by
round (each pair measured in one round), its median and range, and so for 1 → 2 threads: this machine's
speed drifts between sittings by more than the margins in question, and a paired ratio cancels what drifts
slower than a round. ``lmprep native, warm cache`` encodes a second time with the cache full (split and
lookups, no merges). Then the encode stage end to end (prepared
Arrow text → shards, ``encode_corpus`` over 1 and 2 worker processes) against nanoGPT's way (tiktoken
``encode_ordinary`` per document, EOT appended, numpy ``uint16``, one ``.bin``, in as many processes),
CPU seconds of the processes included, token streams compared.

riptoken is not a dependency of lmprep; install it beside the others (it needs nothing they do not
already bring) with ``pip install --no-deps riptoken==0.2.4``; without it its rows are left out.

    python benchmarks/bench_native.py [--megabytes 2] [--vocab-size 8192] [--repeats 3] [--corpus english,...]
        [--engines "lmprep native,gigatok,..."] [--no-stage]

``--smoke``: 0.05 MB of the ``code`` corpus, 300 IDs, the flat API on one thread, once (in a temporary
directory).
"""

from __future__ import annotations

import argparse
import ast
import functools
import gettext
import hashlib
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import time
import unicodedata
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from itertools import chain
from pathlib import Path

import numpy as np
import results

from pipeline.data import documents
from pipeline.engine.executor import Tasks
from pipeline.shards.corpus import encode_corpus
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

ROOT = Path(__file__).resolve().parents[1]

DATA = results.data_dir()
STDLIB = Path(sysconfig.get_paths()["stdlib"])
CATALOG_CHARS = 4000  # from each catalog: many languages, not a few large catalogs
EOT = "<|endoftext|>"
SCRIPT_SHARE = 0.001  # a script counts in the mix from this share of the letters
# a smoke run measures one API with one thread (and the stage with one worker)
APIS = ("flat",) if results.SMOKE else ("flat", "list")
THREADS = (1,) if results.SMOKE else (1, 2)


def unique_lines(documents: list[str], megabytes: float) -> list[str]:
    """The documents without any line that occurs twice anywhere, up to ``megabytes`` of UTF-8."""
    counts = Counter(line for document in documents for line in document.splitlines())
    kept, size = [], 0
    for document in documents:
        text = "\n".join(line for line in document.splitlines() if counts[line] == 1)
        if text.strip():
            kept.append(text + "\n")
            size += len(kept[-1].encode())
            if size >= megabytes * 1e6:
                break
    return kept


def english_documents() -> list[str]:
    documents = []
    for path in sorted(STDLIB.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef)))]
        docstrings = [doc for node in nodes if (doc := ast.get_docstring(node))]
        if docstrings:
            documents.append("\n\n".join(docstrings))
    return documents


def multilingual_documents() -> list[str]:
    documents = []
    # in an order that mixes the languages (sorted by path, one language family would follow another)
    for path in sorted(Path("/usr/share").rglob("*.mo"), key=lambda p: hashlib.sha256(bytes(p)).digest()):
        try:
            with open(path, "rb") as handle:
                catalog = gettext.GNUTranslations(handle)
        except (OSError, UnicodeDecodeError, ValueError, LookupError):
            continue
        messages = [str(text) for key, text in catalog._catalog.items() if key and isinstance(text, str)]
        if messages:
            documents.append("\n".join(messages)[:CATALOG_CHARS])
    return documents


def code_documents() -> list[str]:
    documents = []
    for path in sorted(STDLIB.rglob("*.py")):
        try:
            documents.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return documents


CORPORA = {"english": english_documents, "multilingual": multilingual_documents, "code": code_documents}


def script_mix(texts: list[str]) -> tuple[int, str]:
    """How many scripts hold at least ``SCRIPT_SHARE`` of the letters, and the largest shares (the first
    word of each letter's Unicode name)."""
    scripts = Counter()
    for text in texts:
        for char in text:
            if char.isalpha():
                scripts[unicodedata.name(char, "UNKNOWN ?").split()[0]] += 1
    total = sum(scripts.values())
    counted = sum(1 for count in scripts.values() if count >= SCRIPT_SHARE * total)
    return counted, ", ".join(f"{name.lower()} {count / total:.1%}" for name, count in scripts.most_common(12))


def corpus_file(name: str, megabytes: float) -> Path:
    """The corpus as a JSON list of documents, built once."""
    path = DATA / f"native-{name}-{megabytes:g}MB.json"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(unique_lines(CORPORA[name](), megabytes)), encoding="utf-8")
    return path


def tokenizer_file(name: str, texts: list[str], vocab_size: int) -> Path:
    path = DATA / f"native-{name}-{vocab_size}-{sum(map(len, texts))}-eot.json"
    if not path.exists():
        Tokenizer.train(texts, vocab_size=vocab_size, special_tokens=[EOT], workers=1).save(path)
    return path


# ---- the engines: each makes (fresh, encode) for one API and thread count -----------------------------
# fresh() builds the engine before the clock starts (a cold cache); encode(engine, texts) is timed and
# returns what the API returns (a flat array, or one list per text).

def flat(lists: list[list[int]]) -> np.ndarray:
    return np.fromiter(chain.from_iterable(lists), dtype=np.uint32, count=sum(map(len, lists)))


def lmprep_engine(path: Path, api: str, threads: int):
    fresh = functools.partial(built_tokenizer, path)
    if api == "flat":
        return fresh, lambda tok, texts: tok.encode_batch_flat(texts, threads=threads)[0]
    return fresh, lambda tok, texts: tok.encode_batch(texts, threads=threads)


def built_tokenizer(path: Path) -> Tokenizer:
    """A loaded tokenizer with its native encoder built, as every peer's constructor builds its tables: a
    ``Tokenizer`` builds it at its first encode, which would time the build (the cache's seeding among it) in
    lmprep's call alone."""
    tokenizer = Tokenizer.load(path)
    tokenizer.build_encoder()
    return tokenizer


def tiktoken_engine(path: Path, api: str, threads: int):
    import tiktoken

    tokenizer = Tokenizer.load(path)
    ranks, pattern = mergeable_ranks(tokenizer), tiktoken_pattern(tokenizer)
    fresh = lambda: tiktoken.Encoding("bench", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})  # noqa: E731
    lists = lambda enc, texts: enc.encode_ordinary_batch(texts, num_threads=threads)  # noqa: E731
    return fresh, (lambda enc, texts: flat(lists(enc, texts))) if api == "flat" else lists


def riptoken_engine(path: Path, api: str, threads: int):
    import riptoken  # threads: RAYON_NUM_THREADS, set by the parent

    tokenizer = Tokenizer.load(path)
    ranks, pattern = mergeable_ranks(tokenizer), tiktoken_pattern(tokenizer)
    fresh = lambda: riptoken.CoreBPE(ranks, {}, pattern)  # noqa: E731
    lists = lambda enc, texts: enc.encode_ordinary_batch(texts)  # noqa: E731
    return fresh, (lambda enc, texts: flat(lists(enc, texts))) if api == "flat" else lists


def hf_engine(path: Path, api: str, threads: int):
    import tokenizers  # threads: RAYON_NUM_THREADS, set by the parent

    fresh = lambda: tokenizers.Tokenizer.from_file(str(path))  # noqa: E731
    lists = lambda enc, texts: [e.ids for e in enc.encode_batch_fast(texts, add_special_tokens=False)]  # noqa: E731
    return fresh, (lambda enc, texts: flat(lists(enc, texts))) if api == "flat" else lists


# The GPT-4 split as HF's files spell it (cl100k's pattern in tokenizer.json): the same chunks as lmprep's
# ``gpt4`` (whose possessive form gigatok does not recognise), so the same IDs, which are checked.
HF_GPT4 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
           r"""|\s*[\r\n]|\s+(?!\S)|\s+""")


def hf_spelled(path: Path) -> Path:
    """A copy of the tokenizer file whose split names the GPT-4 pattern as HF's files do (gigatok loads only
    the spellings it knows)."""
    spelled = path.with_name(f"{path.stem}-hf-spelling.json")
    if not spelled.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        split = data["pre_tokenizer"]["pretokenizers"][0]
        assert split["pattern"]["Regex"] == Tokenizer.load(path).pattern, "the benchmark trains on the gpt4 split"
        split["pattern"]["Regex"] = HF_GPT4
        spelled.write_text(json.dumps(data), encoding="utf-8")
    return spelled


def gigatok_engine(path: Path, api: str, threads: int):
    import gigatok  # threads: RAYON_NUM_THREADS, set by the parent

    spelled = hf_spelled(path)
    fresh = lambda: gigatok.Tokenizer(str(spelled))  # noqa: E731
    if api == "flat":  # its batch call gives an awkward array: its flat content is one uint32 array
        return fresh, lambda enc, texts: np.asarray(enc.encode_batch(texts).layout.content.data)
    return fresh, lambda enc, texts: enc.encode_batch(texts)  # one list per text, as awkward holds them


def fastokens_engine(path: Path, api: str, threads: int):
    import fastokens  # threads: RAYON_NUM_THREADS and FASTOKENS_BPE_THREADS, set by the parent

    fresh = lambda: fastokens.Tokenizer.from_file(str(path))  # noqa: E731
    if api == "flat":
        return fresh, lambda enc, texts: np.frombuffer(enc.encode_batch_flat(texts)[0], dtype=np.uint32)
    return fresh, lambda enc, texts: [e.ids for e in enc.encode_batch(texts)]


ENGINES = {"lmprep native": lmprep_engine, "lmprep python": lmprep_engine, "tiktoken": tiktoken_engine,
           "riptoken": riptoken_engine, "gigatok": gigatok_engine, "fastokens": fastokens_engine,
           "HF tokenizers": hf_engine}


def ids_digest(result) -> str:
    if type(result).__module__.startswith("awkward"):
        result = np.asarray(result.layout.content.data)
    array = result if isinstance(result, np.ndarray) else flat(result)
    return hashlib.sha256(np.ascontiguousarray(array, dtype=np.uint32).tobytes()).hexdigest()[:16]


def peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM``, which starts afresh at exec (``ru_maxrss`` keeps the
    parent's peak across it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


WARM_UP_TEXTS = 20  # encoded first by a throwaway engine: the timed one is cold, the process is not


def child(engine: str, api: str, threads: int, corpus: Path, tokenizer: Path, repeats: int, warm: bool) -> None:
    """One measurement, in this fresh process: prints a JSON line."""
    texts = json.loads(corpus.read_text(encoding="utf-8"))
    fresh, encode = ENGINES[engine](tokenizer, api, threads)
    encode(fresh(), texts[:WARM_UP_TEXTS])  # what a process does once (thread pools, lazy tables), untimed
    start_rss = peak_rss_mb()
    wall = cpu = float("inf")
    for _ in range(repeats):
        result = None  # the last result is freed here, not inside the next timing
        built = fresh()
        if warm:
            encode(built, texts)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = encode(built, texts)
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    print(json.dumps({"wall": wall, "cpu": cpu, "digest": ids_digest(result), "start_rss": start_rss,
                      "peak_rss": peak_rss_mb()}))


def measure(engine: str, api: str, threads: int, corpus: Path, tokenizer: Path, repeats: int, warm: bool = False):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), FASTOKENS_BPE_THREADS=str(threads))
    env["LMPREP_BACKEND"] = "python" if engine == "lmprep python" else "native"
    command = [sys.executable, __file__, "--child", json.dumps([engine, api, threads, str(corpus), str(tokenizer),
                                                                 repeats, warm])]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  {engine} {api} x{threads}: failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def available(engine: str) -> bool:
    module = {"tiktoken": "tiktoken", "riptoken": "riptoken", "gigatok": "gigatok", "fastokens": "fastokens",
              "HF tokenizers": "tokenizers"}.get(engine)
    if module is None:
        return True
    try:
        __import__(module)
    except ImportError:
        print(f"({engine} is not installed: its rows are left out)")
        return False
    return True


def best_of(results: list[dict]) -> dict:
    """The best wall and CPU times of one measurement's rounds (its IDs and memory from the last)."""
    return results[-1] | {"wall": min(r["wall"] for r in results), "cpu": min(r["cpu"] for r in results)}


def encode_table(name: str, corpus: Path, tokenizer: Path, megabytes: float, args: argparse.Namespace) -> None:
    configs = []
    for engine in filter(available, args.engines):
        for api in APIS:
            for threads in THREADS:
                if engine == "lmprep python" and threads == 2:
                    continue  # the Python path holds the GIL: one thread whatever it is told
                configs.append((engine, api, threads, False))
        if engine == "lmprep native":
            configs += [("lmprep native, warm cache", "flat", threads, True) for threads in THREADS]
    runs: dict[tuple[str, str, int], list[dict]] = {}
    for round_ in range(args.repeats):  # rounds of every engine in turn, so that a busy spell hits them alike
        for label, api, threads, warm in configs:
            engine = "lmprep native" if warm else label
            result = measure(engine, api, threads, corpus, tokenizer, 1, warm=warm)
            if result:
                runs.setdefault((label, api, threads), []).append(result | {"round": round_})
    measured = {key: best_of(results) for key, results in runs.items()}
    reference = measured[("tiktoken", "flat", 1)]
    fastest = "gigatok" if ("gigatok", "flat", 1) in measured else "tiktoken"
    print(f"\n{name}: best of {args.repeats} rounds (each engine in turn); × tiktoken and × {fastest}: against "
          "them with the same API and threads")
    print(f"| engine | API | threads | MB/s | × tiktoken | MB per CPU s | × tiktoken | × {fastest} (CPU) "
          f"| × {fastest} (CPU) per round: median (min–max) | 1 → 2 threads (wall; per round) "
          "| peak RSS MB (at start) "
          "| same IDs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (engine, api, threads), result in measured.items():
        peer = measured.get(("tiktoken", api, threads), reference)
        ahead_key = (fastest, api, threads) if (fastest, api, threads) in measured else (fastest, "flat", 1)
        ahead = measured[ahead_key]
        one = measured.get((engine, api, 1))
        scaling = ""
        if threads == 2 and one:
            per_round = paired_ratios(runs[(engine, api, 1)], runs[(engine, api, 2)], "wall")
            scaling = f"{one['wall'] / result['wall']:.2f}× ({per_round})"
        same = "yes" if result["digest"] == reference["digest"] else "NO"
        print(f"| {engine} | {api} | {threads} | {megabytes / result['wall']:.1f} "
              f"| {peer['wall'] / result['wall']:.2f} "
              f"| {megabytes / result['cpu']:.1f} | {peer['cpu'] / result['cpu']:.2f} "
              f"| {ahead['cpu'] / result['cpu']:.2f} | {paired_ratios(runs[ahead_key], runs[(engine, api, threads)])} "
              f"| {scaling} | {result['peak_rss']:.0f} ({result['start_rss']:.0f}) | {same} |", flush=True)


def paired_ratios(peer: list[dict], engine: list[dict], time: str = "cpu") -> str:
    """The peer's time over the engine's, round by round (each pair measured a minute apart at most, so that the
    machine's drift between sittings cancels): the median and the range, the spread a best-of hides."""
    peer_time = {result["round"]: result[time] for result in peer}
    ratios = sorted(peer_time[result["round"]] / result[time] for result in engine if result["round"] in peer_time)
    if not ratios:
        return ""
    return f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"


# ---- the encode stage end to end, against nanoGPT's way -----------------------------------------------

_NANOGPT_ENCODING = None


def nanogpt_worker(tokenizer_path: Path) -> None:
    """A nanoGPT worker's start: its tiktoken encoding, built once."""
    import tiktoken

    global _NANOGPT_ENCODING
    tokenizer = Tokenizer.load(tokenizer_path)
    _NANOGPT_ENCODING = tiktoken.Encoding("bench", pat_str=tiktoken_pattern(tokenizer),
                                          mergeable_ranks=mergeable_ranks(tokenizer),
                                          special_tokens=dict(tokenizer.special_tokens))


def nanogpt_part(texts: list[str]) -> bytes:
    """nanoGPT's prepare.py, one part: encode_ordinary per document, EOT appended, uint16."""
    encoding = _NANOGPT_ENCODING
    ids = [encoding.encode_ordinary(text) + [encoding.eot_token] for text in texts]
    return np.concatenate([np.array(one, dtype=np.uint16) for one in ids]).tobytes()


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def stage_run(which: str, workers: int, texts: list[str], tokenizer: Path, work: Path) -> tuple[float, float]:
    prepared = work / "prepared"
    if not (prepared / documents.PARTS_FILE).exists():
        size = -(-len(texts) // 8)
        documents.write_prepared(prepared, {"train": [texts[i:i + size] for i in range(0, len(texts), size)]})
    start, start_cpu = time.perf_counter(), cpu_seconds()
    if which == "lmprep":
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            encode_corpus(prepared, work / "shards", tokenizer_path=tokenizer, tasks=Tasks(pool), splits=("train",),
                          shard_tokens=1_000_000, eos_id=Tokenizer.load(tokenizer).special_tokens[EOT])
    else:
        parts = [documents.iter_documents(prepared / part.file) for part in documents.read_parts(prepared, "train")]
        context = multiprocessing.get_context("fork")
        with context.Pool(workers, nanogpt_worker, (tokenizer,)) as pool, open(work / "train.bin", "wb") as out:
            for data in pool.imap(nanogpt_part, [list(part) for part in parts]):
                out.write(data)
    return time.perf_counter() - start, cpu_seconds() - start_cpu


def stage_table(name: str, corpus: Path, texts: list[str], tokenizer: Path, megabytes: float,
                args: argparse.Namespace) -> None:
    work = DATA / f"stage-{corpus.stem}"  # the prepared text of this corpus file, made once
    best: dict[tuple[str, int], tuple[float, float]] = {}
    for _ in range(args.repeats):
        for workers in THREADS:
            for which in ("lmprep", "nanoGPT"):
                wall, cpu = stage_run(which, workers, texts, tokenizer, work)
                old = best.get((which, workers), (float("inf"), float("inf")))
                best[(which, workers)] = (min(old[0], wall), min(old[1], cpu))
    stream = np.concatenate([shard.tokens for shard in ShardSet.open(work / "shards", "train").shards])
    same = "yes" if np.array_equal(stream, np.fromfile(work / "train.bin", np.uint16)) else "NO"
    print(f"\n{name}, the encode stage end to end ({len(stream):,} tokens; token streams identical: {same})")
    print("| way | processes | MB/s | MB per CPU s | × nanoGPT's way (wall) |")
    print("| --- | --- | --- | --- | --- |")
    for (which, workers), (wall, cpu) in best.items():
        theirs = best[("nanoGPT", workers)][0]
        print(f"| {which} | {workers} | {megabytes / wall:.1f} | {megabytes / cpu:.1f} | {theirs / wall:.2f} |",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=2.0)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--corpus", default=",".join(CORPORA))
    parser.add_argument("--no-stage", action="store_true", help="leave out the encode stage end to end")
    parser.add_argument("--engines", default=",".join(ENGINES), help="the engines to measure (tiktoken always)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.megabytes, args.vocab_size, args.repeats, args.corpus = 0.05, 300, 1, "code"
    args.engines = list(dict.fromkeys(["tiktoken", *args.engines.split(",")]))
    if args.child:
        engine, api, threads, corpus, tokenizer, repeats, warm = json.loads(args.child)
        child(engine, api, threads, Path(corpus), Path(tokenizer), repeats, warm)
        return
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start")
    for name in args.corpus.split(","):
        corpus = corpus_file(name, args.megabytes)
        texts = json.loads(corpus.read_text(encoding="utf-8"))
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        tokenizer = tokenizer_file(name, texts, args.vocab_size)
        scripts, mix = script_mix(texts)
        print(f"\n{name}: {len(texts)} documents, {megabytes:.1f} MB; {scripts} scripts; letters: {mix}", flush=True)
        encode_table(name, corpus, tokenizer, megabytes, args)
        if not args.no_stage:
            stage_table(name, corpus, texts, tokenizer, megabytes, args)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    results.run("bench_native", main)
