"""``lmprep sample``, ``lmprep check`` and ``lmprep stamp``: use a checkpoint, always through the tokenizer guard.

torch and ``Tokenizer`` (numpy) are imported inside the commands, so that ``--help`` and the rest of the CLI
start without them. A checkpoint may be a URL (a directory ``lmprep run train`` wrote to object storage, or its
``checkpoint.safetensors``): ``sample`` reads the checkpoint and the tokenizer kept beside it, ``check`` only
the checkpoint's header (whose checksum it verifies; ``--verify`` reads and verifies the tensors too). ``check``
also takes a model trained elsewhere (a ``transformers`` directory, a nanoGPT ``ckpt.pt``) that ``stamp`` marked
with its tokenizer (:mod:`pipeline.model.foreign`), and an export directory, whose sidecars name the tokenizer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from pipeline.config import Config
from pipeline.errors import CheckpointError, TokenizerMismatchError, describe
from stages.cli.options import config_options

if TYPE_CHECKING:
    from pipeline.model.checkpoint import Checkpoint
    from pipeline.model.foreign import ForeignModel
    from pipeline.tokenizer import Tokenizer


SAMPLE_SEPARATOR = "---"


@click.command()
@click.option("--prompt", required=True, help="Text to continue (may be empty: start a new document).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=200, show_default=True,
              help="Stop after this many new tokens.")
@click.option("--temperature", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Sampling temperature; 0 always picks the most likely token.")
@click.option("--top-k", type=click.IntRange(min=1), default=None,
              help="Pick among the K most likely next tokens only [default: all].")
@click.option("--top-p", type=click.FloatRange(min=0.0, max=1.0, min_open=True), default=None,
              help="Pick among the fewest most likely tokens whose probabilities add up to P (nucleus) [default: 1].")
@click.option("--num-samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many continuations to print, each followed by a '---' line when more than one.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the sampler: the same seed gives the same samples (the first N of a larger --num-samples).")
@click.option("--checkpoint", "checkpoint_path", metavar="PATH",
              help="Checkpoint file or directory, or its URL [default: train.output_dir].")
@click.option("--tokenizer", "tokenizer_path", metavar="PATH",
              help="tokenizer.json [default: the one kept in the checkpoint's directory, else tokenizer.output].")
@config_options(optional=True)
def sample(prompt: str, max_tokens: int, temperature: float, top_k: int | None, top_p: float | None,
           num_samples: int, seed: int, checkpoint_path: str | None, tokenizer_path: str | None,
           config: Config) -> None:
    """Continue PROMPT with the trained model until end of text (a newline for char tokenizers)."""
    import torch

    from pipeline.model.bigram import generate
    from pipeline.model.checkpoint import load_checkpoint, read_header, tokenizer_beside
    from pipeline.tokenizer import Tokenizer

    checkpoint_path = checkpoint_path or config.output_path(config.train.output_dir)
    read_header(checkpoint_path)  # the files beside it, tokenizer.json among them, have their checksums
    tokenizer_path = tokenizer_path or tokenizer_beside(checkpoint_path) or config.output_path(config.tokenizer.output)
    tokenizer = Tokenizer.load(tokenizer_path)
    checkpoint = load_checkpoint(checkpoint_path, tokenizer)  # the guard, whichever tokenizer file it is
    eos_id = end_of_text_id(checkpoint, tokenizer, config)
    prompt_ids = tokenizer.encode(prompt) or ([eos_id] if eos_id is not None else [])
    if not prompt_ids:
        raise click.UsageError("--prompt is empty and the tokenizer has no end-of-text token to start from")
    generator, stops = torch.Generator().manual_seed(seed), stop_ids(tokenizer, eos_id)
    for _ in range(num_samples):
        new_ids = list(generate(
            checkpoint.model, prompt_ids, max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            stop_ids=stops, generator=generator, vocab_size=tokenizer.vocab_size,
        ))
        click.echo(prompt + continuation(tokenizer, new_ids, eos_id))
        if num_samples > 1:
            click.echo(SAMPLE_SEPARATOR)


def end_of_text_id(checkpoint: Checkpoint, tokenizer: Tokenizer, config: Config) -> int | None:
    """The EOS the training shards carried, else ``encode.eos_token``'s ID."""
    special_ids = checkpoint.extra.get("special_ids") or {}
    recorded = special_ids.get("eos") if isinstance(special_ids, dict) else special_ids
    if recorded is None:
        return tokenizer.special_tokens.get(config.encode.eos_token or "")
    if isinstance(special_ids, dict) and type(recorded) is int and 0 <= recorded < tokenizer.vocab_size:
        return recorded
    raise CheckpointError(f"checkpoint {checkpoint.path} records malformed special IDs ({type(special_ids).__name__} "
                          f"{describe(special_ids)}); retrain it with `lmprep run train`")


def stop_ids(tokenizer: Tokenizer, eos_id: int | None) -> set[int]:
    """End of text, and in char mode every token holding a newline: there a line is an answer."""
    stops = {eos_id} if eos_id is not None else set()
    if tokenizer.kind == "char":
        stops |= {i for i in range(tokenizer.vocab_size) if b"\n" in tokenizer.token_bytes(i)}
    return stops


