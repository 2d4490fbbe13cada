"""Every section's data, from the run's outputs only, with the reasons of whatever is missing.

:func:`gather` returns plain JSON-able data: ``{"sections": {name: {"missing": [reason, ...], ...}}}``. A section
whose inputs are all absent has only its reasons; a partial one has what could be read and the reasons for the
rest. The figures are the stages' own where they recorded them (``stats.json``, the manifests, the stage logs,
``metrics.jsonl``), and counted from the parts and shards where they did not (histograms, bytes per source).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pipeline.config import Config
from pipeline.data import documents
from pipeline.engine import locations, stage_log
from pipeline.errors import PipelineError, ReportError, shorten
from pipeline.report import corpus, inputs
from pipeline.report.inputs import Missing
from pipeline.report.rejected import attach_originals, sample_rejected
from pipeline.tokenizer import Tokenizer

SECTIONS = {"overview": "Overview", "sources": "Sources", "dropped": "What was dropped",
            "documents": "Documents and tokens", "training": "Training"}
MAX_POINTS = 400  # of each loss curve: a longer run is thinned to every k-th step (and its last)
METRICS_FILE = "metrics.jsonl"  # pipeline.model.training's (not imported: it would import torch)
PREPARE_STATS, STATS_FILE = "stats.json", "stats.json"
_STARTED = re.compile(r"^# lmprep: stage '(?P<stage>[^']+)', started (?P<when>.+)$")


def gather(config: Config, stages: Sequence[str], *, origin: Callable[[str], str] | None = None) -> dict[str, Any]:
    """The report's data for ``config``'s run; ``stages`` are the declared stages' names, in order; ``origin``
    says where a config value came from (None when unknown)."""
    sections: dict[str, dict[str, Any]] = {name: {"missing": []} for name in SECTIONS}
    tokenizer = _tokenizer(config, sections)
    _overview(config, stages, origin, tokenizer, sections["overview"])
    prepared_path = locations.join(config.output_path(config.prepare.output_dir), PREPARE_STATS)
    prepared = _read(sections["sources"], lambda: inputs.read_json(
        locations.join(inputs.output_location(config.output_path(config.prepare.output_dir)), PREPARE_STATS),
        "prepare stats", "the prepare stage", {"sources": list, "dropped": dict, "rejected": list, "splits": dict}))
    stats, stats_path = None, locations.join(config.output_path(config.stats.output_dir or "."), STATS_FILE)
    if config.stats.output_dir is None:
        sections["sources"]["missing"].append("no stats stage in this config (set stats.output_dir): tokens per "
                                              "source come from the shards' manifests")
    else:
        stats = _read(sections["sources"], lambda: inputs.read_json(
            locations.join(inputs.output_location(config.output_path(config.stats.output_dir)), STATS_FILE),
            "stats summary", "the stats stage", {"splits": dict}))
    metrics_path = locations.join(config.output_path(config.train.output_dir), METRICS_FILE)
    metrics = _read(sections["training"], lambda: inputs.read_jsonl(
        locations.join(inputs.output_location(config.output_path(config.train.output_dir)), METRICS_FILE),
        "training log", "the train stage"))
    figures = _documents(config, tokenizer, sections["documents"])
    with _as_written(prepared_path):
        _dropped(config, prepared, sections["dropped"])
    with _as_written(prepared_path, *([stats_path] if stats else []), *([metrics_path] if metrics else [])):
        _sources(config, prepared, stats, figures, metrics, sections["sources"])
    with _as_written(metrics_path):
        _training(config, metrics, sections["training"])
    if "tokenizer" in sections["overview"]:
        sections["documents"]["tokenizer"] = sections["overview"]["tokenizer"]
    if stats is not None:
        with _as_written(stats_path):
            sections["documents"]["stats_splits"] = {
                split: {key: values[key] for key in ("documents", "tokens", "bytes_per_token", "top_tokens")}
                for split, values in stats["splits"].items()}
    return {"sections": sections, "titles": SECTIONS}


@contextlib.contextmanager
def _as_written(*paths: str | os.PathLike[str]) -> Iterator[None]:
    """A value of the wrong type or a key missing deep inside a JSON file (one that parsed) as a ReportError naming
    the files read (``a or b`` where more than one could hold it)."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        named = " or ".join(os.fspath(path) for path in paths)
        raise ReportError(f"{named}: not as the stages write it ({type(exc).__name__}: {shorten(str(exc))}); "
                          "run the stages that write them again (lmprep run --force)") from None


