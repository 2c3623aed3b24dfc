"""Raw text of scripts written without spaces (Chinese, Japanese, Thai) is split into words by a
word segmenter, chosen by `lang`/`--lang` or from the script; a model trained on another
language warns once. Expected segmentations are the ones the segmenters document."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import pytest

from pyelmo.cli import main
from pyelmo.embedding.embedder import ElmoEmbedder, LanguageWarning
from pyelmo.embedding.store import UnsegmentedTextWarning
from pyelmo.errors import InputError
from pyelmo.errors import WeightFileError
from pyelmo.modelio.resolve import resolve_model
from pyelmo.text import tokenize as tok
from pyelmo.text.tokenize import detect_language, tokenize


def _installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


needs_zh = pytest.mark.skipif(not _installed("jieba"), reason="the zh extra is not installed: pip install 'pyelmo[zh]'")
needs_ja = pytest.mark.skipif(not _installed("sudachipy", "sudachidict_core"),
                              reason="the ja extra is not installed: pip install 'pyelmo[ja]'")
needs_th = pytest.mark.skipif(not _installed("pythainlp"), reason="the th extra is not installed: pip install 'pyelmo[th]'")

ZH = "我来到北京清华大学"  # jieba's README (accurate mode): 我/ 来到/ 北京/ 清华大学


@pytest.mark.parametrize("text,lang", [(ZH, "zh"), ("すもももももももものうち。", "ja"), ("東京都に住む", "ja"),
                                       ("ผมรักคุณ", "th"), ("The bank.", None), ("Café 1990s", None)])
def test_language_from_script(text, lang):
    assert detect_language(text) == lang


def test_english_and_explicit_en_unchanged():
    assert tokenize("I deposited money in the bank.", "auto") == tokenize("I deposited money in the bank.") == \
        ["I", "deposited", "money", "in", "the", "bank", "."]
    # the function's default (corpus building) and --lang en stay Moses-only: no word segmentation
    assert tokenize(ZH) == tokenize(ZH, "en") == list(ZH)  # Moses splits Chinese characters one by one
    assert tokenize("ผมรักคุณ", "en") == ["ผมรักคุณ"] and tokenize("すもものうち。", "en") == ["すもものうち", "。"]


@needs_zh
def test_chinese_jieba_readme_sentences():
    assert tokenize(ZH, "zh") == tokenize(ZH, "auto") == ["我", "来到", "北京", "清华大学"]
    assert tokenize("他来到了网易杭研大厦", "zh") == ["他", "来到", "了", "网易", "杭研", "大厦"]  # its new-word example
    # the rest of a mixed sentence is tokenized Moses-style, as English text alone would be
    assert tokenize("I love 北京, don't you?", "auto") == ["I", "love", "北京", ",", "don", "'t", "you", "?"]
    assert tokenize("北京，上海", "zh") == ["北京", "，", "上海"]


@needs_ja
def test_japanese_sudachi_documented_sentences():
    # SudachiPy's README: 国家公務員 is A: 国家/公務/員 (short units, the mode used here)
    assert tokenize("国家公務員", "ja") == ["国家", "公務", "員"]
    assert tokenize("すもももももももものうち。", "auto") == ["すもも", "も", "もも", "も", "もも", "の", "うち", "。"]
    assert tokenize("東京都に住む Python。", "auto") == ["東京", "都", "に", "住む", "Python", "。"]
    long = "すもももももももものうち" * 2000  # over SudachiPy's input limit: segmented in pieces
    assert len(tokenize(long, "ja")) == 14_000


@needs_th
def test_thai_pythainlp_documented_sentences():
    # PyThaiNLP's word_tokenize example (newmm, its default engine)
    assert tokenize("ผมรักคุณนะครับโอเคบ่พวกเรารักภาษาบ้านเกิด", "auto") == [
        "ผม", "รัก", "คุณ", "นะ", "ครับ", "โอเค", "บ่", "พวกเรา", "รัก", "ภาษา", "บ้านเกิด"]
    assert tokenize("ผมรักคุณ hello", "th") == ["ผม", "รัก", "คุณ", "hello"]


@pytest.fixture
def without_jieba(monkeypatch):
    """As if the zh extra were not installed."""
    tok._load_segmenter.cache_clear()
    monkeypatch.setitem(sys.modules, "jieba", None)  # import jieba raises ImportError
    yield
    tok._load_segmenter.cache_clear()


def test_missing_segmenter_names_the_extra(without_jieba):
    with pytest.raises(InputError, match=r"^Chinese text needs the jieba word segmenter: pip install 'pyelmo\[zh\]'$"):
        tokenize(ZH, "auto")
    assert tokenize("The bank.", "auto") == ["The", "bank", "."]  # other text does not need it
    with pytest.raises(InputError, match="lang must be one of auto, en, zh, ja, th"):
        tokenize("x", "zh-CN")


def test_missing_segmenter_cli_one_line_before_the_model(without_jieba, tmp_path, capsys):
    assert main(["similarity", ZH, "清华大学", "--word", "清华大学", "--model", str(tmp_path / "absent")]) == 1
    assert capsys.readouterr().err == "pyelmo similarity: error: Chinese text needs the jieba word segmenter: " \
                                      "pip install 'pyelmo[zh]'\n"
    raw = tmp_path / "raw.txt"
    raw.write_text(ZH + "\n", encoding="utf-8")
    assert main(["embed", str(raw), str(tmp_path / "o.h5"), "--tokenize", "--lang", "zh",
                 "--model", str(tmp_path / "absent")]) == 1
    assert "pip install 'pyelmo[zh]'" in capsys.readouterr().err and not (tmp_path / "o.h5").exists()


def test_model_language():
    def language(*args):
        return resolve_model(*args).language

    assert language() == language("english") == language("original") == "en"
    assert language("pubmed") == "en"
    shipped = Path(__file__).parents[2] / "src" / "pyelmo" / "pretrained" / "english"
    assert language(shipped) == "en"
    assert language(shipped / "config.json", "weights.hdf5") is None  # released-format files: unknown
    with pytest.raises(WeightFileError, match="model directory not found"):
        language("/nonexistent/model")


def test_language_warning_once_only_when_known_and_different(tiny_model):
    embedder = ElmoEmbedder()
    assert embedder.language == "en"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embedder.tokenize("The bank.")
        embedder.tokenize("The bank.", "en")
        ElmoEmbedder(tiny_model).tokenize("x", "en")
    assert caught == []
    if not _installed("jieba"):
        return
    with pytest.warns(LanguageWarning, match="trained on English text and this text is Chinese") as caught:
        first = embedder.embed_sentence(ZH, tokenize=True)
        embedder.embed_sentence("清华大学", tokenize=True, lang="zh")
    assert len(caught) == 1 and first.shape[1] == 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ElmoEmbedder(tiny_model).tokenize(ZH)  # a model of unknown language: no warning
    assert caught == []


@needs_zh
def test_embed_tokenize_lang(allennlp_reference, tiny_model, tmp_path, capsys):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"{ZH}\nThe bank.\n", encoding="utf-8")
    out = tmp_path / "out.h5"
    model = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    assert main(["embed", str(raw), str(out), "--lang", "zh", *model]) == 1
    assert "--lang chooses how --tokenize splits raw text" in capsys.readouterr().err
    assert main(["embed", str(raw), str(out), "--tokenize", "--no-progress", *model]) == 0
    embedder = ElmoEmbedder(tiny_model)
    with h5py.File(out, "r") as f:
        assert f["0"].shape == (3, 4, 32) and f["1"].shape == (3, 3, 32)
        assert f.attrs["tokenize"] and f.attrs["lang"] == "auto"
        assert abs(f["0"][...] - embedder.embed_sentence(["我", "来到", "北京", "清华大学"])).max() < 1e-5
    assert embedder.embed_file(raw, tmp_path / "api.h5", tokenize=True, lang="zh") == 2
    with h5py.File(tmp_path / "api.h5", "r") as f:
        assert f["0"].shape == (3, 4, 32) and f.attrs["lang"] == "zh"
    with pytest.raises(InputError, match="needs tokenize=True"):
        embedder.embed_file(raw, tmp_path / "x.h5", lang="zh")


@needs_zh
def test_similarity_cli_segments_and_warns_once():
    run = subprocess.run([sys.executable, "-m", "pyelmo", "similarity", "我去银行存钱。", "他在银行工作。", "--word", "银行"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ("pyelmo similarity: warning: the model was trained on English text and this text is "
                          "Chinese: expect vectors of little use (use the shipped Chinese model: --model chinese, or "
                          "ElmoEmbedder('chinese'))\n")
    assert "银行: 我去银行存钱。 | 他在银行工作。" in run.stdout and "layer 0" in run.stdout
    assert run.stdout.splitlines()[1].split()[-4] == "1.000"  # layer 0: the same token, the same vector


def _post_tokenize(embedder, sentences, **service):
    """``POST /v1/tokenize`` to a ``pyelmo serve`` app over ``embedder``."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from pyelmo.serve import create_app
    from pyelmo.serve.app import Service
    from pyelmo.serve.batching import Batcher

    app = create_app(Service(embedder, Batcher(embedder), None, {}, **service))
    with TestClient(app, raise_server_exceptions=False) as client:
        return client.post("/v1/tokenize", json={"sentences": sentences})


