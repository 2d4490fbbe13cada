"""The rejected documents the report shows: a bounded, deterministic sample per step and rule.

Every rejected part is streamed once, in record batches. Per ``step/rule`` the sample keeps the ``size``
documents whose IDs hash lowest (a bottom-k sample: the same run gives the same sample, for any number of
parts or workers, and a rule's sample does not lean towards the corpus's first files); memory holds ``size``
documents per rule whatever the number rejected. A second pass over the kept and rejected parts finds the
text of each sampled duplicate's ``duplicate_of`` document, matching only the IDs wanted. Texts are cut to
:data:`MAX_TEXT_CHARS`, and the differences of a duplicate and its original are computed on word pieces.
"""

from __future__ import annotations

import difflib
import hashlib
import heapq
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data import documents
from pipeline.engine import storage

MAX_TEXT_CHARS = 2_000  # of each sampled text (and of the duplicate it repeats) on the page
MAX_SAMPLE_CHARS = 1 << 20  # all the sample's texts together: the largest rules' samples shrink first
MAX_METADATA = 20  # metadata columns shown per document
_COLUMNS = frozenset({"text", "source", "document", "step", "rule", "duplicate_of", "rewritten"})
_PIECES = re.compile(r"\s+|\w+|[^\w\s]", re.UNICODE)


@dataclass
class Sampled:
    key: int
    text: str
    chars: int  # the whole text's length
    source: int
    document: str
    step: str
    rule: str
    duplicate_of: str
    rewritten: str | None = None  # what a rewriting step had made of the text when a later step dropped it
    metadata: dict[str, Any] = field(default_factory=dict)  # the chain's metadata columns (language, score, ...)
    original: str | None = None
    original_chars: int = 0

    def to_dict(self, sources: list[str]) -> dict[str, Any]:
        item: dict[str, Any] = {"text": self.text, "chars": self.chars, "source": self.source,
                                "source_name": sources[self.source] if 0 <= self.source < len(sources) else "?",
                                "document": self.document, "file": raw_file(self.document),
                                "reason": f"{self.step}/{self.rule}", "metadata": self.metadata}
        if self.rewritten is not None and self.rewritten != self.text:
            item["rewritten"] = self.rewritten
        if self.duplicate_of:
            item["duplicate_of"] = self.duplicate_of
            if self.original is not None:
                item["original"] = self.original
                item["original_chars"] = self.original_chars
                item["diff"] = differences(self.original, self.text)
        return item


@dataclass
class RejectedSample:
    """Per ``step/rule``: how many documents it dropped and the sampled ones."""

    counts: dict[str, int] = field(default_factory=dict)
    sample: dict[str, list[Sampled]] = field(default_factory=dict)

    def to_dict(self, sources: list[str]) -> dict[str, Any]:
        return {"counts": dict(sorted(self.counts.items())),
                "sample": {reason: [item.to_dict(sources) for item in items]
                           for reason, items in sorted(self.sample.items())}}


