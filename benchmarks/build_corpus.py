"""Build a real-text benchmark corpus from documentation already installed on this machine (no network).

Sources, in this order: licence texts, man pages (roff source, decompressed), package documentation
(READMEs, changelogs, copyright files; .gz decompressed), Python standard-library sources. Each file
is one document; files that are not UTF-8 text or are exact duplicates are skipped. The result is a
JSON Lines file, one ``{"text": ...}`` object per document, so document boundaries are exact and any
character survives; it is written atomically and is not committed (``benchmarks/.data/`` is ignored).

Documentation repeats itself (licence boilerplate, blank lines, man-page macros), and lmprep's segment
de-duplication and chunk cache pay in proportion to repetition; web text repeats less. So a second
corpus, ``unique-lines``, is the same documents with every line that occurs more than once anywhere in
the corpus removed entirely (all its copies, blank lines included; documents left empty are dropped).
Each corpus's share of characters in repeated lines is printed. The benchmarks run on both.

    python benchmarks/build_corpus.py [--megabytes 100] [--smoke]

A benchmark's ``--smoke`` run builds a corpus of 0.2 MB in its own temporary directory (``build``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sysconfig
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import results

from pipeline.engine.atomic import atomic_path

ROOT = Path(__file__).resolve().parents[1]

DATA = results.data_dir()
CORPORA = {"full": DATA / "corpus.jsonl", "unique-lines": DATA / "corpus-unique-lines.jsonl"}
SOURCES = (
    (Path("/usr/share/common-licenses"), "*"),
    (Path("/usr/share/man"), "**/*.gz"),
    (Path("/usr/share/doc"), "**/*"),
    (Path(sysconfig.get_paths()["stdlib"]), "**/*.py"),
    (Path("/usr/lib/python3"), "**/*.py"),
)
MAX_DOCUMENT_BYTES = 2_000_000


def candidate_files() -> Iterator[Path]:
    for root, glob in SOURCES:
        if root.is_dir():
            yield from (path for path in sorted(root.glob(glob)) if path.is_file() and not path.is_symlink())


def read_document(path: Path) -> str | None:
    """The file's text, or None if it is not UTF-8 text of a sensible size."""
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
        return None
    if not text.strip() or "\x00" in text or len(data) > MAX_DOCUMENT_BYTES:
        return None
    return text


def documents(limit_bytes: int) -> Iterator[str]:
    """Distinct documents until ``limit_bytes`` of UTF-8 text have been produced."""
    seen: set[bytes] = set()
    total = 0
    for path in candidate_files():
        text = read_document(path)
        if text is None:
            continue
        digest = hashlib.sha256(text.encode()).digest()
        if digest in seen:
            continue
        seen.add(digest)
        yield text
        total += len(text.encode())
        if total >= limit_bytes:
            return
    raise SystemExit(f"only {total / 1e6:.1f} MB of text found; lower --megabytes")


def corpus_path(name: str) -> Path:
    """The JSON Lines file of corpus ``name`` (a key of ``CORPORA``), or exit saying how to build it."""
    path = CORPORA[name]
    if not path.exists():
        raise SystemExit(f"no corpus at {path}; run benchmarks/build_corpus.py first")
    return path


def read_corpus(path: Path) -> Iterator[str]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            yield json.loads(line)["text"]


def write_corpus(path: Path, texts: Iterable[str]) -> None:
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8") as out:
        for text in texts:
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")


def describe(path: Path, counts: Counter[bytes]) -> str:
    """Documents, size and the share of characters (newlines included) in lines that occur more than once."""
    documents_count = size = characters = repeated = 0
    for text in read_corpus(path):
        documents_count += 1
        size += len(text.encode())
        for line in text_lines(text):
            characters += len(line)
            repeated += len(line) * (counts[line_key(line)] > 1)
    return (f"{path.name}: {documents_count} documents, {size / 1e6:.1f} MB of text, "
            f"{repeated / max(characters, 1):.1%} of characters in repeated lines")


def text_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n`` (only ``\\n`` ends a line)."""
    return list(io.StringIO(text, newline="\n"))


def line_key(line: str) -> bytes:
    return hashlib.blake2b(line.rstrip("\n").encode(), digest_size=16).digest()


def line_counts(texts: Iterable[str]) -> Counter[bytes]:
    return Counter(line_key(line) for text in texts for line in text_lines(text))


def without_repeated_lines(texts: Iterable[str], counts: Counter[bytes]) -> Iterator[str]:
    """Each text without the lines that ``counts`` saw more than once; texts left empty are dropped."""
    for text in texts:
        kept = "".join(line for line in text_lines(text) if counts[line_key(line)] == 1)
        if kept.strip():
            yield kept


def build(megabytes: float) -> None:
    """Both corpora, ``megabytes`` of text in the full one."""
    DATA.mkdir(parents=True, exist_ok=True)
    full, unique = CORPORA["full"], CORPORA["unique-lines"]
    write_corpus(full, documents(int(megabytes * 1e6)))
    counts = line_counts(read_corpus(full))
    print(describe(full, counts))
    write_corpus(unique, without_repeated_lines(read_corpus(full), counts))
    print(describe(unique, line_counts(read_corpus(unique))))


SMOKE_MEGABYTES = 0.2  # the corpus of a smoke run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=100.0)
    results.add_arguments(parser)
    args = parser.parse_args()
    build(SMOKE_MEGABYTES if args.smoke else args.megabytes)


if __name__ == "__main__":
    results.run("build_corpus", main)
