"""tokenizer.json: HF tokenizers loads our files with identical IDs; our loader validates and reads HF's files."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import StorageError, TokenizerError, TokenizerFormatError
from pipeline.tokenizer import Tokenizer, hf_json

MULTILINGUAL = [
    "Déjà, l’élève québécois écrit à l’hôpital.",
    "日本語のテキスト、中文，한국어 문장",
    "emoji 😀👍🏽 family 👨‍👩‍👧 flag 🇫🇷",
    "combining e\u0301 a\u0308\u0304 Z\u0335\u0321a\u0336",
    "windows\r\nlines\r\n\r\n and\ttabs\t\t and NUL \x00 here",
    " " * 40 + "x" * 200 + "\n" * 30 + "!!!???" * 20,
    "numbers 1234567890 3.14159 1,000,000 ١٢٣ ٤٥",
    "It's we'LL they'VE I'm don't",
    "mixed\u00a0nbsp\u2028line\u2029para\u200bzero",
    "<|endoftext|> in the middle <|endoftext|>",
    "",
]


@pytest.fixture(scope="session")
def hf_pairs(trained_tokenizers, tmp_path_factory):
    """(ours, HF's loading of our saved file) for every trained tokenizer."""
    directory = tmp_path_factory.mktemp("hf")
    pairs = []
    for i, tok in enumerate(trained_tokenizers):
        path = directory / f"{i}.json"
        tok.save(path)
        pairs.append((tok, tokenizers.Tokenizer.from_file(str(path))))
    return pairs


def test_hf_gives_identical_ids_on_multilingual_text(hf_pairs):
    for ours, theirs in hf_pairs:
        for text in MULTILINGUAL:
            assert theirs.encode(text).ids == ours.encode(text, allowed_special="all"), (ours, text)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_hf_gives_identical_ids_on_any_text(hf_pairs, text):
    for ours, theirs in hf_pairs:
        assert theirs.encode(text).ids == ours.encode(text, allowed_special="all")


def test_hf_decodes_byte_kind_like_us(hf_pairs):
    ours, theirs = hf_pairs[0]
    text = "".join(MULTILINGUAL)
    assert theirs.decode(ours.encode(text), skip_special_tokens=False) == text


def test_transformers_fast_tokenizer_reads_the_file(byte_tokenizer, tmp_path):
    from transformers import PreTrainedTokenizerFast

    byte_tokenizer.save(tmp_path / "tokenizer.json")
    fast = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    for text in MULTILINGUAL:
        assert fast(text, add_special_tokens=False)["input_ids"] == byte_tokenizer.encode(text, allowed_special="all")
    assert len(fast) == byte_tokenizer.vocab_size


def test_save_load_round_trip_keeps_everything(trained_tokenizers, tmp_path):
    for tok in trained_tokenizers:
        tok.save(tmp_path / "t.json")
        loaded = Tokenizer.load(tmp_path / "t.json")
        assert (loaded.fingerprint, loaded.kind, loaded.merges, loaded.special_tokens, loaded.merge_newlines) == (
            tok.fingerprint, tok.kind, tok.merges, tok.special_tokens, tok.merge_newlines)


def test_saving_is_deterministic(byte_tokenizer, tmp_path):
    byte_tokenizer.save(tmp_path / "a.json")
    Tokenizer.load(tmp_path / "a.json").save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_fingerprint_survives_reindenting(byte_tokenizer, tmp_path):
    byte_tokenizer.save(tmp_path / "a.json")
    data = json.loads((tmp_path / "a.json").read_text("utf-8"))
    (tmp_path / "b.json").write_text(json.dumps(data, indent=7), "utf-8")
    assert Tokenizer.load(tmp_path / "b.json").fingerprint == byte_tokenizer.fingerprint


def test_fingerprint_changes_with_one_merge_or_special_id(byte_tokenizer):
    data = hf_json.to_dict(byte_tokenizer)
    swapped = copy.deepcopy(data)
    swapped["model"]["merges"][-1] = swapped["model"]["merges"][-1][::-1]
    vocab = swapped["model"]["vocab"]
    last_id = max(vocab.values())
    del vocab[next(k for k, v in vocab.items() if v == last_id)]
    vocab["".join(swapped["model"]["merges"][-1])] = last_id
    moved = copy.deepcopy(data)
    moved["added_tokens"][0]["content"] = "<|other|>"
    prints = {hf_json.from_dict(d).fingerprint for d in (data, swapped, moved)}
    assert len(prints) == 3


# ---- validation -------------------------------------------------------------------------------


def _broken(byte_tokenizer, edit):
    data = hf_json.to_dict(byte_tokenizer)
    edit(data)
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"].update(type="WordPiece"), "model type 'WordPiece'"),
    (lambda d: d.update(normalizer={"type": "NFKC"}), "normalizer 'NFKC'"),
    (lambda d: d.update(post_processor={"type": "TemplateProcessing"}), "post_processor 'TemplateProcessing'"),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre_tokenizer Whitespace"),
    (lambda d: d["model"]["merges"].append(["zzzq", "h"]), "part 'zzzq' is not in the vocab"),
    (lambda d: d["model"]["merges"].append(["a"]), "exactly two parts"),
    (lambda d: d["model"]["vocab"].update(extra=3), "duplicate ID 3"),
    (lambda d: d["model"]["vocab"].update(extra=100000), "not contiguous"),
    (lambda d: d["model"]["vocab"].update({"a b": 100000}), r"vocab token 'a b' \(ID 100000\) has ' ', which is not a"),
    (lambda d: d["model"]["vocab"].update({"a\u4e2d": 100000}), "has '\u4e2d', which is not a ByteLevel character"),
    (lambda d: d["model"].update(dropout=0.1), "dropout=0.1 is not supported"),
    (lambda d: d["model"].update(byte_fallback="yes"), "byte_fallback='yes' is not true or false"),
    (lambda d: d["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix='##'"),
    (lambda d: d["model"].update(end_of_word_suffix="</w>"), "end_of_word_suffix='</w>'"),
    (lambda d: d.update(pre_tokenizer=5), "pre_tokenizer 5 is not supported"),
    (lambda d: d["pre_tokenizer"].update(pretokenizers=5), "pretokenizers=5, not a list"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern="x+"), "Split pattern 'x[+]' is not an object"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern={"Regex": 1.5}), "Regex 1.5 is not a string"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern={"Regex": "(x"}), "Split pattern: invalid"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][1].update(use_regex="no"), "use_regex='no' is not true"),
    (lambda d: d.update(decoder=[[[[[[[[1]]]]]]]]), r"decoder '\[\[\[\[\.\.\.\]\]\]\]' is not"),
    (lambda d: d["model"]["vocab"].update(extra=-10 ** 400), "has ID <integer of 1329 bits>"),
    (lambda d: d["model"]["vocab"].update(extra=True), "vocab token 'extra' has ID True"),
    (lambda d: d["model"]["vocab"].update(extra=3.0), "vocab token 'extra' has ID 3.0"),
    (lambda d: d["added_tokens"].append({"id": -10 ** 400, "content": "x" * 10 ** 5}), "malformed added token {"),
    (lambda d: d["model"]["merges"].append(1.5), r"merge #\d+ 1.5 does not have"),
    (lambda d: d["added_tokens"][0].update(content="\ud800"), "malformed added token"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern={"Regex": "\ud800"}), "not a string of Unicode"),
    (lambda d: d["pre_tokenizer"]["pretokenizers"][0].update(pattern={"Regex": "(?:" * 10 ** 5 + ")" * 10 ** 5}),
     r"invalid split pattern '\(\?:.*…: maximum recursion depth"),
    (lambda d: d["added_tokens"][0].update(special=False), "not special"),
    (lambda d: d["model"]["lmprep"].update(format_version=99), "format version 99"),
    (lambda d: d["model"].pop("vocab"), "model.vocab"),
    (lambda d: d.pop("model"), "no 'model'"),
])
def test_loader_names_what_is_wrong(byte_tokenizer, edit, message):
    with pytest.raises(TokenizerFormatError, match=message):
        hf_json.from_dict(_broken(byte_tokenizer, edit))


