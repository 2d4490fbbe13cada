"""Byte-, character- and word-level tokenizers: BPE training, exact fast encoding, tokenizer.json, tiktoken export.

``reference`` (BPE written plainly, the oracle of the tests: read it first), ``trainer`` with
``_train_count`` and ``_train_pairs`` (the fast trainer), ``encoder`` (the fast encoder), ``core``
(``Tokenizer``, read-only once built), ``layout`` (the IDs before the first merge), ``patterns`` (the
split patterns and the one split), ``word`` (the word kind), ``hf_json``/``hf_dir`` (HF files),
``tiktoken_export``, ``sweep`` (vocabulary sizes compared) and ``trace`` (BPE merge by merge). May
import only the engine's atomic writes, storage, hashing and pool: nothing of executors or documents.

``from pipeline.tokenizer import Tokenizer``. Importing this package loads no heavy modules (no torch,
no HF tokenizers, no tiktoken).
"""

from pipeline.tokenizer.core import Tokenizer

__all__ = ["Tokenizer"]
