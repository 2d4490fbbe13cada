"""Prepared document files read back in pieces: a long document is never one string where pieces will do."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data import chunk_counts, documents
from pipeline.tokenizer import _train_count
from pipeline.tokenizer.patterns import CUT_CHARS, GPT2, GPT4, WORD

LONG = ("Déjà vu, 日本語 😀 and\nsome more words " * 200_000)[:4_000_000]  # one document of some 7 MB


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(max_size=60), max_size=5), piece_bytes=st.integers(4, 32))
def test_pieces_are_cut_between_characters_and_make_each_document(tmp_path_factory, texts, piece_bytes):
    path = tmp_path_factory.mktemp("docs") / "part.arrow"
    documents.write_documents(path, texts)
    pieces = list(documents.iter_document_pieces(path, piece_bytes=piece_bytes))
    assert all(len(text.encode("utf-8")) <= max(piece_bytes, 4) for text, _ in pieces)  # a character may take 4
    joined, current = [], ""
    for text, ends in pieces:
        current += text
        if ends:
            joined.append(current)
            current = ""
    assert joined == texts and current == ""


@pytest.mark.parametrize("pattern", [GPT4, GPT2, WORD])
def test_a_long_document_is_counted_in_pieces_with_the_counts_of_the_whole(tmp_path, monkeypatch, pattern):
    path = tmp_path / "part.arrow"
    documents.write_documents(path, ["a short one", LONG, ""])
    longest = []

    def recording(texts, **options):
        texts = list(texts)
        longest.append(max(map(len, texts)))
        return _train_count.tally(texts, **options)

    monkeypatch.setattr(chunk_counts, "tally", recording)
    counts = _train_count.as_dict(chunk_counts.count_part(pattern, path))
    assert longest[0] <= CUT_CHARS + documents.PIECE_BYTES < len(LONG)  # the document was never handed over whole
    assert counts == Counter(_train_count.count_chunks(documents.iter_documents(path), pattern=pattern, workers=1))


def test_a_part_counted_without_the_native_core_gives_the_same_counts(tmp_path, monkeypatch):
    """Natively a task's counts are a ChunkCounter (one buffer when pickled), on the Python path a Counter."""
    from pipeline.tokenizer import backend

    path = tmp_path / "part.arrow"
    documents.write_documents(path, ["a short one", "Déjà vu, 日本語 😀 and\nmore", ""])
    counts = chunk_counts.count_part(GPT4, path)
    assert isinstance(counts, dict) == (backend.native is None)
    monkeypatch.setattr(backend, "native", None)
    python = chunk_counts.count_part(GPT4, path)
    assert isinstance(python, Counter)
    assert _train_count.as_dict(counts) == python
