"""Build the scaling corpus: over 1 GB of real text from Debian packages, in three sizes (1/16, 1/4, 1) made by
one recipe, in .txt, .jsonl.gz and .parquet files, with planted near-duplicates and no repeated line.

The text comes from these packages (installed with ``--install``, as root, by apt-get; never otherwise):

- ``manpages``, ``manpages-dev``: man pages (roff source, decompressed) under ``/usr/share/man``;
- ``python3.11-doc``: Python's HTML documentation (tags stripped, entities decoded), with the rest of
  ``/usr/share/doc`` (READMEs, changelogs, copyright files; ``.gz`` decompressed);
- ``linux-source-6.1``: the kernel's source tarball (C, assembly, Kconfig, its Documentation/ in
  reStructuredText), read member by member from ``/usr/src/linux-source-*.tar.xz``;
- ``gcc-12-source``: GCC's source tarball (C, C++, Fortran, Ada, its testsuite and manuals), read the same
  way from ``/usr/src/gcc-12/gcc-*.tar.xz``, until the full corpus holds ``--gigabytes`` of text.

Each file is one document; files that are not UTF-8, hold a NUL or are over 2 MB are skipped. Documentation
and source code repeat lines (licence headers, ``#include``, man-page macros), and a pipeline pays less for
repeated text (its chunk cache, its exact de-duplication), so every non-blank line already seen anywhere
earlier in the corpus is removed (blank lines stay: they delimit paragraphs), and a document left blank is
dropped. The only repetition left is planted: one document in 50 gets a near-duplicate (1-3 % of its words
substituted or deleted, the result ~0.8-0.95 alike in 5-word shingles), written to another file of
another format.

The sizes are nested: each document falls in one of 16 slots by a hash of its name; the 1/16 corpus holds
slot 0, the 1/4 corpus slots 0-3 and the full one all 16, a near-duplicate the slot of its original. So
the three share the composition and the share of duplicates, and a smaller corpus is a subset of the
larger. Within a size, each document goes to one of the three formats by a hash of its name, each format
into files of about 32 MB of text in corpus order; ``.txt`` files separate documents by ``<|endoftext|>``.
The output is deterministic (the same bytes on every run: gzip without a time stamp, Parquet from the
pinned pyarrow) and written atomically, one directory per size, under ``benchmarks/.data/scale/``
(git-ignored: never commit data).

The three sizes are built when one of them is missing, or with ``--rebuild``. ``--small-files N`` also
writes ``small/``: N files of about 1 KB, the full corpus's .jsonl.gz text cut at line
boundaries; ``--huge-gigabytes G`` writes ``huge/huge.jsonl``, one file of G GB: the full corpus's
documents, repeated (each copy with its own ``id``) until the size is reached, so exact de-duplication
drops the repeats. These two are for the task plan, not for the rates.

    python benchmarks/build_scale_corpus.py [--gigabytes 1.05] [--install] [--small-files 100000]
        [--huge-gigabytes 2] [--smoke]

``--smoke``: 4 MB of text from ``/usr/share/doc`` alone, in a temporary directory.
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import random
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import results
import xxhash

from pipeline.engine.atomic import atomic_dir

DATA = results.data_dir() / "scale"
PACKAGES = ("manpages", "manpages-dev", "python3.11-doc", "linux-source-6.1", "gcc-12-source")
TARBALLS = ("/usr/src/linux-source-*.tar.xz", "/usr/src/gcc-12/gcc-*.tar.xz")
TREES = (Path("/usr/share/man"), Path("/usr/share/doc"))
SIZES = {"sixteenth": 1, "quarter": 4, "full": 16}  # slots of 16 each size holds
FORMATS = ("txt", "jsonl.gz", "parquet")
SEPARATOR = "<|endoftext|>"
FILE_BYTES = 32_000_000
MAX_DOCUMENT_BYTES = 2_000_000
PLANTED_ONE_IN = 50
SMOKE_BYTES = 4_000_000
PARQUET_ROW_GROUP = 1000
_TAG = re.compile(r"<[^>]*>")


def install() -> None:
    subprocess.run(["apt-get", "install", "-y", "-q", *PACKAGES], check=True)


def decoded(data: bytes) -> str | None:
    """The UTF-8 text of a file's bytes, or None for binary, non-UTF-8 or oversized files."""
    if len(data) > MAX_DOCUMENT_BYTES or b"\x00" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.strip() and SEPARATOR not in text else None


def tarball_documents(pattern: str) -> Iterator[tuple[str, bytes]]:
    """Every regular member of the source tarballs matching ``pattern``, in archive order."""
    for tarball in sorted(Path("/").glob(pattern.lstrip("/"))):
        with tarfile.open(tarball, "r:xz") as archive:
            for member in archive:
                if member.isfile() and 0 < member.size <= MAX_DOCUMENT_BYTES:
                    yield member.name, archive.extractfile(member).read()


