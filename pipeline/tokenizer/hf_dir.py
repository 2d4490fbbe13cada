"""The two small files beside ``tokenizer.json`` that make its directory a Hugging Face tokenizer directory.

``transformers.AutoTokenizer.from_pretrained(directory)`` reads
``tokenizer_config.json`` (which class to build, the special-token roles,
how to decode) and ``special_tokens_map.json`` (the roles again, for older
readers), then the vocabulary and merges from ``tokenizer.json``. Without them
``eos_token`` and ``bos_token`` are None, and ``decode`` cleans up spaces
before punctuation (``"a ."`` becomes ``"a."``), so text would not round-trip; without a pad
token, ``tokenizer(texts, padding=True)`` raises.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pipeline.engine import locations, storage

TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"


def companion_paths(tokenizer_path: str | os.PathLike[str]) -> tuple[str, str]:
    """The paths (or URLs) of the two files written beside ``tokenizer_path``."""
    directory = locations.parent(tokenizer_path)
    return str(locations.join(directory, TOKENIZER_CONFIG)), str(locations.join(directory, SPECIAL_TOKENS_MAP))


def pad_token(*, eos_token: str | None, special_tokens: Sequence[str]) -> str | None:
    """The token ``padding=True`` pads with: the end-of-text token, as GPT-2 users set it by hand, else the
    first special token; None for a tokenizer with no special token (transformers then refuses to pad).

    A pad position is masked out (``attention_mask`` 0), so sharing the EOS token changes no ID and no
    fingerprint."""
    return eos_token if eos_token is not None else next(iter(special_tokens), None)


def special_tokens_map(*, eos_token: str | None, bos_token: str | None, pad_token: str | None) -> dict[str, str]:
    """Role → token text, for the roles the pipeline gives a token (a role left unset is left out)."""
    roles = {"eos_token": eos_token, "bos_token": bos_token, "pad_token": pad_token}
    return {role: token for role, token in roles.items() if token is not None}


def tokenizer_config(*, eos_token: str | None, bos_token: str | None, pad_token: str | None,
                     model_max_length: int) -> dict[str, Any]:
    """``tokenizer_config.json``: the fast tokenizer class, the special-token roles, exact decoding and the
    longest input (where ``truncation=True`` cuts).

    ``add_bos_token``/``add_eos_token`` stay false: lmprep's shards carry BOS/EOS because the encode
    stage inserts their IDs per document, never because the tokenizer adds them.
    """
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": model_max_length,
        **special_tokens_map(eos_token=eos_token, bos_token=bos_token, pad_token=pad_token),
    }


def write_companions(tokenizer_path: str | os.PathLike[str], *, eos_token: str | None, bos_token: str | None,
                     special_tokens: Sequence[str], model_max_length: int) -> str | None:
    """Write ``tokenizer_config.json`` and ``special_tokens_map.json`` beside ``tokenizer_path``, each whole
    (renamed into place locally, one request remotely); return the pad token they name."""
    config_path, map_path = companion_paths(tokenizer_path)
    pad = pad_token(eos_token=eos_token, special_tokens=special_tokens)
    roles = dict(eos_token=eos_token, bos_token=bos_token, pad_token=pad)
    storage.write_json(config_path, tokenizer_config(**roles, model_max_length=model_max_length))
    storage.write_json(map_path, special_tokens_map(**roles))
    return pad
