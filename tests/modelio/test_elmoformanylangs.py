"""ELMoForManyLangs conversion: their tiny model (made with their code) gives their outputs."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import pyelmo
from pyelmo.cli import main
from pyelmo.errors import WeightFileError
from pyelmo.modelio.elmoformanylangs import convert

FIXTURE = Path(__file__).parents[1] / "fixtures" / "elmoformanylangs"
SENTENCES = json.loads((FIXTURE / "sentences.json").read_text(encoding="utf-8"))


def expected(i: int) -> np.ndarray:
    with np.load(FIXTURE / "outputs.npz", allow_pickle=False) as data:
        return data[str(i)]


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("efml") / "model"
    assert main(["convert", "elmoformanylangs", str(FIXTURE / "model"), str(out)]) == 0
    return out


def test_converted_model_gives_their_outputs(converted):
    embedder = pyelmo.ElmoEmbedder(str(converted))
    for i, sentence in enumerate(SENTENCES):
        got = embedder.embed_sentence(sentence)
        assert got.shape == expected(i).shape
        np.testing.assert_allclose(got, expected(i), atol=1e-5, rtol=0)
    # batched and padded, and through Elmo with an equal-weight mix: the same numbers
    batch = embedder.embed_batch(SENTENCES)
    for i, got in enumerate(batch):
        np.testing.assert_allclose(got, expected(i), atol=1e-5, rtol=0)
    elmo = pyelmo.Elmo(str(converted), None, 1, dropout=0.0)
    with torch.no_grad():
        mixed = elmo(pyelmo.batch_to_ids(SENTENCES))["elmo_representations"][0]
    np.testing.assert_allclose(mixed[2, : len(SENTENCES[2])].numpy(), expected(2).mean(axis=0), atol=1e-5, rtol=0)


def test_converted_folder_is_safetensors_and_lexicons(converted):
    assert sorted(p.name for p in converted.iterdir()) == ["char.dic", "config.json", "model.safetensors", "word.dic"]


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_pickled_code_is_refused(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE / "model", src)

    marker = tmp_path / "code-ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (src / "encoder.pkl").write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(WeightFileError, match="not a tensor-only state dict"):
        convert(src, tmp_path / "out")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_missing_files_and_existing_output_are_clear_errors(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(FIXTURE / "model", src)
    (src / "char.dic").unlink()
    assert main(["convert", "elmoformanylangs", str(src), str(tmp_path / "out")]) == 1
    assert "char.dic" in capsys.readouterr().err
    assert main(["convert", "elmoformanylangs", str(FIXTURE / "model"), str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_lang_is_recorded_and_text_of_another_language_warns_once(converted, tmp_path, capsys):
    from pyelmo.embedding.embedder import LanguageWarning
    from pyelmo.modelio.resolve import resolve_model

    assert resolve_model(converted).language is None  # their folders do not say their language
    out = tmp_path / "zh"
    assert main(["convert", "elmoformanylangs", str(FIXTURE / "model"), str(out), "--lang", "zh"]) == 0
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["language"] == "zh"
    assert resolve_model(out).language == "zh"
    embedder = pyelmo.ElmoEmbedder(str(out))
    np.testing.assert_allclose(embedder.embed_sentence(SENTENCES[2]), expected(2), atol=1e-5, rtol=0)
    with pytest.warns(LanguageWarning, match="trained on Chinese text and this text has no Chinese characters") as caught:
        assert embedder.tokenize("The bank closed.") == SENTENCES[0]
        embedder.embed_sentence("The river bank.", tokenize=True)
    assert len(caught) == 1  # once
    raw = tmp_path / "raw.txt"
    raw.write_text("The bank closed.\nThe river bank.\n", encoding="utf-8")
    with pytest.warns(LanguageWarning) as caught:
        assert main(["embed", str(raw), str(tmp_path / "en.h5"), "--tokenize", "--no-progress", "--model", str(out)]) == 0
    assert len(caught) == 1


def test_bad_lang_is_one_line_before_any_output(tmp_path, capsys):
    assert main(["convert", "elmoformanylangs", str(FIXTURE / "model"), str(tmp_path / "o"), "--lang", "中文"]) == 1
    assert capsys.readouterr().err == "pyelmo convert: error: the language must be a code such as zh or en, got '中文'\n"
    assert not (tmp_path / "o").exists()


def test_the_converted_model_is_pyelmos_biLM_planned_like_any_other(converted, tmp_path):
    """One token encoder: their lexicons map the input (``LexiconIds``), the embedder plans the model (the fused
    convolution on a planned product, the planned linears), and ``pyelmo embed`` gives their outputs."""
    import h5py

    from pyelmo.modelio.lexicon import LexiconIds
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.runtime.linear import PlannedLinear
    from pyelmo.runtime.planning import PlannedConvMax

    encoder = pyelmo.ElmoEmbedder(str(converted)).model.token_encoder
    assert isinstance(encoder.token_ids, LexiconIds) and isinstance(encoder.conv_max, PlannedConvMax)
    assert isinstance(encoder.projection, PlannedLinear)
    assert type(pyelmo.load(str(converted))) is BiLM
    text = tmp_path / "in.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in SENTENCES), encoding="utf-8")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--model", str(converted), "--no-progress"]) == 0
    with h5py.File(tmp_path / "out.hdf5", "r") as f:
        for i in range(len(SENTENCES)):
            np.testing.assert_allclose(f[str(i)][...], expected(i), atol=1e-5, rtol=0)
        assert json.loads(f.attrs["kernels_used"])


def test_a_folder_converted_before_its_options_named_the_lexicon_loads(converted, tmp_path):
    """Folders converted before ``char_cnn.lexicon`` and ``char_cnn.word_embedding``: sized from their section."""
    old = tmp_path / "old"
    shutil.copytree(converted, old)
    config = json.loads((old / "config.json").read_text(encoding="utf-8"))
    assert config["options"]["char_cnn"]["lexicon"] == {"n_characters": config["elmoformanylangs"]["n_chars"],
                                                        "padding_id": 1}  # '<pad>' in their char.dic
    del config["options"]["char_cnn"]["lexicon"], config["options"]["char_cnn"]["word_embedding"]
    (old / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert pyelmo.load(str(old)).config == pyelmo.load(str(converted)).config
    got = pyelmo.ElmoEmbedder(str(old)).embed_sentence(SENTENCES[3])
    np.testing.assert_allclose(got, expected(3), atol=1e-5, rtol=0)
