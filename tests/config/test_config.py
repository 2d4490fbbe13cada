"""Config loading: defaults, overrides, and errors that name the key, the value and the fix."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from pipeline.config import (
    MAX_CONFIG_BYTES,
    Config,
    TrainConfig,
    dump_yaml,
    load_config,
    load_config_with_origins,
    parse_config,
)
from pipeline.config.schema import PrepareConfig, StepConfig
from pipeline.config.yaml_safe import read_yaml
from pipeline.data.dedup import ExactDedupStep
from pipeline.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path, text), overrides)
    return str(info.value)


def test_shipped_configs_load():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        config = load_config(path)
        assert config.data.sources, path


def test_empty_file_gives_all_defaults(tmp_path):
    config = load_config(write_config(tmp_path, ""))
    default_chain = (StepConfig("exact_dedup", ExactDedupStep()),)  # the schema's default, with the step's defaults
    assert config == Config(prepare=PrepareConfig(steps=default_chain))
    assert config.train.steps == 300 and config.tokenizer.special_tokens == ("<|endoftext|>",)


def test_config_is_frozen_and_typed(tmp_path):
    config = load_config(write_config(tmp_path, "train: {lr: 1, steps: 5}\n"))
    assert config.train.lr == 1.0 and isinstance(config.train.lr, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.train.steps = 6  # type: ignore[misc]


def test_sources_parse(tmp_path):
    config = load_config(write_config(tmp_path, "data:\n  sources:\n    - {glob: 'a/*.txt', separator: line}\n"))
    (source,) = config.data.sources
    assert (source.glob, source.format, source.separator, source.field) == ("a/*.txt", "auto", "line", "text")


def test_value_and_to_dict_are_json_able(tmp_path):
    config = load_config(write_config(tmp_path, "tokenizer: {vocab_size: 300}\n"))
    assert config.value("tokenizer.vocab_size") == 300
    assert config.value("tokenizer")["special_tokens"] == ["<|endoftext|>"]
    internal = {"mixture"}  # filled in from data.sources by the train stage, not a key of the section
    assert config.value("train") == {k: v for k, v in dataclasses.asdict(TrainConfig()).items() if k not in internal}
    assert parse_config(config.to_dict()) == config
    assert parse_config(yaml.safe_load(dump_yaml(config))) == config


def test_value_of_unknown_key_suggests(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'train.steps'"):
        Config().value("train.stepz")


def test_overrides_parse_yaml_scalars(tmp_path):
    path = write_config(tmp_path, "data:\n  sources:\n    - {glob: 'a/*.txt'}\n")
    config = load_config(path, ["train.steps=500", "tokenizer.path=null", "prepare.max_chars=10",
                                "data.sources.0.separator=line", "encode.bos_token=<|endoftext|>"])
    assert config.train.steps == 500 and config.prepare.max_chars == 10
    assert config.data.sources[0].separator == "line"
    assert config.encode.bos_token == "<|endoftext|>"


@pytest.mark.parametrize(
    "text, overrides, expected",
    [
        ("train:\n  step: 3\n", (), "unknown key 'train.step'; did you mean 'train.steps'?"),
        ("trian: {}\n", (), "unknown key 'trian'; did you mean 'train'?"),
        ("", ("train.stesp=3",), "--set: unknown key 'train.stesp'; did you mean 'train.steps'?"),
        ("", ("data.sources.0.sep=x",), "unknown key 'data.sources.0.sep'"),
        ("", ("train.steps",), "expected KEY=VALUE"),
        ("train: {steps: abc}\n", (), "train.steps must be an integer >= 0, got a string 'abc'"),
        ("train: {steps: 1.5}\n", (), "train.steps must be an integer"),
        ("train: {steps: true}\n", (), "train.steps must be an integer >= 0, got a boolean True"),
        ("", ("train.batch_size=0",), "train.batch_size must be an integer >= 1 and <= 1048576, got 0"),
        ("", ("prepare.val_fraction=1",), "prepare.val_fraction must be a number >= 0.0 and < 1.0, got 1.0"),
        ("", ("prepare.normalize=NFD",), "prepare.normalize must be one of 'NFC', 'NFKC', 'none'; got 'NFD'"),
        ("", ("tokenizer.kind=bytes",), "did you mean 'byte'?"),
        ("", ("tokenizer.vocab_size=200",), "tokenizer.vocab_size must be at least 257"),
        ("", ("prepare.min_chars=5", "prepare.max_chars=4"), "prepare.max_chars (4) is below"),
        ("", ("encode.eos_token=<eos>",), "encode.eos_token '<eos>' is not one of tokenizer.special_tokens"),
        ("", ("tokenizer.special_tokens=[a, a]",), "tokenizer.special_tokens must be distinct"),
        ("data: {sources: x}\n", (), "data.sources must be a list, got a string 'x'"),
        ("data: {sources: [{format: txt}]}\n", (), "data.sources[0].glob is required"),
        ("train: 3\n", (), "train must be a mapping, got an integer 3"),
        ("- a\n", (), "the top level must be a mapping"),
        ("train: [\n", (), "not valid YAML"),
        ("", ("train.lr=.nan",), "train.lr must be a number >= 0.0, got nan"),
        ("", ("train.weight_decay=.inf",), "train.weight_decay must be a number >= 0.0, got inf"),
        ("", ("train.seed=100000000000000000000000000",),
         "train.seed must be an integer >= 0 and <= 9223372036854775807"),
        ("", ("prepare.seed=-1",), "prepare.seed must be an integer >= 0"),
        ("data: {sources: [{glob: a, separator: ''}]}\n", (), "data.sources[0].separator must not be empty"),
        ("", ("encode.workers=1000000000000000000000000000000",), "encode.workers must be an integer >= 0 and <= 256"),
        ("", ("tokenizer.workers=257",), "tokenizer.workers must be an integer >= 0 and <= 256, got 257"),
        ("", ("train.dim=1000000000",), "train.dim must be an integer >= 1 and <= 65536, got 1000000000"),
        ("", ("train.batch_size=1000000000",), "train.batch_size must be an integer >= 1 and <= 1048576"),
        ("", ("train.context=1000000000",), "train.context must be an integer >= 1 and <= 1048576"),
        ("", ("train.seed=" + "9" * 5000,), "--set train.seed: the integer 99999999999999999999... has too many"),
        ("train: {seed: " + "9" * 5000 + "}\n", (), "line 1: the integer 99999999999999999999... has too many"),
        # a bucket number is computed in 64 bits in a worker: more buckets was an OverflowError there
        ("prepare: {steps: [{exact_dedup: {}}]}\n", ("prepare.steps.0.exact_dedup.buckets=18446744073709551616",),
         "prepare.steps[0].exact_dedup.buckets must be an integer >= 1 and <= 1024, got 18446744073709551616"),
        ("prepare: {steps: [{near_dedup: {buckets: 100000}}]}\n", (),
         "prepare.steps[0].near_dedup.buckets must be an integer >= 1 and <= 1024, got 100000"),
        # a task per bucket, each reading every partition's keys: 65,536 ran over 400 s on 137 KB
        ("prepare: {steps: [{exact_dedup: {}}]}\n", ("prepare.steps.0.exact_dedup.buckets=65536",),
         "prepare.steps[0].exact_dedup.buckets must be an integer >= 1 and <= 1024, got 65536"),
    ],
)
def test_errors_name_key_value_and_allowed(tmp_path, text, overrides, expected):
    assert expected in error_of(tmp_path, text, overrides)


@pytest.mark.parametrize("text, line", [
    ("train: [\n", 1),  # the end of the text is on its last line, not one past it
    ("train:\n  steps: 5\n\t lr: 1\n", 3),
    ("train: {steps: 5}\ntrain: b: c\n", 2),
])
def test_yaml_errors_name_the_file_and_a_line_it_has(tmp_path, text, line):
    message = error_of(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'config.yaml'}: line {line}: not valid YAML: ")
    assert "<unicode string>" not in message and "\n" not in message


@pytest.mark.parametrize("text, line, first", [
    ("train:\n  steps: 5\n  lr: 0.1\n  steps: 50\n", 4, 2),
    ("train: {steps: 5}\nprepare: {}\ntrain: {lr: 0.1}\n", 3, 1),
])
def test_a_key_given_twice_is_refused_in_one_line(tmp_path, text, line, first):
    """PyYAML keeps the last value of a repeated key without a word; YAML forbids repeating one."""
    key = text.splitlines()[line - 1].split(":")[0].strip()
    assert error_of(tmp_path, text) == (f"{tmp_path / 'config.yaml'}: line {line}: the key {key!r} is given twice "
                                        f"in one mapping (first at line {first}); keep one")


def test_a_merged_key_may_still_be_overridden(tmp_path):
    text = "base: &base {steps: 5, lr: 0.1}\ntrain:\n  <<: *base\n  steps: 7\n"
    assert read_yaml(write_config(tmp_path, text))["train"] == {"steps": 7, "lr": 0.1}


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name, kind", [("fifo.yaml", "a FIFO"), ("/dev/zero", "a character device")])
def test_a_config_that_is_no_regular_file_is_refused_unread(tmp_path, name, kind):
    """A FIFO with no writer would block the read for ever, and /dev/zero would never end."""
    if name == "fifo.yaml":
        os.mkfifo(tmp_path / name)
    with pytest.raises(ConfigError, match=f"^config file .*{name} is {kind}, not a regular file"):
        load_config(tmp_path / name)


def test_unreadable_file_is_a_config_error(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes(b"train: {steps: 3}  # caf\xe9\n")
    with pytest.raises(ConfigError, match="latin1.yaml cannot be read as UTF-8"):
        load_config(tmp_path / "latin1.yaml")
    with pytest.raises(ConfigError, match="is a directory, not a regular file"):
        load_config(tmp_path)


def test_char_tokenizer_allows_small_vocab(tmp_path):
    config = load_config(write_config(tmp_path, "tokenizer: {kind: char, vocab_size: 40}\n"))
    assert config.tokenizer.vocab_size == 40


def test_frozen_tokenizer_path_skips_special_token_check(tmp_path):
    config = load_config(write_config(tmp_path, "tokenizer: {path: t.json, special_tokens: []}\n"))
    assert config.tokenizer.special_tokens == () and config.encode.eos_token == "<|endoftext|>"


@pytest.mark.parametrize("typed", ["1e-3", "1E-3", "1e3", "1E3", "+1.5e-3", "1.0e3", ".5e1", "2e+2"])
def test_floats_read_as_typed_in_file_and_set(tmp_path, typed):
    """YAML 1.1 reads ``1e-3`` (no dot, or no exponent sign) as a string; a user means a number."""
    expected = float(typed)
    assert load_config(write_config(tmp_path, f"train: {{lr: {typed}}}\n")).train.lr == expected
    assert load_config(write_config(tmp_path, ""), [f"train.lr={typed}"]).train.lr == expected


def test_exponent_is_not_an_integer(tmp_path):
    assert "train.steps must be an integer >= 0, got a number 1000.0" in error_of(tmp_path, "", ("train.steps=1e3",))


def billion_laughs(levels: int) -> str:
    """Anchors nested ten-fold: ``levels`` lines that expand to 10**levels strings."""
    anchors = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return f"tokenizer:\n  special_tokens: [{', '.join(anchors)}]\n"


def test_alias_bomb_is_refused_before_it_is_built(tmp_path):
    message = error_of(tmp_path, billion_laughs(6))
    assert message.endswith("line 2: aliases expand to more than 100,000 values or 32 levels of nesting")


def test_aliases_within_bounds_still_work(tmp_path):
    text = "data:\n  sources:\n    - &src {glob: 'a/*.txt', separator: line}\n    - *src\n"
    sources = load_config(write_config(tmp_path, text)).data.sources
    assert sources[0] == load_config(write_config(tmp_path, text)).data.sources[1]


def test_recursive_alias_is_refused(tmp_path):
    assert "an alias refers to a node that contains it" in error_of(tmp_path, "tokenizer: {special_tokens: &a [*a]}\n")


@pytest.mark.parametrize("where", ["file", "set"])
def test_deep_nesting_is_one_line(tmp_path, where):
    nested = "[" * 5000 + "]" * 5000
    if where == "file":
        assert error_of(tmp_path, f"train: {{lr: {nested}}}\n").endswith("line 1: nested more than 32 levels deep")
    else:
        assert error_of(tmp_path, "", (f"train.lr={nested}",)).endswith(
            "--set train.lr: nested more than 32 levels deep")


def test_aliases_cannot_nest_beyond_the_bound(tmp_path):
    level = "[" * 20 + "x" + "]" * 20
    text = f"tokenizer:\n  special_tokens: [&a {level}, &b [[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]\n"
    assert "aliases expand to more than 100,000 values or 32 levels" in error_of(tmp_path, text)


def test_oversized_config_is_refused_unread(tmp_path):
    text = "# " + "x" * MAX_CONFIG_BYTES + "\n"
    assert f"is larger than {MAX_CONFIG_BYTES:,} bytes" in error_of(tmp_path, text)


def test_errors_show_huge_values_shortened(tmp_path):
    message = error_of(tmp_path, "train: {seed: '" + "7" * 100_000 + "'}\n")
    assert len(message) < 300 and "..." in message


def test_cli_accepts_exponent_floats_and_refuses_bombs_in_one_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from stages.cli.main import cli

    monkeypatch.chdir(tmp_path)
    write_config(tmp_path, "train: {weight_decay: 1E-4}\n")
    shown = CliRunner().invoke(cli, ["config", "show", "--config", "config.yaml", "--set", "train.lr=1e-3"])
    assert shown.exit_code == 0, shown.output
    assert "lr: 0.001\n" in shown.output and "weight_decay: 0.0001\n" in shown.output
    (tmp_path / "bomb.yaml").write_text(billion_laughs(7))
    refused = CliRunner().invoke(cli, ["config", "show", "--config", "bomb.yaml"])
    assert refused.exit_code == 2
    assert refused.output == ("error: bomb.yaml: line 2: aliases expand to more than 100,000 values "
                              "or 32 levels of nesting\n")


# -- paths relative to the config file, extends, origins ------------------------------------------


def test_paths_are_relative_to_the_config_files_directory(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    path = project / "configs" / "c.yaml"
    path.write_text("output_root: ..\ntokenizer: {output: out/tok.json}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(path)
    assert config.out(config.tokenizer.output) == "out/tok.json"  # as the lock records it: from output_root
    assert config.project_root == str(project)
    assert config.output_path(config.tokenizer.output) == str(project / "out" / "tok.json")
    monkeypatch.chdir(project)
    assert config.output_path(config.tokenizer.output) == "out/tok.json"


def test_set_paths_are_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    path = write_config(tmp_path / "configs", "output_root: ..\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(path, ["tokenizer.output=mine/tok.json", "tokenizer.path=frozen.json",
                                "data.sources=[{glob: 'raw/*.txt'}]", "data.sources.0.glob=raw/*.txt"])
    assert config.tokenizer.output == "mine/tok.json"  # relative to output_root, the current directory here
    assert config.tokenizer.path == "../frozen.json" and config.here(config.tokenizer.path) == "frozen.json"
    assert config.data.sources[0].glob == "../raw/*.txt"


def test_set_errors_name_set_not_the_file(tmp_path):
    message = error_of(tmp_path, "train: {steps: 3}\n", ("train.steps=-1",))
    assert message.startswith("--set: train.steps must be an integer >= 0")
    assert error_of(tmp_path, "train: {steps: -1}\n").startswith(str(tmp_path / "config.yaml"))


@pytest.mark.parametrize("text", ["", "prepare: {val_fraction: 0.1}\n", "prepare: {steps: null}\n"])
def test_set_of_an_item_of_a_list_the_files_do_not_give_blames_set(tmp_path, text):
    """Not ``config.yaml: prepare.steps must be a list, got a mapping {'2': ...}``: the file gave no list."""
    assert error_of(tmp_path, text, ("prepare.steps.2.c4.min_sentences=3",)) == (
        "--set prepare.steps.2.c4.min_sentences: prepare.steps is not a list in the config file, so it has no "
        "item 2; set the whole list instead, e.g. --set 'prepare.steps=[...]'")
    assert "'3' is not an index of a list of 1 items" in error_of(
        tmp_path, text, ("prepare.steps=[{c4: {}}]", "prepare.steps.3.c4.min_sentences=3"))


def test_extends_keeps_the_parents_values_and_names_their_origin(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "default.yaml").write_text(
        "data: {sources: [{glob: 'raw/*.txt'}]}\ntokenizer: {kind: byte, vocab_size: 300, output: tok.json}\n"
        "train: {steps: 5}\n")
    (tmp_path / "variant.yaml").write_text("extends: base/default.yaml\ntokenizer: {kind: char}\n")
    config, origins = load_config_with_origins(tmp_path / "variant.yaml", ["train.lr=0.5"])
    assert (config.tokenizer.kind, config.tokenizer.vocab_size, config.train.steps) == ("char", 300, 5)
    # the parent's paths still mean what they meant in base/: rebased onto the variant's directory
    assert config.data.sources[0].glob == "base/raw/*.txt"
    assert Path(config.output_path(config.tokenizer.output)).resolve() == tmp_path / "base" / "tok.json"
    assert origins.of("tokenizer.kind") == str(tmp_path / "variant.yaml")
    assert origins.of("tokenizer.vocab_size") == str(tmp_path / "base" / "default.yaml")
    assert origins.of("data.sources") == str(tmp_path / "base" / "default.yaml")
    assert origins.of("train.lr") == "--set" and origins.of("train.dim") == "built-in default"


def test_an_error_in_a_parent_names_the_parent(tmp_path):
    (tmp_path / "default.yaml").write_text("train: {steps: -1}\n")
    (tmp_path / "variant.yaml").write_text("extends: default.yaml\n")
    with pytest.raises(ConfigError, match=r"default.yaml: train.steps must be"):
        load_config(tmp_path / "variant.yaml")


@pytest.mark.parametrize("text, expected", [
    ("extends: a.yaml\n", "a.yaml: extends 'config.yaml', which extends it back (a cycle)"),
    ("extends: 3\n", "extends must be the path of another config file, got 3"),
    ("extends: missing.yaml\n", "missing.yaml not found"),
])
def test_bad_extends_is_one_error(tmp_path, text, expected):
    (tmp_path / "a.yaml").write_text("extends: config.yaml\n")
    assert expected in error_of(tmp_path, text)


def test_shipped_variants_only_differ_where_they_say(tmp_path):
    default = load_config(REPO / "configs" / "default.yaml")
    char = load_config(REPO / "configs" / "char.yaml")
    assert char.tokenizer.kind == "char" and char.train.steps == default.train.steps
    assert char.data == default.data and char.output_root == default.output_root
    assert len((REPO / "configs" / "char.yaml").read_text().splitlines()) < 20


def test_file_urls_are_the_local_paths_they_name(tmp_path):
    (tmp_path / "lmprep.yaml").write_text(f"""\
