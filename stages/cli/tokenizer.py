"""``lmprep tokenizer …``: train, encode, decode, fingerprint, export, eval and inspect a tokenizer.

Each command is a thin layer over :class:`pipeline.tokenizer.Tokenizer`; errors are
PipelineErrors, which the root group prints as one line with exit status 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pipeline.config import Config, TokenizerConfig
from pipeline.data.sources import SourceFile, TextDecoder, expand_arguments, read_document_pieces, read_documents
from pipeline.engine import locations, storage
from pipeline.errors import DataError, InvalidUtf8Error, TokenizerError, counted
from stages.cli.options import config_options
from stages.registry import stage_outputs

if TYPE_CHECKING:
    from pipeline.tokenizer import Tokenizer

# Digits beyond 30 make no ID (and int() refuses over 4,300): such a token stays text, an invalid ID.
_INTEGER = re.compile(r"[+-]?0*\d{1,30}")


def load_tokenizer(path: str | None, config: Config) -> Tokenizer:
    """The tokenizer at ``path``, or the config's ``tokenizer.output``. ``Tokenizer`` (numpy and ``regex``) is
    imported by the commands that use one, not with ``--help`` or a usage error."""
    from pipeline.tokenizer import Tokenizer

    return Tokenizer.load(path or config.output_path(config.tokenizer.output))


tokenizer_option = click.option(
    "--tokenizer", "tokenizer_path", metavar="PATH", type=click.Path(dir_okay=False),
    help="tokenizer.json to use [default: the config's tokenizer.output].",
)


def tokenizer_option_or_argument(command):
    """``--tokenizer PATH`` as every tokenizer command takes it, for the commands that take nothing else also as
    a positional ``[PATH]`` (as they always did)."""
    @tokenizer_option
    @click.argument("positional_path", required=False, metavar="[PATH]", type=click.Path(dir_okay=False))
    @functools.wraps(command)
    def wrapper(*args: Any, positional_path: str | None, tokenizer_path: str | None, **kwargs: Any) -> Any:
        if positional_path and tokenizer_path and positional_path != tokenizer_path:
            raise click.UsageError(f"two tokenizers given, {positional_path} and --tokenizer {tokenizer_path}; "
                                   "give one")
        return command(*args, tokenizer_path=tokenizer_path or positional_path, **kwargs)

    return wrapper


@click.group("tokenizer")
def tokenizer_group() -> None:
    """Train and use a BPE tokenizer (HF tokenizer.json format).

    Defaults come from the config's tokenizer section; without a config file (outside a project)
    the built-in defaults apply.
    """


def source_options(command):
    """How to read FILE... arguments: as ``data.sources`` reads its globs, with the same decode-error policy."""
    options = [
        click.option("--field", "--column", "field", metavar="NAME",
                     help="The JSON field (.jsonl) or Parquet column holding the text [default: text]; with it, "
                          "standard input (-) is read as JSON lines."),
        click.option("--separator", default="document", show_default=True,
                     help="How .txt files split into documents: document, blank_line, line or a literal string."),
        click.option("--on-decode-error", "on_decode_error", type=click.Choice(["error", "replace", "skip"]),
                     help="Invalid UTF-8: error, replace or skip the document [default: prepare.on_decode_error]."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


class SourceReader:
    """FILE... arguments (paths, globs, ``.gz``, ``.jsonl``, ``.parquet``, ``-`` for standard input) read
    with the pipeline's readers: one decoding policy, errors naming the file and byte offset."""

    def __init__(self, patterns: tuple[str, ...], *, field: str | None, separator: str,
                 on_decode_error: str | None, config: Config):
        if not separator:
            raise click.BadParameter("must not be empty", param_hint="--separator")
        self.files = expand_arguments(patterns, field=field, separator=separator)
        self.decoder = TextDecoder(on_decode_error or config.prepare.on_decode_error,
                                   advice="pass --on-decode-error replace or skip")

    def documents(self, file: SourceFile) -> Iterator[str]:
        return read_documents(file, self.decoder)

    def all_documents(self) -> Iterator[str]:
        for file in self.files:
            yield from self.documents(file)

    def all_pieces(self) -> Iterator[tuple[str, bool]]:
        """Every document as ``(text, ends_document)`` pieces: a large .txt document need not be held whole."""
        for file in self.files:
            yield from read_document_pieces(file, self.decoder)