def test_serve_tokenize_lang(tiny_model):
    embedder = ElmoEmbedder(tiny_model)
    for lang, expected in (("en", list(ZH)), ("auto", ["我", "来到", "北京", "清华大学"])):
        if lang == "auto" and not _installed("jieba"):
            continue
        got = _post_tokenize(embedder, [ZH, ["我", "来到"]], lang=lang)
        assert got.status_code == 200 and got.json()["sentences"] == [{"tokens": expected}, {"tokens": ["我", "来到"]}]


def test_serve_missing_segmenter_is_a_422(tiny_model, without_jieba):
    got = _post_tokenize(ElmoEmbedder(tiny_model), [ZH])
    error = got.json()["error"]
    assert got.status_code == 422 and error["field"] == "sentences[0]"
    assert "pip install 'pyelmo[zh]' on the server, or send the sentence as a list of tokens" in error["message"]


@needs_zh
@needs_ja
@needs_th
def test_segmented_tokens_keep_every_character():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pyelmo.text.tokenize import normalize_text

    pieces = st.sampled_from([*"我来到北京清华大学すもものうちカタカナーผมรักคุณ abc,.'!?。、，「」１２ＡＢ々〜ๆ", "\u3000", "ｶﾀｶﾅ",
                              "\U00020001", "don't"])

    @settings(max_examples=200, deadline=None)
    @given(st.lists(pieces, max_size=30).map("".join), st.sampled_from(["auto", "zh", "ja", "th"]))
    def check(text, lang):
        tokens = tokenize(text, lang)
        assert all(token and not any(c.isspace() for c in token) for token in tokens)
        assert "".join(tokens) == normalize_text(text).replace(" ", "")

    check()


