"""``lmprep report`` on a small project, opened in headless Chromium (Debian's package; ``make test`` installs it).

Chromium loads the page from ``file://`` and dumps the DOM after its scripts ran. The page records every script
error and ``console.error`` into itself (``<body data-errors>``, ``#page-errors``) and Chromium's own log (on
stderr) must hold no console message either. The tables and charts must carry the run's numbers, read back from
``stats.json`` and the rejected parts; a URL hash (``#open=<rule>:<n>``) clicks a rejected document, whose text
must then be in the page.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from pipeline.report import MAX_PAGE_BYTES
from stages.cli.main import cli

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
data:
  sources:
    - {glob: "raw/facts.txt", separator: line, weight: 3}
    - {glob: "raw/notes.jsonl", field: text, weight: 1, name: notes, metadata: ["id:int64"]}
prepare:
  output_dir: out/prepared
  val_fraction: 0.2
  steps:
    - exact_dedup: {}
    - near_dedup: {threshold: 0.6}
tokenizer: {output: out/tokenizer.json, vocab_size: 300}
encode: {output_dir: out/shards, shard_tokens: 400}
train: {output_dir: out/ckpt, steps: 6, eval_every: 2, eval_batches: 1, batch_size: 2, context: 8, dim: 8}
stats: {output_dir: out/stats}
report: {output: out/report.html, sample: 5}
state_dir: state
"""
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa")


def write_project(root: Path) -> Path:
    (root / "raw").mkdir()
    facts = [f"Fact {i}: the {WORDS[i % 16]} sits next to the {WORDS[(i * 7) % 16]}." for i in range(60)]
    facts += facts[:9] + ["", "Привет, мир: это кириллица.", "def f(x):\n"]  # 9 exact duplicates, one empty
    (root / "raw" / "facts.txt").write_text("\n".join(facts) + "\n", "utf-8")
    notes = []
    for i in range(12):
        words = [f"{WORDS[(i * 5 + j * j) % 16]}{(i * 31 + j * 17) % 97}" for j in range(80)]
        notes.append(" ".join(words))
        if i % 3 == 0:  # a near-duplicate: the same note with two words replaced
            notes.append(" ".join([*words[:10], "zulu", *words[11:60], "yankee", *words[61:]]))
    (root / "raw" / "notes.jsonl").write_text("".join(json.dumps({"text": t, "id": 1000 + i}) + "\n"
                                                      for i, t in enumerate(notes)), "utf-8")
    (root / "lmprep.yaml").write_text(CONFIG)
    return root


def lmprep(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])
    assert result.exit_code == code, result.output
    return result


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is not installed: `make test` installs it (apt-get install -y chromium)"
    return found


def open_in_chromium(page: Path, profile: Path, fragment: str = "") -> tuple[str, str]:
    """The DOM of ``page`` after its scripts ran, and Chromium's log."""
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--disable-extensions",
               f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
               "--dump-dom", page.resolve().as_uri() + fragment]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def console_messages(log: str) -> list[str]:
    return [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]


def attribute(dom: str, element: str, name: str) -> str:
    match = re.search(rf'<[^>]*{element}[^>]*\b{name}="([^"]*)"', dom)
    assert match, f"no {element} with {name} in the page"
    return html.unescape(match[1])


def table_rows(dom: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}".*?<tbody>(.*?)</tbody>', dom, re.S)
    assert table, f"no table {table_id}"
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table[1], re.S)]


def detail_text(dom: str) -> str:
    """The text of the open document, as the page shows it (differences marked inside)."""
    shown = re.search(r'<pre class="doc-text" id="detail-text">(.*?)</pre>', dom, re.S)
    assert shown, "no document is open"
    return html.unescape(re.sub(r"<[^>]+>", "", shown[1]))


def number(text: str) -> int:
    return int(text.replace(",", ""))


def rejected_rows(prepared_dir: Path) -> list[dict]:
    rows = []
    for part in sorted((prepared_dir / "rejected").glob("*.arrow")):
        with pa.OSFile(str(part), "rb") as file:
            rows += pa.ipc.open_stream(file).read_all().to_pylist()
    return rows


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = write_project(tmp_path_factory.mktemp("report"))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        lmprep("run")
    return root