def training_options(command):
    """The options of how to train (not how big), shared by ``train`` and ``sweep``; each defaults to its key."""
    options = [
        click.option("--kind", "kind", type=click.Choice(["byte", "char", "word"]),
                     help="[default: tokenizer.kind]"),
        click.option("--pattern", "pattern", help="Pre-split: gpt4, gpt2, none or a regex [default: "
                                                  "tokenizer.pattern; if null, gpt4 for byte and none for char]."),
        click.option("--special", "special_tokens", multiple=True,
                     help="A special token (repeatable); IDs follow the merges [default: tokenizer.special_tokens]."),
        click.option("--min-frequency", "min_frequency", type=click.IntRange(min=1),
                     help="Stop when no pair occurs this often [default: tokenizer.min_frequency]."),
        click.option("--character-coverage", "character_coverage", type=click.FloatRange(0, 1, min_open=True),
                     help="Char kind: keep the most frequent characters covering this share of the text, the "
                          "rest unknown (ID 0) [default: tokenizer.character_coverage]."),
        click.option("--merge-newlines/--no-merge-newlines", "merge_newlines", default=None,
                     help="Allow tokens containing a newline [default: tokenizer.merge_newlines; "
                          "if null, yes for byte and no for char]."),
        click.option("--workers", "workers", type=click.IntRange(min=0),
                     help="Processes, 0 = all cores [default: tokenizer.workers]."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@tokenizer_group.command("train")
@click.argument("files", nargs=-1, required=True)
@click.option("--vocab-size", "vocab_size", type=click.IntRange(min=1),
              help="Upper bound on IDs: base tokens + merges + special tokens [default: tokenizer.vocab_size].")
@click.option("--merges", "merges", type=click.IntRange(min=0),
              help="Upper bound on merges, instead of --vocab-size [default: tokenizer.merges].")
@training_options
@source_options
@click.option("--out", type=click.Path(dir_okay=False), help="[default: tokenizer.output]")
@click.option("--force", is_flag=True, help="Write over a pipeline stage's output (the pipeline then re-runs it).")
@config_options(optional=True)
def train_command(files, out, force, field, separator, on_decode_error, config, **given) -> None:
    """Train on FILE... read as data.sources reads them: paths or globs of .txt, .jsonl (--field) or
    .parquet (--column) files, each optionally .gz, or - for standard input. Each document is one
    training sequence (a whole .txt file, unless --separator says otherwise)."""
    from pipeline.tokenizer import Tokenizer
    from pipeline.tokenizer.patterns import chunk_aligned, resolve_pattern

    settings = with_given_options(config.tokenizer, given)
    out = out or config.output_path(settings.output)
    if not force:
        refuse_stage_output(out, config)
    reader = SourceReader(files, field=field, separator=separator, on_decode_error=on_decode_error, config=config)
    texts = chunk_aligned(reader.all_pieces(), resolve_pattern(settings.pattern, kind=settings.kind))
    tokenizer = Tokenizer.train(
        texts, vocab_size=settings.vocab_size, merges=settings.merges,
        kind=settings.kind, pattern=settings.pattern, special_tokens=settings.special_tokens,
        min_frequency=settings.min_frequency, character_coverage=settings.character_coverage,
        merge_newlines=settings.merge_newlines, workers=settings.workers,
    )
    if tokenizer.coverage_note:
        click.echo(tokenizer.coverage_note, err=True)
    if tokenizer.stop_reason:
        click.echo(f"stopped early: {tokenizer.stop_reason}", err=True)
    tokenizer.save(out)
    click.echo(f"wrote {out}: {tokenizer.kind} kind, {tokenizer.vocab_size:,} IDs "
               f"({len(tokenizer.merges):,} merges), fingerprint {tokenizer.fingerprint}")


def with_given_options(settings: TokenizerConfig, given: dict[str, Any]) -> TokenizerConfig:
    """The config's tokenizer section, with each option given on the command line in place of its key.

    ``--vocab-size`` and ``--merges`` set the size together: giving one drops the config's other one.
    """
    given = {key: value for key, value in given.items() if value not in (None, ())}
    if "vocab_size" in given and "merges" in given:
        raise click.UsageError("give --vocab-size or --merges, not both")
    if "vocab_size" in given or "merges" in given:
        given = {"vocab_size": None, "merges": None} | given
    return dataclasses.replace(settings, **given)


def refuse_stage_output(out: str, config: Config) -> None:
    """A TokenizerError if ``out`` exists and is (or lies in) a pipeline stage's output: writing over it
    would change what the pipeline made behind its back (a checkpoint would then refuse the tokenizer)."""
    if not storage.exists(out):
        return
    target = _resolved(out)
    for stage, output in stage_outputs(config).items():
        owned = _resolved(output)
        if locations.inside(target, owned):
            raise TokenizerError(
                f"{out} is the output of the pipeline's '{stage}' stage; retrain it from the config with "
                f"`lmprep run tokenizer`, write elsewhere with --out PATH, or pass --force to overwrite it")


def _resolved(location: str) -> str:
    """A path with its links resolved, or a URL as written (without a trailing ``/``)."""
    return location.rstrip("/") if locations.is_url(location) else os.path.realpath(location)


@tokenizer_group.command("encode")
@click.argument("text", required=False)
@click.option("--file", "file_paths", multiple=True, metavar="PATH",
              help="Encode the documents of this source (a path or glob as in data.sources, or - for standard "
                   "input), one line of IDs per document (repeatable).")
@source_options
@tokenizer_option
@config_options(optional=True)
def encode_command(text, file_paths, field, separator, on_decode_error, tokenizer_path, config: Config) -> None:
    """Print the IDs of TEXT (or of each document of --file) separated by spaces; special-token strings
    stay plain text."""
    if (text is None) == (not file_paths):
        raise click.UsageError("give either TEXT or --file PATH")
    tokenizer = load_tokenizer(tokenizer_path, config)
    if text is not None:
        click.echo(" ".join(map(str, tokenizer.encode(text))))
        return
    reader = SourceReader(file_paths, field=field, separator=separator, on_decode_error=on_decode_error,
                          config=config)
    for document in reader.all_documents():
        click.echo(" ".join(map(str, tokenizer.encode(document))))


@tokenizer_group.command("decode", context_settings={"ignore_unknown_options": True})
@click.argument("ids", nargs=-1)
@click.option("--replace", is_flag=True, help="Replace bytes that are not UTF-8 by U+FFFD instead of failing.")
@tokenizer_option
@config_options(optional=True)
def decode_command(ids, replace, tokenizer_path, config: Config) -> None:
    """Print the text of ID... (negative or unknown IDs are an error naming the first one)."""
    tokenizer = load_tokenizer(tokenizer_path, config)
    values = [int(token) if _INTEGER.fullmatch(token) else token for token in ids]
    try:
        text = tokenizer.decode(values, errors="replace" if replace else "strict")
    except InvalidUtf8Error as exc:
        raise InvalidUtf8Error(exc.problem, "pass --replace to print U+FFFD for them") from None
    click.echo(text)


@tokenizer_group.command("fingerprint")
@tokenizer_option_or_argument
@config_options(optional=True)
def fingerprint_command(tokenizer_path, config: Config) -> None:
    """Print the fingerprint: a sha256 of what decides the IDs, not of the file's bytes.

    PATH is the same as --tokenizer PATH.
    """
    click.echo(load_tokenizer(tokenizer_path, config).fingerprint)


@tokenizer_group.command("export")
@tokenizer_option_or_argument
@click.option("--format", "fmt", type=click.Choice(["tiktoken"]), required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@config_options(optional=True)
def export_command(tokenizer_path, fmt, out, config: Config) -> None:
    """Write the tokenizer in another library's format (tiktoken's ranks file).

    Prints the Python code that loads it (on stdout; the note on stderr), so
    ``lmprep tokenizer export --format tiktoken --out x.tiktoken > load_x.py`` gives a runnable file.
    PATH is the same as --tokenizer PATH.
    """
    from pipeline.tokenizer.tiktoken_export import loading_snippet

    tokenizer = load_tokenizer(tokenizer_path, config)
    tokenizer.export_tiktoken(out)
    click.echo(f"wrote {out}; this Python code loads it:", err=True)
    click.echo(loading_snippet(tokenizer, out), nl=False)


@tokenizer_group.command("eval")
@click.argument("files", nargs=-1, required=True)
@click.option("--tokenizer", "tokenizer_paths", multiple=True, type=click.Path(dir_okay=False),
              help="A tokenizer.json to compare (repeatable) [default: tokenizer.output].")
@source_options
@config_options(optional=True)
def eval_command(files, tokenizer_paths, field, separator, on_decode_error, config: Config) -> None:
    """Compare tokenizers by compression: tokens and bytes per token on each file of FILE... (paths or
    globs read as data.sources reads them, or - for standard input).

    When a tokenizer has an unknown token (char and word kinds), each also gets the share of its
    tokens that are unknown: text it cannot give back.
    """
    tokenizer_paths = tokenizer_paths or (config.output_path(config.tokenizer.output),)
    tokenizers = [load_tokenizer(path, config) for path in tokenizer_paths]
    reader = SourceReader(files, field=field, separator=separator, on_decode_error=on_decode_error, config=config)
    unknown = any(tokenizer.unk_id is not None for tokenizer in tokenizers)
    counted = [_count(list(reader.documents(file)), tokenizers) for file in reader.files]
    rows = [_eval_row(locations.name_of(file.path), count, tokenizers, unknown)
            for file, count in zip(reader.files, counted)]
    if len(counted) > 1:
        rows.append(_eval_row("total", _sum_counts(counted), tokenizers, unknown))
    columns = ("tokens", "bytes/tok", "unknown") if unknown else ("tokens", "bytes/tok")
    names = [Path(p).name for p in tokenizer_paths]
    labels = names if len(set(names)) == len(names) else list(tokenizer_paths)  # same file names: whole paths
    header = ["text", "bytes"] + [f"{label} {what}" for label in labels for what in columns]
    if len(tokenizers) > 1:
        header.append("tokens vs first")
    click.echo(_table([header, *rows]))


@dataclasses.dataclass(frozen=True)
class _Count:
    """Bytes of text, and per tokenizer its tokens and unknown tokens."""

    size: int
    tokens: tuple[int, ...]
    unknown: tuple[int, ...]


def _count(documents: list[str], tokenizers: list[Tokenizer]) -> _Count:
    encoded = [[tokenizer.encode(document) for document in documents] for tokenizer in tokenizers]
    return _Count(size=sum(len(document.encode("utf-8")) for document in documents),
                  tokens=tuple(sum(map(len, ids)) for ids in encoded),
                  unknown=tuple(sum(part.count(tokenizer.unk_id) for part in ids)
                                for tokenizer, ids in zip(tokenizers, encoded)))


def _sum_counts(counts: list[_Count]) -> _Count:
    return _Count(size=sum(c.size for c in counts), tokens=tuple(map(sum, zip(*(c.tokens for c in counts)))),
                  unknown=tuple(map(sum, zip(*(c.unknown for c in counts)))))


def _eval_row(name: str, count: _Count, tokenizers: list[Tokenizer], unknown: bool) -> list[str]:
    size, counts = count.size, count.tokens
    row = [name, f"{size:,}"]
    for tokens, unknowns in zip(count.tokens, count.unknown):
        row += [f"{tokens:,}", f"{size / tokens:.2f}" if tokens else "-"]
        if unknown:
            row.append(f"{unknowns / tokens:.2%}" if tokens else "-")
    if len(counts) > 1:
        row.append(" ".join(f"{(c - counts[0]) / counts[0]:+.1%}" if counts[0] else "-" for c in counts[1:]))
    return row


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths)))
             for row in rows]
    return "\n".join(line.rstrip() for line in lines)