def sample_key(document: str) -> bytes:
    return hashlib.blake2b(document.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def raw_file(document: str) -> str:
    """The raw file a document ID names: its part before ``#`` and before any range a task read of it."""
    file = document.rpartition("#")[0] or document
    return re.sub(r" (bytes|row groups) [0-9]+-([0-9]+|end)$", "", file)


def sample_rejected(parts: Iterable[str], size: int) -> RejectedSample:
    """Counts per ``step/rule`` of every document in the rejected ``parts`` (paths or URLs) and the bottom-``size``
    sample of each by the hash of their IDs."""
    result = RejectedSample()
    heaps: dict[str, list[tuple[int, int, Sampled]]] = {}  # per reason, a max-heap (negated) of the lowest keys
    order = 0
    for batch in _batches(parts):
        wanted = ("step", "rule", "document") if size else ("step", "rule")
        columns = {name: batch.column(name).to_pylist() for name in wanted}
        for row in range(batch.num_rows):
            reason = f"{columns['step'][row]}/{columns['rule'][row]}"
            result.counts[reason] = result.counts.get(reason, 0) + 1
            if not size:
                continue
            document = columns["document"][row]
            key = int.from_bytes(sample_key(document), "big")
            heap = heaps.setdefault(reason, [])
            if len(heap) >= size and key >= -heap[0][0]:
                continue
            text = batch.column("text")[row].as_py()
            order += 1
            item = Sampled(key, text[:MAX_TEXT_CHARS], len(text), int(batch.column("source")[row].as_py()), document,
                           columns["step"][row], columns["rule"][row], batch.column("duplicate_of")[row].as_py() or "",
                           metadata=_metadata(batch, row))
            if "rewritten" in batch.schema.names:
                item.rewritten = (batch.column("rewritten")[row].as_py() or "")[:MAX_TEXT_CHARS]
            if len(heap) < size:
                heapq.heappush(heap, (-key, order, item))
            else:
                heapq.heapreplace(heap, (-key, order, item))
    for reason, heap in heaps.items():
        result.sample[reason] = sorted((item for _, _, item in heap), key=lambda item: (item.key, item.document))
    _fit(result.sample)
    return result


def _metadata(batch: pa.RecordBatch, row: int) -> dict[str, Any]:
    """The row's other columns (at most :data:`MAX_METADATA`, each value as JSON allows, a text cut to 200)."""
    found: dict[str, Any] = {}
    for name in batch.schema.names:
        if name in _COLUMNS or len(found) >= MAX_METADATA:
            continue
        value = batch.column(name)[row].as_py()
        if isinstance(value, str):
            value = value[:200]
        elif not isinstance(value, int | float | bool) and value is not None:
            value = str(value)[:200]
        found[name] = value
    return found


def _fit(sample: dict[str, list[Sampled]]) -> None:
    """Drop the last-ranked documents of the largest samples until all texts fit in :data:`MAX_SAMPLE_CHARS`."""
    def total() -> int:
        return sum(len(item.text) + 2 * bool(item.duplicate_of) * MAX_TEXT_CHARS for items in sample.values()
                   for item in items)

    while total() > MAX_SAMPLE_CHARS:
        largest = max(sample, key=lambda reason: (len(sample[reason]), reason))
        sample[largest].pop()


def attach_originals(sample: RejectedSample, parts: Iterable[str]) -> None:
    """Fill in each sampled duplicate's original text from ``parts`` (kept and rejected), reading only matches."""
    wanted: dict[str, list[Sampled]] = {}
    for items in sample.sample.values():
        for item in items:
            if item.duplicate_of:
                wanted.setdefault(item.duplicate_of, []).append(item)
    if not wanted:
        return
    ids = documents.text_column(sorted(wanted))
    for batch in _batches(parts, columns=("text", "document")):
        hits = pc.is_in(batch.column("document"), value_set=ids)
        if not pc.any(hits).as_py():
            continue
        found = batch.filter(hits).to_pydict()
        for text, document in zip(found["text"], found["document"], strict=True):
            for item in wanted.pop(document, []):
                item.original, item.original_chars = text[:MAX_TEXT_CHARS], len(text)
        if not wanted:
            return


def _batches(parts: Iterable[str], columns: tuple[str, ...] | None = None) -> Iterator[pa.RecordBatch]:
    for part in parts:
        with storage.local_copy(part) as path, pa.OSFile(str(path), "rb") as file:
            reader = pa.ipc.open_stream(file)
            if columns and not set(columns) <= set(reader.schema.names):
                continue
            for batch in reader:
                yield batch.select(list(columns)) if columns else batch


def differences(original: str, duplicate: str) -> list[list[str]]:
    """``[[op, original piece, duplicate piece], ...]`` with op ``=`` (the same), ``-`` (only in the original),
    ``+`` (only in the duplicate) or ``~`` (replaced), on word pieces, neighbours of one op joined."""
    a, b = _PIECES.findall(original), _PIECES.findall(duplicate)
    ops: list[list[str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        op = {"equal": "=", "delete": "-", "insert": "+", "replace": "~"}[tag]
        left, right = "".join(a[i1:i2]), "".join(b[j1:j2])
        if ops and ops[-1][0] == op:
            ops[-1][1] += left
            ops[-1][2] += right
        else:
            ops.append([op, left, right])
    for op in ops:  # the same text once: the page shows it on both sides
        if op[0] == "=":
            op[2] = ""
    return ops
