"""``lmprep tokenizer …``: train, encode, decode, fingerprint, export, eval and inspect a tokenizer.

Each command is a thin layer over :class:`pipeline.tokenizer.Tokenizer`; errors are
PipelineErrors, which the root group prints as one line with exit status 2.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import click

from pipeline.config import MAX_VOCAB_SIZE, Config, TokenizerConfig
from pipeline.errors import DataError
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.patterns import pattern_name
from stages.options import config_options

_INTEGER = re.compile(r"[+-]?\d+")

tokenizer_option = click.option(
    "--tokenizer", "tokenizer_path", metavar="PATH", type=click.Path(dir_okay=False),
    help="tokenizer.json to use [default: the config's tokenizer.output].",
)
tokenizer_argument = click.argument("tokenizer_path", required=False, type=click.Path(dir_okay=False))


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Train and use a BPE tokenizer (HF tokenizer.json format).

    Defaults come from the config's tokenizer section; without a config file (outside a project)
    the built-in defaults apply.
    """


@tokenizer_group.command("train")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--vocab-size", "vocab_size", type=click.IntRange(min=1, max=MAX_VOCAB_SIZE),
              help="Upper bound on IDs: base tokens + merges + special tokens [default: tokenizer.vocab_size].")
@click.option("--kind", "kind", type=click.Choice(["byte", "char"]), help="[default: tokenizer.kind]")
@click.option("--pattern", "pattern", help="Pre-split: gpt4, gpt2, none or a regex [default: tokenizer.pattern; "
                                           "if null, gpt4 for byte and none for char].")
@click.option("--special", "special_tokens", multiple=True,
              help="A special token (repeatable); IDs follow the merges [default: tokenizer.special_tokens].")
@click.option("--min-frequency", "min_frequency", type=click.IntRange(min=1),
              help="Stop when no pair occurs this often [default: tokenizer.min_frequency].")
@click.option("--merge-newlines/--no-merge-newlines", "merge_newlines", default=None,
              help="Allow tokens containing a newline [default: tokenizer.merge_newlines; "
                   "if null, yes for byte and no for char].")
@click.option("--workers", "workers", type=click.IntRange(min=0),
              help="Processes, 0 = all cores [default: tokenizer.workers].")
@click.option("--out", type=click.Path(dir_okay=False), help="[default: tokenizer.output]")
@config_options(optional=True)
def train_command(files, out, config, **given) -> None:
    """Train on FILE... (UTF-8 text; each file's whole text is one training sequence)."""
    settings = with_given_options(config.tokenizer, given)
    tokenizer = Tokenizer.train(
        (read_utf8(path) for path in files), vocab_size=settings.vocab_size, kind=settings.kind,
        pattern=settings.pattern, special_tokens=settings.special_tokens, min_frequency=settings.min_frequency,
        merge_newlines=settings.merge_newlines, workers=settings.workers,
    )
    if tokenizer.stop_reason:
        click.echo(f"stopped early: {tokenizer.stop_reason}", err=True)
    out = out or settings.output
    tokenizer.save(out)
    click.echo(f"wrote {out}: {tokenizer.kind} kind, {tokenizer.vocab_size} IDs "
               f"({len(tokenizer.merges)} merges), fingerprint {tokenizer.fingerprint}")


def with_given_options(settings: TokenizerConfig, given: dict[str, Any]) -> TokenizerConfig:
    """The config's tokenizer section, with each option given on the command line in place of its key."""
    return dataclasses.replace(settings, **{key: value for key, value in given.items() if value not in (None, ())})


