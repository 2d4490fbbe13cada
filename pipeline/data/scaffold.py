"""``lmprep init``: a new project around the user's own files.

Each ``--from`` path or glob becomes a source of the config; how to read it
(the ``.txt`` separator, the JSON field or Parquet column) is guessed from a
sample of its first file (the separator from up to 20 of its files, naming those
that look otherwise), and the guess and what it rests on are written as
comments beside it, for the user to confirm. Every output goes under one
``output_root``, which the project's ``.gitignore`` leaves out of git; a Makefile
runs the pipeline from any directory.
"""

from __future__ import annotations

import glob
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.data.sources import format_of, head_bytes, string_column_characters
from pipeline.engine import atomic
from pipeline.errors import ConfigError, DataError

CONFIG_NAME = "config.yaml"
OUTPUT_ROOT = "out"
SAMPLE_BYTES = 1 << 16
SAMPLE_LINES = 50
SAMPLE_ROWS = 1000
SAMPLE_FILES = 20  # .txt files a source's separator is guessed from, spread over its files


@dataclass(frozen=True)
class SourceGuess:
    """One source of the new config: its glob (relative to the project), how to read it, and why."""

    glob: str
    separator: str | None  # for .txt files; None when the source has none
    field: str | None  # for .jsonl/.parquet files; None when the source has none
    notes: tuple[str, ...]
    doubt: str | None = None  # files that disagree with the guess, for ``init`` to say


def guess_sources(patterns: list[str], project: Path) -> list[SourceGuess]:
    """A source per ``--from`` path or glob (a directory: one per file type found in it)."""
    return [guess for pattern in patterns for guess in _guess_pattern(pattern, project)]


def _guess_pattern(pattern: str, project: Path) -> list[SourceGuess]:
    if os.path.isdir(pattern):
        files = sorted(Path(p) for p in glob.glob(os.path.join(pattern, "**", "*"), recursive=True)
                       if os.path.isfile(p))
        by_suffix = _group_by_suffix(files)
        if not by_suffix:
            raise DataError(f"--from {pattern}: no text-like (.txt, .md, .py, ...), .jsonl or .parquet files "
                            "(optionally .gz) in it")
        return [_guess(os.path.join(pattern, "**", f"*{suffix}"), group, project)
                for suffix, group in by_suffix.items()]
    files = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not files:
        raise DataError(f"--from {pattern!r} matches no files")
    unknown = [file for file in files if format_of(file) is None]
    if unknown:
        raise DataError(f"--from {pattern!r}: cannot tell the format of {unknown[0]} (known: .jsonl, .parquet, "
                        "and text-like ones such as .txt, .md, .py, optionally .gz); narrow the glob")
    return [_guess(pattern, files, project)]


def _group_by_suffix(files: list[Path]) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for file in files:
        if format_of(file) is not None:
            suffix = "".join(file.suffixes[-2:]) if file.name.endswith(".gz") else file.suffix
            groups.setdefault(suffix, []).append(file)
    return groups


def _suffix(file: Path) -> str:
    """The extension that says the format, a ``.gz`` aside, in lower case."""
    return Path(file.name[:-3] if file.name.endswith(".gz") else file.name).suffix.lower()


