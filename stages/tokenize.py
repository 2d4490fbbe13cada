"""The ``tokenizer`` stage: train a BPE tokenizer on the prepared train split, or reuse a frozen one.

Either way its output is ``tokenizer.output``, the file every later stage
reads. With ``tokenizer.path`` set the stage only copies that file there
(after validating it), and depends on that file alone, not on the prepared
data: a data change then re-runs prepare, encode and train but never this
stage, the fingerprint stays the same, and training can resume.
"""

from __future__ import annotations

import functools
import os

from pipeline import atomic, documents
from pipeline.config import Config
from pipeline.executor import open_tasks
from pipeline.runner import Stage
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.counting import count_prepared
from pipeline.tokenizer.patterns import resolve_pattern
from stages.console import say, show_progress

TRAINING_KEYS = ("kind", "vocab_size", "merges", "pattern", "merge_newlines", "min_frequency", "special_tokens")


# Version of the code that shapes this stage's outputs (the trainer and tokenizer.json writer in
# pipeline/tokenizer/): bump it whenever the same prepared data and settings would give another
# tokenizer.json, and the stage re-runs wherever it ran before. tests/test_code_versions.py pins it.
CODE_VERSION = 2

def build(config: Config) -> Stage:
    settings = config.tokenizer
    if settings.path is not None:
        return Stage(name="tokenizer", deps=(settings.path,), outs=(settings.output,),
                     params=("tokenizer.path", "tokenizer.output"), run=functools.partial(reuse, config),
                     code_version=CODE_VERSION,
                     keys={settings.path: "tokenizer.path", settings.output: "tokenizer.output"})
    return Stage(
        name="tokenizer",
        deps=(str(training_file(config)),),
        outs=(settings.output,),
        params=("tokenizer.path", "tokenizer.output", *(f"tokenizer.{key}" for key in TRAINING_KEYS)),
        run=functools.partial(train, config),
        code_version=CODE_VERSION,
        keys={settings.output: "tokenizer.output"},
    )


def training_file(config: Config) -> os.PathLike[str]:
    return documents.split_dir(config.prepare.output_dir, "train")


def train(config: Config) -> None:
    """Byte and char kinds: chunks counted by partition tasks, merges here; the word kind trains in-process."""
    settings = config.tokenizer
    options = dict(vocab_size=settings.vocab_size, kind=settings.kind, pattern=settings.pattern,
                   special_tokens=settings.special_tokens, min_frequency=settings.min_frequency,
                   merges=settings.merges, merge_newlines=settings.merge_newlines, progress=show_progress())
    if settings.kind == "word":
        tokenizer = Tokenizer.train(documents.iter_split_documents(config.prepare.output_dir, "train"),
                                    workers=settings.workers, **options)
    else:
        with open_tasks(config.executor, workers=settings.workers) as tasks:
            counts = count_prepared(tasks, config.prepare.output_dir, "train", progress=show_progress(),
                                    pattern=resolve_pattern(settings.pattern, kind=settings.kind))
        tokenizer = Tokenizer.train_from_counts(counts, **options)
    tokenizer.save(settings.output)
    stopped = f" ({tokenizer.stop_reason})" if tokenizer.stop_reason else ""
    say("tokenizer", f"trained vocab {tokenizer.vocab_size} ({len(tokenizer.merges)} merges){stopped}, "
                     f"fingerprint {tokenizer.fingerprint[:12]} → {settings.output}")


def reuse(config: Config) -> None:
    """Validate the frozen tokenizer and copy its exact bytes to ``tokenizer.output``.

    The runner refuses a ``tokenizer.output`` that is ``tokenizer.path`` before this runs.
    """
    source, output = config.tokenizer.path, config.tokenizer.output
    tokenizer = Tokenizer.load(source)
    with open(source, "rb") as handle:
        atomic.write_bytes(output, handle.read())
    say("tokenizer", f"reusing {source} (vocab {tokenizer.vocab_size}, fingerprint {tokenizer.fingerprint[:12]}) → {output}")
