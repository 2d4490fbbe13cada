"""One load of a tokenizer file per process: a file whose bytes were loaded before is not parsed again.

Reading a config with a frozen tokenizer (``tokenizer.path``) loads the file to learn its settings, and the
encode stage loads the copy the tokenizer stage made of it: a run parses one file once, however many names it
has. A file's content is known by its sha256 (hashing costs far less than parsing), a remote one's by its URL
with the store's size and ETag (one metadata request, no read).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipeline.engine import hashing, locations, storage

if TYPE_CHECKING:
    from pipeline.tokenizer import Tokenizer

_LOADED: dict[str, Tokenizer] = {}  # content identity -> the tokenizer loaded from it


def load(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of ``path``, loaded now unless a file of the same content was (TokenizerFormatError, as
    :meth:`Tokenizer.load <pipeline.tokenizer.core.Tokenizer.load>`, for a missing or malformed file)."""
    from pipeline.tokenizer import Tokenizer

    try:
        identity = content_identity(path)  # before loading: a file replaced meanwhile is loaded again next time
    except OSError:
        return Tokenizer.load(path)  # which says what is wrong with it
    if identity not in _LOADED:
        _LOADED[identity] = Tokenizer.load(path)
    return _LOADED[identity]


def content_identity(path: str | os.PathLike[str]) -> str:
    """What changes when the file's bytes change: their sha256, or a remote file's URL, size and ETag."""
    if locations.is_url(path):
        return hashing.canonical_hash([os.fspath(path), storage.stamp(path)])
    return hashing.sha256_file(path)
