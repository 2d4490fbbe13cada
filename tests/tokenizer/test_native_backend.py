"""Choosing the backend: the native core when it loads, the Python path when asked or when it does not."""

from __future__ import annotations

import importlib
import os
import random
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import needs_native_core

from pipeline.tokenizer import Tokenizer, backend, encoder, patterns

needs_native = needs_native_core()


def test_version_names_the_backend():
    from stages.cli.main import cli

    output = CliRunner().invoke(cli, ["--version"]).output
    assert output.startswith("lmprep, version ") and f"(tokenizer backend: {backend.name()})" in output


def test_the_environment_variable_forces_the_python_path(monkeypatch, capsys):
    monkeypatch.setenv(backend.ENVIRONMENT_VARIABLE, "python")
    assert backend._load() is None
    assert capsys.readouterr().err == ""


def test_a_core_that_does_not_load_is_one_warning_line_and_the_python_path(monkeypatch, capsys):
    def broken(name):
        raise ImportError(f"cannot load {name}")

    monkeypatch.delenv(backend.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(importlib, "import_module", broken)
    assert backend._load() is None
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "native tokenizer core does not load" in lines[0] and "Python path" in lines[0]


def test_an_unknown_backend_name_is_said_and_native_is_tried(monkeypatch, capsys):
    monkeypatch.setenv(backend.ENVIRONMENT_VARIABLE, "fortran")
    assert backend._load() is backend.native or backend.native is None
    assert "'fortran' is not a backend" in capsys.readouterr().err


def test_a_tokenizer_built_on_the_python_path_stays_on_it(monkeypatch):
    monkeypatch.setattr(backend, "native", None)
    tokenizer = Tokenizer.from_merges(kind="byte", pattern=patterns.GPT4, merges=[(97, 98)])
    assert isinstance(tokenizer._encoder, encoder.PythonEncoder)
    monkeypatch.undo()
    assert tokenizer.encode_ordinary("abab x") == [256, 256, 32, 120]


@needs_native
def test_every_pattern_encodes_natively_a_custom_one_split_by_regex_first():
    for name in ("gpt4", "gpt2", "none"):
        pattern = patterns.resolve_pattern(name, kind="byte")
        fast = Tokenizer.from_merges(kind="byte", pattern=pattern, merges=[])._encoder
        assert isinstance(fast, encoder.NativeEncoder) and fast._split is None
    custom = Tokenizer.from_merges(kind="byte", pattern=patterns.resolve_pattern(r"\w+", kind="byte"),
                                   merges=[(97, 98)])
    assert isinstance(custom._encoder, encoder.NativeEncoder) and custom._encoder._split is not None
    assert custom.encode_ordinary("ab ab") == [256, 32, 256]


@needs_native
@pytest.mark.parametrize("threads", [1, 3])
def test_the_native_cache_keeps_its_byte_bound(threads):
    """Distinct 200-character documents with pattern none: the cache starts over, never passes its bound,
    and the IDs never depend on it, whatever the number of threads."""
    tokenizer = Tokenizer.from_merges(kind="char", pattern="", alphabet=list("abc"),
                                      merges=[(1, 2), (4, 3), (3, 3), (5, 1), (6, 6)])
    unbounded = Tokenizer.from_merges(kind="char", pattern="", alphabet=list("abc"),
                                      merges=[(1, 2), (4, 3), (3, 3), (5, 1), (6, 6)])
    tokenizer.bound_cache(20_000)
    cache = tokenizer._encoder
    rng = random.Random(3)
    for _ in range(10):
        texts = ["".join(rng.choice("abc") for _ in range(200)) for _ in range(30)]
        assert tokenizer.encode_batch_flat(texts, threads=threads)[0].tolist() == \
            unbounded.encode_batch_flat(texts)[0].tolist()
        assert 0 < cache.nbytes <= 20_000 and 0 < len(cache) <= 20_000 // 200
    long_text = "ab" * 200  # longer than any cached chunk: encoded, never kept
    before = len(cache)
    assert tokenizer.encode_ordinary(long_text) == unbounded.encode_ordinary(long_text)
    assert len(cache) == before


@needs_native
def test_threads_sharing_one_tokenizer_get_the_ids_of_one_thread(tokenizer_corpus):
    tokenizer = Tokenizer.train(tokenizer_corpus, vocab_size=300, workers=1)
    texts = [text[start:] for text in tokenizer_corpus for start in range(0, 40, 3)]
    want = [tokenizer.encode_ordinary(text) for text in texts]
    fresh = Tokenizer.from_merges(kind="byte", pattern=tokenizer.pattern, merges=tokenizer.merges)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(fresh.encode_ordinary, texts * 4))
    assert got == want * 4


@pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None, reason="no C++ compiler: the core is optional")
@pytest.mark.skipif(os.environ.get(backend.ENVIRONMENT_VARIABLE, "").strip().lower() == "python",
                    reason="the Python path is forced")
def test_where_a_compiler_is_the_core_is_built_from_the_current_sources():
    """The build is optional, so a compile error only warns during the install and leaves the Python path
    (or an older build) in place; where a compiler is at hand, that must fail here instead."""
    assert backend.native is not None, "the native core did not build: run `pip install -e .` and read its errors"
    built = Path(backend.native.__file__).stat().st_mtime
    sources = Path(backend.__file__).parent.glob("_native*.[ch]*")
    stale = [source.name for source in sources if source.stat().st_mtime > built and source.suffix in {".cpp", ".h"}]
    assert not stale, f"the native core is older than {stale}: rebuild it with `pip install -e .`"


@needs_native
@pytest.mark.parametrize("kind", ["byte", "char"])
def test_the_cache_starts_with_every_token_under_what_its_text_encodes_to(kind):
    """A fresh encoder's cache holds the text of each token a merge makes; "abc", made by (ab, c) after
    (b, c), encodes to [a, bc] (what the merges make of it alone, as the Python path says), not to its
    own ID. A token whose bytes are not UTF-8 (no chunk is spelt so) is not kept."""
    alphabet = list("abcé")
    first = 256 if kind == "byte" else len(alphabet) + 1
    a, b, c = ((ord(x) for x in "abc") if kind == "byte" else range(1, 4))
    merges = [(b, c), (a, b), (first + 1, c)]  # bc, ab, abc
    if kind == "byte":
        merges.append((0xC3, 0x61))  # b"\xc3a": not UTF-8
    fast = Tokenizer.from_merges(kind=kind, pattern="", alphabet=alphabet, merges=merges)
    assert len(fast._encoder) == 3
    assert fast.token_bytes(first + 2) == b"abc"
    assert fast.encode_ordinary("abc") == [a, first] != [first + 2]
    assert fast.encode_ordinary("abc") == encoder.PythonEncoder(
        lambda text: [text], fast._base_ids_function(), {pair: r for r, pair in enumerate(merges)},
        fast._merge_results).ids("abc")