def _guess(pattern: str, files: list[Path], project: Path) -> SourceGuess:
    """How to read the files of one source, from a sample of the first of each format."""
    formats = Counter(format_of(file) for file in files)
    notes = ["matches " + ", ".join(f"{count:,} {fmt} file{'s' if count > 1 else ''}"
                                    for fmt, count in sorted(formats.items())) + " now"]
    separator = field = doubt = None
    if "txt" in formats:
        first = next(file for file in files if format_of(file) == "txt")
        suffix = _suffix(first)
        if suffix in (".txt", ".text"):
            separator, note, doubt = _guess_files_separator([file for file in files if _suffix(file) == suffix])
            notes.append(note + (f", but {doubt}" if doubt else ""))
        else:
            separator = "document"
            notes.append(f"separator document: a {suffix} file is one document (source code, markup)")
    if "jsonl" in formats:
        first = next(file for file in files if format_of(file) == "jsonl")
        field, why = _guess_json_field(first)
        notes.append(f"field {field}: {why} in {first.name}")
    if "parquet" in formats:
        first = next(file for file in files if format_of(file) == "parquet")
        characters = string_column_characters(first, SAMPLE_ROWS)
        if not characters:
            raise DataError(f"{first}: no string column to read text from")
        chosen = _longest(characters)
        if field is not None and field != chosen:
            raise DataError(f"--from {pattern!r}: its JSON lines hold the text in {field!r} and its Parquet files "
                            f"in {chosen!r}; give each kind of file its own --from")
        field = chosen
        notes.append(f"column {chosen}: the longest texts of the string columns in the first {SAMPLE_ROWS:,} rows "
                     f"of {first.name}: {_candidates(characters)}")
    relative = os.path.relpath(os.path.abspath(pattern), os.path.abspath(project))
    return SourceGuess(glob=relative, separator=separator, field=field, notes=tuple(notes), doubt=doubt)


