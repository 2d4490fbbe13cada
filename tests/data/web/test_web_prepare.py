"""The web readers and steps inside prepare, through ``lmprep run prepare``, on a copy of data/web/."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from stages.cli.main import cli

WEB = Path(__file__).resolve().parents[3] / "data" / "web"
STEPS = """\
    - url_filter: {domains: web/blocklist-domains.txt, words: web/blocklist-words.txt, allow: web/allowlist.txt}
    - html_extract: {}
    - pii: {}
    - decontaminate: {sets: [web/eval/trivia.jsonl, stories=web/eval/stories.txt]}
"""
CONFIG = """\
data:
  sources:
    - {glob: "web/*.warc.gz", name: crawl, metadata: [url, date, record_id, warc_offset:int64]}
prepare:
  val_fraction: 0
  output_dir: out/prepared
  steps:
STEPS
state_dir: state
"""


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copytree(WEB, tmp_path / "web")
    write_config(tmp_path)
    return tmp_path


def write_config(root: Path, steps: str = STEPS, sources: str | None = None) -> None:
    config = CONFIG.replace("STEPS\n", steps)
    if sources is not None:
        config = config.replace('    - {glob: "web/*.warc.gz", name: crawl, metadata: [url, date, record_id, '
                                'warc_offset:int64]}\n', sources)
    (root / "lmprep.yaml").write_text(config)


def lmprep(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, [*args, "--config", "lmprep.yaml"])
    assert result.exit_code == code, result.output
    return result


def rows(root: Path, split: str) -> list[dict]:
    found = []
    for path in sorted((root / "out" / "prepared" / split).glob("*.arrow")):
        with pa.ipc.open_stream(path) as reader:
            found += reader.read_all().to_pylist()
    return found


def test_every_record_is_counted_and_pages_keep_their_metadata(project):
    output = lmprep("run", "prepare").output
    stats = json.loads((project / "out" / "prepared" / "stats.json").read_text())
    (source,) = stats["sources"]
    assert source["documents_read"] == source["documents_kept"] + sum(source["dropped"].values())
    read = {rule: count for rule, count in source["dropped"].items() if rule.startswith("read/")}
    assert read.pop("read/no_url") == 2 and read.pop("read/non_html") == 4
    # a request before each page, and per file a warcinfo, a metadata and a revisit record
    assert read == {"read/non_response": source["documents_read"] // 2}
    assert source["dropped"]["url_filter/blocked_domain"] == 3 and source["dropped"]["url_filter/blocked_word"] == 2
    assert source["dropped"]["decontaminate/overlap:trivia"] == 2
    assert source["dropped"]["decontaminate/overlap:stories"] == 1
    assert source["lines_removed"]["pii/lines_redacted"] >= 15
    assert "url_filter/blocked_domain" in output
    kept = rows(project, "train")
    assert all(row["url"].startswith("https://") and row["record_id"].startswith("<urn:uuid:") for row in kept)
    assert not any("<html" in row["text"] or "Most read story" in row["text"] for row in kept)
    allowed = [row for row in kept if row["url_match"].startswith("allow:")]
    assert [row["url"] for row in allowed] == [
        "https://cedarvale-library.net/local-history/affiliate/the-old-casino.html"]
    first = kept[0]
    member = gzip.decompress((project / first["document"].split("#")[0]).read_bytes()[first["warc_offset"]:])
    assert first["record_id"].encode() in member[:400]


def test_rejected_documents_say_which_list_entry_and_set(project):
    lmprep("run", "prepare")
    rejected = rows(project, "rejected")
    blocked = {row["url"]: row["url_match"] for row in rejected if row["step"] == "url_filter"}
    assert blocked["https://www.bestcasino-online.biz/bonus/today.html"] == "domains:bestcasino-online.biz"
    assert blocked["https://eastport-makers.com/affiliate/tools.html"] == "words:/affiliate/"
    overlaps = sorted(row["eval_overlap"].split(":")[0] for row in rejected if row["step"] == "decontaminate")
    assert overlaps == ["stories", "trivia", "trivia"]
    assert all(row["text"].lstrip().startswith("<!DOCTYPE html>") for row in rejected)  # as read


def test_remove_span_keeps_the_document_without_the_overlap(project):
    write_config(project, STEPS.replace("stories.txt]}", "stories.txt], mode: remove_span}"))
    lmprep("run", "prepare")
    cut = [row for row in rows(project, "train") if row["eval_overlap"]]
    assert len(cut) == 3 and all("Remember this one:" in row["text"] for row in cut)
    trivia = [json.loads(line) for line in (project / "web" / "eval" / "trivia.jsonl").read_text().splitlines()]
    assert not any(item["question"][:60] in row["text"] for item in trivia for row in cut)


def test_editing_a_blocklist_reruns_prepare(project):
    lmprep("run", "prepare")
    with (project / "web" / "blocklist-domains.txt").open("a") as blocklist:
        blocklist.write("juniper-travel.co.uk\n")
    assert "blocklist-domains.txt" in lmprep("status").output
    lmprep("run", "prepare")
    stats = json.loads((project / "out" / "prepared" / "stats.json").read_text())
    assert stats["sources"][0]["dropped"]["url_filter/blocked_domain"] > 3


def test_saved_html_pages_are_a_source_too(project):
    pages = project / "pages"
    pages.mkdir()
    (pages / "a.html").write_bytes("<html><head><meta charset='iso-8859-1'></head><body><nav>Home</nav><main>"
                                   "<p>Le café de Zoë est ouvert.</p></main></body></html>".encode("latin-1"))
    (pages / "huge.html").write_bytes(b"<html><body>" + b"<p>x</p>" * (9 << 20 >> 3) + b"</body></html>")
    write_config(project, "    - html_extract: {}\n", '    - {glob: "pages/*.html", format: html, metadata: [url]}\n')
    lmprep("run", "prepare")
    (kept,) = rows(project, "train")
    assert kept["text"] == "Le café de Zoë est ouvert." and kept["url"].endswith("a.html")
    stats = json.loads((project / "out" / "prepared" / "stats.json").read_text())
    assert stats["sources"][0]["dropped"] == {"read/too_large": 1}


def truncate(path: Path, cut: int) -> None:
    path.write_bytes(path.read_bytes()[:-cut])


@pytest.mark.parametrize(("change", "message"), [
    (lambda root: truncate(root / "web" / "crawl-1.warc.gz", 500),
     r"crawl-1\.warc\.gz: truncated WARC record at byte offset \d+"),
    (lambda root: (root / "web" / "blocklist-words.txt").write_text("# nothing\n"),
     r"blocklist-words\.txt: the URL-word blocklist of prepare\.steps\[0\]\.url_filter has no entries"),
    (lambda root: (root / "web" / "eval" / "trivia.jsonl").unlink(),
     r"needs 'web/eval/trivia\.jsonl', which does not exist"),  # the files a step reads are the stage's inputs
    (lambda root: (root / "web" / "eval" / "stories.txt").write_text("too short\n"),
     r"stories\.txt: evaluation set 'stories' has no item of 13 words or more"),
    (lambda root: write_config(root, sources='    - {glob: "web/*.warc.gz"}\n'),
     r"prepare\.steps\[0\]\.url_filter reads each document's url: keep it on the web sources"),
])
def test_bad_input_is_one_line_and_exit_2(project, change, message):
    change(project)
    result = lmprep("run", "prepare", code=2)
    assert "Traceback" not in result.output
    assert re.search(message, result.output), result.output
    assert not (project / "out" / "prepared" / "stats.json").exists()


def tree(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_the_web_chain_gives_the_same_bytes_on_a_local_dask_cluster(project):
    lmprep("run", "prepare")
    config = (project / "lmprep.yaml").read_text()
    (project / "lmprep.yaml").write_text(config.replace("out/prepared", "out/dask").replace(
        "state_dir: state", "state_dir: dask\nexecutor: {kind: dask, address: local, workers: 2}"))
    lmprep("run", "prepare")
    assert tree(project / "out" / "dask") == tree(project / "out" / "prepared")


def test_the_shipped_recipe_prepares_the_shipped_corpus(tmp_path):
    repo = WEB.parents[1]
    shutil.copytree(WEB, tmp_path / "data" / "web")
    (tmp_path / "configs").mkdir()
    for name in ("web.yaml", "default.yaml"):
        shutil.copy(repo / "configs" / name, tmp_path / "configs" / name)
    result = CliRunner().invoke(cli, ["run", "prepare", "--config", str(tmp_path / "configs" / "web.yaml")])
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "data" / "web-out" / "prepared" / "stats.json").read_text())
    dropped = stats["sources"][0]["dropped"]
    assert stats["documents_kept"] > 200
    for rule in ("url_filter/blocked_domain", "url_filter/blocked_word", "exact_dedup/duplicate",
                 "near_dedup/near_duplicate", "decontaminate/overlap:trivia", "decontaminate/overlap:stories"):
        assert dropped.get(rule), rule
    assert stats["sources"][0]["lines_removed"]["pii/lines_redacted"] > 0