def _read(section: dict[str, Any], read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Missing as exc:
        section["missing"].append(str(exc))
        return None


def _tokenizer(config: Config, sections: dict[str, Any]) -> Tokenizer | None:
    path = config.output_path(config.tokenizer.output)
    if not inputs.exists(path):
        for name in ("overview", "documents"):
            sections[name]["missing"].append(f"{path} is missing (the tokenizer: the tokenizer stage writes it)")
        return None
    try:
        return Tokenizer.load(path)
    except PipelineError as exc:
        raise ReportError(f"{path}: the tokenizer cannot be read ({exc})") from None


def _overview(config: Config, stages: Sequence[str], origin: Callable[[str], str] | None,
              tokenizer: Tokenizer | None, section: dict[str, Any]) -> None:
    section["config"] = [[key, value, origin(key) if origin else None] for key, value in _leaves(config.to_dict())]
    state = Path(config.output_path(config.state_dir))
    lock = _read(section, lambda: inputs.read_json(state / "lock.json", "pipeline lock", "every stage's run",
                                                   {"stages": dict}))
    entries = (lock or {}).get("stages", {}) if isinstance(lock, dict) else {}
    rows = []
    for name in stages:
        row: dict[str, Any] = {"stage": name, "code_version": entries.get(name, {}).get("code_version"),
                               "recorded": name in entries}
        try:
            log = inputs.read_stage_log(state / stage_log.LOGS_DIR / f"{name}.log", name)
        except Missing as exc:
            section["missing"].append(str(exc))
        else:
            row |= log.to_dict()
            row["started"] = _started(log.path)
            row["executor"] = log.header.get("executor", log.header.get("executor.kind"))
        rows.append(row)
    section["stages"] = rows
    if tokenizer is not None:
        section["tokenizer"] = corpus.tokenizer_figures(tokenizer)


def _started(path: str) -> str | None:
    with open(path, encoding="utf-8", errors="replace") as file:
        match = _STARTED.match(file.readline().rstrip("\n"))
    return match["when"] if match else None


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        found += _leaves(value, path) if isinstance(value, dict) else [(path, value)]
    return found


def _documents(config: Config, tokenizer: Tokenizer | None, section: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = {"prepared": None, "shards": None}
    prepared = config.output_path(config.prepare.output_dir)
    location = _read(section, lambda: inputs.output_location(prepared))
    if location is not None and inputs.exists(locations.join(location, documents.PARTS_FILE)):
        figures["prepared"] = corpus.prepared_figures(location, len(config.data.sources), tokenizer)
    elif location is not None:
        section["missing"].append(f"{locations.join(prepared, documents.PARTS_FILE)} is missing (the prepared "
                                  "documents: the prepare stage writes them)")
    shards = config.output_path(config.encode.output_dir)
    present = [split for split in documents.SPLITS if inputs.exists(locations.join(shards, f"{split}.manifest.json"))]
    if present:
        figures["shards"] = corpus.shard_figures(shards, present)
    for split in documents.SPLITS:
        if split not in present:
            section["missing"].append(f"{locations.join(shards, f'{split}.manifest.json')} is missing (the {split} "
                                      "shards: the encode stage writes them)")
    stale = {values["fingerprint"] for values in (figures["shards"] or {}).values()} - (
        {tokenizer.fingerprint} if tokenizer is not None else set())
    if tokenizer is not None and stale:
        section["missing"].append(f"the shards were encoded with tokenizer {sorted(stale)[0][:12]}, not with "
                                  f"{config.output_path(config.tokenizer.output)} ({tokenizer.fingerprint[:12]}): "
                                  "their figures are not this tokenizer's (lmprep run encode)")
    section["bins"] = [corpus.bin_label(i) for i in range(corpus.BINS)]
    section["sources"] = [_source_name(config, i) for i in range(len(config.data.sources))]
    section |= figures
    section["bytes_per_token"] = [[name, _bytes_per_token(i, figures)] for i, name in enumerate(section["sources"])]
    return figures


def _source_name(config: Config, index: int) -> str:
    """``data.sources[0] ../raw/*.txt``, or ``data.sources[0] qa (../raw/*.txt)`` for a source with a name."""
    source = config.data.sources[index]
    return f"data.sources[{index}] " + (f"{source.name} ({source.glob})" if source.name else source.glob)


def _sources(config: Config, prepared: dict[str, Any] | None, stats: dict[str, Any] | None,
             figures: dict[str, Any], metrics: list[Any] | None, section: dict[str, Any]) -> None:
    names = [_source_name(config, i) for i in range(len(config.data.sources))]
    weights = [source.weight for source in config.data.sources]
    total_weight = sum(w for w in weights if w is not None)
    prepared_rows = (prepared or {}).get("sources", [])
    reasons = sorted({reason for row in prepared_rows for reason in row.get("dropped", {})})
    split_tokens: dict[str, dict[int, int]] = {}
    for split, values in ((stats or {}).get("splits") or {}).items():
        split_tokens[split] = {int(row["source"]): int(row["tokens"]) for row in values.get("sources", [])}
    shards = figures.get("shards") or {}
    for split, values in shards.items():  # without stats.json, the manifests' own counts
        split_tokens.setdefault(split, {int(s): n for s, n in values["source_tokens"].items()})
    seen = _achieved(metrics or [])
    seen_total = sum(seen)
    rows = []
    for index, name in enumerate(names):
        row: dict[str, Any] = {"source": name}
        recorded = prepared_rows[index] if index < len(prepared_rows) else None
        if recorded is not None:
            row |= {"read": recorded["documents_read"], "kept": recorded["documents_kept"],
                    "chars_read": recorded["characters_read"], "chars_kept": recorded["characters_kept"]}
            row |= {f"dropped {reason}": recorded.get("dropped", {}).get(reason, 0) for reason in reasons}
        for split in documents.SPLITS:
            if split in split_tokens:
                row[f"tokens {split}"] = split_tokens[split].get(index, 0)
        row["bytes_per_token"] = _bytes_per_token(index, figures)
        row["target_share"] = weights[index] / total_weight if weights[index] is not None and total_weight else None
        train = split_tokens.get("train")
        row["natural_share"] = train.get(index, 0) / sum(train.values()) if train and sum(train.values()) else None
        row["reached_share"] = seen[index] / seen_total if seen_total and index < len(seen) else None
        rows.append(row)
    section["reasons"] = reasons
    section["rows"] = rows
    if prepared is not None:
        section["totals"] = {key: prepared.get(key) for key in ("files", "documents_read", "documents_kept",
                                                               "characters_read", "dropped", "splits")}


def _bytes_per_token(index: int, figures: dict[str, Any]) -> float | None:
    prepared, shards = figures.get("prepared"), figures.get("shards")
    if not prepared or not shards:
        return None
    text_bytes = tokens = 0
    for split, values in shards.items():
        key = str(index)
        text_bytes += prepared["splits"].get(split, {}).get("bytes", {}).get(key, 0)
        tokens += values["source_tokens"].get(key, 0) - values["rows"].get(key, 0) * values["specials_per_row"]
    return text_bytes / tokens if tokens > 0 else None


def _achieved(metrics: list[Any]) -> list[int]:
    totals: list[int] = []
    for record in metrics:
        counts = record.get("source_tokens", []) if isinstance(record, dict) else []
        totals += [0] * (len(counts) - len(totals))
        for source, tokens in enumerate(counts):
            totals[source] += int(tokens)
    return totals


def _dropped(config: Config, prepared: dict[str, Any] | None, section: dict[str, Any]) -> None:
    if prepared is None:
        section["missing"].append("the prepare stats are missing (see Sources), so the rejected parts are unknown")
        return
    location = _read(section, lambda: inputs.output_location(config.output_path(config.prepare.output_dir)))
    if location is None:
        return
    parts = [locations.join(location, part["file"]) for part in prepared.get("rejected", [])]
    absent = [part for part in parts if not inputs.exists(part)]
    if absent:
        section["missing"].append(f"{os.fspath(absent[0])} is missing ({len(absent):,} of {len(parts):,} rejected "
                                  "parts; the prepare stage writes them)")
        parts = [part for part in parts if part not in absent]
    sample = sample_rejected(parts, config.report.sample)
    kept = [locations.join(location, part.file) for split in documents.SPLITS
            for part in documents.read_parts(location, split)] if inputs.exists(
        locations.join(location, documents.PARTS_FILE)) else []
    attach_originals(sample, [*kept, *parts])
    names = [_source_name(config, i) for i in range(len(config.data.sources))]
    section |= sample.to_dict(names)
    for items in section["sample"].values():  # a link to each local raw file (IDs name them from names_root)
        for item in items:
            if not locations.is_url(item["file"]):
                raw = Path(config.names_root, item["file"]).absolute()
                item["file_uri"] = raw.as_uri() if raw.is_file() else None
    section["recorded"] = prepared.get("dropped", {})
    section["sample_size"] = config.report.sample


def _training(config: Config, metrics: list[Any] | None, section: dict[str, Any]) -> None:
    if metrics is None:
        return
    records = [record for record in metrics if isinstance(record, dict) and "step" in record]
    train = [(r["step"], r["train_loss"]) for r in records if isinstance(r.get("train_loss"), (int, float))]
    val = [(r["step"], r["val_loss"]) for r in records if isinstance(r.get("val_loss"), (int, float))]
    section["train"], section["val"] = _thin(train), _thin(val)
    section["steps"] = records[-1]["step"] if records else 0
    section["last"] = {"train_loss": train[-1][1] if train else None, "val_loss": val[-1][1] if val else None}
    seen = _achieved(records)
    weights = [source.weight for source in config.data.sources]
    total_weight = sum(w for w in weights if w is not None)
    section["seen"] = [{"source": _source_name(config, i) if i < len(config.data.sources) else f"source {i}",
                        "tokens": tokens, "share": tokens / sum(seen) if sum(seen) else 0.0,
                        "target": weights[i] / total_weight if i < len(weights) and weights[i] is not None
                        and total_weight else None} for i, tokens in enumerate(seen)]


def _thin(points: list[tuple[Any, float]]) -> list[list[float]]:
    if len(points) <= MAX_POINTS:
        return [[step, round(loss, 5)] for step, loss in points]
    every = -(-len(points) // (MAX_POINTS - 1))
    kept = points[::every] + ([points[-1]] if (len(points) - 1) % every else [])
    return [[step, round(loss, 5)] for step, loss in kept]
