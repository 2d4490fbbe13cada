"""Shared test fixtures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def replace_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """Reference BPE step: replace every non-overlapping occurrence of ``pair``, left to right."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# --- model and checkpoint tests: a minimal stand-in for the tokenizer the guard reads


@dataclass
class FakeTokenizer:
    """The attributes the checkpoint guard and the trainer read, for a byte-level BPE."""

    merges: list[tuple[int, int]]
    kind: str = "byte"
    pattern: str = ""
    special_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges) + len(self.special_tokens)

    @property
    def fingerprint(self) -> str:
        from pipeline.hashing import canonical_hash

        return canonical_hash([self.kind, self.pattern, self.special_tokens, self.merges])

    def token_bytes(self, id: int) -> bytes:
        if id < 256:
            return bytes([id])
        a, b = self.merges[id - 256]
        return self.token_bytes(a) + self.token_bytes(b)


@pytest.fixture
def fake_tokenizer():
    """Factory: ``fake_tokenizer(merges, kind=..., special_tokens=...)``."""
    return FakeTokenizer


# --- tokenizer tests: tiny tokenizers trained once per session on a small multilingual corpus

TOKENIZER_CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away!\n"
    "It's 2024 and we're testing 12345 numbers, don't we? I'll see, you've seen.\n",
    "Les élèves étudient; les élèves écrivent; les enseignantes étudient à l'école.\n"
    "Déjà, l’élève québécois écrit à l’hôpital. Über die Brücke gehen Mädchen und Jungen.\n",
    "日本語のテキストも少し入れます。東京は日本の首都です。中文也可以。한국어 문장도 있습니다.\n",
    "Emoji 😀😀 and flags 🇫🇷, combining marks: e\u0301 a\u0308 n\u0303, tabs\tand\r\nwindows lines.\n",
    "def encode(text: str) -> list[int]:\n    return [ord(c) for c in text]  # code\n\n\n    \n",
    "low lower lowest newer newest wider widest " * 3 + "\n",
]
SPECIAL = "<|endoftext|>"


@pytest.fixture(scope="session")
def tokenizer_corpus() -> list[str]:
    return list(TOKENIZER_CORPUS)


@pytest.fixture(scope="session")
def byte_tokenizer():
    """Byte kind, GPT-4 pattern, one special token, 400 IDs."""
    from pipeline.tokenizer import Tokenizer

    return Tokenizer.train(TOKENIZER_CORPUS * 2, vocab_size=400, special_tokens=[SPECIAL], workers=1)


@pytest.fixture(scope="session")
def char_tokenizer():
    """Char kind, no pre-split, newline never merged, one special token."""
    from pipeline.tokenizer import Tokenizer

    return Tokenizer.train(TOKENIZER_CORPUS * 2, vocab_size=300, kind="char", special_tokens=[SPECIAL], workers=1)


@pytest.fixture(scope="session")
def trained_tokenizers(byte_tokenizer, char_tokenizer):
    """Every supported kind/pattern combination (for parity tests)."""
    from pipeline.tokenizer import Tokenizer

    extra = [
        Tokenizer.train(TOKENIZER_CORPUS, vocab_size=350, pattern=pattern, kind=kind, workers=1,
                        special_tokens=[SPECIAL, "<|pad|>"])
        for kind, pattern in [("byte", "gpt2"), ("byte", "none"), ("byte", r"\w+"), ("char", "gpt4")]
    ]
    return [byte_tokenizer, char_tokenizer, *extra]


class StartOrder(ThreadPoolExecutor):
    """One thread, so partition tasks start in submission order; records each task's label as submitted."""

    def __init__(self) -> None:
        super().__init__(1)
        self.labels: list[str] = []

    def submit(self, function, /, *args, **kwargs):
        self.labels.append(args[1])  # run_task(function, label, item)
        return super().submit(function, *args, **kwargs)


@pytest.fixture
def start_order():
    """An executor for ``Tasks`` that records the order in which the tasks start."""
    with StartOrder() as executor:
        yield executor


# --- CLI tests: a tiny project in a temp directory


def make_project(root: Path, config: str) -> Path:
    """A project in ``root``: 40 question/answer documents in ``raw/a.txt`` and ``config`` as ``lmprep.yaml``."""
    (root / "raw").mkdir()
    (root / "raw" / "a.txt").write_text("\n\n".join(f"Q: what is {i}?\nA: it is {i}." for i in range(40)))
    (root / "lmprep.yaml").write_text(config)
    return root
