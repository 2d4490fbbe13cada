"""With ``tokenizer.path`` set, the tokenizer's settings are the file's: shown so, and a contradiction refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.config import load_config, load_config_with_origins, parse_config
from pipeline.config.frozen import FROM_FILE
from pipeline.errors import ConfigError
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

TEXTS = ["the cat sat on the mat; the dog sat on the log"] * 20
SPECIALS = ["<|endoftext|>", "<|pad|>"]


@pytest.fixture(scope="module")
def char_tokenizer() -> Tokenizer:
    return Tokenizer.train(TEXTS, kind="char", vocab_size=30, special_tokens=SPECIALS, workers=1)


@pytest.fixture
def project(tmp_path, char_tokenizer) -> Path:
    char_tokenizer.save(tmp_path / "frozen.json")
    return tmp_path


def write(project: Path, tokenizer: str) -> Path:
    (project / "config.yaml").write_text(f"tokenizer: {{path: frozen.json, {tokenizer}}}\n")
    return project / "config.yaml"


def test_the_settings_come_from_the_file(project, char_tokenizer):
    config, origins = load_config_with_origins(write(project, "output: out/tok.json"))
    tok = config.tokenizer
    assert (tok.kind, tok.vocab_size, tok.merges, tok.pattern, tok.special_tokens) == (
        "char", char_tokenizer.vocab_size, None, "none", tuple(SPECIALS))
    assert origins.of("tokenizer.kind") == "tokenizer.path frozen.json"
    assert origins.of("tokenizer.min_frequency") == "built-in default"  # training only: not in the file


def test_config_show_prints_the_files_settings_and_says_so(project, char_tokenizer):
    write(project, "vocab_size: 1000")  # an upper bound the file keeps to
    shown = CliRunner().invoke(cli, ["config", "show", "--config", "config.yaml"])
    assert shown.exit_code == 0, shown.output
    assert ("  path: frozen.json\n"
            "  kind: char  # from tokenizer.path frozen.json\n"
            f"  vocab_size: {char_tokenizer.vocab_size}  # from tokenizer.path frozen.json\n"
            "  merges: null  # from tokenizer.path frozen.json\n"
            "  pattern: none  # from tokenizer.path frozen.json\n") in shown.stdout
    assert "  special_tokens:  # from tokenizer.path frozen.json\n  - <|endoftext|>\n  - <|pad|>\n" in shown.stdout
    origin = CliRunner().invoke(cli, ["config", "show", "--origin", "--config", "config.yaml"])
    assert 'tokenizer.kind: "char"  # tokenizer.path frozen.json\n' in origin.stdout


@pytest.mark.parametrize("tokenizer, overrides, message", [
    ("kind: byte", (), "config.yaml: tokenizer.kind 'byte' contradicts tokenizer.path 'frozen.json', a char "
                       "tokenizer; set tokenizer.kind to 'char'"),
    ("vocab_size: 10", (), "config.yaml: tokenizer.vocab_size 10 contradicts tokenizer.path 'frozen.json', which has "
                           "{vocab} IDs; set tokenizer.vocab_size to {vocab} or null (the file's is then used)"),
    ("vocab_size: null, merges: 2", (), "config.yaml: tokenizer.merges 2 contradicts tokenizer.path 'frozen.json', "
                                        "which has {merges} merges; set tokenizer.merges to {merges} or null"),
    ("pattern: gpt4", (), "config.yaml: tokenizer.pattern 'gpt4' contradicts tokenizer.path 'frozen.json', whose "
                          "pattern is 'none'; set tokenizer.pattern to 'none' or null"),
    ("output: t.json", ("tokenizer.special_tokens=['<|endoftext|>']",),
     "--set: tokenizer.special_tokens ['<|endoftext|>'] contradicts tokenizer.path 'frozen.json', whose special "
     "tokens is ['<|endoftext|>', '<|pad|>']; set tokenizer.special_tokens to ['<|endoftext|>', '<|pad|>']"),
])
def test_a_setting_that_contradicts_the_file_is_refused_naming_both(project, char_tokenizer, tokenizer, overrides,
                                                                   message):
    expected = message.format(vocab=char_tokenizer.vocab_size, merges=len(char_tokenizer.merges))
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(write(project, tokenizer), overrides)


def test_a_missing_file_leaves_the_settings_for_the_tokenizer_stage_to_report(tmp_path):
    (tmp_path / "config.yaml").write_text("tokenizer: {path: absent.json, kind: char, vocab_size: 99}\n")
    tok = load_config(tmp_path / "config.yaml").tokenizer
    assert (tok.kind, tok.vocab_size) == ("char", 99)


def run_tokenizer_stage(project: Path, frozen: str):
    (project / "raw").mkdir(exist_ok=True)
    (project / "raw" / "a.txt").write_text(TEXTS[0])
    (project / "config.yaml").write_text(f"tokenizer: {{path: {frozen}, output: out/tokenizer.json}}\n"
                                         "encode: {eos_token: null}\ndata: {sources: [{glob: 'raw/*.txt'}]}\n")
    return CliRunner().invoke(cli, ["run", "tokenizer", "--config", str(project / "config.yaml")])


def byte_file_with_values_hf_refuses(project: Path) -> Path:
    """lmprep's own byte-level file with three values lmprep reads as HF's defaults and HF refuses."""
    Tokenizer.train(TEXTS, vocab_size=280, special_tokens=SPECIALS, workers=1).save(project / "own.json")
    data = json.loads((project / "own.json").read_text("utf-8"))
    data["added_tokens"][0]["lstrip"] = 0  # a boolean given as 0
    del data["added_tokens"][1]["single_word"]
    data["decoder"]["add_prefix_space"] = []
    (project / "odd.json").write_text(json.dumps(data), "utf-8")
    return project / "odd.json"


def test_a_frozen_file_is_written_as_one_hf_loads_with_the_same_ids_and_fingerprint(project):
    import tokenizers

    odd = byte_file_with_values_hf_refuses(project)
    with pytest.raises(Exception, match="invalid type|missing field"):
        tokenizers.Tokenizer.from_file(str(odd))
    result = run_tokenizer_stage(project, "odd.json")
    assert result.exit_code == 0, result.output
    assert "; rewritten as lmprep writes a tokenizer.json, not copied)" in result.output
    written = project / "out" / "tokenizer.json"
    hf, ours = tokenizers.Tokenizer.from_file(str(written)), Tokenizer.load(odd)
    assert Tokenizer.load(written).fingerprint == ours.fingerprint
    for text in [*TEXTS[:1], "Déjà vu 😀 <|pad|> x", ""]:
        assert hf.encode(text).ids == ours.encode(text, allowed_special="all")


def test_a_frozen_file_lmprep_wrote_is_written_out_byte_for_byte(project):
    Tokenizer.train(TEXTS, vocab_size=280, special_tokens=SPECIALS, workers=1).save(project / "own.json")
    result = run_tokenizer_stage(project, "own.json")
    assert result.exit_code == 0 and "rewritten" not in result.output, result.output
    assert (project / "out" / "tokenizer.json").read_bytes() == (project / "own.json").read_bytes()


def test_validation_reads_no_file(project, monkeypatch):
    """Checking a mapping does no I/O: only loading a config file reads the frozen tokenizer's settings in."""
    def refuse(*args, **kwargs):
        raise AssertionError("config validation read a file")

    monkeypatch.setattr(Tokenizer, "load", refuse)
    monkeypatch.setattr("builtins.open", refuse)
    config = parse_config({"tokenizer": {"path": str(project / "frozen.json"), "vocab_size": 1000}})
    assert (config.tokenizer.kind, config.tokenizer.vocab_size) == ("byte", 1000)


