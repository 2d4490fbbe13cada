"""datatrove's side of ``bench_web.py``: its FineWeb-style web pipeline on WARC files, one task in this process.

``WarcReader`` → ``URLFilter`` (the recipe's blocklists only: ``use_integrated_lists=False``) → ``Trafilatura``
(its defaults: ``favour_precision``, a 1 s timeout in its sandbox process) → ``GopherRepetitionFilter`` →
``GopherQualityFilter`` → ``C4QualityFilter`` → ``FineWebQualityFilter`` → ``PIIFormatter``, the filters with
their defaults but lmprep's words and sentences (whitespace, and runs of ``.!?``; datatrove's English
tokenizer is spaCy's, slower: this favours datatrove). tldextract is given no suffix-list URL, so it uses
its bundled snapshot instead of the network.
Prints one JSON line: the documents kept and the CPU seconds of the run, imports excluded (this process and
its children).

    python benchmarks/datatrove_web.py WARC_DIR DOMAINS_FILE WORDS_FILE
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import tempfile
import time

import tldextract
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.base import PipelineStep
from datatrove.pipeline.extractors import Trafilatura
from datatrove.pipeline.filters import (
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
    URLFilter,
)
from datatrove.pipeline.formatters import PIIFormatter
from datatrove.pipeline.readers import WarcReader
from datatrove.utils.word_tokenizers import WordTokenizer

from pipeline.data.quality import SENTENCE_END


class Whitespace(WordTokenizer):
    """Words split at whitespace, sentences ending at runs of ``.``, ``!`` or ``?`` (lmprep's reading of both)."""

    def __init__(self):
        super().__init__("en")

    def word_tokenize(self, text: str) -> list[str]:
        return text.split()

    def sent_tokenize(self, text: str) -> list[str]:
        return [text[start:end] for start, end in self.span_tokenize(text)]

    def span_tokenize(self, text: str) -> list[tuple[int, int]]:
        ends = [match.end() for match in SENTENCE_END.finditer(text)][:-1]  # the last sentence ends the text
        return list(zip([0, *ends], [*ends, len(text)]))


KEPT: list[str] = []  # the executor runs a copy of each step: the copy appends here (one task, this process)


class Keep(PipelineStep):
    name = "keep"

    def run(self, data, rank: int = 0, world_size: int = 1):
        for document in data:
            KEPT.append(document.metadata["url"])
        yield from ()


def entries(path: str) -> list[str]:
    return [line.strip() for line in open(path) if line.strip() and not line.startswith("#")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warcs")
    parser.add_argument("domains")
    parser.add_argument("words")
    args = parser.parse_args()
    tldextract.TLDExtract = functools.partial(tldextract.TLDExtract, suffix_list_urls=())
    words = Whitespace()
    steps = [WarcReader(args.warcs, glob_pattern="*.warc.gz"),
             URLFilter(extra_domains=entries(args.domains), banned_subwords=entries(args.words),
                       use_integrated_lists=False),
             Trafilatura(), GopherRepetitionFilter(language=words), GopherQualityFilter(language=words),
             C4QualityFilter(language=words), FineWebQualityFilter(language=words), PIIFormatter(), Keep()]
    start, cpu = time.perf_counter(), cpu_seconds()
    with tempfile.TemporaryDirectory() as logs:
        LocalPipelineExecutor(steps, tasks=1, workers=1, logging_dir=logs).run()
    print(json.dumps({"kept": len(KEPT), "wall_s": time.perf_counter() - start, "cpu_s": cpu_seconds() - cpu}))


def cpu_seconds() -> float:
    """This process's CPU seconds and its finished children's (Trafilatura's sandbox process is one)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if __name__ == "__main__":
    main()