def read_utf8(path: str) -> str:
    """A file's text, or a DataError naming the file and the byte offset of the first invalid byte."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not valid UTF-8: byte {data[exc.start]:#04x} at byte offset {exc.start}; "
                        "convert the file to UTF-8") from None


@tokenizer_group.command("encode")
@click.argument("text", required=False)
@click.option("--file", "file_path", type=click.Path(exists=True, dir_okay=False), help="Encode this file's text.")
@tokenizer_option
@config_options(optional=True)
def encode_command(text, file_path, tokenizer_path, config: Config) -> None:
    """Print the IDs of TEXT (or of --file) separated by spaces; special-token strings stay plain text."""
    if (text is None) == (file_path is None):
        raise click.UsageError("give either TEXT or --file PATH")
    tokenizer = Tokenizer.load(tokenizer_path or config.tokenizer.output)
    ids = tokenizer.encode(read_utf8(file_path) if file_path else text)
    click.echo(" ".join(map(str, ids)))


@tokenizer_group.command("decode", context_settings={"ignore_unknown_options": True})
@click.argument("ids", nargs=-1)
@click.option("--replace", is_flag=True, help="Replace bytes that are not UTF-8 by U+FFFD instead of failing.")
@tokenizer_option
@config_options(optional=True)
def decode_command(ids, replace, tokenizer_path, config: Config) -> None:
    """Print the text of ID... (negative or unknown IDs are an error naming the first one)."""
    tokenizer = Tokenizer.load(tokenizer_path or config.tokenizer.output)
    values = [int(token) if _INTEGER.fullmatch(token) else token for token in ids]
    click.echo(tokenizer.decode(values, errors="replace" if replace else "strict"))


@tokenizer_group.command("fingerprint")
@tokenizer_argument
@config_options(optional=True)
def fingerprint_command(tokenizer_path, config: Config) -> None:
    """Print the fingerprint: a sha256 of what decides the IDs, not of the file's bytes.

    TOKENIZER_PATH defaults to the config's tokenizer.output.
    """
    click.echo(Tokenizer.load(tokenizer_path or config.tokenizer.output).fingerprint)


@tokenizer_group.command("export")
@tokenizer_argument
@click.option("--format", "fmt", type=click.Choice(["tiktoken"]), required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@config_options(optional=True)
def export_command(tokenizer_path, fmt, out, config: Config) -> None:
    """Write the tokenizer in another library's format (tiktoken's ranks file).

    TOKENIZER_PATH defaults to the config's tokenizer.output.
    """
    from pipeline.tokenizer.tiktoken_export import tiktoken_pattern

    tokenizer = Tokenizer.load(tokenizer_path or config.tokenizer.output)
    tokenizer.export_tiktoken(out)
    click.echo(f"wrote {out}; build it with tiktoken.Encoding(name, pat_str={tiktoken_pattern(tokenizer)!r}, "
               f"mergeable_ranks=tiktoken.load.load_tiktoken_bpe({out!r}), special_tokens={tokenizer.special_tokens!r})")


@tokenizer_group.command("eval")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--tokenizer", "tokenizer_paths", multiple=True, type=click.Path(dir_okay=False),
              help="A tokenizer.json to compare (repeatable) [default: tokenizer.output].")
@config_options(optional=True)
def eval_command(files, tokenizer_paths, config: Config) -> None:
    """Compare tokenizers by compression: tokens and bytes per token on each FILE."""
    tokenizer_paths = tokenizer_paths or (config.tokenizer.output,)
    tokenizers = [Tokenizer.load(path) for path in tokenizer_paths]
    texts = {path: read_utf8(path) for path in files}
    rows = [_eval_row(Path(path).name, text, tokenizers) for path, text in texts.items()]
    if len(files) > 1:
        rows.append(_eval_row("total", "".join(texts.values()), tokenizers))
    header = ["text", "bytes"] + [f"{Path(p).name} {what}" for p in tokenizer_paths for what in ("tokens", "bytes/tok")]
    if len(tokenizers) > 1:
        header.append("tokens vs first")
    click.echo(_table([header, *rows]))


def _eval_row(name: str, text: str, tokenizers: list[Tokenizer]) -> list[str]:
    size = len(text.encode("utf-8"))
    counts = [len(tokenizer.encode(text)) for tokenizer in tokenizers]
    row = [name, str(size)]
    for count in counts:
        row += [str(count), f"{size / count:.2f}" if count else "-"]
    if len(counts) > 1:
        row.append(" ".join(f"{(c - counts[0]) / counts[0]:+.1%}" if counts[0] else "-" for c in counts[1:]))
    return row


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(row, widths)))
             for row in rows]
    return "\n".join(line.rstrip() for line in lines)


@tokenizer_group.command("inspect")
@tokenizer_argument
@click.option("--merges", "shown", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the first merges to show.")
@config_options(optional=True)
def inspect_command(tokenizer_path, shown, config: Config) -> None:
    """Print the kind, sizes, pattern, special tokens, fingerprint and the first merges.

    TOKENIZER_PATH defaults to the config's tokenizer.output.
    """
    tokenizer = Tokenizer.load(tokenizer_path or config.tokenizer.output)
    click.echo(f"kind: {tokenizer.kind}")
    click.echo(f"vocab size: {tokenizer.vocab_size} ({len(tokenizer.merges)} merges, "
               f"{len(tokenizer.special_tokens)} special tokens)")
    click.echo(f"pattern: {pattern_name(tokenizer.pattern)}")
    click.echo(f"merge newlines: {'yes' if tokenizer.merge_newlines else 'no'}")
    click.echo(f"special tokens: {', '.join(f'{t}={i}' for t, i in tokenizer.special_tokens.items()) or '-'}")
    click.echo(f"fingerprint: {tokenizer.fingerprint}")
    for rank, (a, b) in enumerate(tokenizer.merges[:shown]):
        result = tokenizer.merge_results[rank]
        click.echo(f"  {result}: {tokenizer.render_token(a)} + {tokenizer.render_token(b)} -> "
                   f"{tokenizer.render_token(result)}")