def tree_documents(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every regular file under ``root`` in sorted order, ``.gz`` decompressed, HTML as its text."""
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
            if path.suffix == ".gz":
                data = gzip.decompress(data)
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if path.suffix in (".html", ".htm"):
            data = html.unescape(_TAG.sub("", data.decode("utf-8", "replace"))).encode()
        yield str(path.relative_to(root.parent)), data


def source_documents(smoke: bool) -> Iterator[tuple[str, str]]:
    """(name, text) of every usable file of the sources, in corpus order."""
    sources = [tree_documents(TREES[1])] if smoke else [*map(tree_documents, TREES), *map(tarball_documents, TARBALLS)]
    for documents in sources:
        for name, data in documents:
            if (text := decoded(data)) is not None:
                yield name, text


class LineFilter:
    """Removes every non-blank line seen before (a 64-bit hash of it), so no line repeats across the corpus."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.kept = self.removed = 0

    def new_lines(self, text: str) -> str:
        kept = []
        for line in text.splitlines(keepends=True):
            if line.strip():
                key = xxhash.xxh64_intdigest(line.rstrip("\r\n").encode())
                if key in self.seen:
                    self.removed += len(line)
                    continue
                self.seen.add(key)
            kept.append(line)
            self.kept += len(line)
        return "".join(kept)


def near_copy(text: str, name: str) -> str:
    """A near-duplicate of ``text``: 1-3 % of its words substituted by another of its words or deleted."""
    rng = random.Random(xxhash.xxh64_intdigest(name.encode(), seed=1))
    rate = rng.uniform(0.01, 0.03)
    words = text.split(" ")
    edited = []
    for word in words:
        if rng.random() >= rate:
            edited.append(word)
        elif rng.random() < 0.5:
            edited.append(rng.choice(words))
    return " ".join(edited)


def slot_of(name: str) -> int:
    return xxhash.xxh64_intdigest(name.encode()) % 16


def format_of(name: str) -> str:
    return FORMATS[xxhash.xxh64_intdigest(name.encode(), seed=2) % len(FORMATS)]


def planted(name: str) -> bool:
    return xxhash.xxh64_intdigest(name.encode(), seed=3) % PLANTED_ONE_IN == 0


@dataclass
class FormatFiles:
    """The files of one format in one size's directory, each closed at about :data:`FILE_BYTES` of text."""

    directory: Path
    kind: str
    files: int = 0
    batch: list[tuple[str, str]] = field(default_factory=list)
    batch_bytes: int = 0

    def add(self, name: str, text: str) -> None:
        self.batch.append((name, text))
        self.batch_bytes += len(text.encode())
        if self.batch_bytes >= FILE_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        path = self.directory / f"part-{self.files:04d}.{self.kind}"
        write_file(path, self.kind, self.batch)
        self.files += 1
        self.batch, self.batch_bytes = [], 0


def write_file(path: Path, kind: str, documents: list[tuple[str, str]]) -> None:
    if kind == "txt":
        path.write_text(SEPARATOR.join(text for _, text in documents), "utf-8")
    elif kind == "jsonl.gz":
        lines = "".join(json.dumps({"text": text, "id": name}, ensure_ascii=False) + "\n" for name, text in documents)
        with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                                     compresslevel=1) as out:
            out.write(lines.encode())
    else:
        table = pa.table({"text": [text for _, text in documents], "id": [name for name, _ in documents]})
        pq.write_table(table, path, row_group_size=PARQUET_ROW_GROUP)


@dataclass
class Size:
    """One size of the corpus being written: its directory, its files per format and its counts."""

    name: str
    slots: int
    directory: Path
    formats: dict[str, FormatFiles] = field(default_factory=dict)
    documents: int = 0
    planted: int = 0
    text_bytes: int = 0

    def add(self, name: str, text: str) -> None:
        kind = format_of(name)
        if kind not in self.formats:
            self.formats[kind] = FormatFiles(self.directory, kind)
        self.formats[kind].add(name, text)
        self.documents += 1
        self.text_bytes += len(text.encode())

    def close(self) -> str:
        for files in self.formats.values():
            files.flush()
        disk = sum(path.stat().st_size for path in self.directory.iterdir())
        counts = ", ".join(f"{files.files} {kind}" for kind, files in sorted(self.formats.items()))
        return (f"{self.name}: {self.documents:,} documents ({self.planted:,} planted near-duplicates), "
                f"{self.text_bytes / 1e6:,.1f} MB of text, {disk / 1e6:,.1f} MB on disk in {counts} files")