@pytest.mark.parametrize("line,lang", [
    (ZH, "zh"), ("The line 我来到北京清华大学了 has one.", "zh"), ("すもももももももものうち", "ja"),
    ("ผมรักคุณนะครับโอเคบ่พวกเรารักภาษาบ้านเกิด", "th"),
    ("我 来到 北京 清华大学", None), ("中华人民共和国 成立 了", None),  # segmented (a 7-character word)
    ("我爱你", None), ("ผมรักคุณ", None), ("The bank.", None), ("", None)])
def test_unsegmented_language(line, lang):
    from pyelmo.text.tokenize import unsegmented_language

    assert unsegmented_language(line) == lang


def test_embed_warns_once_for_unsegmented_lines(allennlp_reference, tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(f"The bank .\n我 来到 北京\n{ZH}\n他来到了网易杭研大厦\n", encoding="utf-8")
    model = ["--options-file", str(allennlp_reference.options), "--weight-file", str(allennlp_reference.weights)]
    with pytest.warns(UnsegmentedTextWarning) as caught:
        assert main(["embed", str(raw), str(tmp_path / "out.h5"), "--no-progress", *model]) == 0
    assert [str(w.message) for w in caught] == [  # once, at the first such line
        "line 3 looks like Chinese text without spaces between words, and is split on whitespace only: "
        "add --tokenize --lang zh (tokenize=True, lang=\"zh\") to split it into words"]
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert f["2"].shape == (3, 1, 32)  # the whole line is one token, as asked
    raw.write_text("The bank .\n我 来到 北京\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # segmented text: no warning
        assert main(["embed", str(raw), str(tmp_path / "seg.h5"), "--no-progress", *model]) == 0


def test_chinese_model_warns_once_for_text_without_chinese_characters(tiny_model):
    embedder = ElmoEmbedder(tiny_model)
    embedder.language = "zh"  # as a model whose config.json says "zh"
    with pytest.warns(LanguageWarning, match="trained on Chinese text and this text has no Chinese characters: "
                                             r"expect vectors of little use \(give it Chinese text\)") as caught:
        embedder.tokenize("The bank.")
        embedder.tokenize("The river bank.")
    assert len(caught) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embedder.tokenize("清华大学 42", "zh")
    assert caught == []


@needs_zh
def test_blank_tokens_segment_the_text_around_the_blank():
    from pyelmo.lm.predict import blank_tokens

    assert blank_tokens("我来到___清华大学。") == ["我", "来到", "___", "清华大学", "。"]  # auto: from the script
    assert blank_tokens("我来到___。", "en") == ["我", "来", "到", "___", "。"]
    assert blank_tokens("The river ___ .") == ["The", "river", "___", "."]
    assert blank_tokens("我来到___", split=str.split) == ["我来到", "___"]
