"""Direct tests for one-line bugs that a mutation audit found the rest of the suite let through: each test
fails on its bug (reading comprehension, adaptation, int8)."""

from __future__ import annotations

import json
import zipfile

import pytest
import torch

from pyelmo.cli import main
from pyelmo.modelio.resolve import load
from pyelmo.modelio.weights import model_fingerprint
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import Quantization
from pyelmo.runtime.linear import PLANNED
from pyelmo.runtime.products import Products
from pyelmo.tasks.metrics import squad_metrics
from pyelmo.tasks.model import ModelConfig
from pyelmo.tasks.reader import Reader
from pyelmo.tasks.squad import read_squad, tokenize_with_offsets
from pyelmo.training.config import config_from_dict
from pyelmo.training.start import InitFrom
from pyelmo.training.trainer import Trainer

from adaptation import FIXTURES, OPTIONS, WEIGHTS, adapt_config, corpus, corpus_data  # noqa: F401 (a fixture)


# -- reading comprehension ------------------------------------------------------------------------
def test_squad_normalisation_deletes_punctuation():
    """SQuAD v1.1 removes punctuation: "5,000" and "5000" are the same answer (a space would split it)."""
    assert squad_metrics([["5000"]], ["5,000"]) == {"exact_match": 100.0, "f1": 100.0, "n": 1}
    assert squad_metrics([["rock-and-roll"]], ["rockandroll"])["exact_match"] == 100.0


def test_the_reader_picks_the_span_of_the_highest_log_probability_product():
    """p(start) * p(end), not p(start) + p(end): here the sum prefers (3, 3), the product (2, 2)."""
    start = torch.tensor([[-2.0, -3.0, -1.0, 1.0]])
    end = torch.tensor([[1.0, 1.0, 1.0, -2.0]])
    ps, pe = start.softmax(-1)[0], end.softmax(-1)[0]
    assert ps[3] + pe[3] > ps[2] + pe[2] + 0.3 and ps[2] * pe[2] > 2 * ps[3] * pe[3]  # the two rules disagree
    model = Reader(ModelConfig(kind="qa", n_labels=2, static_dim=2, static_size=1, hidden=2))
    model.logits = lambda passage, question: (start, end)
    assert model.predict(None, None, max_tokens=30) == [(2, 2)]
    # the same passage padded (-inf) in a batch with a longer one
    pad = torch.full((1, 2), float("-inf"))
    batch = torch.cat([torch.cat([start, pad], 1), torch.zeros(1, 6)]), torch.cat([torch.cat([end, pad], 1),
                                                                               torch.zeros(1, 6)])
    model.logits = lambda passage, question: batch
    assert model.predict(None, None, max_tokens=30)[0] == (2, 2)


def test_token_offsets_advance_through_repeated_pieces():
    """Each piece is searched from where the previous one ended, not from its chunk's start."""
    text = "see (a)(a) and aa"
    tokens, offsets = tokenize_with_offsets(text)
    assert tokens == ["see", "(", "a", ")", "(", "a", ")", "and", "aa"]
    assert offsets == [(0, 3), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (9, 10), (11, 14), (15, 17)]
    assert all(b <= c for (_, b), (c, _) in zip(offsets, offsets[1:]))  # increasing, never overlapping


def test_an_answer_inside_a_token_maps_to_that_token(tmp_path):
    """"5" in "5km" (and "km") is answered by the token "5km": not lost, no crash."""
    context = "The race is 5km long."
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "context": context, "question": "How long?",
                                        "answers": [{"text": text, "answer_start": context.index(text)}]}) + "\n"
                            for i, text in enumerate(["5", "km", "5km long"])), encoding="utf-8")
    examples = read_squad(path, training=True)
    assert examples[0].tokens[3] == "5km"
    assert [e.span for e in examples] == [(3, 3), (3, 3), (3, 4)]
    assert [e.answer_text(*e.span) for e in examples] == ["5km", "5km", "5km long"]


# -- adaptation -----------------------------------------------------------------------------------
def _trainer(corpus, out, **train):
    config = config_from_dict(adapt_config(eval_every=0, keep_best=False, **train))
    return Trainer(config, out, data=corpus_data(corpus), init_from=InitFrom(str(OPTIONS), str(WEIGHTS)), progress=False)


