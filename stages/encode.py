"""The ``encode`` stage: prepared documents + tokenizer → ``encode.output_dir`` token shards.

All splits are written into one staging directory that replaces the old
shard directory in a single swap, so an interrupted run leaves the previous
shards untouched (and the stage stale).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.config import Config
from pipeline.data.cleaning import SPLITS, split_dir
from pipeline.engine import completion
from pipeline.engine.runner import Stage
from pipeline.errors import ConfigError, counted
from stages.console import PROGRESS, say

if TYPE_CHECKING:
    from pipeline.shards.format import ShardSet
    from pipeline.tokenizer import Tokenizer

PARAMS = ("encode.eos_token", "encode.bos_token", "encode.shard_tokens", "encode.output_dir")


CODE_VERSION = 4  # 4: each row's source, file and document columns, counts per source in the manifest


def build(config: Config) -> Stage:
    prepared = tuple(str(split_dir(config.out(config.prepare.output_dir), split)) for split in SPLITS)
    tokenizer, output = config.out(config.tokenizer.output), config.out(config.encode.output_dir)
    return Stage(name="encode", deps=(*prepared, tokenizer),
                 outs=(output,), params=PARAMS, run=functools.partial(run, config),
                 code_version=CODE_VERSION, reusable=True, scratch=(output + completion.SUFFIX,),  # finished parts
                 keys={tokenizer: "tokenizer.output", output: "encode.output_dir"})


def run(config: Config) -> None:
    from pipeline.engine.executor import open_tasks
    from pipeline.shards import corpus

    settings, tokenizer_path = config.encode, config.output_path(config.tokenizer.output)
    output_dir = config.output_path(settings.output_dir)
    tokenizer = corpus.share_tokenizer(tokenizer_path)
    bos_id = special_id(tokenizer, settings.bos_token, key="encode.bos_token", path=tokenizer_path)
    eos_id = special_id(tokenizer, settings.eos_token, key="encode.eos_token", path=tokenizer_path)
    with open_tasks(config.executor, workers=settings.workers, writes=[output_dir]) as tasks:
        manifests = corpus.encode_corpus(
            config.output_path(config.prepare.output_dir), output_dir, tokenizer_path=tokenizer_path, tasks=tasks,
            shard_tokens=settings.shard_tokens, bos_id=bos_id, eos_id=eos_id,
            cache_bytes=settings.chunk_cache_mb * 10**6, progress=PROGRESS, code_version=CODE_VERSION,
            notify=functools.partial(say, "encode"),
        )
    for manifest in manifests:
        say("encode", f"{manifest.stamp.split}: {counted(manifest.rows, 'document')}, "
                      f"{counted(manifest.tokens, 'token')} in {counted(len(manifest.shards), 'shard')} → {output_dir}")


def special_id(tokenizer: Tokenizer, token: str | None, *, key: str, path: str) -> int | None:
    """The ID of a configured special token; ConfigError naming the key if the tokenizer lacks it."""
    if token is None:
        return None
    if token not in tokenizer.special_tokens:
        raise ConfigError(
            f"{key} {token!r} is not a special token of {path} (it has {sorted(tokenizer.special_tokens)}); "
            f"add it to tokenizer.special_tokens and retrain, or set {key}: null"
        )
    return tokenizer.special_tokens[token]


def open_splits(config: Config) -> tuple[Tokenizer, list[ShardSet]]:
    """The tokenizer and every split's verified shard set (train required, val when present)."""
    from pipeline.shards.format import ShardSet
    from pipeline.shards.manifest import has_split
    from pipeline.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(config.output_path(config.tokenizer.output))
    directory = config.output_path(config.encode.output_dir)
    splits = [split for split in SPLITS if split == "train" or has_split(directory, split)]
    return tokenizer, [ShardSet.open(directory, split, tokenizer=tokenizer) for split in splits]


def shard_reader_stage(config: Config, name: str, run: Callable[[Config], None], code_version: int = 1) -> Stage:
    """An optional stage reading the shards and the tokenizer into ``<name>.output_dir``; its params are
    its whole section."""
    output_dir = getattr(config, name).output_dir
    shards, tokenizer, output = (config.out(config.encode.output_dir), config.out(config.tokenizer.output),
                                 config.out(output_dir))
    return Stage(name=name, deps=(shards, tokenizer), outs=(output,), params=(name,),
                 run=functools.partial(run, config), code_version=code_version, reusable=True,
                 keys={shards: "encode.output_dir", tokenizer: "tokenizer.output", output: f"{name}.output_dir"})
