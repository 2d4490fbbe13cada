"""``lmprep sample`` and ``lmprep check``: use a checkpoint, always through the tokenizer guard.

torch is imported inside the commands, so the rest of the CLI starts without it. A checkpoint may be a
URL (a directory ``lmprep run train`` wrote to object storage, or its ``checkpoint.safetensors``): ``sample``
reads the checkpoint and the tokenizer kept beside it, ``check`` only the checkpoint's header (whose
checksum it verifies; ``--verify`` reads and verifies the tensors too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pipeline.config.schema import Config
from pipeline.errors import CheckpointError, TokenizerMismatchError
from pipeline.tokenizer import Tokenizer
from stages.cli.options import config_options

if TYPE_CHECKING:
    from pipeline.model.checkpoint import Checkpoint


@click.command()
@click.option("--prompt", required=True, help="Text to continue (may be empty: start a new document).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=200, show_default=True,
              help="Stop after this many new tokens.")
@click.option("--temperature", type=click.FloatRange(min=0.0), default=1.0, show_default=True,
              help="Sampling temperature; 0 always picks the most likely token.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampler.")
@click.option("--checkpoint", "checkpoint_path", metavar="PATH",
              help="Checkpoint file or directory, or its URL [default: train.output_dir].")
@click.option("--tokenizer", "tokenizer_path", metavar="PATH",
              help="tokenizer.json [default: the one kept in the checkpoint's directory, else tokenizer.output].")
@config_options(optional=True)
def sample(prompt: str, max_tokens: int, temperature: float, seed: int, checkpoint_path: str | None,
           tokenizer_path: str | None, config: Config) -> None:
    """Continue PROMPT with the trained model until end of text (a newline for char tokenizers)."""
    import torch

    from pipeline.model.bigram import generate
    from pipeline.model.checkpoint import load_checkpoint, tokenizer_beside

    checkpoint_path = checkpoint_path or config.output_path(config.train.output_dir)
    tokenizer_path = tokenizer_path or tokenizer_beside(checkpoint_path) or config.output_path(config.tokenizer.output)
    tokenizer = Tokenizer.load(tokenizer_path)
    checkpoint = load_checkpoint(checkpoint_path, tokenizer)  # the guard, whichever tokenizer file it is
    eos_id = end_of_text_id(checkpoint, tokenizer, config)
    prompt_ids = tokenizer.encode(prompt) or ([eos_id] if eos_id is not None else [])
    if not prompt_ids:
        raise click.UsageError("--prompt is empty and the tokenizer has no end-of-text token to start from")
    new_ids = list(generate(
        checkpoint.model, prompt_ids, max_tokens=max_tokens, temperature=temperature,
        stop_ids=stop_ids(tokenizer, eos_id), generator=torch.Generator().manual_seed(seed),
    ))
    click.echo(prompt + continuation(tokenizer, new_ids, eos_id))


def end_of_text_id(checkpoint: Checkpoint, tokenizer: Tokenizer, config: Config) -> int | None:
    """The EOS the training shards carried, else ``encode.eos_token``'s ID."""
    special_ids = checkpoint.extra.get("special_ids") or {}
    recorded = special_ids.get("eos") if isinstance(special_ids, dict) else special_ids
    if recorded is None:
        return tokenizer.special_tokens.get(config.encode.eos_token or "")
    if isinstance(special_ids, dict) and type(recorded) is int and 0 <= recorded < tokenizer.vocab_size:
        return recorded
    raise CheckpointError(f"checkpoint {checkpoint.path} records malformed special IDs ({type(special_ids).__name__} "
                          f"{special_ids!r:.60}); retrain it with `lmprep run train`")


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

    Reads only its header (milliseconds whatever its size), whose metadata checksum it verifies; with
    --verify it loads the whole checkpoint, so a damaged tensor is an error as it would be in sample.
    """
    from pipeline.model.checkpoint import check_tokenizer, read_checkpoint, read_header

    tokenizer_path = tokenizer_path or config.output_path(config.tokenizer.output)
    checkpoint = read_checkpoint(checkpoint_path) if verify else read_header(checkpoint_path)
    tokenizer = Tokenizer.load(tokenizer_path)
    try:
        check_tokenizer(checkpoint, tokenizer)
    except TokenizerMismatchError as exc:
        click.echo(f"incompatible: {exc}")
        click.get_current_context().exit(1)
    click.echo(
        f"compatible: {checkpoint.path} (step {checkpoint.step:,}) was trained with tokenizer "
        f"{tokenizer.fingerprint} ({tokenizer_path}, vocab size {tokenizer.vocab_size:,})"
    )