data:
  sources: [{{glob: "file://{tmp_path}/raw/*.txt"}}]
tokenizer: {{path: "file://{tmp_path}/frozen.json"}}
encode: {{output_dir: "file://{tmp_path}/shards"}}
""")
    config = load_config(tmp_path / "lmprep.yaml", [f"prepare.output_dir=file://{tmp_path}/prepared"])
    assert config.data.sources[0].glob == f"{tmp_path}/raw/*.txt"
    assert Path(config.here(config.tokenizer.path)).resolve() == tmp_path / "frozen.json"
    for value, local in ((config.encode.output_dir, "shards"), (config.prepare.output_dir, "prepared")):
        assert Path(config.output_path(value)).resolve() == tmp_path / local


def test_url_schemes_are_spelt_in_lower_case_so_that_paths_compare_as_places(tmp_path):
    (tmp_path / "lmprep.yaml").write_text("encode: {output_dir: S3://bucket/shards}\n")
    config = load_config(tmp_path / "lmprep.yaml", ["train.output_dir=S3://bucket/Ckpt"])
    assert (config.encode.output_dir, config.train.output_dir) == ("s3://bucket/shards", "s3://bucket/Ckpt")


@pytest.mark.parametrize("key", ["prepare.output_dir", "encode.output_dir", "train.output_dir", "stats.output_dir"])
def test_an_output_that_is_a_whole_bucket_is_refused(tmp_path, key):
    (tmp_path / "lmprep.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match=rf"{key} 's3://bucket/' is a whole bucket; name a prefix inside it"):
        load_config(tmp_path / "lmprep.yaml", [f"{key}=s3://bucket/"])


def test_an_export_format_that_cannot_hold_the_vocabulary_is_refused_at_load(tmp_path):
    """A word vocabulary past int32 cannot be a Megatron indexed dataset: said before any stage runs."""
    text = "tokenizer: {kind: word, vocab_size: 3000000000}\nexport: {formats: [parquet, megatron]}\n"
    assert error_of(tmp_path, text) == (
        f"{write_config(tmp_path, text)}: export.formats: megatron holds at most 2,147,483,648 IDs, "
        "but tokenizer.vocab_size is 3,000,000,000; remove megatron from export.formats")
    config = load_config(write_config(tmp_path, text.replace("megatron", "nanogpt")))
    assert config.export.formats == ("parquet", "nanogpt")  # uint32 holds it


def test_a_section_given_twice_is_refused_naming_both_lines(tmp_path):
    """YAML keeps the second ``train:`` whole, so the first one's settings would be dropped without a word."""
    message = error_of(tmp_path, "train: {steps: 5}\nprepare: {seed: 1}\ntrain:\n  lr: 0.1\n")
    assert message == (f"{tmp_path / 'config.yaml'}: line 3: the key 'train' is given twice in one mapping "
                       "(first at line 1); keep one")
