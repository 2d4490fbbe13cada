"""Near-duplicate removal: precision and recall on planted near-duplicates of real text, and throughput.

Originals are real documents: the Debian changelogs of this machine (``/usr/share/doc/*/changelog.Debian.gz``),
cut into chunks of 2-6 KB at blank lines. Each variant edits one original in one of five ways at a random
rate: words substituted (1-30 %), words deleted (1-30 %), boilerplate appended (20-200 words), truncated
(keeping 50-100 %), or two halves swapped. Originals come first in the corpus, the variants after them,
so the first copy (the original) is the one kept.

Truth is the exact Jaccard similarity of the two documents' shingle sets (as the step shingles them);
a pair is a near-duplicate when it is at least the threshold. A variant is predicted a near-duplicate
when prepare rejects it with the rule ``near_duplicate``. Also timed, in wall and CPU seconds (the least
of ``--repeat`` runs): prepare with the default chain (exact de-duplication only), with near-dedup after
it, and with Gopher's quality and repetition filters and C4's after it, on the same corpus and workers; and
datasketch's MinHashLSH (one process, same threshold and hashes) for reference when installed.

    .venv/bin/python benchmarks/bench_dedup.py --originals 1500 --variants 1500 --workers 2 [--smoke]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import random
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import results

from pipeline.config.schema import PrepareConfig, SourceConfig, StepConfig
from pipeline.data import minhash
from pipeline.data.dedup import ExactDedupStep
from pipeline.data.documents import iter_records
from pipeline.data.near_dedup import NearDedupStep
from pipeline.data.prepare import prepare_corpus
from pipeline.data.quality import C4Step, GopherQualityStep, GopherRepetitionStep
from pipeline.data.sources import expand_sources
from pipeline.engine.executor import Tasks

ROOT = Path(__file__).resolve().parents[1]

BOILERPLATE = ["this", "document", "is", "distributed", "in", "the", "hope", "that", "it", "will", "be", "useful",
               "but", "without", "any", "warranty", "see", "the", "license", "for", "more", "details", "and",
               "subscribe", "to", "our", "newsletter", "for", "updates"]


def originals(count: int, rng: random.Random) -> list[str]:
    chunks: list[str] = []
    for path in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz")):
        paragraphs = gzip.decompress(Path(path).read_bytes()).decode("utf-8", "replace").split("\n\n")
        chunk: list[str] = []
        target = rng.randint(2000, 6000)
        for paragraph in paragraphs:
            chunk.append(paragraph)
            if sum(map(len, chunk)) >= target:
                chunks.append("\n\n".join(chunk))
                chunk, target = [], rng.randint(2000, 6000)
    rng.shuffle(chunks)
    distinct = _dissimilar(chunks, count)
    if len(distinct) < count:
        raise SystemExit(f"only {len(distinct)} dissimilar chunks of real text found; ask for fewer --originals")
    return distinct


def _dissimilar(chunks: list[str], count: int, below: float = 0.4) -> list[str]:
    """The first ``count`` chunks whose exact Jaccard with every earlier kept one is below ``below``, among the
    candidates of 32 bands × 4 rows (which finds 56 % of the pairs at 0.4 and 98 % at 0.6), so that a variant's
    only near-duplicate is its original."""
    a, b = minhash.permutations(128, 1)
    kept: list[str] = []
    seen: dict[int, list[int]] = {}
    for chunk in chunks:
        keys = minhash.band_keys(minhash.signature(minhash.shingle_hashes(chunk, shingle="words", size=5), a, b),
                                 32, 4).tolist()
        candidates = {index for key in keys for index in seen.get(key, [])}
        if any(jaccard(chunk, kept[index], 5) >= below for index in candidates):
            continue
        for key in keys:
            seen.setdefault(key, []).append(len(kept))
        kept.append(chunk)
        if len(kept) == count:
            break
    return kept


def variant(text: str, rng: random.Random) -> tuple[str, str]:
    words = text.split(" ")
    kind = rng.choice(["substitute", "delete", "append", "truncate", "swap"])
    if kind == "substitute":
        rate = rng.uniform(0.01, 0.3)
        words = [rng.choice(BOILERPLATE) if rng.random() < rate else word for word in words]
    elif kind == "delete":
        rate = rng.uniform(0.01, 0.3)
        words = [word for word in words if rng.random() >= rate]
    elif kind == "append":
        words = words + [rng.choice(BOILERPLATE) for _ in range(rng.randint(20, 200))]
    elif kind == "truncate":
        words = words[: max(1, int(len(words) * rng.uniform(0.5, 1.0)))]
    else:
        half = len(words) // 2
        words = words[half:] + words[:half]
    return " ".join(words), kind


def corpus_index(document: str, data: bytes) -> int:
    """The line of ``corpus.jsonl`` a document ID names (``corpus.jsonl bytes S-E#n``: the n-th line that
    starts at or after byte S)."""
    piece, _, number = document.rpartition("#")
    start = int(piece.partition(" bytes ")[2].partition("-")[0] or 0)
    return (data[: start - 1].count(b"\n") + 1 if start else 0) + int(number)


def shingle_set(text: str, size: int) -> set[str]:
    units = text.lower().split()
    return {" ".join(units[i : i + size]) for i in range(max(len(units) - size + 1, 1))}


def jaccard(one: str, two: str, size: int) -> float:
    a, b = shingle_set(one, size), shingle_set(two, size)
    return len(a & b) / len(a | b)


def run_prepare(raw: Path, out: Path, steps: tuple[StepConfig, ...], workers: int,
                repeat: int) -> tuple[float, float, dict]:
    """prepare's wall seconds and CPU seconds (the workers' and the driver's), each the least of ``repeat``
    runs (the machine is shared), and its stats; the corpus is cut into four partitions per worker."""
    files = expand_sources([SourceConfig("*.jsonl")], root=raw)
    partition_bytes = sum(path.stat().st_size for path in raw.iterdir()) // (4 * workers) + 1
    settings = PrepareConfig(steps=steps, val_fraction=0.0, partition_bytes=partition_bytes)
    walls, cpus = [], []
    for _ in range(repeat):
        before = _cpu_seconds()
        start = time.perf_counter()
        with ProcessPoolExecutor(workers) as pool:
            prepare_corpus(files, settings, out, tasks=Tasks(pool), names_root=raw)
        walls.append(time.perf_counter() - start)
        cpus.append(_cpu_seconds() - before)
    return min(walls), min(cpus), json.loads((out / "stats.json").read_text())


def _cpu_seconds() -> float:
    """User and system seconds of this process and its finished children (the pool's workers)."""
    return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def datasketch_reference(texts: list[str], near: NearDedupStep) -> dict | None:
    try:
        from datasketch import MinHash, MinHashLSH
    except ImportError:
        return None
    start = time.perf_counter()
    lsh = MinHashLSH(threshold=near.threshold, num_perm=near.hashes)
    flagged = set()
    for index, text in enumerate(texts):
        sketch = MinHash(num_perm=near.hashes, seed=near.seed)
        sketch.update_batch([s.encode() for s in shingle_set(text, near.shingle_size)])
        if lsh.query(sketch):
            flagged.add(index)
        else:
            lsh.insert(str(index), sketch)
    return {"seconds": round(time.perf_counter() - start, 2), "flagged": flagged}


def scores(truth: list[bool], predicted: list[bool]) -> dict[str, float]:
    true_positive = sum(t and p for t, p in zip(truth, predicted))
    return {"precision": round(true_positive / max(sum(predicted), 1), 4),
            "recall": round(true_positive / max(sum(truth), 1), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--originals", type=int, default=1500)
    parser.add_argument("--variants", type=int, default=1500)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each prepare; the fastest is reported")
    parser.add_argument("--hashes", type=int, default=NearDedupStep().hashes)
    parser.add_argument("--bands", type=int, default=NearDedupStep().bands)
    parser.add_argument("--rows", type=int, default=NearDedupStep().rows)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.originals, args.variants, args.repeat = 20, 20, 1
    rng = random.Random(args.seed)
    near = NearDedupStep(hashes=args.hashes, bands=args.bands, rows=args.rows)
    base = originals(args.originals, rng)
    planted = [(source, *variant(base[source], rng)) for source in rng.sample(range(len(base)), args.variants)]
    texts = base + [text for _, text, _ in planted]
    similarity = [jaccard(base[source], text, near.shingle_size) for source, text, _ in planted]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        (raw / "corpus.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
        megabytes = (raw / "corpus.jsonl").stat().st_size / 1e6
        exact = (StepConfig("exact_dedup", ExactDedupStep()),)
        exact_seconds, exact_cpu, _ = run_prepare(raw, Path(tmp) / "exact", exact, args.workers, args.repeat)
        near_seconds, near_cpu, stats = run_prepare(raw, Path(tmp) / "near", (*exact, StepConfig("near_dedup", near)),
                                                    args.workers, args.repeat)
        quality = (*exact, StepConfig("gopher_quality", GopherQualityStep()),
                   StepConfig("gopher_repetition", GopherRepetitionStep()), StepConfig("c4", C4Step()))
        quality_seconds, quality_cpu, quality_stats = run_prepare(raw, Path(tmp) / "quality", quality, args.workers,
                                                                  args.repeat)
        data = (raw / "corpus.jsonl").read_bytes()
        rejected = {corpus_index(row[2], data): row[4] for part in stats["rejected"]
                    for row in iter_records(Path(tmp) / "near" / part["file"])}
    flagged = [rejected.get(len(base) + i) in ("near_duplicate", "duplicate")
               for i in range(len(planted))]
    truth = [value >= near.threshold for value in similarity]
    report = {
        "corpus_mb": round(megabytes, 2), "originals": len(base), "variants": len(planted),
        "variants_at_or_above_threshold": sum(truth),
        "originals_flagged": sum(1 for i in range(len(base)) if i in rejected),
        "settings": {"shingle": near.shingle, "shingle_size": near.shingle_size, "hashes": near.hashes,
                     "bands": near.bands, "rows": near.rows, "threshold": near.threshold},
        "lmprep": scores(truth, flagged),
        "by_kind": {kind: scores([t for t, (_, _, k) in zip(truth, planted) if k == kind],
                                 [f for f, (_, _, k) in zip(flagged, planted) if k == kind])
                    for kind in sorted({kind for _, _, kind in planted})},
        "missed_similarities": sorted(round(s, 3) for s, t, f in zip(similarity, truth, flagged) if t and not f)[:20],
        "false_similarities": sorted(round(s, 3) for s, t, f in zip(similarity, truth, flagged) if f and not t)[:20],
        "prepare_exact": {"wall_s": round(exact_seconds, 2), "cpu_s": round(exact_cpu, 2),
                          "mb_per_s": round(megabytes / exact_seconds, 2)},
        "prepare_exact_and_near": {"wall_s": round(near_seconds, 2), "cpu_s": round(near_cpu, 2),
                                   "mb_per_s": round(megabytes / near_seconds, 2)},
        "near_dedup_alone_mb_per_cpu_s": round(megabytes / max(near_cpu - exact_cpu, 1e-9), 2),
        "prepare_exact_and_quality_filters": {"wall_s": round(quality_seconds, 2), "cpu_s": round(quality_cpu, 2),
                                     "mb_per_s": round(megabytes / quality_seconds, 2),
                                     "dropped": quality_stats["dropped"]},
        "quality_filters_alone_mb_per_cpu_s": round(megabytes / max(quality_cpu - exact_cpu, 1e-9), 2),
        "workers": args.workers,
    }
    reference = datasketch_reference(texts, near)
    if reference is not None:
        predicted = [len(base) + i in reference["flagged"] for i in range(len(planted))]
        report["datasketch_lsh"] = {**scores(truth, predicted), "seconds_one_process": reference["seconds"]}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    results.run("bench_dedup", main)