def _guess_files_separator(files: list[Path]) -> tuple[str, str, str | None]:
    """The separator most of up to ``SAMPLE_FILES`` files (spread over the list) look like, the note that
    says so, and which files look otherwise (None when none do)."""
    sampled = files[::max(1, -(-len(files) // SAMPLE_FILES))]
    guesses = [(file, *_guess_separator(head_bytes(file, SAMPLE_BYTES))) for file in sampled]
    counts = Counter(separator for _, separator, _ in guesses)
    separator, agreeing = counts.most_common(1)[0]
    example, _, why = next(guess for guess in guesses if guess[1] == separator)
    note = f"separator {separator}: {why} in {example.name}"
    if len(sampled) > 1:
        note += f"; so do {agreeing:,} of the {len(sampled):,} files sampled"
    others = [f"{other} in {next(file.name for file, guessed, _ in guesses if guessed == other)}"
              + (f" and {count - 1} more" if count > 1 else "") for other, count in counts.most_common()[1:]]
    doubt = f"not {', '.join(others)}: check them, or give each kind its own --from" if others else None
    return separator, note, doubt


def _guess_separator(sample: bytes) -> tuple[str, str]:
    text = sample.decode("utf-8", errors="replace").replace("\r\n", "\n")
    lines = text.split("\n")
    blank = sum(1 for line in lines if not line.strip())
    if blank >= 2 and blank < len(lines) / 2:
        return "blank_line", f"{blank:,} blank lines among the first {len(lines):,} lines"
    if len(lines) >= 10:
        return "line", f"{len(lines):,} lines and no blank lines between them in the first {len(sample):,} bytes"
    return "document", f"{len(lines):,} lines in the file (each file is one document)"


def _guess_json_field(path: Path) -> tuple[str, str]:
    lengths: Counter[str] = Counter()
    lines = [line for line in head_bytes(path, SAMPLE_BYTES).splitlines()[:SAMPLE_LINES] if line.strip()]
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # the last line of the sample may be cut short
        if isinstance(record, dict):
            lengths.update({key: len(value) for key, value in record.items() if isinstance(value, str)})
    if not lengths:
        raise DataError(f"{path}: no JSON object with a string field in its first {len(lines)} lines")
    return _longest(lengths), f"the longest texts of the string fields in the first {len(lines)} lines: " + \
        _candidates(lengths)


def _longest(characters: Mapping[str, int]) -> str:
    """The field or column holding the most characters over the sample: the text, not its name or ID
    (the first one on a tie)."""
    return max(characters, key=lambda name: characters[name])


def _candidates(characters: Mapping[str, int]) -> str:
    return ", ".join(f"{name} ({count:,} characters)" for name, count in
                     sorted(characters.items(), key=lambda item: -item[1]))


def write_project(directory: Path, sources: list[SourceGuess], *, force: bool = False) -> list[Path]:
    """Write the config, ``.gitignore`` and Makefile into ``directory``; return the files written.

    An existing config is never overwritten unless ``force``.
    """
    config = directory / CONFIG_NAME
    if config.exists() and not force:
        raise ConfigError(f"{config} already exists; edit it, or pass --force to write a new one over it")
    files = {config: render_config(sources), directory / ".gitignore": GITIGNORE, directory / "Makefile": MAKEFILE}
    for path, text in files.items():
        if path.name != CONFIG_NAME and path.exists() and not force:
            continue  # the user's own .gitignore or Makefile stays
        atomic.write_text(path, text)
    return [path for path in files if path.exists()]


def render_config(sources: list[SourceGuess]) -> str:
    lines = [CONFIG_HEAD]
    for source in sources:
        lines += [f"    # {note}" for note in source.notes]
        lines.append(f"    - glob: {json.dumps(source.glob)}")
        if source.separator is not None:
            lines.append(f"      separator: {source.separator}    # document | blank_line | line | a literal string")
        if source.field is not None:
            lines.append(f"      field: {json.dumps(source.field)}")
    lines.append(CONFIG_TAIL)
    return "\n".join(lines)


CONFIG_HEAD = """\
# lmprep project, written by `lmprep init`. Paths are relative to this file's directory, so
#   lmprep run --config path/to/config.yaml
# works from anywhere (`make` here does the same); in this directory or below it, plain
# `lmprep run`, `lmprep status` or `lmprep sample` find this file. Every output goes under output_root.
# A variant needs only what differs: a file with `extends: config.yaml`, say
#   extends: config.yaml
#   output_root: out/char
#   tokenizer: {kind: char, vocab_size: 512}
# and takes what this config ran with the same inputs and settings (prepare, here) as it is.
# `lmprep config show --origin` prints every value and where it came from.

# Where the text comes from: how each source is read was guessed from a sample of it (the
# comments above it say from what); check it, `lmprep run prepare` prints what was kept.
data:
  sources:"""

CONFIG_TAIL = f"""
# Everything lmprep writes goes under output_root (left out of git by .gitignore); the
# output paths below are relative to it.
output_root: {OUTPUT_ROOT}
state_dir: .lmprep            # the lock file (like dvc.lock) and the file-hash cache
# What every config here ran, as DVC's run cache, relative to this file as output_root is: a
# variant with an output_root of its own links the stages it shares instead of running them.
run_cache_dir: {OUTPUT_ROOT}/.lmprep/runs

prepare:
  on_decode_error: error      # invalid UTF-8: error (names file and byte) | replace | skip
  val_fraction: 0.05          # share of documents held out for validation
  output_dir: prepared

tokenizer:
  kind: byte                  # byte | char | word
  vocab_size: 2048            # including the special tokens; `lmprep tokenizer sweep` helps choose
  output: tokenizer/tokenizer.json

encode:
  output_dir: shards

train:
  steps: 300
  checkpoint_every: 100       # a resumable checkpoint every N steps
  output_dir: checkpoints/default
"""

GITIGNORE = f"""\
# derived data, rebuilt by `make` (lmprep run)
{OUTPUT_ROOT}/
"""

MAKEFILE = """\
# `make` runs every stale stage of this project; it works from any directory
# (make -f path/to/Makefile). LMPREP is the lmprep command, CONFIG the config.
HERE := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
LMPREP ?= lmprep
CONFIG ?= $(HERE)config.yaml
PROMPT ?=

.DEFAULT_GOAL := all
.PHONY: all prepare tokenize train status sample clean help

all: ## Run every stage that is stale
\t$(LMPREP) run --config $(CONFIG)

prepare: ## Read, clean, de-duplicate and split the sources
\t$(LMPREP) run prepare --config $(CONFIG)

tokenize: ## Train the tokenizer and encode the corpus into shards
\t$(LMPREP) run tokenizer encode --config $(CONFIG)

train: ## Train the model on the shards
\t$(LMPREP) run train --config $(CONFIG)

status: ## Say which stages are stale and why
\t$(LMPREP) status --config $(CONFIG)

sample: ## Continue PROMPT with the trained model
\t$(LMPREP) sample --config $(CONFIG) --prompt "$(PROMPT)"

clean: ## Delete derived data (checkpoints are kept)
\t$(LMPREP) clean --config $(CONFIG)

help: ## List the targets
\t@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\\t/' | expand -t 12
"""