def test_the_report_stage_writes_the_page_with_the_run(project):
    page = project / "out" / "report.html"
    text = page.read_text("utf-8")
    assert "<script src" not in text and "<link" not in text and "http://" not in text and "https://" not in text
    assert 'id="sources-table"' in text


def test_the_page_loads_without_a_console_error_and_shows_the_runs_numbers(project, tmp_path):
    dom = open_cleanly(project / "out" / "report.html", tmp_path / "profile")
    check_the_runs_numbers(dom, project / "out" / "prepared", project / "out" / "stats", project / "out" / "ckpt")
    dropped = {row[0] for row in table_rows(dom, "dropped-table")}
    assert {"exact_dedup/duplicate", "near_dedup/near_duplicate", "length/empty"} <= dropped
    assert 'class="tokens"' in dom and "Cyrillic" in dom


def open_cleanly(page: Path, profile: Path, fragment: str = "") -> str:
    """The DOM of ``page``, which must have run its script to the end without an error or a console message."""
    dom, log = open_in_chromium(page, profile, fragment)
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    assert attribute(dom, "body", "data-errors") == "0", re.search(r'id="page-errors"[^>]*>(.*?)<', dom)[1]
    assert console_messages(log) == []
    return dom


def check_the_runs_numbers(dom: str, prepared_dir: Path, stats_dir: Path, train_dir: Path) -> None:
    """The sources and dropped tables and the charts against stats.json (prepare's and the stats stage's) and
    metrics.jsonl."""
    prepared = json.loads((prepared_dir / "stats.json").read_text())
    stats = json.loads((stats_dir / "stats.json").read_text())
    sources = table_rows(dom, "sources-table")
    assert len(sources) == len(prepared["sources"])
    for row, recorded in zip(sources, prepared["sources"], strict=True):
        assert number(row[1]) == recorded["documents_read"] and number(row[2]) == recorded["documents_kept"]
    tokens = {row["source"]: row["tokens"] for row in stats["splits"]["train"]["sources"]}
    headers = re.findall(r"<th[^>]*>(.*?)</th>", re.search(r'<table id="sources-table".*?</thead>', dom, re.S)[0])
    column = headers.index("tokens train")
    assert [number(row[column]) for row in sources] == [tokens.get(i, 0) for i in range(len(sources))]

    dropped = {row[0]: number(row[1]) for row in table_rows(dom, "dropped-table")}
    by_rule = {}
    for recorded in prepared["sources"]:
        for reason, count in recorded["dropped"].items():
            by_rule[reason] = by_rule.get(reason, 0) + count
    assert dropped == by_rule

    splits = stats["splits"]
    for split in ("train", "val"):
        assert number(attribute(dom, f'data-chart="tokens-{split}"', "data-total")) == splits[split]["documents"]
        assert number(attribute(dom, f'data-chart="chars-{split}"', "data-total")) == prepared["splits"][split][
            "documents"]
    metrics = [json.loads(line) for line in (train_dir / "metrics.jsonl").read_text().splitlines()]
    assert number(attribute(dom, 'data-series="train"', "data-points")) == len(metrics)
    assert float(attribute(dom, 'data-series="val"', "data-last")) == pytest.approx(
        [m["val_loss"] for m in metrics if "val_loss" in m][-1], abs=1e-4)
    for chart in ("bytes-per-source", "bytes-per-script", "bytes-per-probe", "tokens-seen"):
        assert f'data-chart="{chart}"' in dom


def test_the_shipped_projects_page_opens_with_its_numbers_and_stays_small(tmp_path, monkeypatch):
    """The README's page: the shipped configs and raw data, as a fresh clone has them, run once."""
    listing = subprocess.run(["git", "ls-files", "-z", "configs", "data/raw"], cwd=REPO, capture_output=True,
                             check=True).stdout
    for name in filter(None, listing.decode().split("\0")):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    for command in (["run"], ["report", "--out", "report.html"]):
        result = CliRunner().invoke(cli, [*command, "--config", "configs/default.yaml"])
        assert result.exit_code == 0, result.output
    assert len((tmp_path / "report.html").read_bytes()) <= MAX_PAGE_BYTES
    dom = open_cleanly(tmp_path / "report.html", tmp_path / "profile", "#open=exact_dedup/duplicate:0")
    check_the_runs_numbers(dom, tmp_path / "data" / "prepared", tmp_path / "data" / "stats",
                           tmp_path / "checkpoints" / "default")
    document = attribute(dom, 'li class="rej selected"', "data-document")
    by_id = {row["document"]: row for row in rejected_rows(tmp_path / "data" / "prepared")}
    assert detail_text(dom) == by_id[document]["text"]
    stages = {row[0]: row for row in table_rows(dom, "stages")}
    assert list(stages) == ["prepare", "tokenizer", "encode", "train", "export", "stats"]
    log = (tmp_path / ".lmprep" / "logs" / "prepare.log").read_text().splitlines()
    ended = re.match(r"finished after ([0-9.]+) s \(([0-9]+) tasks? done", log[-1])
    assert stages["prepare"][2:5] == ["finished", ended[1], ended[2]]


