"""WARC → extracted text → filters: lmprep's web pieces against datatrove's pipeline, in the same run, on the
same generated WARC files, and decontamination's recall and false positives.

The corpus is ``data/generate_web_corpus.py --pages N`` (without the response lacking a target URI, on which
warcio, under datatrove's reader, raises). Each side runs in a process of its own, one task:

- lmprep: ``pipeline.data.web.warc`` → URL filter (the corpus's blocklists) → ``extract`` (resiliparse) →
  gopher_repetition → gopher_quality → c4 → fineweb (the registry's steps, their defaults) → PII redaction
  → decontamination against the corpus's two evaluation sets;
- datatrove: ``datatrove_web.py`` (WarcReader → URLFilter → Trafilatura → the same four filters →
  PIIFormatter; it has no decontamination step that reads evaluation files, so lmprep does more work).

Reported: MB of gzipped WARC per CPU second of each side (its process and children, imports excluded), the
ratio, and the share of lmprep's CPU spent in extraction. Then decontamination: 13-grams taken from
evaluation items planted in ``--planted`` random documents of the corpus must all be found (recall), and no
other document may match (false positives, counted over every document without a planted overlap).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_web.py [--pages 3000] [--smoke]

Prints one JSON object; say the machine's load (``uptime``) beside its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import results

from pipeline.data.quality import C4, FineWeb, GopherQuality, GopherRepetition
from pipeline.data.record import Document, Drop, Rewrite
from pipeline.data.web.decontam import Decontaminator, EvalSet, read_items, words_of
from pipeline.data.web.extract import extract
from pipeline.data.web.pii import Redactor
from pipeline.data.web.urls import UrlFilter, read_list
from pipeline.data.web.warc import Skipped, read_pages

ROOT = Path(__file__).resolve().parents[1]


def generate(pages: int, out: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "data" / "generate_web_corpus.py"), "--out", str(out), "--pages",
                    str(pages), "--no-orphan"], check=True)


def filters():
    return [step(step.Settings()) for step in (GopherRepetition, GopherQuality, C4, FineWeb)]


def lmprep_side(corpus: Path) -> dict:
    """The web chain in this process; CPU seconds of the whole and of extraction."""
    url_filter = UrlFilter(domains=read_list(corpus / "blocklist-domains.txt", what="domain blocklist"),
                           words=read_list(corpus / "blocklist-words.txt", what="word blocklist"),
                           allow=read_list(corpus / "allowlist.txt", what="allow-list"))
    steps, redactor = filters(), Redactor()
    decontaminator = Decontaminator([EvalSet("trivia", corpus / "eval" / "trivia.jsonl"),
                                     EvalSet("stories", corpus / "eval" / "stories.txt")])
    kept, extracting = 0, 0.0
    start = time.process_time()
    for path in sorted(corpus.glob("*.warc.gz")):
        with path.open("rb") as stream:
            for page in read_pages(stream, name=path.name, skipped=Skipped()):
                if not url_filter.decide(page.url).keep:
                    continue
                before = time.process_time()
                text = extract(page.html, page.charset).text
                extracting += time.process_time() - before
                text = _filtered(text, steps)
                if text is None:
                    continue
                text = redactor.redact(text).text
                kept += decontaminator.check(page.url, text).text is not None
    return {"kept": kept, "cpu_s": time.process_time() - start, "extract_cpu_s": extracting}


def _filtered(text: str, steps) -> str | None:
    for step in steps:
        answer = step.apply(Document(text, 0, ""))
        if isinstance(answer, Drop):
            return None
        if isinstance(answer, Rewrite):
            text = answer.text
    return text


def throughput(megabytes: float, side: dict) -> dict:
    return {**side, "mb_per_cpu_s": round(megabytes / side["cpu_s"], 2)}


def decontamination(corpus: Path, planted: int, seed: int = 1) -> dict:
    """Plant one 13-gram of an evaluation item into ``planted`` extracted documents; recall and false positives."""
    texts = []
    for path in sorted(corpus.glob("*.warc.gz")):
        with path.open("rb") as stream:
            texts += [extract(page.html, page.charset).text for page in
                      read_pages(stream, name=path.name, skipped=Skipped())]
    sets = [EvalSet("trivia", corpus / "eval" / "trivia.jsonl"), EvalSet("stories", corpus / "eval" / "stories.txt")]
    clean = Decontaminator(sets)
    already = {index for index, text in enumerate(texts) if clean.check(str(index), text).matches}
    rng = random.Random(seed)
    items = [item for eval_set in sets for item in read_items(eval_set) if len(words_of(item)) >= 13]
    targets = rng.sample([index for index in range(len(texts)) if index not in already], planted)
    for index in targets:
        words = [found.group(0) for found in words_of(rng.choice(items))]
        start = rng.randrange(len(words) - 12)
        sentences = texts[index].split(". ")
        sentences.insert(rng.randrange(len(sentences) + 1), " ".join(words[start:start + 13]))
        texts[index] = ". ".join(sentences)
    checked = Decontaminator(sets)
    hits = {index for index, text in enumerate(texts) if checked.check(str(index), text).matches}
    planted_set = set(targets)
    negatives = len(texts) - len(planted_set) - len(already)
    return {"documents": len(texts), "planted": planted, "recall": len(hits & planted_set) / planted,
            "overlapping_before_planting": len(already),
            "false_positives": len(hits - planted_set - already), "negatives": negatives,
            "ngrams_per_set": {name: report.ngrams for name, report in checked.reports.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--planted", type=int, default=200)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.planted = 60, 10
    report: dict = {"load": os.getloadavg(), "pages": args.pages}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp)
        generate(args.pages, corpus)
        megabytes = sum(path.stat().st_size for path in corpus.glob("*.warc.gz")) / 1e6
        report["warc_mb"] = round(megabytes, 3)
        ours = throughput(megabytes, lmprep_side(corpus))
        ours["extract_share"] = round(ours["extract_cpu_s"] / ours["cpu_s"], 3)
        theirs = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "datatrove_web.py"), str(corpus),
                                 str(corpus / "blocklist-domains.txt"), str(corpus / "blocklist-words.txt")],
                                check=True, capture_output=True, text=True)
        report["lmprep"] = ours
        report["datatrove"] = throughput(megabytes, json.loads(theirs.stdout.strip().splitlines()[-1]))
        report["lmprep_over_datatrove"] = round(ours["mb_per_cpu_s"] / report["datatrove"]["mb_per_cpu_s"], 2)
        report["decontamination"] = decontamination(corpus, args.planted)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    results.run("bench_web", main)
