"""Byte- and character-level BPE: training, exact fast encoding, HF ``tokenizer.json`` and tiktoken export.

``from pipeline.tokenizer import Tokenizer``. Importing this package loads no
heavy modules (no torch, no HF tokenizers, no tiktoken).
"""

from pipeline.tokenizer.core import Tokenizer

__all__ = ["Tokenizer"]
