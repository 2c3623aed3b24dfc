"""One model resolver (``pyelmo.modelio.resolve``): every kind of model a user names becomes one record;
``--lang zh`` picks the shipped Chinese model (here a tiny stand-in put in the registry)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import warnings
from pathlib import Path

import pytest

from lmfolder import lm_folder
from pyelmo.cli import main
from pyelmo.errors import WeightFileError
from pyelmo.lm.model import LanguageModel
from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio import hub, resolve
from pyelmo.modelio.resolve import resolve_model
from pyelmo.modelio.weights import model_fingerprint, save_bilm_hdf5, save_pretrained

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"
ZH_WORDS = ["<S>", "</S>", "<UNK>", "我", "喜欢", "苹果", "手机", "吃", "。", "公司"]
needs_jieba = pytest.mark.skipif(importlib.util.find_spec("jieba") is None, reason="the zh extra is not installed")


@pytest.fixture
def chinese(tiny_model, tmp_path, monkeypatch) -> Path:
    """The registry's ``chinese`` pointed at a tiny Chinese model (the shipped one's layout)."""
    folder = lm_folder(tiny_model, tmp_path / "chinese", ZH_WORDS, language="zh")
    (folder / "MODEL_CARD.md").write_text("# a tiny stand-in\n", encoding="utf-8")
    monkeypatch.setitem(hub.SHIPPED, "chinese", hub.Shipped("chinese", folder, "zh", "a tiny stand-in"))
    return folder


@pytest.fixture
def resolved(monkeypatch) -> list:
    """Every record ``resolve_model`` returns from now on."""
    records, original = [], resolve.resolve_model

    def spy(*args, **kwargs):
        record = original(*args, **kwargs)
        if not (args and args[0] is record):  # a record handed on is not resolved again
            records.append(record)
        return record

    monkeypatch.setattr(resolve, "resolve_model", spy)
    return records


def test_every_kind_becomes_one_record(tiny_model, tmp_path):
    english = resolve_model()
    assert (english.name, english.kind, english.format, english.has_softmax, english.language) == \
        ("english", "shipped", "pyelmo", True, "en")
    assert resolve_model("english") == english and english.max_length == 60
    released = resolve_model("original")  # nothing is downloaded to resolve a name
    assert (released.kind, released.format, released.has_softmax, released.language) == \
        ("released", "bilm-tf", False, "en")
    assert resolve_model("https://example.org/m.zip").kind == "url"
    (tmp_path / "m.tar.gz").write_bytes(b"")
    assert resolve_model(tmp_path / "m.tar.gz").kind == "archive"
    pair = resolve_model(REF / "options.json", REF / "lm_weights.hdf5")
    assert (pair.kind, pair.format, pair.files.weights) == ("bilm-tf", "bilm-tf", REF / "lm_weights.hdf5")
    nlpl = tmp_path / "nlpl"
    nlpl.mkdir()
    shutil.copy(REF / "options.json", nlpl / "options.json")
    shutil.copy(REF / "lm_weights.hdf5", nlpl / "model.hdf5")
    assert (resolve_model(nlpl).kind, resolve_model(nlpl).files.weights) == ("nlpl", nlpl / "model.hdf5")
    native = lm_folder(tiny_model, tmp_path / "native", ZH_WORDS[:5], language="el", training={"max_length": 33})
    record = resolve_model(native)
    assert (record.kind, record.has_softmax, record.language, record.max_length) == ("native", True, "el", 33)
    bare = save_pretrained(tiny_model, tmp_path / "bare")
    assert resolve_model(bare).has_softmax is False
    exported = tmp_path / "exported"
    assert main(["export", "--model", str(native), str(exported)]) == 0
    assert (resolve_model(exported).kind, resolve_model(exported).has_softmax) == ("exported", True)
    # the fingerprint is of the weights, computed when asked for
    assert pair.fingerprint == model_fingerprint(BiLM.from_pretrained(pair)) == model_fingerprint(tiny_model)
    assert "fingerprint" not in vars(record)


def test_a_run_folder_is_its_model_and_refusals_name_what_works(tiny_model, tmp_path):
    run = tmp_path / "run"
    lm_folder(tiny_model, run / "model", ZH_WORDS[:5])
    (run / "run.json").write_text("{}", encoding="utf-8")
    assert (resolve_model(run).kind, resolve_model(run).folder) == ("run", run / "model")
    shutil.rmtree(run / "model")
    with pytest.raises(WeightFileError, match="training run without its final model"):
        resolve_model(run)
    many = tmp_path / "manylangs"
    many.mkdir()
    (many / "char.dic").write_text("a\t1\n")
    (many / "encoder.pkl").write_bytes(b"")
    with pytest.raises(WeightFileError, match="ELMoForManyLangs model folder: convert it first"):
        resolve_model(many)
    with pytest.raises(WeightFileError, match="an options file"):
        resolve_model(REF / "options.json")
    task = tmp_path / "task"
    task.mkdir()
    (task / "config.json").write_text(json.dumps({"format": "pyelmo-task-1", "bilm": {"model": "original"}}))
    with pytest.raises(WeightFileError, match="is a task model.*--model original"):
        resolve_model(task)
    with pytest.raises(WeightFileError, match="has no softmax"):
        LanguageModel.from_pretrained("original")


def test_chinese_is_a_clear_error_until_it_is_shipped(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(hub.SHIPPED, "chinese", hub.Shipped("chinese", tmp_path / "absent", "zh", "-"))
    with pytest.raises(WeightFileError, match="shipped model 'chinese' is not in this installation"):
        resolve_model("chinese")
    assert main(["similarity", "我喜欢苹果。", "苹果公司。", "--word", "苹果", "--lang", "zh"]) == 1
    err = capsys.readouterr().err.strip()
    assert "'chinese' is not in this installation" in err and "\n" not in err and "Traceback" not in err
    assert main(["models"]) == 0
    assert "chinese" not in capsys.readouterr().out


def test_the_shipped_chinese_model_by_name(chinese, capsys):
    record = resolve_model("chinese")
    assert (record.kind, record.language, record.has_softmax, record.folder) == ("shipped", "zh", True, chinese)
    assert [hub.default_model(lang) for lang in (None, "auto", "en", "zh")] == ["english"] * 3 + ["chinese"]
    lm = LanguageModel.from_pretrained("chinese")
    assert lm.vocab.words == ZH_WORDS
    assert main(["models"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert names[:3] == ["english", "chinese", "small"]


@needs_jieba
@pytest.mark.parametrize("argv", [
    ["similarity", "我喜欢吃苹果。", "他买了苹果手机。", "--word", "苹果", "--lang", "zh"],
    ["demo", "--lang", "zh", "--out", ""],
    ["predict", "我喜欢___。", "--lang", "zh"],
])
def test_lang_zh_picks_the_shipped_chinese_model(chinese, resolved, argv, capsys):
    assert main(argv) == 0, capsys.readouterr().err
    assert {r.name for r in resolved} == {"chinese"}


@needs_jieba
def test_embed_tokenize_lang_zh_picks_it_and_whitespace_input_keeps_english(chinese, resolved, tmp_path):
    text = tmp_path / "zh.txt"
    text.write_text("我喜欢吃苹果。\n", encoding="utf-8")
    assert main(["embed", str(text), str(tmp_path / "o.h5"), "--tokenize", "--lang", "zh", "--no-progress"]) == 0
    assert [r.name for r in resolved] == ["chinese"]


@needs_jieba
def test_serve_lang_zh_picks_it(chinese, resolved, monkeypatch, tmp_path):
    from pyelmo.serve import build_service
    from pyelmo.serve import process

    pytest.importorskip("fastapi")
    settings = {}
    monkeypatch.setattr(process, "run_server", lambda s, **kw: settings.update(s))
    monkeypatch.setattr(process, "check_address", lambda host, port: None)
    assert main(["serve", "--lang", "zh"]) == 0
    assert (settings["model"], settings["lang"]) == (None, "zh")  # the workers' build_service resolves it
    service = build_service(lang="zh", cache_dir=tmp_path / "cache")  # the Python API picks it too
    try:
        assert service.model_info["source"] == "chinese (shipped)" and service.embedder.language == "zh"
        assert service.predictor is not None and service.predictor.vocab.words == ZH_WORDS
    finally:
        service.close()


@needs_jieba
def test_chinese_text_to_the_english_model_names_the_chinese_one_once(chinese):
    from pyelmo.embedding.embedder import ElmoEmbedder, LanguageWarning

    embedder = ElmoEmbedder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embedder.tokenize("我喜欢吃苹果。")
        embedder.tokenize("苹果公司的手机。")
    messages = [str(w.message) for w in caught if issubclass(w.category, LanguageWarning)]
    assert len(messages) == 1 and "--model chinese" in messages[0], messages