def test_a_run_loads_the_frozen_file_once_however_it_is_named(tmp_path, monkeypatch):
    """The config reads the frozen file's settings, the encode stage loads the tokenizer stage's copy of it: the
    same bytes, parsed once per process."""
    from pipeline.shards import corpus

    frozen = Tokenizer.from_merges(kind="byte", pattern="", merges=[(120, 121)], special_tokens=[str(tmp_path)])
    frozen.save(tmp_path / "frozen.json")  # bytes no other test loaded in this process (its special token)
    (tmp_path / "copy.json").write_bytes((tmp_path / "frozen.json").read_bytes())
    loads = []
    real_load = Tokenizer.load.__func__
    monkeypatch.setattr(Tokenizer, "load", classmethod(lambda cls, path: loads.append(path) or real_load(cls, path)))
    config = load_config(write(tmp_path, "output: out/tok.json"))
    shared = corpus.share_tokenizer(str(tmp_path / "copy.json"))
    assert config.tokenizer.kind == "byte" and shared.fingerprint == frozen.fingerprint
    assert [Path(path).name for path in loads] == ["frozen.json"]


def memo_of(project: Path) -> dict:
    return json.loads((project / ".lmprep" / "tokenizer-files.json").read_text("utf-8"))


def refuse_loading(monkeypatch) -> None:
    def refuse(path):
        raise AssertionError(f"{path} was loaded")

    monkeypatch.setattr("pipeline.tokenizer.shared.load", refuse)


