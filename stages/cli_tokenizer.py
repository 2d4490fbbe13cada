"""``lmprep tokenizer …``: train, encode, decode, fingerprint, export, eval and inspect a tokenizer.

Each command is a thin layer over :class:`pipeline.tokenizer.Tokenizer`; errors are
PipelineErrors, which the root group prints as one line with exit status 2.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from pipeline.errors import DataError
from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.patterns import pattern_name

DEFAULT_TOKENIZER = "data/tokenizer/tokenizer.json"
_INTEGER = re.compile(r"[+-]?\d+")

tokenizer_option = click.option(
    "--tokenizer", "tokenizer_path", default=DEFAULT_TOKENIZER, show_default=True,
    type=click.Path(dir_okay=False), help="tokenizer.json to use.",
)
tokenizer_argument = click.argument("tokenizer_path", required=False, default=DEFAULT_TOKENIZER,
                                    type=click.Path(dir_okay=False))


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Train and use a BPE tokenizer (HF tokenizer.json format)."""


@tokenizer_group.command("train")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--vocab-size", default=2048, show_default=True, type=click.IntRange(min=1),
              help="Upper bound on IDs: base tokens + merges + special tokens.")
@click.option("--kind", type=click.Choice(["byte", "char"]), default="byte", show_default=True)
@click.option("--pattern", default=None, help="Pre-split: gpt4, gpt2, none or a regex [default: gpt4 for byte, none for char].")
@click.option("--special", "specials", multiple=True, help="A special token (repeatable); IDs follow the merges.")
@click.option("--min-frequency", default=2, show_default=True, type=click.IntRange(min=1),
              help="Stop when no pair occurs this often.")
@click.option("--merge-newlines/--no-merge-newlines", default=None,
              help="Allow tokens containing a newline [default: yes for byte, no for char].")
@click.option("--workers", default=0, show_default=True, type=click.IntRange(min=0), help="Processes (0 = all cores).")
@click.option("--out", default=DEFAULT_TOKENIZER, show_default=True, type=click.Path(dir_okay=False))
def train_command(files, vocab_size, kind, pattern, specials, min_frequency, merge_newlines, workers, out) -> None:
    """Train on FILE... (UTF-8 text; each file's whole text is one training sequence)."""
    tokenizer = Tokenizer.train(
        (read_utf8(path) for path in files), vocab_size=vocab_size, kind=kind, pattern=pattern,
        special_tokens=specials, min_frequency=min_frequency, merge_newlines=merge_newlines, workers=workers,
    )
    if tokenizer.stop_reason:
        click.echo(f"stopped early: {tokenizer.stop_reason}", err=True)
    tokenizer.save(out)
    click.echo(f"wrote {out}: {tokenizer.kind} kind, {tokenizer.vocab_size} IDs "
               f"({len(tokenizer.merges)} merges), fingerprint {tokenizer.fingerprint}")


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
def encode_command(text, file_path, tokenizer_path) -> None:
    """Print the IDs of TEXT (or of --file) separated by spaces; special-token strings stay plain text."""
    if (text is None) == (file_path is None):
        raise click.UsageError("give either TEXT or --file PATH")
    tokenizer = Tokenizer.load(tokenizer_path)
    ids = tokenizer.encode(read_utf8(file_path) if file_path else text)
    click.echo(" ".join(map(str, ids)))


@tokenizer_group.command("decode", context_settings={"ignore_unknown_options": True})
@click.argument("ids", nargs=-1)
@click.option("--replace", is_flag=True, help="Replace bytes that are not UTF-8 by U+FFFD instead of failing.")
@tokenizer_option
def decode_command(ids, replace, tokenizer_path) -> None:
    """Print the text of ID... (negative or unknown IDs are an error naming the first one)."""
    tokenizer = Tokenizer.load(tokenizer_path)
    values = [int(token) if _INTEGER.fullmatch(token) else token for token in ids]
    click.echo(tokenizer.decode(values, errors="replace" if replace else "strict"))


@tokenizer_group.command("fingerprint")
@tokenizer_argument
def fingerprint_command(tokenizer_path) -> None:
    """Print the tokenizer's fingerprint (sha256 of what decides its IDs, not of the file's bytes)."""
    click.echo(Tokenizer.load(tokenizer_path).fingerprint)


@tokenizer_group.command("export")
@click.argument("tokenizer_path", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["tiktoken"]), required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
def export_command(tokenizer_path, fmt, out) -> None:
    """Write the tokenizer in another library's format (tiktoken's ranks file)."""
    from pipeline.tokenizer.tiktoken_export import tiktoken_pattern

    tokenizer = Tokenizer.load(tokenizer_path)
    tokenizer.export_tiktoken(out)
    click.echo(f"wrote {out}; build it with tiktoken.Encoding(name, pat_str={tiktoken_pattern(tokenizer)!r}, "
               f"mergeable_ranks=tiktoken.load.load_tiktoken_bpe({out!r}), special_tokens={tokenizer.special_tokens!r})")


@tokenizer_group.command("eval")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--tokenizer", "tokenizer_paths", multiple=True, required=True, type=click.Path(dir_okay=False),
              help="A tokenizer.json to compare (repeatable).")
def eval_command(files, tokenizer_paths) -> None:
    """Compare tokenizers by compression: tokens and bytes per token on each FILE."""
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
def inspect_command(tokenizer_path, shown) -> None:
    """Print the kind, sizes, pattern, special tokens, fingerprint and the first merges."""
    tokenizer = Tokenizer.load(tokenizer_path)
    click.echo(f"kind: {tokenizer.kind}")
    click.echo(f"vocab size: {tokenizer.vocab_size} ({len(tokenizer.merges)} merges, "
               f"{len(tokenizer.special_tokens)} special tokens)")
    click.echo(f"pattern: {pattern_name(tokenizer.pattern)}")
    click.echo(f"merge newlines: {'yes' if tokenizer.merge_newlines else 'no'}")
    click.echo(f"special tokens: {', '.join(f'{t}={i}' for t, i in tokenizer.special_tokens.items()) or '-'}")
    click.echo(f"fingerprint: {tokenizer.fingerprint}")
    for rank, (a, b) in enumerate(tokenizer.merges[:shown]):
        result = tokenizer.merge_results[rank]
        click.echo(f"  {result}: {_show(tokenizer, a)} + {_show(tokenizer, b)} -> {_show(tokenizer, result)}")


def _show(tokenizer: Tokenizer, token_id: int) -> str:
    return repr(tokenizer.token_bytes(token_id).decode("utf-8", "backslashreplace"))
