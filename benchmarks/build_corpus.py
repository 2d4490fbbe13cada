"""Build a real-text benchmark corpus from documentation already installed on this machine (no network).

Sources, in this order: licence texts, man pages (roff source, decompressed), package documentation
(READMEs, changelogs, copyright files; .gz decompressed), Python standard-library sources. Each file
is one document; files that are not UTF-8 text or are exact duplicates are skipped. The result is one
JSON Lines file, one ``{"text": ...}`` object per document, so document boundaries are exact and any
character survives; it is written atomically and is not committed (``benchmarks/.data/`` is ignored).

    python benchmarks/build_corpus.py [--megabytes 100] [--out benchmarks/.data/corpus.jsonl]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.atomic import atomic_path  # noqa: E402

DEFAULT_OUT = ROOT / "benchmarks" / ".data" / "corpus.jsonl"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=100.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    count = size = 0
    with atomic_path(args.out) as temporary, open(temporary, "w", encoding="utf-8") as out:
        for text in documents(int(args.megabytes * 1e6)):
            out.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            count += 1
            size += len(text.encode())
    print(f"{args.out}: {count} documents, {size / 1e6:.1f} MB of text")


if __name__ == "__main__":
    main()