def test_a_project_remembers_what_the_file_says_by_its_content(project, char_tokenizer, monkeypatch):
    """Every command reads the config: once the state dir knows a file's bytes, the file is not loaded again, and
    the settings, their origins and the refusals are the same as a load gives."""
    (project / ".lmprep").mkdir()
    config, origins = load_config_with_origins(write(project, "output: out/tok.json"))
    assert [entry["vocab_size"] for entry in memo_of(project).values()] == [char_tokenizer.vocab_size]
    with monkeypatch.context() as patched:
        refuse_loading(patched)
        remembered, remembered_origins = load_config_with_origins(write(project, "output: out/tok.json"))
        assert remembered == config
        assert [remembered_origins.of(f"tokenizer.{key}") for key in FROM_FILE] == [
            origins.of(f"tokenizer.{key}") for key in FROM_FILE] == ["tokenizer.path frozen.json"] * len(FROM_FILE)
        with pytest.raises(ConfigError, match=re.escape("tokenizer.kind 'byte' contradicts tokenizer.path "
                                                        "'frozen.json', a char tokenizer")):
            load_config(write(project, "kind: byte"))
    Tokenizer.train(TEXTS, vocab_size=270, workers=1).save(project / "frozen.json")  # other bytes: loaded again
    tok = load_config(write(project, "output: out/tok.json")).tokenizer
    assert (tok.kind, tok.vocab_size, tok.special_tokens) == ("byte", 270, ())
    assert len(memo_of(project)) == 2


@pytest.mark.parametrize("memo", ["[]", "{", '{"abc": {"kind": "byte"}}', "fifo"])
def test_a_memo_that_is_not_one_lmprep_wrote_is_ignored_and_replaced(project, char_tokenizer, memo):
    (project / ".lmprep").mkdir()
    path = project / ".lmprep" / "tokenizer-files.json"
    if memo == "fifo":
        os.mkfifo(path)  # never opened for reading: it would block
    else:
        path.write_text(memo, "utf-8")
    assert load_config(write(project, "output: out/tok.json")).tokenizer.vocab_size == char_tokenizer.vocab_size
    assert [entry["kind"] for entry in memo_of(project).values()] == ["char"]


def test_a_project_that_has_not_run_gets_no_state_dir_from_reading_its_config(project):
    load_config(write(project, "output: out/tok.json"))
    assert not (project / ".lmprep").exists()
