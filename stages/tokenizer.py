"""The ``tokenizer`` stage: train a BPE tokenizer on the prepared train split, or reuse a frozen one.

Either way its output is ``tokenizer.output``, the file every later stage
reads, with ``tokenizer_config.json`` and ``special_tokens_map.json`` beside it
(the EOS/BOS roles of ``encode.eos_token``/``encode.bos_token``), so that the
directory loads with ``transformers.AutoTokenizer.from_pretrained``. With ``tokenizer.path`` set the stage only copies that file there
(after validating it), and depends on that file alone, not on the prepared
data: a data change then re-runs prepare, encode and train but never this
stage, the fingerprint stays the same, and training can resume.
"""

from __future__ import annotations

import functools
import os

from pipeline.config.schema import Config
from pipeline.data import documents
from pipeline.data.chunk_counts import count_prepared
from pipeline.engine import storage
from pipeline.engine.executor import open_tasks
from pipeline.engine.runner import Stage
from pipeline.tokenizer import Tokenizer, hf_dir, hf_json
from pipeline.tokenizer.patterns import resolve_pattern
from stages.console import PROGRESS, say
from stages.encode import special_id

TRAINING_KEYS = ("kind", "vocab_size", "merges", "pattern", "merge_newlines", "min_frequency", "special_tokens")
ROLE_KEYS = ("encode.eos_token", "encode.bos_token")  # the special-token roles written for transformers


# Version of the code that shapes this stage's outputs (the trainer and tokenizer.json writer in
# pipeline/tokenizer/): bump it whenever the same prepared data and settings would give another
# tokenizer.json (3: it also writes tokenizer_config.json and special_tokens_map.json), and the stage
# re-runs wherever it ran before. tests/test_code_versions.py pins it.
CODE_VERSION = 3

def build(config: Config) -> Stage:
    settings = config.tokenizer
    output = config.out(settings.output)
    outs = (output, *hf_dir.companion_paths(output))
    if settings.path is not None:
        source = config.input(settings.path)
        return Stage(name="tokenizer", deps=(source,), outs=outs,
                     params=("tokenizer.path", "tokenizer.output", *ROLE_KEYS), run=functools.partial(reuse, config),
                     code_version=CODE_VERSION,
                     keys={source: "tokenizer.path", **dict.fromkeys(outs, "tokenizer.output")})
    return Stage(
        name="tokenizer",
        deps=(str(documents.split_dir(config.out(config.prepare.output_dir), "train")),),
        outs=outs,
        params=("tokenizer.path", "tokenizer.output", *(f"tokenizer.{key}" for key in TRAINING_KEYS), *ROLE_KEYS),
        run=functools.partial(train, config),
        code_version=CODE_VERSION,
        keys=dict.fromkeys(outs, "tokenizer.output"),
    )


def training_file(config: Config) -> os.PathLike[str]:
    return documents.split_dir(config.output_path(config.prepare.output_dir), "train")


def train(config: Config) -> None:
    """Byte and char kinds: chunks counted by partition tasks, merges here; the word kind trains in-process."""
    settings, prepared, output = (config.tokenizer, config.output_path(config.prepare.output_dir),
                                  config.output_path(config.tokenizer.output))
    options = dict(vocab_size=settings.vocab_size, kind=settings.kind, pattern=settings.pattern,
                   special_tokens=settings.special_tokens, min_frequency=settings.min_frequency,
                   merges=settings.merges, merge_newlines=settings.merge_newlines, progress=PROGRESS)
    if settings.kind == "word":
        tokenizer = Tokenizer.train(documents.iter_split_documents(prepared, "train"),
                                    workers=settings.workers, **options)
    else:
        with open_tasks(config.executor, workers=settings.workers) as tasks:
            counts = count_prepared(tasks, prepared, "train", progress=PROGRESS,
                                    pattern=resolve_pattern(settings.pattern, kind=settings.kind))
        tokenizer = Tokenizer.train_from_counts(counts, **options)
    check_roles(config, tokenizer)
    tokenizer.save(output)
    write_companions(config)
    stopped = f" ({tokenizer.stop_reason})" if tokenizer.stop_reason else ""
    say("tokenizer", f"trained vocab {tokenizer.vocab_size:,} ({len(tokenizer.merges):,} merges){stopped}, "
                     f"fingerprint {tokenizer.fingerprint[:12]} → {output}")


def reuse(config: Config) -> None:
    """Validate the frozen tokenizer and copy its exact bytes, read once, to ``tokenizer.output`` (either may be
    a URL).

    The runner refuses a ``tokenizer.output`` that is ``tokenizer.path`` before this runs.
    """
    source, output = config.here(config.tokenizer.path), config.output_path(config.tokenizer.output)
    data = hf_json.read_file(source)
    tokenizer = hf_json.loads(data, name=source)
    check_roles(config, tokenizer)
    storage.write_bytes(output, data)
    write_companions(config)
    say("tokenizer", f"reusing {source} (vocab {tokenizer.vocab_size:,}, fingerprint {tokenizer.fingerprint[:12]}) → {output}")


def check_roles(config: Config, tokenizer: Tokenizer) -> None:
    """Each role's token must be one of the tokenizer's special tokens: transformers would add
    any other as a new token, with an ID lmprep never made."""
    settings = config.tokenizer
    for key in ROLE_KEYS:
        special_id(tokenizer, getattr(config.encode, key.partition(".")[2]), key=key,
                   path=config.here(settings.path) if settings.path else config.output_path(settings.output))


def write_companions(config: Config) -> None:
    """The transformers files beside ``tokenizer.output``."""
    encode = config.encode
    hf_dir.write_companions(config.output_path(config.tokenizer.output), eos_token=encode.eos_token, bos_token=encode.bos_token)