@tokenizer_group.command("inspect")
@tokenizer_option_or_argument
@click.option("--merges", "shown", default=10, show_default=True, type=click.IntRange(min=0),
              help="How many of the first merges to show.")
@config_options(optional=True)
def inspect_command(tokenizer_path, shown, config: Config) -> None:
    """Print the kind, sizes, pattern, special tokens, fingerprint and the first merges.

    PATH is the same as --tokenizer PATH.
    """
    from pipeline.tokenizer.patterns import pattern_name

    tokenizer = load_tokenizer(tokenizer_path, config)
    click.echo(f"kind: {tokenizer.kind}")
    click.echo(f"vocab size: {tokenizer.vocab_size:,} ({len(tokenizer.merges):,} merges, "
               f"{counted(len(tokenizer.special_tokens), 'special token')})")
    click.echo(f"pattern: {pattern_name(tokenizer.pattern)}")
    click.echo(f"merge newlines: {'yes' if tokenizer.merge_newlines else 'no'}")
    click.echo(f"special tokens: {', '.join(f'{t}={i}' for t, i in tokenizer.special_tokens.items()) or '-'}")
    click.echo(f"fingerprint: {tokenizer.fingerprint}")
    for rank, (a, b) in enumerate(tokenizer.merges[:shown]):
        result = tokenizer.merge_results[rank]
        click.echo(f"  {result}: {tokenizer.render_token(a)} + {tokenizer.render_token(b)} -> "
                   f"{tokenizer.render_token(result)}")


