"""The ``tokenizer`` stage: train a BPE tokenizer on the prepared train split, or reuse a frozen one.

Either way its output is ``tokenizer.output``, the file every later stage
reads, with ``tokenizer_config.json`` and ``special_tokens_map.json`` beside it
(the EOS/BOS roles of ``encode.eos_token``/``encode.bos_token``, a pad token and
``tokenizer.model_max_length``), so that the directory loads with
``transformers.AutoTokenizer.from_pretrained`` and pads. With ``tokenizer.path`` set the stage only
validates that file and writes the tokenizer it describes there, and depends on that file alone, not on
the prepared data: a data change then re-runs prepare, encode and train but never this
stage, the fingerprint stays the same, and training can resume.

The frozen file is written as lmprep writes every tokenizer.json, not copied: a file lmprep wrote comes out
byte for byte, and any other accepted file (HF's own, or one with a value HF would refuse, such as ``0`` for
``false``) comes out as one that HF loads and that gives the same IDs, with the same fingerprint (which
hashes the tokenizer, not the file's bytes). The stage's line says when the bytes differ.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from pipeline.config import Config
from pipeline.data.cleaning import split_dir
from pipeline.engine import stage_log, storage
from pipeline.engine.runner import Stage
from pipeline.errors import AlphabetTooLargeError
from pipeline.tokenizer import hf_dir
from stages.console import PROGRESS, say
from stages.encode import special_id

if TYPE_CHECKING:
    from pipeline.tokenizer import Tokenizer

TRAINING_KEYS = ("kind", "vocab_size", "merges", "pattern", "merge_newlines", "min_frequency", "character_coverage",
                 "special_tokens")
ROLE_KEYS = ("encode.eos_token", "encode.bos_token")  # the special-token roles written for transformers
COMPANION_KEYS = (*ROLE_KEYS, "tokenizer.model_max_length")  # what else the transformers files hold


CODE_VERSION = 4  # 3: tokenizer_config.json, special_tokens_map.json beside it; 4: a pad token, model_max_length
# With tokenizer.path (a trained tokenizer's output did not change): 5: written as lmprep writes it, not copied
REUSE_CODE_VERSION = 5


def build(config: Config) -> Stage:
    settings = config.tokenizer
    output = config.out(settings.output)
    outs = (output, *hf_dir.companion_paths(output))
    if settings.path is not None:
        source = config.input(settings.path)
        return Stage(name="tokenizer", deps=(source,), outs=outs,
                     params=("tokenizer.path", "tokenizer.output", *COMPANION_KEYS),
                     run=functools.partial(reuse, config),
                     code_version=REUSE_CODE_VERSION, reusable=True, mode=f"reusing tokenizer.path {settings.path}",
                     keys={source: "tokenizer.path", **dict.fromkeys(outs, "tokenizer.output")})
    return Stage(
        name="tokenizer",
        deps=(str(split_dir(config.out(config.prepare.output_dir), "train")),),
        outs=outs,
        params=("tokenizer.path", "tokenizer.output", *(f"tokenizer.{key}" for key in TRAINING_KEYS), *COMPANION_KEYS),
        run=functools.partial(train, config),
        code_version=CODE_VERSION,
        reusable=True,
        mode="training on the prepared data",
        keys=dict.fromkeys(outs, "tokenizer.output"),
    )


def train(config: Config) -> None:
    """Byte and char kinds: chunks counted by partition tasks, merges here; the word kind trains in-process."""
    from pipeline.data import documents
    from pipeline.data.chunk_counts import count_prepared
    from pipeline.engine.executor import open_tasks
    from pipeline.tokenizer import Tokenizer
    from pipeline.tokenizer.patterns import chunk_aligned, resolve_pattern

    settings, prepared, output = (config.tokenizer, config.output_path(config.prepare.output_dir),
                                  config.output_path(config.tokenizer.output))
    options = dict(vocab_size=settings.vocab_size, kind=settings.kind, pattern=settings.pattern,
                   special_tokens=settings.special_tokens, min_frequency=settings.min_frequency,
                   merges=settings.merges, merge_newlines=settings.merge_newlines,
                   character_coverage=settings.character_coverage, progress=PROGRESS)
    if settings.kind == "word":  # a long document in pieces cut where no piece of the split crosses
        texts = chunk_aligned(documents.iter_split_document_pieces(prepared, "train"),
                              resolve_pattern(settings.pattern, kind="word"))
        tokenizer = Tokenizer.train(texts, workers=settings.workers, **options)
    else:
        with stage_log.timed("counting the chunks (the pool's start and the sum of the parts' counts included)"), \
                open_tasks(config.executor, workers=settings.workers) as tasks:
            counts = count_prepared(tasks, prepared, "train", progress=PROGRESS,
                                    pattern=resolve_pattern(settings.pattern, kind=settings.kind))
        try:
            with stage_log.timed(f"merging {len(counts):,} distinct chunks into a tokenizer"):
                tokenizer = Tokenizer.train_from_counts(counts, **options)
        except AlphabetTooLargeError as exc:
            raise AlphabetTooLargeError(exc.problem, "raise tokenizer.vocab_size, or keep fewer characters with "
                                                     "tokenizer.character_coverage (such as 0.9995)") from None
    if tokenizer.coverage_note:
        say("tokenizer", tokenizer.coverage_note)
    check_roles(config, tokenizer)
    with stage_log.timed("writing the tokenizer's files"):
        tokenizer.save(output)
        pad = write_companions(config, tokenizer)
    stopped = f" ({tokenizer.stop_reason})" if tokenizer.stop_reason else ""
    say("tokenizer", f"trained vocab {tokenizer.vocab_size:,} ({len(tokenizer.merges):,} merges){stopped}, "
                     f"fingerprint {tokenizer.fingerprint[:12]}, {pad} → {output}")


def reuse(config: Config) -> None:
    """Validate the frozen tokenizer, read once, and write it to ``tokenizer.output`` as lmprep writes it (either
    may be a URL); the line says so when that is not the file's own bytes.

    The runner refuses a ``tokenizer.output`` that is ``tokenizer.path`` before this runs.
    """
    from pipeline.tokenizer import hf_json

    source, output = config.here(config.tokenizer.path), config.output_path(config.tokenizer.output)
    data = hf_json.read_file(source)
    tokenizer = hf_json.loads(data, name=source)
    check_roles(config, tokenizer)
    written = hf_json.dumps(tokenizer)
    storage.write_bytes(output, written)
    pad = write_companions(config, tokenizer)
    rewritten = "" if written == data else "; rewritten as lmprep writes a tokenizer.json, not copied"
    say("tokenizer", f"reusing {source} (vocab {tokenizer.vocab_size:,}, fingerprint {tokenizer.fingerprint[:12]}, "
                     f"{pad}{rewritten}) → {output}")


def check_roles(config: Config, tokenizer: Tokenizer) -> None:
    """Each role's token must be one of the tokenizer's special tokens: transformers would add
    any other as a new token, with an ID lmprep never made."""
    settings = config.tokenizer
    for key in ROLE_KEYS:
        special_id(tokenizer, getattr(config.encode, key.partition(".")[2]), key=key,
                   path=config.here(settings.path) if settings.path else config.output_path(settings.output))


def write_companions(config: Config, tokenizer: Tokenizer) -> str:
    """The transformers files beside ``tokenizer.output``; returns ``pad token '<|endoftext|>'`` (or that there
    is none) for the stage's line."""
    encode, specials = config.encode, tokenizer.special_tokens
    pad = hf_dir.write_companions(config.output_path(config.tokenizer.output), eos_token=encode.eos_token,
                                  bos_token=encode.bos_token, special_tokens=sorted(specials, key=specials.get),
                                  model_max_length=config.tokenizer.model_max_length)
    return f"pad token {pad!r}" if pad is not None else "no pad token (no special token to pad with)"
