"""``pyelmo train --init-from`` any format: released-layout files, an NLPL-style archive on 127.0.0.1, a folder
converted from ELMoForManyLangs; the built softmax, the frozen phase, resume across its end, export, errors."""

import io
import json
import zipfile

import numpy as np
import pytest
import torch

from adaptation import FIXTURES, OPTIONS, WEIGHTS, adapt_config, corpus, corpus_data  # noqa: F401 (a fixture)
from httpserver import FileServer
from pyelmo.cli import main
from pyelmo.modelio.lexicon import lexicon_ids
from pyelmo.modelio.resolve import load
from pyelmo.modelio.weights import load_bilm_hdf5, load_native_tensors, model_fingerprint
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.training.checkpoints import load_checkpoint
from pyelmo.training.config import config_from_dict
from pyelmo.training.start import InitFrom
from pyelmo.training.trainer import Trainer, train

SENTENCES = [["the", "river", "bank", "flooded", "."], ["she", "paid", "the", "bank", "a", "visit"]]


def _layers(model, sentences=SENTENCES):
    with torch.no_grad():
        return model.eval()(batch_to_ids(sentences)).layers


def _bilm_tensors(directory):
    return {k: v for k, v in load_native_tensors(directory).items() if not k.startswith("softmax.")}


def test_a_bilm_tf_pair_adapts_with_a_built_softmax_and_a_frozen_first_phase(corpus, tmp_path):
    source = load_bilm_hdf5(OPTIONS, WEIGHTS)
    init = InitFrom(str(OPTIONS), str(WEIGHTS))
    frozen = train(adapt_config(max_steps=3), tmp_path / "frozen", data_dir=corpus, init_from=init)
    # phase 1 trains the softmax alone: every biLM tensor is bit-identical to the source's
    for name, tensor in _bilm_tensors(frozen.model_dir).items():
        assert torch.equal(tensor, source.state_dict()[name]), name
    config = json.loads((frozen.model_dir / "config.json").read_text())
    assert config["source"]["format"] == "bilm-tf" and config["source"]["fingerprint"] == model_fingerprint(source)
    assert config["training"]["config"]["train"]["freeze_bilm_steps"] == 3
    # phase 2 trains everything
    both = train(adapt_config(), tmp_path / "both", data_dir=corpus, init_from=init)
    changed = [k for k, v in _bilm_tensors(both.model_dir).items() if not torch.equal(v, source.state_dict()[k])]
    assert len(changed) > 10


@pytest.mark.parametrize("rows", ["zero", "layer0"])
def test_a_new_softmax_starts_from_the_unigram_frequencies(corpus, tmp_path, rows):
    config = adapt_config()
    config["softmax"]["new_rows"] = rows
    tr = Trainer(config_from_dict(config), tmp_path / "run", data=corpus_data(corpus),
                 init_from=InitFrom(str(OPTIONS), str(WEIGHTS)), progress=False)
    counts = {w: 0 for w in tr.vocab.words}
    for line in (corpus / "train" / "part.txt").read_text().splitlines():
        for w in line.split():
            counts[w] += 1
    total = sum(counts.values()) + 2 * 120 + len(tr.vocab)  # <S> and </S> once per sentence, add-one
    assert float(tr.model.softmax_bias[tr.vocab.id("patient")].detach()) == pytest.approx(
        np.log((counts["patient"] + 1) / total), abs=1e-5)
    start = tr.validate()["ppl"]
    weight = tr.model.softmax_weight.detach().clone()
    with torch.no_grad():
        tr.model.softmax_weight.zero_()
    unigram = tr.validate()["ppl"]
    if rows == "zero":
        assert torch.equal(weight, torch.zeros_like(weight)) and start == unigram
    else:  # each row along its word's layer-0 vector; the logits move mildly around the biases
        words = tr.vocab.words[3:8]
        with torch.no_grad():
            layer0 = load_bilm_hdf5(OPTIONS, WEIGHTS).token_encoder(batch_to_ids([[w] for w in words])[:, 0])
        cosines = torch.nn.functional.cosine_similarity(weight[[tr.vocab.id(w) for w in words]], layer0)
        assert torch.allclose(cosines, torch.ones(len(words)), atol=1e-5)
        assert unigram < start <= 1.2 * unigram