@tokenizer_group.command("trace")
@click.argument("text")
@click.option("--max-steps", "max_steps", type=click.IntRange(min=0),
              help="Show at most this many merges (the IDs are always the full encoding).")
@click.option("--json", "as_json", is_flag=True, help="Print the trace as JSON.")
@tokenizer_option
@config_options(optional=True)
def trace_command(text, max_steps, as_json, tokenizer_path, config: Config) -> None:
    """Show BPE at work on TEXT: the starting pieces, each merge that applies in training order, the IDs.

    Bytes that are not whole characters are shown as <e6>; special-token strings are plain text.
    """
    from pipeline.tokenizer import trace

    tokenizer = load_tokenizer(tokenizer_path, config)
    result = trace.trace(tokenizer, text, max_steps=max_steps)
    if as_json:
        click.echo(json.dumps(trace.to_json(tokenizer, text, result), ensure_ascii=False))
    else:
        click.echo("\n".join(trace.format_text(tokenizer, result)))


def _size_list(ctx, param, value: str | None) -> list[int] | None:
    """``512,1024,2048`` → ``[512, 1024, 2048]``; the order is checked by the sweep itself."""
    if value is None:
        return None
    try:
        return [int(item) for item in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers, "
                                 "e.g. 512,1024,2048") from None


