"""``lmprep tokenizer …`` through click's CliRunner."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import rustbpe
from click.testing import CliRunner

from pipeline.tokenizer import Tokenizer
from pipeline.tokenizer.patterns import GPT4
from stages.cli.main import cli


@pytest.fixture
def corpus_files(tmp_path, tokenizer_corpus):
    paths = []
    for i, text in enumerate(tokenizer_corpus):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(text * 3, "utf-8")
        paths.append(path)
    return paths


@pytest.fixture
def trained(run, tmp_path, corpus_files):
    out = tmp_path / "tok.json"
    result = run("tokenizer", "train", *corpus_files, "--vocab-size", 300, "--special", "<|endoftext|>",
                 "--out", out, "--workers", 1)
    assert result.exit_code == 0, result.output
    return out


def test_train_matches_rustbpe_on_the_files(trained, corpus_files):
    ours = Tokenizer.load(trained)
    oracle = rustbpe.Tokenizer()
    oracle.train_from_iterator([p.read_text("utf-8") for p in corpus_files], vocab_size=299, pattern=GPT4)
    ranks = sorted(oracle.get_mergeable_ranks(), key=lambda item: item[1])
    assert [bytes(token) for token, _ in ranks] == [ours.token_bytes(i) for i in range(299)]


def test_encode_decode_round_trip(run, trained):
    encoded = run("tokenizer", "encode", "héllo wörld <|endoftext|>", "--tokenizer", trained)
    assert encoded.exit_code == 0
    ids = encoded.output.split()
    assert str(Tokenizer.load(trained).special_tokens["<|endoftext|>"]) not in ids
    decoded = run("tokenizer", "decode", *ids, "--tokenizer", trained)
    assert decoded.output == "héllo wörld <|endoftext|>\n"


def test_encode_file(run, trained, corpus_files):
    result = run("tokenizer", "encode", "--file", corpus_files[0], "--tokenizer", trained)
    assert result.output.split() == [str(i) for i in Tokenizer.load(trained).encode(corpus_files[0].read_text())]


def test_fingerprint_and_inspect(run, trained):
    fingerprint = run("tokenizer", "fingerprint", trained).output.strip()
    assert fingerprint == Tokenizer.load(trained).fingerprint
    shown = run("tokenizer", "inspect", trained, "--merges", 3).output
    assert "kind: byte" in shown and fingerprint in shown and "vocab size: 300" in shown
    assert shown.count(" -> ") == 3
    assert "vocab size: 300 (43 merges, 1 special token)" in shown  # 256 bytes + 43 merges + 1


@pytest.mark.parametrize("command", [["fingerprint"], ["inspect"], ["export", "--format", "tiktoken", "--out", "t"]])
def test_every_tokenizer_command_takes_the_file_as_tokenizer_option(run, trained, tmp_path, command):
    given_so = run("tokenizer", *command, "--tokenizer", trained)
    assert given_so.exit_code == 0, given_so.output
    assert given_so.output == run("tokenizer", *command, trained).output  # the positional PATH still works
    twice = run("tokenizer", *command, trained, "--tokenizer", tmp_path / "other.json")
    assert twice.exit_code == 2 and twice.stderr == (
        f"error: two tokenizers given, {trained} and --tokenizer {tmp_path / 'other.json'}; give one "
        f"(see 'lmprep tokenizer {command[0]} --help')\n")


@pytest.mark.parametrize("name, write, advice", [
    ("x.parquet", lambda path: pq.write_table(pa.table({"body": ["some text"]}), path), "pass --column NAME"),
    ("x.jsonl", lambda path: path.write_text('{"body": "some text"}\n'), "pass --field NAME"),
])
def test_a_missing_field_or_column_advises_the_option_that_names_it(run, tmp_path, name, write, advice):
    write(tmp_path / name)
    result = run("tokenizer", "train", tmp_path / name, "--vocab-size", 260, "--out", tmp_path / "t.json")
    assert result.exit_code == 2 and result.output.endswith(f"(fields: body); {advice}\n".replace(
        "fields", "columns" if name.endswith(".parquet") else "fields")), result.output


def test_export_tiktoken_prints_code_that_runs_as_printed(run, trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("tokenizer", "export", trained, "--format", "tiktoken", "--out", "t.tiktoken")
    assert result.exit_code == 0 and (tmp_path / "t.tiktoken").read_text().startswith("AA== 0\n")
    assert result.stderr == "wrote t.tiktoken; this Python code loads it:\n"
    namespace: dict = {}
    exec(result.stdout, namespace)
    text = "It's 2024 <|endoftext|> naïve café"
    assert namespace["encoding"].encode_ordinary(text) == Tokenizer.load(trained).encode(text)
    assert namespace["encoding"].name == "t"


@pytest.mark.parametrize("cache", ["tiktoken's default directory", "TIKTOKEN_CACHE_DIR"])
def test_exported_code_loads_the_current_file_after_another_export_to_the_same_path(
        run, trained, corpus_files, tmp_path, monkeypatch, cache):
    """tiktoken's loader caches a file by its path's name in one directory shared by every process
    (``TIKTOKEN_CACHE_DIR``, else ``data-gym-cache`` in the temporary directory): the printed code must
    still give the IDs of the file there now."""
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    if cache == "TIKTOKEN_CACHE_DIR":
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(shared / "tiktoken-cache"))
    else:
        monkeypatch.setattr(tempfile, "tempdir", str(shared))  # where tempfile.gettempdir() points
    monkeypatch.chdir(tmp_path)
    bigger = tmp_path / "bigger.json"
    assert run("tokenizer", "train", *corpus_files, "--vocab-size", 400, "--out", bigger, "--workers", 1).exit_code == 0
    text = "It's 2024 naïve café, the tokenizers differ"
    for tokenizer in (trained, bigger, trained):
        result = run("tokenizer", "export", tokenizer, "--format", "tiktoken", "--out", "t.tiktoken")
        namespace: dict = {}
        exec(result.stdout, namespace)
        assert namespace["encoding"].encode_ordinary(text) == Tokenizer.load(tokenizer).encode(text)
    assert Tokenizer.load(trained).encode(text) != Tokenizer.load(bigger).encode(text)


def test_eval_table(run, trained, tmp_path, corpus_files):
    other = tmp_path / "other.json"
    run("tokenizer", "train", *corpus_files, "--vocab-size", 260, "--out", other, "--workers", 1)
    result = run("tokenizer", "eval", *corpus_files[:2], "--tokenizer", trained, "--tokenizer", other)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert "bytes/tok" in lines[0] and lines[-1].startswith("total") and "%" in lines[-1]
    total_bytes = sum(len(Path(path).read_bytes()) for path in corpus_files[:2])
    assert lines[-1].split()[1] == f"{total_bytes:,}" and total_bytes >= 1000  # thousands separators


def test_char_kind_training_stops_early_with_a_message(run, tmp_path):
    (tmp_path / "a.txt").write_text("abab\n", "utf-8")
    result = run("tokenizer", "train", tmp_path / "a.txt", "--kind", "char", "--vocab-size", 100,
                 "--out", tmp_path / "c.json", "--workers", 1)
    assert result.exit_code == 0 and "stopped early" in result.output


@pytest.mark.parametrize("args, message", [
    (["decode", "1", "-5", "2"], "invalid token ID -5 at position 1"),
    (["decode", "1", "x7"], "invalid token ID 'x7' at position 1"),
    (["decode", "99999"], "invalid token ID 99999 at position 0"),
    (["decode", "195"], "not valid UTF-8 (at byte offset 0: b'\\xc3'); pass --replace to print U+FFFD for them"),
    (["decode", "0001", "9" * 5000], "invalid token ID '99999"),
    (["encode"], "either TEXT or --file"),
])
def test_errors_exit_2_with_one_line(run, trained, args, message):
    result = run("tokenizer", *args, "--tokenizer", trained)
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_invalid_utf8_training_file_names_file_and_offset(run, tmp_path):
    (tmp_path / "bad.txt").write_bytes(b"ok text \xff more")
    result = run("tokenizer", "train", tmp_path / "bad.txt", "--out", tmp_path / "t.json")
    assert result.exit_code == 2
    assert ("bad.txt: invalid UTF-8 at byte offset 8; fix the file or pass --on-decode-error replace or skip"
            in result.output)
    assert len(result.output.strip().splitlines()) == 1


def test_bad_pattern_and_missing_tokenizer(run, tmp_path, corpus_files):
    result = run("tokenizer", "train", corpus_files[0], "--pattern", "([a-", "--out", tmp_path / "t.json")
    assert result.exit_code == 2 and "invalid split pattern '([a-'" in result.output
    result = run("tokenizer", "fingerprint", tmp_path / "nope.json")
    assert result.exit_code == 2 and "does not exist" in result.output


def test_char_export_is_an_error(run, tmp_path):
    (tmp_path / "a.txt").write_text("hello hello\n", "utf-8")
    run("tokenizer", "train", tmp_path / "a.txt", "--kind", "char", "--vocab-size", 20, "--out", tmp_path / "c.json")
    result = run("tokenizer", "export", tmp_path / "c.json", "--format", "tiktoken", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "byte-level" in result.output


def test_tokenizer_cli_does_not_import_torch(tmp_path, trained):
    import subprocess
    import sys

    code = ("import sys; from stages.cli.main import cli; "
            f"cli(['tokenizer', 'encode', 'hi', '--tokenizer', {str(trained)!r}], standalone_mode=False); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_commands_work_outside_a_project(run, trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config file here: the built-in defaults apply
    result = run("tokenizer", "encode", "--tokenizer", trained, "hi")
    assert result.exit_code == 0 and result.output.split() == [str(i) for i in Tokenizer.load(trained).encode("hi")]
    assert run("tokenizer", "fingerprint", trained).output.strip() == Tokenizer.load(trained).fingerprint
    missing = run("tokenizer", "fingerprint")
    assert missing.exit_code == 2 and "data/tokenizer/tokenizer.json does not exist" in missing.output


def test_defaults_come_from_the_config(run, tmp_path, monkeypatch, corpus_files):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "char.yaml").write_text("tokenizer: {kind: char, vocab_size: 300, output: out/char.json}\n")
    trained = run("tokenizer", "train", *corpus_files, "--config", "char.yaml", "--workers", 1)
    assert trained.exit_code == 0 and "wrote out/char.json: char kind" in trained.output
    char = Tokenizer.load(tmp_path / "out" / "char.json")
    assert run("tokenizer", "fingerprint", "--config", "char.yaml").output.strip() == char.fingerprint
    encoded = run("tokenizer", "encode", "ab", "--config", "char.yaml").output.split()
    assert encoded == [str(i) for i in char.encode("ab")]
    assert "kind: char" in run("tokenizer", "inspect", "--config", "char.yaml").output
    given = run("tokenizer", "train", *corpus_files, "--config", "char.yaml", "--kind", "byte", "--out", "b.json")
    assert given.exit_code == 0 and "wrote b.json: byte kind" in given.output
    other = run("tokenizer", "fingerprint", "--config", "char.yaml", "--set", "tokenizer.output=b.json")
    assert other.output.strip() == Tokenizer.load(tmp_path / "b.json").fingerprint


def test_a_missing_config_is_an_error_when_named(run, trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    named = run("tokenizer", "encode", "hi", "--tokenizer", trained, "--config", "nope.yaml")
    assert named.exit_code == 2 and "config file nope.yaml not found" in named.output
    overridden = run("tokenizer", "fingerprint", "--set", "tokenizer.output=x.json")
    assert overridden.exit_code == 2
    assert "error: no config file: no config.yaml or configs/default.yaml in" in overridden.output
    monkeypatch.setenv("LMPREP_CONFIG", "nope.yaml")
    from_env = run("tokenizer", "fingerprint", trained)
    assert from_env.exit_code == 2 and "config file nope.yaml not found" in from_env.output


# -- the pipeline's sources and decode policy; never over a stage's output ---------------------------


@pytest.fixture
def mixed_sources(tmp_path, tokenizer_corpus):
    """The corpus as a .txt.gz (one document per line), a .jsonl.gz and a .parquet file."""
    import gzip
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    lines = [line for text in tokenizer_corpus for line in text.splitlines() if line.strip()]
    (tmp_path / "src").mkdir()
    with gzip.open(tmp_path / "src" / "lines.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines[:4]))
    with gzip.open(tmp_path / "src" / "docs.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"body": line}) + "\n" for line in lines[4:])
    pq.write_table(pa.table({"body": lines[4:]}), tmp_path / "src" / "table.parquet")
    return tmp_path / "src", lines


def test_train_reads_gz_jsonl_and_globs_like_the_pipeline(run, tmp_path, mixed_sources):
    folder, lines = mixed_sources
    result = run("tokenizer", "train", folder / "*.txt.gz", folder / "*.jsonl.gz", "--separator", "line",
                 "--field", "body", "--vocab-size", 300, "--workers", 1, "--out", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    expected = Tokenizer.train(lines, vocab_size=300, workers=1, special_tokens=["<|endoftext|>"])
    assert Tokenizer.load(tmp_path / "t.json").fingerprint == expected.fingerprint


@pytest.mark.parametrize("options, kind, pattern, pieced", [
    ((), "byte", None, True),
    (("--pattern", "gpt2"), "byte", "gpt2", True),
    (("--kind", "word"), "word", None, True),
    (("--kind", "char"), "char", None, False),  # no pre-split: the document is one chunk, counted whole
])
def test_train_counts_a_large_document_in_pieces_with_the_merges_of_the_whole(
        run, tmp_path, monkeypatch, tokenizer_corpus, options, kind, pattern, pieced):
    from pipeline.data import sources
    from pipeline.tokenizer import _train_count, patterns

    text = "".join(tokenizer_corpus) * 20  # 13,140 characters, one document
    (tmp_path / "big.txt").write_text(text, "utf-8")
    whole = Tokenizer.train([text], kind=kind, pattern=pattern, vocab_size=400, workers=1,
                            special_tokens=["<|endoftext|>"])
    monkeypatch.setattr(sources, "CHUNK", 500)  # read 500 bytes at a time
    monkeypatch.setattr(patterns, "CUT_CHARS", 1000)  # and cut at 1,000 characters or more
    counted: list[int] = []  # the length of every text the counting pass is given (either backend)
    blocks = _train_count._blocks

    def counting(texts, **options):
        for block in blocks(texts, **options):
            counted.extend(map(len, block))
            yield block

    monkeypatch.setattr(_train_count, "_blocks", counting)
    result = run("tokenizer", "train", tmp_path / "big.txt", *options, "--vocab-size", 400, "--workers", 1,
                 "--special", "<|endoftext|>", "--out", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    assert Tokenizer.load(tmp_path / "t.json").fingerprint == whole.fingerprint
    assert sum(counted) == len(text)
    assert max(counted) <= (2000 if pieced else len(text))


def test_eval_and_encode_read_parquet_and_stdin(run, trained, mixed_sources):
    folder, lines = mixed_sources
    tokenizer = Tokenizer.load(trained)
    table = run("tokenizer", "eval", folder / "table.parquet", "--column", "body", "--tokenizer", trained)
    assert table.exit_code == 0, table.output
    tokens = sum(len(tokenizer.encode(line)) for line in lines[4:])
    assert table.output.splitlines()[1].split()[:3] == ["table.parquet", str(sum(len(x.encode()) for x in lines[4:])),
                                                      str(tokens)]
    piped = CliRunner().invoke(cli, ["tokenizer", "encode", "--file", "-", "--field", "body", "--tokenizer",
                                     str(trained)], input='{"body": "ab"}\n{"body": "cd"}\n')
    assert piped.exit_code == 0, piped.output
    assert piped.output.splitlines() == [" ".join(map(str, tokenizer.encode(t))) for t in ("ab", "cd")]


def test_decode_errors_follow_the_pipelines_policy(run, tmp_path, trained):
    import gzip

    with gzip.open(tmp_path / "bad.txt.gz", "wb") as handle:
        handle.write(b"good line\nbad \xff line\n")
    failed = run("tokenizer", "eval", tmp_path / "bad.txt.gz", "--separator", "line", "--tokenizer", trained)
    assert failed.exit_code == 2 and failed.output.count("\n") == 1
    assert "bad.txt.gz: invalid UTF-8 at byte offset 14 of the decompressed data" in failed.output
    skipped = run("tokenizer", "eval", tmp_path / "bad.txt.gz", "--separator", "line", "--tokenizer", trained,
                  "--on-decode-error", "skip")
    assert skipped.exit_code == 0 and skipped.output.splitlines()[1].split()[1] == "9"  # only "good line"


def test_a_glob_matching_nothing_is_one_line(run, tmp_path, trained):
    result = run("tokenizer", "eval", tmp_path / "*.nothing", "--tokenizer", trained)
    assert result.exit_code == 2 and "source " in result.output and "matches no files" in result.output


def test_train_never_writes_over_a_stage_output(run, tmp_path, monkeypatch, corpus_files):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lmprep.yaml").write_text("tokenizer: {vocab_size: 300, output: out/tok.json}\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tok.json").write_text("made by the pipeline")
    refused = run("tokenizer", "train", *corpus_files, "--config", "lmprep.yaml", "--workers", 1)
    assert refused.exit_code == 2 and refused.output.count("\n") == 1
    assert ("out/tok.json is the output of the pipeline's 'tokenizer' stage; retrain it from the config with "
            "`lmprep run tokenizer`, write elsewhere with --out PATH") in refused.output
    assert (tmp_path / "out" / "tok.json").read_text() == "made by the pipeline"
    forced = run("tokenizer", "train", *corpus_files, "--config", "lmprep.yaml", "--workers", 1, "--force")
    assert forced.exit_code == 0 and Tokenizer.load(tmp_path / "out" / "tok.json").vocab_size == 300


def test_stage_outputs_are_the_stages_outs(tmp_path):
    from pipeline.config import load_config
    from stages.registry import build_stages, stage_outputs

    (tmp_path / "raw.txt").write_text("x")
    (tmp_path / "c.yaml").write_text("data: {sources: [{glob: raw.txt}]}\noutput_root: o\n")
    config = load_config(tmp_path / "c.yaml")
    outs = {stage.name: os.path.normpath(os.path.join(config.project_root, stage.outs[0]))
            for stage in build_stages(config)}
    assert outs == stage_outputs(config)