def test_a_valid_file_is_read_without_describing_each_entry(byte_tokenizer, monkeypatch):
    """A message names the entry at fault alone: one built for every valid entry was half of a load's time."""
    small = Tokenizer.from_merges(kind="byte", pattern=byte_tokenizer.pattern, merges=[(97, 98)],
                                  special_tokens=list(byte_tokenizer.special_tokens))
    described = {}
    for tokenizer in (small, byte_tokenizer):
        calls = described[tokenizer.vocab_size] = []
        monkeypatch.setattr(hf_json, "describe", lambda value, calls=calls: calls.append(value) or repr(value))
        assert hf_json.from_dict(hf_json.to_dict(tokenizer)).fingerprint == tokenizer.fingerprint
    assert len(described) == 2 and len(set(map(len, described.values()))) == 1, described


@pytest.mark.parametrize("unk_token", [["<unk>"], {"id": 0}, 0, None])
def test_char_unk_token_that_is_not_a_string_is_a_format_error(char_tokenizer, unk_token):
    data = hf_json.to_dict(char_tokenizer)
    data["model"]["unk_token"] = unk_token
    with pytest.raises(TokenizerFormatError, match="unk_token must be a string"):
        hf_json.from_dict(data)


@pytest.mark.parametrize("text, message", [
    ('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}", "t.json nests JSON too deeply"),
    ('{"model": {"vocab": {"a": ' + "9" * 5000 + "}}}",
     "t.json is not a tokenizer.json: Exceeds the limit .* 5000 digits$"),
])
def test_unreadable_json_is_one_format_error(tmp_path, text, message):
    (tmp_path / "t.json").write_text(text, "utf-8")
    with pytest.raises(TokenizerFormatError, match=message):
        Tokenizer.load(tmp_path / "t.json")


def test_load_reports_path_and_bad_json(tmp_path):
    (tmp_path / "t.json").write_text("{nope", "utf-8")
    with pytest.raises(TokenizerFormatError, match="t.json is not valid JSON"):
        Tokenizer.load(tmp_path / "t.json")
    with pytest.raises(TokenizerFormatError, match="does not exist"):
        Tokenizer.load(tmp_path / "missing.json")


def test_loads_a_gpt2_style_tokenizer_written_by_hf(tokenizer_corpus, tmp_path):
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    hf = tokenizers.Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    hf.train_from_iterator(tokenizer_corpus, trainer)
    hf.save(str(tmp_path / "hf.json"))
    ours = Tokenizer.load(tmp_path / "hf.json")
    assert ours.kind == "byte" and ours.special_tokens == {"<|endoftext|>": 0}
    for text in [*MULTILINGUAL, *tokenizer_corpus]:
        assert ours.encode(text, allowed_special="all") == hf.encode(text).ids
        assert ours.decode(ours.encode(text)) == text
    ours.save(tmp_path / "again.json")
    again = tokenizers.Tokenizer.from_file(str(tmp_path / "again.json"))
    assert again.encode(tokenizer_corpus[0]).ids == hf.encode(tokenizer_corpus[0]).ids


# ---- foreign files: every file we accept encodes exactly as HF does, anything else is refused ----

FOREIGN_TEXTS = [*MULTILINGUAL, "    def f(x):\n\t\treturn {'a': [1, 2]}  # zebra zebras\n\n\n  ", "abc" * 40]


def _hf_trained(corpus, path, *, model=None, trainer=None, pre_tokenizer=None, normalizer=None, edit=None):
    """A tokenizer.json written by HF's own BpeTrainer (ByteLevel unless told), optionally edited."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = tokenizers.Tokenizer(models.BPE(**(model or {})))
    hf.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    if normalizer is not None:
        hf.normalizer = normalizer
    options = dict(vocab_size=450, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    hf.train_from_iterator(corpus * 2, trainers.BpeTrainer(**options | (trainer or {})))
    hf.save(str(path))
    if edit is not None:
        data = json.loads(path.read_text("utf-8"))
        edit(data)
        path.write_text(json.dumps(data), "utf-8")
    return tokenizers.Tokenizer.from_file(str(path))


def _append_zebra(data):
    """A multi-byte vocabulary entry that no merge makes, as files in the wild have."""
    vocab = data["model"]["vocab"]
    vocab["Ġzebra"] = max(vocab.values()) + 1


def _split_then_byte_level(regex_):
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex_), "isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


FOREIGN_FILES = {
    "plain": {},
    "added tokens": dict(trainer=dict(special_tokens=["<|endoftext|>", "<pad>"])),
    "ignore_merges": dict(model=dict(ignore_merges=True)),
    "byte_fallback": dict(model=dict(byte_fallback=True)),
    "unk_token": dict(model=dict(unk_token="<unk>"), trainer=dict(special_tokens=["<unk>"])),
    "fuse_unk": dict(model=dict(unk_token="<unk>", fuse_unk=True), trainer=dict(special_tokens=["<unk>"])),
    "max_token_length": dict(trainer=dict(max_token_length=3)),
    "appended Ġzebra": dict(edit=_append_zebra),
    "Split with a group": dict(pre_tokenizer=_split_then_byte_level(r"(\p{L}+)|\s+|[\s\S]")),
}
REFUSED_FILES = {
    "continuing_subword_prefix": (dict(model=dict(continuing_subword_prefix="##"),
                                       trainer=dict(continuing_subword_prefix="##")), "continuing_subword_prefix='##'"),
    "end_of_word_suffix": (dict(model=dict(end_of_word_suffix="</w>"), trainer=dict(end_of_word_suffix="</w>")),
                           "end_of_word_suffix='</w>'"),
    "NFC normalizer": (dict(normalizer="NFC"), "normalizer 'NFC'"),
    "Lowercase normalizer": (dict(normalizer="Lowercase"), "normalizer 'Lowercase'"),
    "dropout": (dict(model=dict(dropout=0.5)), "dropout=0.5"),
    "prefix space": (dict(pre_tokenizer="prefix space"), "add_prefix_space=true"),
    "ignore_merges with appended Ġzebra": (dict(model=dict(ignore_merges=True), edit=_append_zebra),
                                           "vocab token 'Ġzebra' \\(ID 450\\) is not what the merges make"),
}


def _components(options):
    """Turn the names in ``options`` into HF objects (kept as names so that test IDs stay readable)."""
    from tokenizers import normalizers, pre_tokenizers

    options = dict(options)
    if isinstance(options.get("normalizer"), str):
        options["normalizer"] = getattr(normalizers, options["normalizer"])()
    if options.get("pre_tokenizer") == "prefix space":
        options["pre_tokenizer"] = pre_tokenizers.ByteLevel(add_prefix_space=True)
    return options


@pytest.mark.parametrize("name", FOREIGN_FILES)
def test_foreign_file_encodes_exactly_as_hf(name, tokenizer_corpus, tmp_path):
    hf = _hf_trained(tokenizer_corpus, tmp_path / "hf.json", **_components(FOREIGN_FILES[name]))
    ours = Tokenizer.load(tmp_path / "hf.json")
    for text in [*FOREIGN_TEXTS, *tokenizer_corpus]:
        assert ours.encode(text, allowed_special="all") == hf.encode(text).ids, text
        assert ours.decode(ours.encode(text)) == text


@pytest.mark.parametrize("name", REFUSED_FILES)
def test_foreign_file_that_would_encode_differently_is_refused(name, tokenizer_corpus, tmp_path):
    options, message = REFUSED_FILES[name]
    _hf_trained(tokenizer_corpus, tmp_path / "hf.json", **_components(options))
    with pytest.raises(TokenizerFormatError, match=message):
        Tokenizer.load(tmp_path / "hf.json")


def test_appended_vocab_entry_is_never_emitted(tokenizer_corpus, tmp_path):
    hf = _hf_trained(tokenizer_corpus, tmp_path / "hf.json", edit=_append_zebra)
    ours = Tokenizer.load(tmp_path / "hf.json")
    zebra = hf.token_to_id("Ġzebra")
    text = " ".join(tokenizer_corpus) + " a zebra, two zebras"
    assert zebra not in ours.encode_ordinary(text)
    assert ours.encode_ordinary(text) == hf.encode(text).ids
    assert ours.decode([zebra]) == " zebra"


# --- the directory the tokenizer stage writes: tokenizer.json + tokenizer_config.json + special_tokens_map.json


@pytest.fixture(scope="module")
def hf_directories(trained_tokenizers, tmp_path_factory):
    """(ours, a transformers-ready directory) per trained tokenizer: EOS <|endoftext|>, BOS <|pad|> when it has one."""
    from pipeline.tokenizer import hf_dir

    pairs = []
    for i, tok in enumerate(trained_tokenizers):
        path = tmp_path_factory.mktemp(f"hfdir{i}") / "tokenizer.json"
        tok.save(path)
        bos = "<|pad|>" if "<|pad|>" in tok.special_tokens else None
        hf_dir.write_companions(path, eos_token="<|endoftext|>", bos_token=bos, special_tokens=list(tok.special_tokens),
                                model_max_length=12)
        pairs.append((tok, path.parent))
    return pairs


def test_auto_tokenizer_loads_the_directory_with_roles_ids_and_exact_decoding(hf_directories):
    from transformers import AutoTokenizer

    plain = [text for text in MULTILINGUAL if "<|" not in text] + ["a , b . c ! d ?", "don 't"]
    for ours, directory in hf_directories:
        auto = AutoTokenizer.from_pretrained(directory)
        assert auto.eos_token == "<|endoftext|>" and auto.eos_token_id == ours.special_tokens["<|endoftext|>"]
        if "<|pad|>" in ours.special_tokens:
            assert auto.bos_token_id == ours.special_tokens["<|pad|>"]
        else:
            assert auto.bos_token is None
        assert len(auto) == ours.vocab_size
        for text in plain:
            ids = auto(text)["input_ids"]
            assert ids == ours.encode(text), (ours.kind, text)
            if ours.kind == "byte":  # the char kind's unknown characters decode to U+FFFD
                assert auto.decode(ids) == text == ours.decode(ids)
            else:
                assert auto.decode(ids) == ours.decode(ids, errors="replace")


def test_hf_reads_special_token_text_as_lmprep_does_when_told_to_split_it(hf_directories):
    """By default HF turns the text '<|endoftext|>' into the special token; lmprep keeps it plain text.
    ``split_special_tokens=True`` (transformers) or ``encode_special_tokens`` (tokenizers) makes them agree."""
    from transformers import AutoTokenizer

    text = "<|endoftext|> in the middle <|endoftext|>"
    for ours, directory in hf_directories:
        default = AutoTokenizer.from_pretrained(directory)
        assert default(text)["input_ids"] == ours.encode(text, allowed_special="all") != ours.encode(text)
        split = AutoTokenizer.from_pretrained(directory, split_special_tokens=True)
        assert split(text)["input_ids"] == ours.encode(text)
        hf = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
        hf.encode_special_tokens = True
        assert hf.encode(text).ids == ours.encode(text)


def test_auto_tokenizer_pads_and_truncates_a_batch(hf_directories):
    from transformers import AutoTokenizer

    texts = ["the cat sat on the mat, and then it sat on the hat", "a cat", ""]
    for ours, directory in hf_directories:
        auto = AutoTokenizer.from_pretrained(directory)
        eos = ours.special_tokens["<|endoftext|>"]
        assert auto.pad_token == "<|endoftext|>" and auto.pad_token_id == eos and auto.model_max_length == 12
        batch = auto(texts, padding=True)
        width = max(len(ours.encode(text)) for text in texts)
        for text, ids, mask in zip(texts, batch["input_ids"], batch["attention_mask"]):
            own = ours.encode(text)
            assert ids == own + [eos] * (width - len(own)) and mask == [1] * len(own) + [0] * (width - len(own))
        cut = auto(texts, padding="max_length", truncation=True)
        assert all(len(ids) == 12 for ids in cut["input_ids"]) and cut["input_ids"][0] == ours.encode(texts[0])[:12]


def test_the_pad_token_is_the_end_of_text_token_else_the_first_special_one():
    from pipeline.tokenizer import hf_dir

    assert hf_dir.pad_token(eos_token="<|eos|>", special_tokens=["<|pad|>", "<|eos|>"]) == "<|eos|>"
    assert hf_dir.pad_token(eos_token=None, special_tokens=["<|pad|>", "<|eos|>"]) == "<|pad|>"
    assert hf_dir.pad_token(eos_token=None, special_tokens=[]) is None


def _fifo(directory: Path) -> Path:
    os.mkfifo(directory / "fifo.json")  # with no writer, a plain open would block for ever
    return directory / "fifo.json"


def _sparse_file_over_the_bound(directory: Path) -> Path:
    with open(directory / "big.json", "wb") as file:
        file.truncate(hf_json.MAX_FILE_BYTES + 1)
    return directory / "big.json"


@pytest.mark.parametrize("make, message", [
    (_fifo, "is a FIFO, not a regular file"),
    (_sparse_file_over_the_bound, "is larger than 268,435,456 bytes (256 MiB), the most lmprep reads of such a file"),
    (lambda directory: Path("/dev/zero"), "/dev/zero is a character device, not a regular file"),  # endless
    (lambda directory: directory, "is a directory, not a regular file"),
])
def test_a_tokenizer_file_is_read_within_a_bound_or_refused_unread(tmp_path, make, message):
    with pytest.raises(StorageError, match=f"^tokenizer file .*{re.escape(message)}"):
        Tokenizer.load(make(tmp_path))


def test_a_remote_tokenizer_file_is_read_within_the_bound(monkeypatch, byte_tokenizer):
    import fsspec

    fsspec.filesystem("memory").pipe("/bounds/tokenizer.json", hf_json.dumps(byte_tokenizer))
    assert Tokenizer.load("memory://bounds/tokenizer.json").fingerprint == byte_tokenizer.fingerprint
    monkeypatch.setattr(hf_json, "MAX_FILE_BYTES", 1000)
    with pytest.raises(StorageError, match="^tokenizer file memory://bounds/tokenizer.json is larger than 1,000 bytes"):
        Tokenizer.load("memory://bounds/tokenizer.json")


def test_lmprep_never_writes_a_tokenizer_file_it_would_not_read_back(byte_tokenizer, monkeypatch, tmp_path):
    monkeypatch.setattr(hf_json, "MAX_FILE_BYTES", 1000)
    with pytest.raises(TokenizerError, match="more than the 1,000 lmprep reads back"):
        byte_tokenizer.save(tmp_path / "tokenizer.json")
    assert not (tmp_path / "tokenizer.json").exists()
