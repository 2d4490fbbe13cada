"""Encoding throughput of the native core against the Python path and tiktoken (MB of UTF-8 per second).

Three corpora, built here from what is installed on the machine (no network), each with every
repeated line dropped so that the chunk cache helps as little as it does on web text:

- ``english``: the docstrings of the Python standard library;
- ``multilingual``: the translated messages of the gettext catalogs (``*.mo``) under /usr/share, in
  many scripts (the script mix is printed);
- ``code``: the Python standard library's sources.

A byte tokenizer (GPT-4 pattern) is trained on each corpus once and kept in ``benchmarks/.data``;
tiktoken (and riptoken, when installed) are built from its exported ranks and pattern, so all
engines give the same IDs, which is checked. Each run starts with a fresh tokenizer (a cold cache)
and encodes the whole corpus to one flat array (``encode_batch_flat``; tiktoken's batch + numpy);
``lmprep native x2`` is two threads, each with its own tokenizer, on half the documents; ``warm
cache`` encodes the corpus a second time (the floor of split and lookups, without merges). Best of
``--repeats``, in wall-clock time and in CPU time (which a busy machine disturbs less). The split
alone (native vs ``regex``) is timed too: it is the floor of the Python path.

    python benchmarks/bench_native.py [--megabytes 4] [--vocab-size 8192] [--repeats 3]
"""

from __future__ import annotations

import argparse
import ast
import gettext
import hashlib
import sys
import sysconfig
import time
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.tokenizer import Tokenizer, backend, patterns  # noqa: E402

DATA = ROOT / "benchmarks" / ".data"
STDLIB = Path(sysconfig.get_paths()["stdlib"])
CATALOG_CHARS = 4000  # from each catalog: many languages, not a few large catalogs


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


def script_mix(texts: list[str]) -> str:
    """The share of letters in each script (the first word of the letter's Unicode name), largest first."""
    scripts = Counter()
    for text in texts:
        for char in text:
            if char.isalpha():
                scripts[unicodedata.name(char, "UNKNOWN ?").split()[0]] += 1
    total = sum(scripts.values())
    return ", ".join(f"{name.lower()} {count / total:.1%}" for name, count in scripts.most_common(12))


def trained_tokenizer(name: str, texts: list[str], vocab_size: int) -> Tokenizer:
    path = DATA / f"native-{name}-{vocab_size}-{sum(map(len, texts))}.json"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        Tokenizer.train(texts, vocab_size=vocab_size, workers=1).save(path)
    return Tokenizer.load(path)


def fresh(tokenizer: Tokenizer, native: bool) -> Tokenizer:
    """The same tokenizer with an empty cache, on the native core or the Python path."""
    saved = backend.native
    if not native:
        backend.native = None
    try:
        return Tokenizer.from_merges(kind=tokenizer.kind, pattern=tokenizer.pattern, merges=tokenizer.merges)
    finally:
        backend.native = saved


def lmprep_flat(tokenizer: Tokenizer, native: bool, threads: int):
    """A run on tokenizers built before the clock starts, so that each run begins with a cold cache."""
    built = []

    def prepare():
        built[:] = [fresh(tokenizer, native) for _ in range(threads)]

    def run(texts):
        if threads == 1:
            return built[0].encode_batch_flat(texts)[0]
        parts = [texts[i::threads] for i in range(threads)]  # interleaved: each thread gets all kinds of text
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda pair: pair[0].encode_batch_flat(pair[1]), zip(built, parts)))
        return None
    run.prepare = prepare
    return run


def tiktoken_flat(tokenizer: Tokenizer, threads: int):
    import tiktoken

    from pipeline.tokenizer.tiktoken_export import mergeable_ranks, tiktoken_pattern

    encoding = tiktoken.Encoding("bench", pat_str=tiktoken_pattern(tokenizer),
                                 mergeable_ranks=mergeable_ranks(tokenizer), special_tokens={})

    def run(texts):
        lists = encoding.encode_ordinary_batch(texts, num_threads=threads)
        return np.fromiter((i for ids in lists for i in ids), dtype=np.uint32) if threads == 1 else None
    return run


def best_seconds(run, texts, repeats: int):
    """The best wall-clock and CPU seconds (all threads of the process) of ``repeats`` runs, and the IDs."""
    wall = cpu = float("inf")
    result = None
    for _ in range(repeats):
        if hasattr(run, "prepare"):
            run.prepare()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = run(texts)
        wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.process_time() - start_cpu)
    return wall, cpu, result


def split_seconds(texts: list[str], repeats: int) -> dict[str, tuple[float, float]]:
    compiled = patterns.compile_checked(patterns.GPT4)
    python_split = lambda chunk_texts: [compiled.findall(t) for t in chunk_texts]  # noqa: E731
    timings = {"regex findall": best_seconds(python_split, texts, repeats)[:2]}
    if backend.native is not None:
        native_split = lambda chunk_texts: [backend.native.split(0, t) for t in chunk_texts]  # noqa: E731
        timings["native split (to str objects)"] = best_seconds(native_split, texts, repeats)[:2]
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--corpus", default=",".join(CORPORA))
    args = parser.parse_args()
    print(f"backend: {backend.name()}")
    for name in args.corpus.split(","):
        texts = unique_lines(CORPORA[name](), args.megabytes)
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        tokenizer = trained_tokenizer(name, texts, args.vocab_size)
        print(f"\n{name}: {len(texts)} documents, {megabytes:.1f} MB; letters: {script_mix(texts)}")
        engines = {"tiktoken": tiktoken_flat(tokenizer, 1), "tiktoken x2": tiktoken_flat(tokenizer, 2),
                   "lmprep python": lmprep_flat(tokenizer, False, 1)}
        if backend.native is not None:
            warm = fresh(tokenizer, True)
            warm.encode_batch_flat(texts)
            engines |= {"lmprep native": lmprep_flat(tokenizer, True, 1),
                        "lmprep native x2": lmprep_flat(tokenizer, True, 2),
                        "lmprep native, warm cache": lambda texts, warm=warm: warm.encode_batch_flat(texts)[0]}
        results = {engine: best_seconds(run, texts, args.repeats) for engine, run in engines.items()}
        wall, cpu, reference = results["tiktoken"]
        print("| engine | MB/s | vs tiktoken | MB per CPU second | vs tiktoken | same IDs |")
        print("| --- | --- | --- | --- | --- | --- |")
        for engine, (seconds, cpu_seconds, ids) in results.items():
            same = "-" if ids is None else ("yes" if np.array_equal(ids, reference) else "NO")
            print(f"| {engine} | {megabytes / seconds:.1f} | {wall / seconds:.2f}x | {megabytes / cpu_seconds:.1f} "
                  f"| {cpu / cpu_seconds:.2f}x | {same} |")
        for what, (seconds, cpu_seconds) in split_seconds(texts, args.repeats).items():
            print(f"split only, {what}: {megabytes / seconds:.1f} MB/s, "
                  f"{megabytes / cpu_seconds:.1f} MB per CPU second")


if __name__ == "__main__":
    main()