@pytest.mark.parametrize("stop_at", [2, 3])  # inside the frozen phase, and at its end
def test_resume_across_the_phase_boundary_equals_a_straight_run(corpus, tmp_path, monkeypatch, stop_at):
    init = InitFrom(str(OPTIONS), str(WEIGHTS))
    straight = train(adapt_config(), tmp_path / "straight", data_dir=corpus, init_from=init)
    original = Trainer.train_step
    calls = {"n": 0}

    def crashing(self, rows):
        calls["n"] += 1
        if calls["n"] == stop_at + 1:
            raise KeyboardInterrupt
        return original(self, rows)

    monkeypatch.setattr(Trainer, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        train(adapt_config(checkpoint_every=1), tmp_path / "part", data_dir=corpus, init_from=init)
    monkeypatch.setattr(Trainer, "train_step", original)
    assert load_checkpoint(tmp_path / "part" / "checkpoint.pt")["step"] == stop_at
    assert main(["train", "--out", str(tmp_path / "part"), "--resume", "--no-progress"]) == 0
    a, b = load_native_tensors(straight.model_dir), load_native_tensors(tmp_path / "part" / "model")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_the_adapted_model_exports_and_loads_everywhere(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--init-from", str(OPTIONS), "--init-weight-file", str(WEIGHTS), "--data", str(corpus),
                 "--out", str(run), "--set", "vocab.max_size=200", "--set", "data.batch_tokens=300",
                 "--negatives", "16", "--max-steps", "2", "--freeze-bilm-steps", "1", "--threads", "1",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "continued from:" in out and "softmax built over the run's vocabulary" in out
    assert "phase 1: the softmax alone for 1 steps" in out
    assert main(["export", "--model", str(run), "--format", "bilm-hdf5", str(tmp_path / "exp")]) == 0
    native = load(run)
    exported = load_bilm_hdf5(tmp_path / "exp" / "options.json", tmp_path / "exp" / "weights.hdf5")
    assert (_layers(native) - _layers(exported)).abs().max() <= 1e-6
    from pyelmo.embedding.elmo import Elmo

    elmo = Elmo(str(run), num_output_representations=1, dropout=0.0).eval()
    with torch.no_grad():
        assert elmo(batch_to_ids(SENTENCES))["elmo_representations"][0].shape == (2, 6, 32)
    capsys.readouterr()
    assert main(["perplexity", "--model", str(run), str(corpus / "valid" / "part.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["average"] > 1
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("pyelmo", config={"model": str(run), "layer": "top"})
    doc = nlp("the river bank flooded .")
    top = _layers(native, [["the", "river", "bank", "flooded", "."]])[-1, 0, 2]  # (layer, sentence, token)
    assert np.allclose(doc[2].vector, top.numpy(), atol=1e-5)


def test_an_nlpl_archive_url_adapts(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("PYELMO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PYELMO_OFFLINE", raising=False)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("options.json", OPTIONS.read_bytes())
        zf.writestr("model.hdf5", WEIGHTS.read_bytes())
        zf.writestr("vocab.txt", "the\nbank\n")
    with FileServer({"/repository/7.zip": buffer.getvalue()}) as srv:
        url = f"{srv.url}/repository/7.zip"
        result = train(adapt_config(max_steps=2, freeze_bilm_steps=2), tmp_path / "run", data_dir=corpus, init_from=url)
    source = json.loads((result.model_dir / "config.json").read_text())["source"]
    assert source["model"] == url and source["format"] == "released"
    assert source["fingerprint"] == model_fingerprint(load_bilm_hdf5(OPTIONS, WEIGHTS))
    for name, tensor in _bilm_tensors(result.model_dir).items():
        assert torch.equal(tensor, load_bilm_hdf5(OPTIONS, WEIGHTS).state_dict()[name]), name


def test_an_elmoformanylangs_model_adapts_and_keeps_its_lexicons(corpus, tmp_path, capsys):
    converted = tmp_path / "efml"
    assert main(["convert", "elmoformanylangs", str(FIXTURES / "elmoformanylangs" / "model"), str(converted)]) == 0
    source = load(converted)
    result = train(adapt_config(max_steps=4, freeze_bilm_steps=2), tmp_path / "run", data_dir=corpus,
                   init_from=str(converted))
    adapted = load(result.model_dir)
    assert type(adapted) is type(source) is BiLM
    assert lexicon_ids(adapted).chars == lexicon_ids(source).chars
    assert lexicon_ids(adapted).words == lexicon_ids(source).words
    assert json.loads((result.model_dir / "config.json").read_text())["source"]["format"] == "elmoformanylangs"
    assert not torch.equal(_layers(adapted), _layers(source))
    capsys.readouterr()
    assert main(["perplexity", "--model", str(result.model_dir), str(corpus / "valid" / "part.txt")]) == 0
    assert main(["export", "--model", str(result.model_dir), "--format", "bilm-hdf5", str(tmp_path / "x")]) == 1
    err = capsys.readouterr().err.strip()
    assert "ELMoForManyLangs" in err and "\n" not in err
    # resumed from its checkpoint (the lexicons come from the recorded source)
    assert main(["train", "--out", str(tmp_path / "run"), "--resume", "--no-progress", "--max-steps", "5"]) == 0


def test_the_shipped_model_continues_with_its_own_softmax_or_a_new_one(corpus, tmp_path):
    from pyelmo.lm.model import LanguageModel

    shipped = LanguageModel.from_pretrained()
    vocab = shipped.vocab
    kept = Trainer(config_from_dict(adapt_config(freeze_bilm_steps=None)), tmp_path / "kept", data=corpus_data(corpus),
                   init_from="english", progress=False)
    assert kept.freeze == 0 and kept.vocab.words == vocab.words
    assert torch.equal(kept.model.softmax_weight, shipped.softmax_weight)
    new = Trainer(config_from_dict(adapt_config(freeze_bilm_steps=None)), tmp_path / "new", data=corpus_data(corpus),
                  init_from=InitFrom("english", new_softmax=True), progress=False)
    assert new.freeze == 200 and len(new.vocab) < 100 and new.source["language"] == "en"


@pytest.mark.parametrize("args, message", [
    (["--init-from", str(FIXTURES / "elmoformanylangs" / "model")], "convert it first"),
    (["--init-weight-file", str(WEIGHTS)], "go with --init-from"),
    (["--freeze-bilm-steps", "5", "--set", "preset=small"], "goes with --init-from"),
    (["--init-from", "english", "--vocab", "VOCAB"], "differs from english's"),
    (["--init-from", str(OPTIONS)], "weight file"),
    # the model's size is the source's: a stated other size is refused, not silently ignored
    (["--init-from", "english", "--set", "lstm.dim=32"], "lstm.dim = 32 cannot apply: the model continued from "
                                                          "english has lstm.dim = 256"),
    (["--init-from", str(OPTIONS), "--init-weight-file", str(WEIGHTS), "--set", "preset=small"], "cannot apply"),
])
def test_sources_that_cannot_be_adapted_are_one_line_errors(corpus, tmp_path, capsys, args, message):
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    args = [a.replace("VOCAB", str(tmp_path / "vocab.txt")) for a in args]
    assert main(["train", "--data", str(corpus), "--out", str(tmp_path / "run"), *args]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err
    assert not (tmp_path / "run" / "run.json").exists()


@pytest.mark.parametrize("field", ["n_lexicon_characters", "word_dim"])
def test_a_new_model_has_no_lexicon_or_word_embedding(field):
    from pyelmo.errors import ConfigError

    with pytest.raises(ConfigError, match=f"char_cnn.{field} must be 0 .*converted ELMoForManyLangs"):
        config_from_dict({"char_cnn": {field: 5, "n_words" if field == "word_dim" else "lexicon_padding_id": 1}})
