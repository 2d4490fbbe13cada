"""The report's HTML: one self-contained page from :func:`pipeline.report.sections.gather`'s data.

Tables and charts are written here (every number is in the markup, the charts are SVG), so the page reads
the same with scripts off; the script (:mod:`pipeline.report.assets`) adds sorting, the rejected documents'
texts (from the JSON of the sample embedded in the page) and the search box.

The page is at most :data:`MAX_PAGE_BYTES`: the sample is bounded (``report.sample`` documents per rule, each
text cut to 2,000 characters, 1 Mi characters in all) and everything else has a fixed size per source, split
and stage (32 bins per histogram, 400 points per loss curve); should a page still come out larger (thousands of
sources and rules), the sample is halved until it fits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from pipeline.report import svg
from pipeline.report.assets import ERRORS_SCRIPT, SCRIPT, STYLE

MAX_PAGE_BYTES = 4 << 20
SNIPPET_CHARS = 90


def render(data: dict[str, Any], *, title: str, generated: str) -> str:
    """The page; the sample shrinks (halved per rule) until the page fits in :data:`MAX_PAGE_BYTES`."""
    while True:
        page = _page(data, title=title, generated=generated)
        sample = data["sections"]["dropped"].get("sample") or {}
        if len(page.encode("utf-8")) <= MAX_PAGE_BYTES or not any(sample.values()):
            return page
        for reason, items in sample.items():
            sample[reason] = items[: len(items) // 2]


def _page(data: dict[str, Any], *, title: str, generated: str) -> str:
    sections, titles = data["sections"], data["titles"]
    body = [_overview(sections["overview"]), _sources(sections["sources"]), _dropped(sections["dropped"]),
            _documents(sections["documents"]), _training(sections["training"])]
    missing = [name for name, section in sections.items() if section["missing"]]
    summary = ("every section is complete" if not missing else "incomplete sections: " + ", ".join(
        f'<a href="#{name}">{escape(titles[name])}</a>' for name in missing))
    nav = "".join(f'<a href="#{name}">{escape(label)}</a>' for name, label in titles.items())
    sample = json.dumps(sections["dropped"].get("sample") or {}, ensure_ascii=False, separators=(",", ":"))
    sample = sample.replace("</", "<\\/").replace("<!--", "<\\!--")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<script>{ERRORS_SCRIPT}</script>
<style>{STYLE}</style>
</head><body>
<header><h1>{escape(title)}</h1><p>generated {escape(generated)} from the run's outputs; {summary}</p>
<nav>{nav}</nav></header>
<main>
{"".join(body)}
</main>
<pre id="page-errors" hidden></pre>
<script type="application/json" id="sample-data">{sample}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def _section(name: str, title: str, section: dict[str, Any], content: str) -> str:
    missing = ""
    if section["missing"]:
        missing = ('<div class="missing" data-missing="' + str(len(section["missing"])) + '"><b>Missing here:</b><ul>'
                   + "".join(f"<li>{escape(reason)}</li>" for reason in section["missing"]) + "</ul></div>")
    return f'<section id="{name}"><h2>{escape(title)}</h2>{missing}{content}</section>\n'


def _number(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and digits:
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else escape(str(value))


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _cell(value: Any, text: str | None = None, *, left: bool = False) -> str:
    shown = _number(value) if text is None else text
    sort = "" if value is None or isinstance(value, str) else f' data-value="{value}"'
    return f'<td{" class=text" if left else ""}{sort}>{shown}</td>'


def _table(table_id: str, headers: Sequence[str], rows: Sequence[str], *, sortable: bool = True,
           left: int = 1) -> str:
    head = "".join(f'<th{" class=text" if i < left else ""}>{escape(h).replace(" / ", "<br>")}</th>'
                   for i, h in enumerate(headers))
    return (f'<div class="scroll"><table id="{table_id}"{" class=sortable" if sortable else ""}><thead><tr>{head}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _cards(cards: Sequence[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(f'<div class="card"><b>{value}</b><span>{escape(label)}</span></div>'
                                           for label, value in cards) + "</div>"


# -- sections ----------------------------------------------------------------------------------------------

def _overview(section: dict[str, Any]) -> str:
    parts = []
    tokenizer = section.get("tokenizer")
    if tokenizer:
        parts.append(_cards([("tokenizer fingerprint", f'<code title="{escape(tokenizer["fingerprint"])}">'
                                                       f'{escape(tokenizer["fingerprint"][:12])}</code>'),
                             ("vocabulary", _number(tokenizer["vocab_size"])), ("merges", _number(tokenizer["merges"])),
                             ("kind", escape(tokenizer["kind"]))]))
    rows = []
    for row in section.get("stages", []):
        rows.append("<tr>" + _cell(row["stage"], left=True) + _cell(row.get("started"), left=True)
                    + _cell(row.get("ending"), left=True) + _cell(row.get("wall_seconds"))
                    + _cell(row.get("tasks")) + _cell(row.get("task_seconds"))
                    + _cell(row.get("workers")) + _cell(row.get("code_version"))
                    + _cell(row.get("executor"), left=True) + _cell(row.get("path"), left=True) + "</tr>")
    parts.append("<h3>Stages</h3>" + _table("stages", ["stage", "last ran", "ended", "wall s", "tasks",
                                                       "task s (sum over workers)", "workers", "code version",
                                                       "executor", "log"], rows, left=1))
    timed = [(row["stage"], row["wall_seconds"], f"{row['wall_seconds']:,.1f} s") for row in section.get("stages", [])
             if row.get("wall_seconds") is not None]
    if timed:
        parts.append("<h3>Where the time went</h3><p class=note>Each stage's last run, from its log.</p>"
                     + svg.bars("stage-seconds", timed))
    config = section.get("config", [])
    config_rows = [f"<tr>{_cell(key, left=True)}{_cell(json.dumps(value, ensure_ascii=False), left=True)}"
                   f"{_cell(origin or 'not recorded', left=True)}</tr>" for key, value, origin in config]
    parts.append(f"<details><summary>Config: {len(config):,} keys, each with where its value came from</summary>"
                 + _table("config", ["key", "value", "origin"], config_rows, left=3) + "</details>")
    return _section("overview", "Overview", section, "".join(parts))


def _sources(section: dict[str, Any]) -> str:
    rows, reasons = section.get("rows", []), section.get("reasons", [])
    if not rows:
        return _section("sources", "Sources", section, "")
    totals = section.get("totals") or {}
    parts = []
    if totals:
        parts.append(_cards([("files read", _number(totals.get("files"))),
                             ("documents read", _number(totals.get("documents_read"))),
                             ("documents kept", _number(totals.get("documents_kept"))),
                             ("characters read", _number(totals.get("characters_read")))]))
    token_splits = [key for key in ("tokens train", "tokens val") if any(key in row for row in rows)]
    headers = ["source", "read", "kept", *[f"dropped / {r}" for r in reasons], "characters read", "characters kept",
               *token_splits, "bytes per token", "target share", "natural share (train)", "reached share (training)"]
    body = []
    for row in rows:
        name, _, glob = row["source"].partition(" ")
        cells = [_cell(row["source"], f"{escape(name)}<br><small>{escape(glob)}</small>", left=True),
                 _cell(row.get("read")), _cell(row.get("kept"))]
        cells += [_cell(row.get(f"dropped {r}")) for r in reasons]
        cells += [_cell(row.get("chars_read")), _cell(row.get("chars_kept"))]
        cells += [_cell(row.get(key)) for key in token_splits]
        cells += [_cell(row.get("bytes_per_token"), _number(row.get("bytes_per_token"), 2))]
        cells += [_cell(row.get(key), _share(row.get(key))) for key in ("target_share", "natural_share",
                                                                         "reached_share")]
        body.append("<tr>" + "".join(cells) + "</tr>")
    parts.append('<p class="note">Click a column to sort. Target shares are the sources\' weights; the natural '
                 "share is the train split's tokens; the reached share is what training sampled.</p>")
    parts.append(_table("sources-table", headers, body))
    return _section("sources", "Sources", section, "".join(parts))


def _dropped(section: dict[str, Any]) -> str:
    counts, sample = section.get("counts"), section.get("sample") or {}
    if counts is None:
        return _section("dropped", "What was dropped", section, "")
    total = sum(counts.values())
    rows = [f"<tr>{_cell(reason, left=True)}{_cell(count)}{_cell(len(sample.get(reason, [])))}</tr>"
            for reason, count in counts.items()]
    parts = [f'<p>{total:,} documents dropped. Up to {section.get("sample_size", 0):,} of each rule are sampled: '
             "those whose IDs hash lowest, the same on every run. Click one to read it.</p>",
             _table("dropped-table", ["step/rule", "documents", "sampled"], rows)]
    lists = []
    for reason, items in sample.items():
        entries = "".join(
            f'<li class="rej" tabindex="0" data-reason="{escape(reason)}" data-index="{i}" '
            f'data-document="{escape(item["document"])}" '
            f'title="{escape(item["document"])}"><code>{escape(item["document"])}</code>'
            f'{escape(_snippet(item["text"]))}</li>' for i, item in enumerate(items))
        lists.append(f"<h3>{escape(reason)} <span class=muted>({counts.get(reason, 0):,} dropped, "
                     f"{len(items):,} shown)</span></h3><ul>{entries}</ul>")
    search = ('<p><input id="search" type="search" placeholder="search the sample (text, ID)"> '
              '<span id="search-count" class="muted"></span></p>') if sample else ""
    parts.append(f'{search}<div class="dropped"><div class="rules">{"".join(lists)}</div>'
                 '<div id="detail" hidden></div></div>')
    return _section("dropped", "What was dropped", section, "".join(parts))


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    return (flat[:SNIPPET_CHARS] + "…" if len(flat) > SNIPPET_CHARS else flat) or "(empty)"


def _documents(section: dict[str, Any]) -> str:
    names, bins = section.get("sources", []), section.get("bins", [])
    prepared, shards = section.get("prepared"), section.get("shards")
    parts = []
    if names and (prepared or shards):
        parts.append(svg.legend(names))
    charts = []
    for split in ("train", "val"):
        if prepared and split in prepared["splits"]:
            charts.append(_histogram(f"chars-{split}", f"{split}: characters per document", bins,
                                     prepared["splits"][split]["chars"], names, "characters"))
        if shards and split in shards:
            charts.append(_histogram(f"tokens-{split}", f"{split}: tokens per document", bins,
                                     shards[split]["tokens"], names, "tokens"))
    if charts:
        parts.append('<div class="charts">' + "".join(charts) + "</div>")
    stats = section.get("stats_splits") or {}
    if stats:
        rows = [f"<tr>{_cell(split, left=True)}{_cell(v['documents'])}{_cell(v['tokens'])}"
                f"{_cell(v['bytes_per_token'], _number(v['bytes_per_token'], 3))}"
                f"{_cell(', '.join(t['token'] for t in v['top_tokens'][:8]), left=True)}</tr>"
                for split, v in stats.items()]
        parts.append("<h3>Splits (stats.json)</h3>" + _table("splits-table", ["split", "documents", "tokens",
                                                                                "bytes per token", "most frequent"],
                                                               rows, left=1))
    per_source = [(name, value, f"{value:.2f}") for name, value in section.get("bytes_per_token", [])
                  if value is not None]
    if per_source:
        parts.append("<h3>Bytes per token by source</h3><p class=note>The kept documents' UTF-8 bytes over their "
                     "tokens (special tokens left out), both splits.</p>" + svg.bars("bytes-per-source", per_source))
    if prepared and prepared.get("scripts"):
        scripts = prepared["scripts"]
        parts.append("<h3>Bytes per token by script</h3><p class=note>From the first documents of each source "
                     "(each under its main script), then fixed probe texts.</p>")
        rows = [(f"{name} ({v['documents']:,} documents)", v["bytes_per_token"], f"{v['bytes_per_token']:.2f}")
                for name, v in scripts.items()]
        parts.append(svg.bars("bytes-per-script", rows))
    tokenizer = section.get("tokenizer")
    if tokenizer:
        probes = tokenizer["probes"]
        parts.append(svg.bars("bytes-per-probe", [(f"probe: {name}", p["bytes_per_token"],
                                                   f"{p['bytes_per_token']:.2f} ({p['tokens']} tokens)")
                                                  for name, p in probes.items()]))
        longest = [f"<tr>{_cell(t['id'])}{_cell(t['bytes'])}{_cell(t['token'], left=True)}</tr>"
                   for t in tokenizer["longest"]]
        parts.append("<h3>Longest tokens</h3>" + _table("longest-tokens", ["ID", "bytes", "token"], longest, left=0))
        views = []
        if prepared:
            views += [(f"corpus, {name}", v["view"]) for name, v in prepared.get("scripts", {}).items() if v["view"]]
        views += [(f"probe, {name}", p["view"]) for name, p in probes.items()]
        parts.append("<h3>Token by token</h3><p class=note>Each coloured span is one token; hover for its ID. An "
                     "underlined span is several tokens that each hold part of one character.</p>")
        parts += [f"<h4>{escape(label)} ({sum(len(ids) for _, ids in view):,} tokens)</h4>{_token_view(view)}"
                  for label, view in views]
    return _section("documents", "Documents and tokens", section, "".join(parts))


def _histogram(name: str, caption: str, bins: Sequence[str], rows: dict[str, list[int]], names: Sequence[str],
               unit: str) -> str:
    series = {(names[int(s)] if int(s) < len(names) else f"source {s}"): counts for s, counts in rows.items()}
    return f"<figure><figcaption>{escape(caption)}</figcaption>{svg.histogram(name, bins, series, unit=unit)}</figure>"


def _token_view(view: list[list[Any]]) -> str:
    """Coloured spans, one per token; a span of several tokens (the bytes of one character) is underlined."""
    spans = []
    for i, (piece, ids) in enumerate(view):
        title = f"ID {ids[0]}" if len(ids) == 1 else f"{len(ids)} tokens, IDs {' '.join(map(str, ids))}"
        shared = " shared" if len(ids) > 1 else ""
        spans.append(f'<span class="t{i % 6}{shared}" title="{title}">{escape(piece)}</span>')
    return f'<div class="tokens">{"".join(spans)}</div>'


def _training(section: dict[str, Any]) -> str:
    if "train" not in section:
        return _section("training", "Training", section, "")
    last = section["last"]
    parts = [_cards([("steps", _number(section["steps"])), ("last train loss", _number(last["train_loss"], 4)),
                     ("last val loss", _number(last["val_loss"], 4))])]
    series = {"train": section["train"], "val": section["val"]}
    parts.append('<div class="charts"><figure><figcaption>loss (nats per token) by step</figcaption>'
                 + svg.lines("loss", series, x_label="step", y_label="loss") + svg.legend(list(series)) + "</figure>")
    seen = section.get("seen", [])
    if seen:
        parts.append("<figure><figcaption>tokens training saw, per source</figcaption>" + svg.bars(
            "tokens-seen", [(row["source"], row["tokens"], f"{row['tokens']:,} ({row['share']:.1%}"
                             + (f", target {row['target']:.1%})" if row["target"] is not None else ")"))
                            for row in seen]) + "</figure>")
    parts.append("</div>")
    return _section("training", "Training", section, "".join(parts))
