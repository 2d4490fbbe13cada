"""The web pieces' candidates measured side by side: WARC parsers (fastwarc, warcio) and HTML extractors
(resiliparse, trafilatura), each on the same input in this one process.

- Parsers: every record of a generated WARC corpus (``data/generate_web_corpus.py --pages N``), the payload
  of each response read; MB of gzipped WARC per CPU second of this process.
- Extractors: the corpus's HTML pages, then the hand-checked pages of ``benchmarks/web_golden/`` (real
  HTML that Debian packages ship, each beside the lines of its main text): MB of HTML per CPU second, and
  the quality of what each extractor keeps. Two measures, both over all golden pages together:
  *lines*: precision is the share of the extractor's lines found in the golden text, recall the share of
  golden lines found in the extractor's text (whitespace normalised, list markers and anchors' ``#``
  dropped; a line is found when it is a substring of the other side's text, so a paragraph split or
  joined differently still counts);
  *words*: precision and recall of the multiset of words (as CleanEval scores extractors).

resiliparse runs as ``pipeline.data.web.extract`` calls it (main content); trafilatura as datatrove's
``Trafilatura`` extractor calls it (``favor_precision``, no comments, ``deduplicate``).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_web_parts.py [--pages 2000] [--repeat 3] [--smoke]

Prints one JSON object. CPU seconds are the steadier figure on a shared machine; say the load beside them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import results

from pipeline.data.web.extract import decode, main_text
from pipeline.data.web.warc import Skipped, read_pages

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "benchmarks" / "web_golden"


def generated_warcs(pages: int, folder: Path) -> list[Path]:
    subprocess.run([sys.executable, str(ROOT / "data" / "generate_web_corpus.py"), "--out", str(folder),
                    "--pages", str(pages), "--no-orphan"], check=True)  # warcio raises on the orphan
    return sorted(folder.glob("*.warc.gz"))


def cpu_rate(work, megabytes: float, repeat: int) -> dict:
    """The best of ``repeat`` runs of ``work()``: MB per CPU second and per wall second."""
    best_cpu, best_wall = float("inf"), float("inf")
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        work()
        best_cpu, best_wall = min(best_cpu, time.process_time() - cpu), min(best_wall, time.perf_counter() - wall)
    return {"mb": round(megabytes, 3), "cpu_s": round(best_cpu, 4), "mb_per_cpu_s": round(megabytes / best_cpu, 2),
            "mb_per_s": round(megabytes / best_wall, 2)}


def fastwarc_pass(blobs: list[bytes]) -> int:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    payload = 0
    for blob in blobs:
        for record in ArchiveIterator(io.BytesIO(blob), parse_http=True):
            if record.record_type == WarcRecordType.response:
                payload += len(record.reader.read())
    return payload


def warcio_pass(blobs: list[bytes]) -> int:
    from warcio.archiveiterator import ArchiveIterator

    payload = 0
    for blob in blobs:
        for record in ArchiveIterator(io.BytesIO(blob)):
            if record.rec_type == "response":
                payload += len(record.content_stream().read())
    return payload


def lmprep_reader_pass(blobs: list[bytes]) -> int:
    """The reader as prepare uses it (fastwarc plus its own checks of the file's end)."""
    return sum(len(page.html) for blob in blobs
               for page in read_pages(io.BytesIO(blob), name="bench", skipped=Skipped()))


def trafilatura_text(html: str) -> str:
    from trafilatura import extract

    return extract(html, favor_precision=True, include_comments=False, deduplicate=True) or ""


EXTRACTORS = {"resiliparse": main_text, "trafilatura": trafilatura_text}


_MARKERS = re.compile(r"^(?:[•*-]|\d+\.)\s+|\s*#$")


def normal(text: str) -> str:
    """A line as compared: whitespace collapsed, without a list marker an extractor adds (``•``, ``1.``)
    or the ``#`` of a heading's anchor link."""
    return _MARKERS.sub("", " ".join(text.split()))


def quality(golden: list[tuple[str, str]], extractor) -> dict:
    """Line and word precision and recall of ``extractor`` over the golden pages (html, golden text)."""
    found_out = total_out = found_gold = total_gold = 0
    word_hits = word_out = word_gold = 0
    for html, truth in golden:
        output = extractor(html)
        out_lines = [normal(line) for line in output.splitlines() if line.strip()]
        gold_lines = [normal(line) for line in truth.splitlines() if line.strip()]
        gold_text, out_text = " ".join(gold_lines), " ".join(out_lines)
        found_out += sum(line in gold_text for line in out_lines)
        found_gold += sum(line in out_text for line in gold_lines)
        total_out, total_gold = total_out + len(out_lines), total_gold + len(gold_lines)
        out_words, gold_words = Counter(re.findall(r"\w+", output)), Counter(re.findall(r"\w+", truth))
        word_hits += sum((out_words & gold_words).values())
        word_out, word_gold = word_out + sum(out_words.values()), word_gold + sum(gold_words.values())
    return {"lines": {"precision": round(found_out / max(total_out, 1), 3),
                      "recall": round(found_gold / max(total_gold, 1), 3)},
            "words": {"precision": round(word_hits / max(word_out, 1), 3),
                      "recall": round(word_hits / max(word_gold, 1), 3)}}


def golden_pages() -> list[tuple[str, str]]:
    pages = []
    for html_path in sorted(GOLDEN.glob("*.html")):
        pages.append((decode(html_path.read_bytes()).text, html_path.with_suffix(".txt").read_text()))
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.pages, args.repeat = 60, 1
    report: dict = {"load": os.getloadavg(), "pages": args.pages}
    with tempfile.TemporaryDirectory() as tmp:
        blobs = [path.read_bytes() for path in generated_warcs(args.pages, Path(tmp))]
    megabytes = sum(map(len, blobs)) / 1e6
    report["parsers"] = {name: cpu_rate(lambda work=work: work(blobs), megabytes, args.repeat)
                         for name, work in (("fastwarc", fastwarc_pass), ("warcio", warcio_pass),
                                            ("lmprep_reader", lmprep_reader_pass))}
    report["parsers"]["fastwarc_over_warcio"] = round(report["parsers"]["fastwarc"]["mb_per_cpu_s"]
                                                      / report["parsers"]["warcio"]["mb_per_cpu_s"], 2)
    htmls = [decode(page.html, page.charset).text for blob in blobs
             for page in read_pages(io.BytesIO(blob), name="bench", skipped=Skipped())]
    html_mb = sum(len(html.encode("utf-8")) for html in htmls) / 1e6
    golden = golden_pages()
    report["extractors"] = {}
    for name, extractor in EXTRACTORS.items():
        speed = cpu_rate(lambda extractor=extractor: [extractor(html) for html in htmls], html_mb, args.repeat)
        report["extractors"][name] = {"speed": speed, "golden": quality(golden, extractor)}
    report["extractors"]["resiliparse_over_trafilatura"] = round(
        report["extractors"]["resiliparse"]["speed"]["mb_per_cpu_s"]
        / report["extractors"]["trafilatura"]["speed"]["mb_per_cpu_s"], 2)
    report["golden_pages"] = len(golden)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    results.run("bench_web_parts", main)