def test_the_check_catches_a_script_error(project, tmp_path):
    """The harness is not blind: the page with one failing script has its error in the DOM and in the log."""
    broken = tmp_path / "broken.html"
    broken.write_text((project / "out" / "report.html").read_text("utf-8").replace(
        "</body>", "<script>undefinedFunction();</script></body>"), "utf-8")
    dom, log = open_in_chromium(broken, tmp_path / "profile")
    assert attribute(dom, "body", "data-errors") == "1" and "undefinedFunction" in dom
    assert any("undefinedFunction" in line for line in console_messages(log))


def test_clicking_a_rejected_document_shows_its_text_and_its_duplicate(project, tmp_path):
    page = project / "out" / "report.html"
    by_id = {row["document"]: row for row in rejected_rows(project / "out" / "prepared")}
    dom, log = open_in_chromium(page, tmp_path / "profile", "#open=" + "exact_dedup/duplicate:0")
    assert attribute(dom, "body", "data-errors") == "0" and console_messages(log) == []
    document = attribute(dom, 'li class="rej selected"', "data-document")
    shown = detail_text(dom)
    assert shown == by_id[document]["text"] and shown
    assert by_id[document]["duplicate_of"] in dom
    assert (project / by_id[document]["document"].partition("#")[0]).resolve().as_uri() in dom  # the raw file

    dom, _ = open_in_chromium(page, tmp_path / "profile", "#open=" + "near_dedup/near_duplicate:0")
    document = attribute(dom, 'li class="rej selected"', "data-document")
    shown = detail_text(dom)
    assert shown == by_id[document]["text"]
    assert re.search(r'<ins class="diff-(ins|rep)">[^<]*(zulu|yankee)', dom), "the differences are not marked"
    assert re.search(r'<del class="diff-(del|rep)">', dom)
    assert f"<dt>id</dt><dd>{1000 + int(document.rpartition('#')[2])}</dd>" in dom  # the source's metadata column


def test_the_search_box_and_the_sortable_table_work_from_the_hash(project, tmp_path):
    page = project / "out" / "report.html"
    dom, _ = open_in_chromium(page, tmp_path / "profile", "#search=zulu&sort=sources-table:1")
    items = re.findall(r'<li class="rej"[^>]*>', dom)
    shown = [html.unescape(re.search(r'data-document="([^"]*)"', item)[1]) for item in items if " hidden" not in item]
    texts = {row["document"]: row["text"] for row in rejected_rows(project / "out" / "prepared")}
    assert shown and len(shown) < len(items) and all("zulu" in texts[document] for document in shown)
    assert "1 shown" in dom or f"{len(shown)} shown" in dom
    assert re.search(r'<th[^>]*aria-sort="ascending"[^>]*>read</th>', dom)
    reads = [number(row[1]) for row in table_rows(dom, "sources-table")]
    assert reads == sorted(reads)


def test_a_run_with_missing_outputs_still_opens_and_says_what_is_missing(tmp_path, monkeypatch):
    root = tmp_path / "partial"
    root.mkdir()
    write_project(root)
    monkeypatch.chdir(root)
    lmprep("run", "prepare")
    result = lmprep("report", "--out", "partial.html")
    assert "incomplete: Overview, Sources, Documents and tokens, Training" in result.output
    dom, log = open_in_chromium(root / "partial.html", tmp_path / "profile")
    assert attribute(dom, "body", "data-errors") == "0" and console_messages(log) == []
    assert "out/tokenizer.json is missing" in dom and "out/ckpt/metrics.jsonl is missing" in dom
    assert 'id="dropped-table"' in dom and 'data-missing=' in dom