@tokenizer_group.command("sweep")
@click.argument("files", nargs=-1, required=True)
@click.option("--sizes", "vocab_sizes", callback=_size_list, metavar="N,N,...",
              help="Vocabulary sizes to compare, increasing (special tokens included), e.g. 512,1024,2048.")
@click.option("--merges", "merge_counts", callback=_size_list, metavar="N,N,...",
              help="Merge counts to compare instead of sizes, increasing, e.g. 0,6,12,24,48.")
@click.option("--eval", "eval_files", multiple=True, metavar="PATH",
              help="Count tokens on this source instead of the training FILEs (repeatable), e.g. held-out text.")
@click.option("--min-gain", "min_gain", type=click.FloatRange(min=0), default=3.0, show_default=True,
              help="For the suggestion: the least gain worth having, in percent fewer tokens per 1,000 "
                   "extra vocabulary entries.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default="sweep.png", show_default=True,
              help="Where to draw bytes per token against vocabulary size.")
@training_options
@source_options
@config_options(optional=True)
def sweep_command(files, vocab_sizes, merge_counts, eval_files, min_gain, plot_path, field, separator,
                  on_decode_error, config: Config, **given) -> None:
    """Compare vocabulary sizes on FILE...: train once to the largest, read the others off its merges.

    Per size: tokens, bytes per token, the gain over the previous size per 1,000 extra entries, and
    the embedding + output head parameters at the config's train.dim. Ends with a suggested size.
    """
    from pipeline.tokenizer import sweep

    if (vocab_sizes is None) == (merge_counts is None):
        raise click.UsageError("give either --sizes or --merges")
    settings = with_given_options(config.tokenizer, given)
    reading = dict(field=field, separator=separator, on_decode_error=on_decode_error, config=config)
    texts = list(SourceReader(files, **reading).all_documents())
    if not any(texts):
        raise DataError(f"{', '.join(files)}: no text to train on (the files are empty)")
    eval_texts = list(SourceReader(eval_files, **reading).all_documents()) if eval_files else None
    if eval_texts is not None and not any(eval_texts):
        raise DataError(f"{', '.join(eval_files)}: no text to count tokens on (the --eval files are empty)")
    result = sweep.sweep(texts, eval_texts=eval_texts, vocab_sizes=vocab_sizes, merge_counts=merge_counts,
                         kind=settings.kind, pattern=settings.pattern, special_tokens=settings.special_tokens,
                         min_frequency=settings.min_frequency, merge_newlines=settings.merge_newlines,
                         character_coverage=settings.character_coverage, workers=settings.workers)
    dim, tied = config.train.dim, config.train.tie_weights
    measured = "the --eval files" if eval_texts else "the training files"
    click.echo(f"trained once: {settings.kind} kind, {result.rows[-1].merges:,} merges; tokens counted on {measured} "
               f"({result.rows[0].text_bytes:,} bytes)")
    header = ["vocab", "merges", "tokens", "bytes/token", f"fewer tokens per +{sweep.GAIN_PER:,} vocab",
              f"{'embedding (tied)' if tied else 'embedding + head'} params at dim {dim}"]
    rows = [[f"{row.vocab_size:,}", f"{row.merges:,}", f"{row.tokens:,}", f"{row.bytes_per_token:.3f}",
             f"{sweep.gain_per_thousand(previous, row):.1f}%" if previous else "-",
             f"{sweep.embedding_parameters(row.vocab_size, dim, tie_weights=tied):,}"]
            for previous, row in zip([None, *result.rows], result.rows)]
    click.echo(_table([header, *rows]))
    suggestion = sweep.suggest(result, min_gain=min_gain)
    click.echo(f"suggested vocab size: {suggestion.vocab_size:,} "
               f"(a suggestion, not a measurement: {suggestion.rule})")
    sweep.plot(result, plot_path, title=f"{settings.kind}-level BPE, {', '.join(files)}"[:80])
    click.echo(f"bytes per token against vocabulary size → {plot_path}")