def build(smoke: bool, gigabytes: float = 1.05) -> None:
    """The three sizes, the full one of ``gigabytes`` GB of text (4 MB for a smoke run)."""
    DATA.mkdir(parents=True, exist_ok=True)
    lines = LineFilter()
    with atomic_dir(DATA / "sixteenth") as sixteenth, atomic_dir(DATA / "quarter") as quarter, \
            atomic_dir(DATA / "full") as full:
        sizes = [Size(name, slots, directory)
                 for (name, slots), directory in zip(SIZES.items(), (sixteenth, quarter, full), strict=True)]
        for name, text in source_documents(smoke):
            text = lines.new_lines(text)
            if not text.strip():
                continue
            copy = near_copy(text, name) if planted(name) else None
            for size in sizes:
                if slot_of(name) < size.slots:
                    size.add(name, text)
                    if copy is not None:
                        size.add(f"{name}#near", copy)
                        size.planted += 1
            if sizes[-1].text_bytes >= (SMOKE_BYTES if smoke else gigabytes * 1e9):
                break
        summaries = [size.close() for size in sizes]
        if not smoke and sizes[-1].text_bytes < gigabytes * 1e9:
            raise SystemExit(f"only {sizes[-1].text_bytes / 1e9:.2f} GB of text; install {' '.join(PACKAGES)} "
                             f"(--install)")
    print(f"lines: {lines.removed / max(lines.kept + lines.removed, 1):.1%} of characters removed as repeated")
    print("\n".join(summaries))


def write_small_files(count: int) -> None:
    """``count`` files of about 1 KB, cut at line boundaries from the full corpus's .jsonl.gz documents."""
    with atomic_dir(DATA / "small") as directory:
        written = 0
        piece: list[str] = []
        for text in corpus_texts(DATA / "full"):
            for line in text.splitlines(keepends=True):
                piece.append(line)
                if sum(map(len, piece)) >= 1000:
                    (directory / f"{written // 1000:03d}").mkdir(exist_ok=True)
                    (directory / f"{written // 1000:03d}" / f"{written:06d}.txt").write_text("".join(piece), "utf-8")
                    written, piece = written + 1, []
                    if written == count:
                        print(f"small: {count:,} files of about 1 KB")
                        return
    raise SystemExit(f"the full corpus's .jsonl.gz files hold only {written:,} pieces of 1 KB")


def write_huge_file(gigabytes: float) -> None:
    """One .jsonl file of ``gigabytes`` GB: the full corpus's .jsonl.gz documents, repeated under new ids."""
    with atomic_dir(DATA / "huge") as directory, open(directory / "huge.jsonl", "w", encoding="utf-8") as out:
        written, round_ = 0, 0
        while written < gigabytes * 1e9:
            for number, text in enumerate(corpus_texts(DATA / "full")):
                written += out.write(json.dumps({"text": text, "id": f"{round_}-{number}"}, ensure_ascii=False) + "\n")
                if written >= gigabytes * 1e9:
                    break
            round_ += 1
    print(f"huge: one .jsonl file of {written / 1e9:.2f} GB ({round_} passes over the full corpus's .jsonl.gz)")


SOURCE_LINES = {"txt": '    - {{glob: "{raw}/*.txt", separator: "<|endoftext|>"}}',
                "jsonl.gz": '    - {{glob: "{raw}/*.jsonl.gz", field: text}}',
                "parquet": '    - {{glob: "{raw}/*.parquet", field: text}}'}


def source_lines(size: str, raw: str) -> str:
    """The ``data.sources`` lines of a config that reads ``size``'s files from ``raw`` (where they are, or a
    copy of them): one source for each format the size's directory holds (a smoke run's corpus may lack one)."""
    formats = [kind for kind in FORMATS if any((DATA / size).glob(f"*.{kind}"))]
    return "\n".join(SOURCE_LINES[kind].format(raw=raw) for kind in formats)


def corpus_texts(directory: Path) -> Iterator[str]:
    for path in sorted(directory.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)["text"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.05, help="text in the full corpus [%(default)s]")
    parser.add_argument("--rebuild", action="store_true", help="build the three sizes even where they exist")
    parser.add_argument("--install", action="store_true", help=f"apt-get install {' '.join(PACKAGES)} first")
    parser.add_argument("--small-files", type=int, default=0, help="also write this many files of about 1 KB")
    parser.add_argument("--huge-gigabytes", type=float, default=0.0, help="also write one .jsonl file this large")
    results.add_arguments(parser)
    args = parser.parse_args()
    if args.install:
        install()
    if args.rebuild or args.smoke or not all((DATA / size).is_dir() for size in SIZES):
        build(args.smoke, args.gigabytes)
    else:
        for size in SIZES:
            files = sorted((DATA / size).iterdir())
            print(f"{size}: built before, {len(files)} files, {sum(f.stat().st_size for f in files) / 1e6:,.1f} MB")
    if args.small_files or args.smoke:
        write_small_files(args.small_files or 100)
    if args.huge_gigabytes or args.smoke:
        write_huge_file(args.huge_gigabytes or 0.004)


if __name__ == "__main__":
    results.run("build_scale_corpus", main)
