"""``lmprep run``, ``status`` and ``config show`` through click's CliRunner, in a temp project."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import files_under, make_project, tiny_config
from conftest import lmprep_in_cwd as lmprep

from pipeline.data.documents import iter_records
from pipeline.shards.format import ShardSet
from pipeline.tokenizer import Tokenizer
from stages.cli.main import cli

REPO = Path(__file__).resolve().parents[2]

@pytest.fixture
def project(tiny_project) -> Path:
    return tiny_project()


def test_run_prepare_then_nothing_to_do(project):
    result = lmprep("run", "prepare")
    assert result.exit_code == 0, result.output
    assert "running 'prepare': never run" in result.output and "kept 40 documents" in result.output
    assert (project / "out" / "prepared" / "stats.json").exists()
    again = lmprep("run", "prepare")
    assert again.exit_code == 0 and "'prepare' is up to date" in again.output


def test_status_names_what_changed_and_check_exits_1(project):
    assert "prepare: never run" in lmprep("status").output
    assert lmprep("status", "--check").exit_code == 1
    lmprep("run", "prepare")
    assert lmprep("status", "--check").exit_code == 1  # later stages never ran
    (project / "raw" / "b.txt").write_text("another document")
    result = lmprep("status", "--set", "prepare.seed=4")
    assert "prepare: stale" in result.output
    assert "param prepare.seed changed 0 → 4" in result.output
    assert "dependency 'raw/b.txt' added" in result.output


def test_source_names_that_are_not_utf8_run_and_rerun(tmp_path, tiny_project):
    """A directory and a file whose names are not UTF-8: prepare reads them, the run cache, the hash cache and the
    lock record them, and every later command works; a line names them with backslash escapes, as Python would."""
    tiny_project()
    odd = os.fsencode(tmp_path / "raw") + b"/sub\xffdir"
    os.mkdir(odd)
    with open(odd + b"/caf\xe9.txt", "w") as file:
        file.write("Q: what is odd?\nA: a name that is not UTF-8.")
    with open(odd + b"/short\xff.txt", "w") as file:
        file.write("x")  # too short: its document ID names the file in rejected/
    (tmp_path / "lmprep.yaml").write_text(tiny_config(data={"sources": [{"glob": "raw/**/*.txt",
                                                                          "separator": "blank_line"}]},
                                                      prepare={"min_chars": 2}))
    first = lmprep("run", "prepare")
    assert first.exit_code == 0 and "kept 41 documents" in first.output and "1 length/too_short" in first.output, \
        first.output
    rejected = list(iter_records(tmp_path / "out" / "prepared" / "rejected" / "part-00000.arrow"))
    assert [record[2] for record in rejected] == ["raw/sub\\udcffdir/short\\udcff.txt#0"]
    assert lmprep("run", "prepare").output.strip() == "'prepare' is up to date"
    with open(odd + b"/caf\xe9.txt", "a") as file:
        file.write(" And one more line.")
    strict_utf8 = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}  # as under en_US.UTF-8
    for command in (["status"], ["run", "prepare"]):
        result = subprocess.run([sys.executable, "-m", "stages", *command, "--config", "lmprep.yaml"],
                                capture_output=True, encoding="utf-8", env=strict_utf8)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert "dependency 'raw/sub\\udcffdir/caf\\udce9.txt' changed" in result.stdout


def test_config_show_prints_effective_yaml(project):
    result = lmprep("config", "show", "--set", "train.steps=7")
    assert result.exit_code == 0
    assert "  steps: 7\n" in result.output and "glob: raw/*.txt" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (("status", "--set", "train.stepz=1"), "error: --set: unknown key 'train.stepz'; did you mean 'train.steps'?"),
        (("run", "nonsense"), "error: unknown stage 'nonsense'; stages: prepare, tokenizer, encode, train"),
        (("run", "tokenize"),
         "error: unknown stage 'tokenize'; did you mean 'tokenizer'? stages: prepare, tokenizer, encode, train"),
        (("config", "show", "--set", "prepare.val_fraction=2"), "error: --set: prepare.val_fraction must be"),
    ],
)
def test_errors_are_one_line_with_exit_2(project, args, message):
    result = lmprep(*args)
    assert result.exit_code == 2
    assert result.output.startswith(message) and result.output.count("\n") == 1


def test_missing_raw_data_is_named(project):
    shutil.rmtree(project / "raw")
    result = lmprep("status")
    assert result.exit_code == 2 and "glob 'raw/*.txt' matches no files" in result.output


def test_without_config_the_projects_config_is_found_here_or_in_the_nearest_parent(project, monkeypatch):
    def steps_shown() -> tuple[str, str]:
        result = CliRunner().invoke(cli, ["config", "show"])
        assert result.exit_code == 0, result.output
        return next(line.strip() for line in result.stdout.splitlines() if "steps: " in line), result.stderr

    refused = CliRunner().invoke(cli, ["status"])
    assert refused.exit_code == 2 and refused.output == (
        f"error: no config file: no config.yaml or configs/default.yaml in {project} or a parent directory; "
        "pass --config PATH\n")
    (project / "configs").mkdir()
    (project / "configs" / "default.yaml").write_text("train: {steps: 7}\n")
    assert steps_shown() == ("steps: 7", "")  # in the current directory: the conventional place, nothing said
    (project / "sub" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(project / "sub" / "deeper")
    assert steps_shown() == ("steps: 7", "using config ../../configs/default.yaml\n")
    (project / "config.yaml").write_text("train: {steps: 8}\n")  # what lmprep init writes comes first
    assert steps_shown() == ("steps: 8", "using config ../../config.yaml\n")
    (project / "sub" / "config.yaml").write_text("train: {steps: 9}\n")  # the nearest wins
    assert steps_shown() == ("steps: 9", "using config ../config.yaml\n")
    named = CliRunner().invoke(cli, ["config", "show", "--config", str(project / "lmprep.yaml")])
    assert named.exit_code == 0 and "  steps: 2\n" in named.stdout and named.stderr == ""
    monkeypatch.setenv("LMPREP_CEILING_DIRECTORIES", str(project))  # never up into the project's directory
    assert steps_shown() == ("steps: 9", "using config ../config.yaml\n")
    (project / "sub" / "config.yaml").unlink()
    assert CliRunner().invoke(cli, ["config", "show"]).output.startswith("error: no config file: ")


def test_clean_keeps_raw_data_and_checkpoints_unless_asked(project):
    assert lmprep("run").exit_code == 0
    result = lmprep("clean")
    assert result.exit_code == 0
    assert "removed out/prepared" in result.output and "checkpoints kept" in result.output
    assert (project / "raw" / "a.txt").exists() and (project / "out" / "ckpt").exists()
    assert not (project / "out" / "shards").exists()
    assert "prepare: stale\n    output 'out/prepared' is missing\n" in lmprep("status").output
    (project / "out" / "shards.partial" / "train-00000").mkdir(parents=True)  # what a killed encode keeps
    assert "removed out/shards.partial" in lmprep("clean").output
    assert not (project / "out" / "shards.partial").exists()
    assert "removed out/ckpt" in lmprep("clean", "--checkpoints").output


def test_a_duplicate_document_reruns_only_prepare(project):
    assert lmprep("run").exit_code == 0
    with open(project / "raw" / "a.txt", "a", encoding="utf-8") as raw:
        raw.write("\n\nQ: what is 3?\nA: it is 3.")  # an exact duplicate: only the stats change
    result = lmprep("run")
    assert "running 'prepare'" in result.output and "dropped: 1 duplicate" in result.output
    assert all(f"'{stage}' is up to date" in result.output for stage in ("tokenizer", "encode", "train"))


@pytest.mark.parametrize(
    "args, line",
    [
        (["--bogus"], "error: No such option '--bogus'. (see 'lmprep --help')"),
        (["nonsense"], "error: No such command 'nonsense'. (see 'lmprep --help')"),
        (["status", "--chek"],
         "error: No such option '--chek'. (Did you mean one of: '--check', '--help'?) (see 'lmprep status --help')"),
        (["tokenizer", "train", "a.txt", "--out"],
         "error: Option '--out' requires an argument. (see 'lmprep tokenizer train --help')"),
        (["config", "show", "--set"], "error: Option '--set' requires an argument. (see 'lmprep config show --help')"),
        (["tokenizer", "train", "--kind", "unigram", "a.txt"],
         "error: Invalid value for '--kind': 'unigram' is not one of 'byte', 'char', 'word'. "
         "(see 'lmprep tokenizer train --help')"),
        (["tokenizer", "train"], "error: Missing argument 'FILES...'. (see 'lmprep tokenizer train --help')"),
        (["tokenizer", "encode"], "error: give either TEXT or --file PATH (see 'lmprep tokenizer encode --help')"),
    ],
)
def test_usage_errors_are_one_line_on_stderr_with_exit_2(project, args, line):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert result.stderr == line + "\n" and result.stdout == ""


def test_help_and_version_exit_0(project):
    for args in (["--help"], ["-h"], ["tokenizer", "train", "--help"], ["--version"], ["-V"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0 and result.stderr == "", args
    assert CliRunner().invoke(cli, ["-V"]).output.startswith("lmprep, version ")


def test_run_help_lists_the_stages(project):
    help_text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "Stages: prepare, tokenizer, encode, train, export, stats" in help_text


def test_status_warns_when_running_would_set_the_checkpoint_aside(project):
    assert lmprep("run").exit_code == 0
    result = lmprep("status", "--set", "train.lr=0.02")
    assert ("    warning: the train settings changed (train.lr 0.01 → 0.02): running it will move out/ckpt to "
            "out/ckpt-old-lr and train from scratch\n") in result.output
    status = lmprep("status", "--set", "train.steps=1").output
    assert "warning: train.steps=1 is below the checkpoint's step 2" in status
    assert "warning" not in lmprep("status", "--set", "train.steps=5").output  # raising steps resumes


def test_status_warns_that_a_damaged_checkpoint_will_be_set_aside_as_the_run_then_does(project):
    assert lmprep("run").exit_code == 0
    checkpoint = project / "out" / "ckpt" / "checkpoint.safetensors"
    data = bytearray(checkpoint.read_bytes())
    data[-3] ^= 0xFF  # in the last tensor's bytes: the header is intact
    checkpoint.write_bytes(bytes(data))
    status = lmprep("status").output
    assert "does not match its checksum; retrain it with `lmprep run train`): running it will move out/ckpt to " \
           "out/ckpt-unreadable and train from scratch" in status, status
    ran = lmprep("run")
    assert ran.exit_code == 0 and "moved the old checkpoint to out/ckpt-unreadable" in ran.output, ran.output


def test_status_names_the_free_directory_the_run_will_set_the_checkpoint_aside_to(project):
    assert lmprep("run").exit_code == 0
    (project / "out" / "ckpt-old-lr").mkdir()  # an earlier checkpoint set aside for the same reason
    result = lmprep("status", "--set", "train.lr=0.02")
    assert "running it will move out/ckpt to out/ckpt-old-lr-2 and train from scratch" in result.output
    ran = lmprep("run", "--set", "train.lr=0.02")
    assert ran.exit_code == 0 and "moved the old checkpoint to out/ckpt-old-lr-2" in ran.output
    assert (project / "out" / "ckpt-old-lr-2" / "checkpoint.safetensors").exists()


def test_status_names_no_new_directory_while_a_stage_before_train_may_still_change_it(project):
    """The move's name is decided when it happens: a new tokenizer's checkpoint goes to ckpt-<its fingerprint>."""
    assert lmprep("run").exit_code == 0
    changes = ("--set", "train.lr=0.02", "--set", "tokenizer.vocab_size=280")
    assert ("    warning: the train settings changed (train.lr 0.01 → 0.02): running it will set out/ckpt aside and "
            "train from scratch (where it moves is decided then, after 'tokenizer' and 'encode' ran)\n"
            ) in lmprep("status", *changes).output
    old = Tokenizer.load(project / "out" / "tokenizer.json").fingerprint[:12]
    ran = lmprep("run", *changes)
    assert ran.exit_code == 0 and f"moved the old checkpoint to out/ckpt-{old}" in ran.output


def test_a_bare_group_still_prints_its_help(project):
    result = CliRunner().invoke(cli, ["tokenizer"])
    assert "Usage: lmprep tokenizer" in result.stderr and "encode" in result.stderr


def test_ctrl_c_is_one_line_with_exit_130(project, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("stages.cli.pipeline.make_pipeline", interrupted)
    result = CliRunner().invoke(cli, ["status", "--config", "lmprep.yaml"])
    assert result.exit_code == 130 and result.stderr == "interrupted; the previous outputs are intact\n"


def test_a_config_runs_from_any_directory(project, tmp_path_factory, monkeypatch):
    """Paths in the config are relative to its directory, as DVC's are to dvc.yaml."""
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    config = str(project / "lmprep.yaml")
    result = CliRunner().invoke(cli, ["run", "prepare", "--config", config])
    assert result.exit_code == 0, result.output
    assert (project / "out" / "prepared" / "stats.json").exists() and (project / "state" / "lock.json").exists()
    monkeypatch.chdir(project)
    assert "'prepare' is up to date" in lmprep("run", "prepare").output  # the same lock, from the project