def test_the_bilm_trains_from_the_step_after_the_frozen_ones(corpus, tmp_path):
    """--freeze-bilm-steps 3 with 4 steps: the 4th step changes the biLM (the 3rd does not)."""
    source = load(OPTIONS, WEIGHTS).state_dict()
    for steps, changes in ((3, False), (4, True)):
        trainer = _trainer(corpus, tmp_path / str(steps), max_steps=steps, freeze_bilm_steps=3)
        trainer.run(handle_signals=False)
        bilm = trainer.model.bilm.state_dict()
        changed = [k for k in source if not torch.equal(bilm[k].cpu(), source[k])]
        assert bool(changed) == changes, (steps, changed)


def test_the_warm_up_starts_again_with_the_second_phase(corpus, tmp_path):
    """optim.warmup_steps = 2, 3 frozen steps: the rates in metrics.jsonl rise again from step 4."""
    config = adapt_config(max_steps=6, freeze_bilm_steps=3, eval_every=0, log_every=1)
    config["optim"]["warmup_steps"] = 2
    Trainer(config_from_dict(config), tmp_path / "run", data=corpus_data(corpus),
            init_from=InitFrom(str(OPTIONS), str(WEIGHTS)), progress=False).run(handle_signals=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["lr"] for r in records if "lr" in r]
    lr = config["optim"]["lr"]
    assert rates == pytest.approx([lr / 2, lr, lr, lr / 2, lr, lr])


def _sources(tmp_path, corpus):
    """(source given to --init-from, its format, the biLM it loads) for each format, made from the fixtures."""
    archive = tmp_path / "nlpl.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(OPTIONS, "options.json")
        zf.write(WEIGHTS, "model.hdf5")
    efml = tmp_path / "efml"
    assert main(["convert", "elmoformanylangs", str(FIXTURES / "elmoformanylangs" / "model"), str(efml)]) == 0
    native = _trainer(corpus, tmp_path / "native", max_steps=1, freeze_bilm_steps=1)
    native.run(handle_signals=False)
    return [(InitFrom(str(OPTIONS), str(WEIGHTS)), "bilm-tf"), (InitFrom(str(archive)), "released"),
            (InitFrom(str(efml)), "elmoformanylangs"), (InitFrom(str(tmp_path / "native" / "model")), "pyelmo")]


def test_a_resumed_adapted_run_keeps_its_source_record(corpus, tmp_path, monkeypatch):
    """run.json and the saved model's config.json record the source after --resume too, for every format."""
    original = Trainer.train_step

    def stop_after_one_step(self, rows):
        if self.step == 1:
            raise KeyboardInterrupt
        return original(self, rows)

    for n, (init, form) in enumerate(_sources(tmp_path, corpus)):
        out = tmp_path / f"run{n}"
        config = config_from_dict(adapt_config(max_steps=2, checkpoint_every=1, freeze_bilm_steps=1, eval_every=0))
        with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):  # stopped with its checkpoint
            m.setattr(Trainer, "train_step", stop_after_one_step)
            Trainer(config, out, data=corpus_data(corpus), init_from=init, progress=False).run(handle_signals=False)
        assert main(["train", "--out", str(out), "--resume", "--no-progress"]) == 0
        run = json.loads((out / "run.json").read_text()).get("source")
        saved = json.loads((out / "model" / "config.json").read_text()).get("source") or {}
        assert run == saved and saved["format"] == form and saved["model"] == init.model, (form, saved)
        assert saved["fingerprint"] == model_fingerprint(load(init.model, init.weight_file)), form


# -- int8 -----------------------------------------------------------------------------------------
def test_int8_weights_are_scaled_per_output_channel():
    """Rows of the weight 1000x apart in size: each output channel keeps its own resolution (one scale for
    the matrix would round the small rows to zero)."""
    torch.manual_seed(0)
    w = torch.randn(512, 512) * torch.cat([torch.ones(256, 1), torch.full((256, 1), 1e-3)])
    x = torch.randn(4, 512)
    products = Products(ExecutionPlan(precision="int8", quantization=Quantization(0)))
    y, exact = PLANNED[products.precision_of(w)](w, None, products)(x), x @ w.T
    assert set(products.decisions.values()) == {"int8"}
    for rows in (slice(0, 256), slice(256, 512)):  # the large rows' outputs and the small rows'
        error = (y[:, rows] - exact[:, rows]).norm() / exact[:, rows].norm()
        assert error < 0.03, (rows, float(error))