def continuation(tokenizer: Tokenizer, ids: list[int], eos_id: int | None) -> str:
    """The generated text without the end-of-text token, cut before a newline in char mode."""
    text = tokenizer.decode([i for i in ids if i != eos_id], errors="replace")
    return text.split("\n", 1)[0] if tokenizer.kind == "char" else text


@click.command()
@click.argument("checkpoint_path", metavar="CHECKPOINT")
@click.option("--tokenizer", "tokenizer_path", metavar="PATH",
              help="tokenizer.json to check against [default: tokenizer.output].")
@click.option("--verify", is_flag=True,
              help="Also read every tensor and check it against its checksum (as sample and train do on load).")
@config_options(optional=True)
def check(checkpoint_path: str, tokenizer_path: str | None, verify: bool, config: Config) -> None:
    """Say whether CHECKPOINT can be used with a tokenizer: exit 0 if so, 1 if not.

    CHECKPOINT is an lmprep checkpoint, a model trained elsewhere that `lmprep stamp` marked (a transformers
    save_pretrained directory, a nanoGPT ckpt.pt or its directory), or an export directory (each file's sidecar).
    Of a checkpoint it reads only the header (milliseconds whatever its size), whose metadata checksum it
    verifies; with --verify it loads the whole checkpoint, so a damaged tensor is an error as in sample."""
    from pipeline.tokenizer import Tokenizer

    tokenizer_path = tokenizer_path or config.output_path(config.tokenizer.output)
    guard = guard_of(checkpoint_path, verify=verify)
    tokenizer = Tokenizer.load(tokenizer_path)
    used = f"tokenizer {tokenizer.fingerprint} ({tokenizer_path}, vocab size {tokenizer.vocab_size:,})"
    try:
        verdict = guard(tokenizer, used)
    except TokenizerMismatchError as exc:
        click.echo(f"incompatible: {exc}")
        click.get_current_context().exit(1)
    click.echo(f"compatible: {verdict}")


def guard_of(path: str, *, verify: bool = False) -> Callable[[Tokenizer, str], str]:
    """How ``check`` checks what is at ``path``: a function of the tokenizer (and how to name it) that returns
    the verdict or raises TokenizerMismatchError. An lmprep checkpoint's header (its whole body with
    ``verify``) is read here, so a missing or damaged checkpoint is named before the tokenizer is loaded."""
    from pipeline.model import foreign
    from pipeline.model.checkpoint import check_tokenizer, read_checkpoint, read_header
    from pipeline.shards import export

    if foreign.is_foreign_model(path):
        def check_model(tokenizer: Tokenizer, used: str) -> str:
            model = foreign.check_model(path, tokenizer)
            return (f"{model.directory} ({model.tool}) was trained with {used}, says {model.stamp_path}; "
                    f"{describe_vocabulary(model, tokenizer)}")
        return check_model
    if os.path.isdir(path) and export.exported_files(path):
        def check_export(tokenizer: Tokenizer, used: str) -> str:
            files = export.check_export(path, tokenizer)
            return f"the {len(files)} exported files of {path} ({', '.join(f.name for f in files)}) hold IDs of {used}"
        return check_export
    checkpoint = read_checkpoint(path) if verify else read_header(path)

    def check_checkpoint(tokenizer: Tokenizer, used: str) -> str:
        check_tokenizer(checkpoint, tokenizer)
        return f"{checkpoint.path} (step {checkpoint.step:,}) was trained with {used}"
    return check_checkpoint


@click.command()
@click.argument("model_path", metavar="MODEL")
@click.option("--tokenizer", "tokenizer_path", metavar="PATH",
              help="The tokenizer.json MODEL was trained with [default: tokenizer.output].")
@click.option("--force", is_flag=True, help="Replace a stamp that names another tokenizer.")
@config_options(optional=True)
def stamp(model_path: str, tokenizer_path: str | None, force: bool, config: Config) -> None:
    """Record in MODEL's directory (lmprep.json) which tokenizer it was trained with, so `lmprep check` can tell.

    MODEL is a transformers save_pretrained directory or a nanoGPT ckpt.pt (or its directory), trained on
    lmprep's exports. Its vocabulary size is read from its config.json or checkpoint, never by running code."""
    from pipeline.model import foreign
    from pipeline.tokenizer import Tokenizer

    tokenizer_path = tokenizer_path or config.output_path(config.tokenizer.output)
    tokenizer = Tokenizer.load(tokenizer_path)
    model = foreign.stamp_model(model_path, tokenizer, force=force)
    click.echo(f"stamped {model.stamp_path}: {model.directory} ({model.tool}) was trained with tokenizer "
               f"{tokenizer.fingerprint} ({tokenizer_path}); {describe_vocabulary(model, tokenizer)}")


def describe_vocabulary(model: ForeignModel, tokenizer: Tokenizer) -> str:
    """``vocab size 270 (config.json)``, and the padding rows where the model has more IDs than the tokenizer."""
    text = f"vocab size {model.vocab_size:,} ({model.source.name})"
    if model.vocab_size > tokenizer.vocab_size:
        text += f": IDs {tokenizer.vocab_size:,} to {model.vocab_size - 1:,} are padding that the tokenizer never gives"
    return text