def test_config_show_origin_names_file_set_and_default(project):
    (project / "variant.yaml").write_text("extends: lmprep.yaml\ntrain: {lr: 0.5}\n")
    result = CliRunner().invoke(cli, ["config", "show", "--origin", "--config", "variant.yaml",
                                      "--set", "train.dim=4"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "train.lr: 0.5  # variant.yaml" in lines and "train.steps: 2  # lmprep.yaml" in lines
    assert "train.dim: 4  # --set" in lines and "train.weight_decay: 0.0  # built-in default" in lines


def test_checkpoint_directories_keep_their_tokenizer_and_sample_without_flags(project):
    assert lmprep("run").exit_code == 0
    first = (project / "out" / "tokenizer.json").read_bytes()
    assert (project / "out" / "ckpt" / "tokenizer.json").read_bytes() == first
    (project / "lmprep.yaml").write_text(tiny_config(tokenizer={"vocab_size": 270}))
    retrained = lmprep("run")
    assert retrained.exit_code == 0, retrained.output
    aside = next(path for path in (project / "out").iterdir() if path.name.startswith("ckpt-"))
    assert (aside / "tokenizer.json").read_bytes() == first  # the set-aside directory kept its own
    sampled = CliRunner().invoke(cli, ["sample", "--checkpoint", str(aside), "--prompt", "Q:", "--max-tokens", "3",
                                       "--config", "lmprep.yaml"])
    assert sampled.exit_code == 0, sampled.output
    refused = CliRunner().invoke(cli, ["sample", "--checkpoint", str(aside), "--prompt", "Q:", "--config",
                                       "lmprep.yaml", "--tokenizer", "out/tokenizer.json"])
    assert refused.exit_code == 2 and "was trained with tokenizer" in refused.output


def test_status_json_is_one_document_per_stage_with_reasons_and_outputs(project):
    import json

    before = json.loads(lmprep("status", "--json").output)
    assert before["version"] == 1 and list(before["stages"]) == ["prepare", "tokenizer", "encode", "train"]
    assert before["stages"]["prepare"] == {"up_to_date": False, "reasons": ["never run"], "warning": None,
                                           "outputs": ["out/prepared"]}
    assert before["stages"]["tokenizer"]["outputs"] == [
        "out/tokenizer.json", "out/tokenizer_config.json", "out/special_tokens_map.json"]
    assert lmprep("run").exit_code == 0
    result = lmprep("status", "--json", "--check", "--set", "train.steps=3")
    assert result.exit_code == 1
    stages = json.loads(result.output)["stages"]
    assert [name for name, stage in stages.items() if stage["up_to_date"]] == ["prepare", "tokenizer", "encode"]
    assert stages["train"]["reasons"] == ["param train.steps changed 2 → 3"]


def test_dag_shows_each_stages_upstream_as_its_inputs_declare_it(project):
    result = lmprep("dag")
    assert result.exit_code == 0, result.output
    assert result.output == ("prepare\n"
                             "tokenizer  ← prepare\n"
                             "encode     ← prepare, tokenizer\n"
                             "train      ← tokenizer, encode\n")
    (project / "frozen.json").write_text("{}")  # dag reads only the config: the file is not parsed
    frozen = lmprep("dag", "--set", "tokenizer.path=frozen.json", "--set", "stats.output_dir=out/stats")
    assert frozen.output.splitlines()[1] == "tokenizer"  # a frozen tokenizer reads no prepared data
    assert frozen.output.splitlines()[-1] == "stats      ← tokenizer, encode"
    dot = lmprep("dag", "--dot").output
    assert dot.startswith('strict digraph {\n\t"prepare";\n') and '\t"prepare" -> "encode";\n' in dot
    assert dot.count("->") == 5 and dot.endswith("}\n")


def test_the_tokenizer_stage_writes_a_pad_token_and_model_max_length_for_transformers(project):
    import json

    result = lmprep("run", "tokenizer", "--set", "tokenizer.model_max_length=256")
    assert result.exit_code == 0 and "pad token '<|endoftext|>' → out/tokenizer.json" in result.output
    written = json.loads((project / "out" / "tokenizer_config.json").read_text())
    assert written["pad_token"] == "<|endoftext|>" and written["model_max_length"] == 256
    assert json.loads((project / "out" / "special_tokens_map.json").read_text())["pad_token"] == "<|endoftext|>"


def test_a_variant_config_reuses_the_stages_it_shares_with_a_finished_run(project):
    (project / "variant.yaml").write_text(
        "extends: lmprep.yaml\nprepare: {output_dir: var/prepared}\n"
        "tokenizer: {output: var/tokenizer.json, vocab_size: 280}\nencode: {output_dir: var/shards}\n"
        "train: {output_dir: var/ckpt}\nstate_dir: state/var\n")
    assert lmprep("run").exit_code == 0
    variant = CliRunner().invoke(cli, ["run", "--config", "variant.yaml"])
    assert variant.exit_code == 0, variant.output
    assert "'prepare' reused from out/prepared: the same inputs, settings and code version ran there" in variant.output
    assert "kept 40 documents" not in variant.output and "reused from out/tokenizer" not in variant.output
    assert "trained vocab 280" in variant.output
    reused = {path.relative_to(project / "var"): path.read_bytes() for path in (project / "var/prepared").rglob("*")
              if path.is_file()}
    forced = CliRunner().invoke(cli, ["run", "prepare", "--force", "--config", "variant.yaml"])
    assert "kept 40 documents" in forced.output  # run for real this time: the very same bytes
    assert reused == {path.relative_to(project / "var"): path.read_bytes()
                      for path in (project / "var/prepared").rglob("*") if path.is_file()}
    off = CliRunner().invoke(cli, ["run", "prepare", "--config", "variant.yaml", "--set", "run_cache_dir=null",
                                   "--set", "prepare.output_dir=var/prepared2"])
    assert "kept 40 documents" in off.output


def test_a_variant_with_another_output_root_reuses_the_runs_of_the_same_inputs_byte_for_byte(project):
    """The run cache is the project's (beside its config files) and document IDs name raw files from the config's
    directory, as its globs do: a variant that moves every output elsewhere takes them from the run cache."""
    (project / "variant.yaml").write_text("extends: lmprep.yaml\noutput_root: v2\n")
    assert lmprep("run", "encode").exit_code == 0
    variant = CliRunner().invoke(cli, ["run", "encode", "--config", "variant.yaml"])
    assert variant.exit_code == 0, variant.output
    for stage, place in [("prepare", "out/prepared"), ("tokenizer", "out/tokenizer.json"), ("encode", "out/shards")]:
        assert f"'{stage}' reused from {place}: the same inputs, settings and code version ran there" in variant.output
    assert "kept 40 documents" not in variant.output
    fresh = CliRunner().invoke(cli, ["run", "encode", "--config", "variant.yaml", "--set", "output_root=v3",
                                     "--set", "run_cache_dir=null"])
    assert fresh.exit_code == 0 and "kept 40 documents" in fresh.output
    outputs = [{name: data for name, data in files_under(root / "out").items() if ".partial" not in name}
               for root in (project / "v2", project / "v3", project)]  # not what a run keeps for the next
    assert outputs[0] == outputs[1] == outputs[2]


def test_a_damaged_checkpoint_is_set_aside_and_retrained_never_recorded_as_up_to_date(project):
    assert lmprep("run").exit_code == 0
    checkpoint = project / "out" / "ckpt" / "checkpoint.safetensors"
    damaged = bytearray(checkpoint.read_bytes())
    damaged[-5] ^= 0xFF  # in the last tensor's data
    checkpoint.write_bytes(bytes(damaged))
    assert "output 'out/ckpt' was modified" in lmprep("status").output
    result = lmprep("run")
    assert result.exit_code == 0, result.output
    assert "train: the previous checkpoint is unreadable (checkpoint out/ckpt/checkpoint.safetensors is damaged: " \
           "tensor " in result.output and "training from scratch" in result.output
    assert (project / "out" / "ckpt-unreadable" / "checkpoint.safetensors").read_bytes() == bytes(damaged)
    from pipeline.model.checkpoint import read_checkpoint

    assert read_checkpoint(checkpoint).step == 2
    assert "'train' is up to date" in lmprep("run").output


def test_freezing_the_tokenizer_is_one_reason_not_every_training_setting_that_went(project):
    assert lmprep("run", "tokenizer").exit_code == 0
    shutil.copy(project / "out" / "tokenizer.json", project / "frozen.json")

    def tokenizer_reasons(*args):
        lines = lmprep("status", *args).output.splitlines()
        start = lines.index("tokenizer: stale") + 1
        return lines[start:next(i for i in range(start, len(lines)) if not lines[i].startswith(" "))]

    assert tokenizer_reasons("--set", "tokenizer.path=frozen.json") == [
        "    switched from training on the prepared data to reusing tokenizer.path frozen.json"]
    assert lmprep("run", "tokenizer", "--set", "tokenizer.path=frozen.json").exit_code == 0
    assert tokenizer_reasons() == [
        "    switched from reusing tokenizer.path frozen.json to training on the prepared data"]


def test_document_ids_and_dependencies_are_printed_as_they_open_from_here(tmp_path, monkeypatch):
    """IDs name files relative to the config's directory, as its globs do (``../mydata/raw/a.txt#3``), which points
    elsewhere from another directory: printed, they open from the current directory; in the shards they stay as
    they were."""
    (tmp_path / "mydata").mkdir()
    make_project(tmp_path / "mydata", "")
    project = tmp_path / "project"
    project.mkdir()
    (project / "config.yaml").write_text(
        "data: {sources: [{glob: ../mydata/raw/*.txt, separator: blank_line}]}\noutput_root: out/run\n"
        "prepare: {val_fraction: 0.2}\ntokenizer: {vocab_size: 300}\n")
    monkeypatch.chdir(project)
    assert CliRunner().invoke(cli, ["run", "encode"]).exit_code == 0
    stored = ShardSet.open(project / "out" / "run" / "data" / "shards", "train", verify=False).shards[0].document_id(0)
    assert stored.startswith("../mydata/raw/a.txt#")  # as the shards hold it, relative to the config's directory
    raw = tmp_path / "mydata" / "raw" / "a.txt"
    located = CliRunner().invoke(cli, ["locate", "train", "0", "--row"]).output.splitlines()
    assert located[1:] == [f"source: data.sources[0] {raw.parent}/*.txt",
                           f"document: {raw}#{stored.rpartition('#')[2]}"]
    raw.write_text(raw.read_text() + "\n\nQ: one more?\nA: yes.")
    assert f"    dependency '{raw}' changed" in CliRunner().invoke(cli, ["status"]).output.splitlines()
    monkeypatch.chdir(tmp_path)  # below the current directory: relative to it
    status = CliRunner().invoke(cli, ["status", "--config", "project/config.yaml"]).output.splitlines()
    assert "    dependency 'mydata/raw/a.txt' changed" in status
