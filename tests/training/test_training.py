"""Training: data order, sampled softmax, trainer, resume, export, perplexity, CLI errors (tiny models)."""

import json
import os
import random
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.training.checkpoints import load_checkpoint
from pyelmo.training.config import config_from_dict
from pyelmo.lm.text import TokenizedText
from pyelmo.training.data import DataOrder, shard
from pyelmo.lm.model import LanguageModel, evaluate, full_softmax_nll, perplexity
from pyelmo.training.data import resolve_data
from pyelmo.training.trainer import Trainer, train
from pyelmo.lm.vocab import Vocabulary, vocab_from_files
from pyelmo.modelio.resolve import resolve_model
from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5, load_native_tensors

TINY = {
    "char_cnn": {"filters": [[1, 8], [2, 8], [3, 16]], "n_highway": 1, "embedding_dim": 8},
    "lstm": {"dim": 32, "projection_dim": 16, "n_layers": 2},
    "vocab": {"max_size": 200},
    "data": {"batch_tokens": 300, "max_length": 12},
    "softmax": {"negatives": 16},
    "train": {"max_steps": 12, "eval_every": 6, "checkpoint_every": 4, "log_every": 2, "threads": 1},
}


def _config(**changes):
    data = json.loads(json.dumps(TINY))
    for key, value in changes.items():
        section, name = key.split("__")
        data.setdefault(section, {})[name] = value
    return data


def _english(n, seed):
    rng = random.Random(seed)
    nouns, verbs = "cat dog bird fish horse cow sheep goat".split(), "sees chases eats likes finds".split()
    adjs = "big small red blue old young".split()
    out = []
    for _ in range(n):
        s = ["the", rng.choice(adjs), rng.choice(nouns), rng.choice(verbs), "the", rng.choice(nouns)]
        if rng.random() < 0.4:
            s += ["and", "a", rng.choice(nouns), rng.choice(verbs), "it"]
        out.append(" ".join(s + ["."]))
    return "\n".join(out) + "\n"


def _greek(n, seed):
    rng = random.Random(seed)
    nouns, verbs = "γάτα σκύλος πουλί ψάρι άλογο".split(), "βλέπει τρώει αγαπά βρίσκει".split()
    return "\n".join(" ".join(["η", rng.choice(nouns), rng.choice(verbs), "το", rng.choice(nouns), "."])
                     for _ in range(n)) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for split, n, seed in (("train", 160, 0), ("valid", 20, 1), ("test", 20, 2)):
        (root / split).mkdir()
        (root / split / "part.txt").write_text(_english(n, seed), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    result = train(_config(), out, data_dir=corpus)
    return out, result


# -- data --------------------------------------------------------------------------------
def test_data_chunks_budget_and_order(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("a b c d e f g h i j k\nx y\n\nz\n")
    vocab = vocab_from_files([f])
    text = TokenizedText([f], vocab, max_length=4)
    assert [text.sentence(i) for i in range(len(text))] == [list("abcd"), list("efgh"), list("ijk"), ["x", "y"],
                                                            ["z"]]
    batch = text.batch([3, 4])
    assert batch.char_ids.shape == (2, 2, 50) and batch.char_ids[1, 1].eq(0).all()
    assert batch.targets[1].tolist() == [0, vocab.id("z"), 1, -1] and batch.n_predictions == 3 + 2

    lengths = np.random.default_rng(0).integers(1, 30, size=500)
    order = DataOrder(lengths, batch_tokens=120, seed=3, min_rows=2, pool_batches=4)
    batches = order.epoch_batches(0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    for rows in batches:
        assert len(rows) >= 2 and (len(rows) <= 3 or len(rows) * (lengths[rows].max() + 2) <= 120)
    again = DataOrder(lengths, batch_tokens=120, seed=3, min_rows=2, pool_batches=4)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again.epoch_batches(0)))
    assert not all(np.array_equal(a, b) for a, b in zip(batches, again.epoch_batches(1)))
    rows = np.arange(7)
    assert sorted(np.concatenate([shard(rows, r, 3) for r in range(3)]).tolist()) == list(range(7))


# -- softmax -----------------------------------------------------------------------------
def _lm(vocab_size):
    cfg = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 4), (2, 4)), n_highway=1, embedding_dim=4),
                     lstm=LSTMConfig(dim=8, projection_dim=8, n_layers=1))
    torch.manual_seed(0)
    return LanguageModel(cfg, vocab_size)


def test_sampler_unique_and_expected_counts():
    lm = _lm(1000)
    neg = lm.sample_negatives(100, np.random.default_rng(0))
    assert len(set(neg.ids.tolist())) == 100 and neg.num_tries >= 100
    p = lm.sampler.probs
    assert abs(float(p.sum()) - 1) < 1e-9 and bool((p[1:] < p[:-1]).all())
    expected = torch.log(1 - (1 - p[neg.ids]) ** neg.num_tries)
    assert torch.allclose(neg.log_q, expected.float(), atol=1e-5)
    counts = np.bincount(np.concatenate([lm.sampler.sample(50, np.random.default_rng(s))[0].numpy()
                                         for s in range(200)]), minlength=1000)
    assert counts[:10].sum() > counts[500:510].sum() * 5  # Zipfian: frequent ids drawn far more often


def test_sampled_softmax_close_to_full_on_tiny_vocab():
    vocab = 40
    lm = _lm(vocab)
    h = torch.randn(500, 8)
    y = torch.from_numpy(np.minimum(np.random.default_rng(0).zipf(1.3, 500) - 1, vocab - 1))
    with torch.no_grad():
        full = float(full_softmax_nll(h, y, lm.softmax_weight, lm.softmax_bias).mean())
        sampled = np.mean([float(lm.sampled_nll(h, y, lm.sample_negatives(36, np.random.default_rng(s))).mean())
                           for s in range(5)])
        few = np.mean([float(lm.sampled_nll(h, y, lm.sample_negatives(5, np.random.default_rng(s))).mean())
                       for s in range(5)])
    assert abs(sampled - full) < 0.05 * full
    assert abs(few - full) > abs(sampled - full)


# -- training ----------------------------------------------------------------------------
def test_loss_decreases_and_outputs(corpus, tmp_path):
    config = config_from_dict(_config(train__max_steps=24, train__eval_every=0, train__dropout=0.0))
    tr = Trainer(config, tmp_path, resolve_data(corpus, None, None), progress=False)
    before = evaluate(tr.model, tr.valid_text).average
    result = tr.run()
    after = evaluate(tr.model, tr.valid_text).average
    assert after < 0.8 * before, (before, after)
    assert result.steps == 24 and (tmp_path / "curves.png").stat().st_size > 1000
    records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] and any("valid_ppl" in r for r in records)
    model = from_pretrained(tmp_path / "model")  # extra softmax tensors are ignored
    assert set(load_native_tensors(tmp_path / "model")) >= {"softmax.weight", "softmax.bias"}
    assert model.config.lstm.dim == 32
    assert resolve_model(tmp_path / "model").language is None  # no data.language: not recorded
    assert perplexity(tmp_path / "model", [corpus / "valid" / "part.txt"]).average == pytest.approx(after, rel=1e-4)


def test_products_follow_the_plain_path(corpus, tmp_path):
    from pyelmo.modeling.encoder import ConvMax, FusedConvMax

    weights = {}
    for products in ("plain", "fused"):
        config = config_from_dict(_config(train__max_steps=4, train__eval_every=0, train__checkpoint_every=0,
                                          train__products=products))
        tr = Trainer(config, tmp_path / products, resolve_data(corpus, None, None), progress=False)
        kind = type(tr.model.bilm.token_encoder.conv_max)  # the trainer swaps the fused one in at start
        assert kind is (FusedConvMax if products == "fused" else ConvMax)
        tr.run()
        weights[products] = tr.model.state_dict()
    assert config_from_dict({}).train.products == "fused"
    for products, got in weights.items():
        assert list(got) == list(weights["plain"])  # the same checkpoint keys
        for name, w in weights["plain"].items():
            torch.testing.assert_close(got[name], w, rtol=1e-4, atol=1e-4)


def test_bf16_training_validates_in_float32(corpus, tmp_path, monkeypatch):
    """Under bfloat16 autocast the training steps run in bfloat16, and validation (the inference
    backend, which chooses its own precision) runs outside autocast: it used to fail on a CPU with
    bfloat16 instructions (a bfloat16 input meeting a float32 weight in the packed LSTM)."""
    from pyelmo.training import trainer as trainer_module

    monkeypatch.setattr(trainer_module, "bf16_supported", lambda: True)  # autocast on any CPU (slow: tiny model)
    config = config_from_dict(_config(train__max_steps=2, train__eval_every=1, train__checkpoint_every=0,
                                      train__bf16=True))
    tr = Trainer(config, tmp_path, resolve_data(corpus, None, None), progress=False)
    assert isinstance(tr.autocast(), torch.autocast)
    tr.run()
    records = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    validated = [r["valid_ppl"] for r in records if "valid_ppl" in r]
    assert validated and validated[-1] == pytest.approx(evaluate(tr.model, tr.valid_text).average, rel=1e-5)


def test_non_latin_text_loss_falls(tmp_path):
    (tmp_path / "el.txt").write_text(_greek(120, 0), encoding="utf-8")
    config = config_from_dict(_config(train__max_steps=40, train__eval_every=0, softmax__negatives=8,
                                      optim__name="adamw", optim__lr=0.01, data__language="el"))
    tr = Trainer(config, tmp_path / "out", resolve_data(None, [tmp_path / "el.txt"], None), progress=False)
    before = evaluate(tr.model, tr.train_text).average
    tr.run()
    after = evaluate(tr.model, tr.train_text).average
    assert after < 0.5 * before, (before, after)
    assert "γάτα" in Vocabulary.load(tmp_path / "out" / "model").words
    assert resolve_model(tmp_path / "out" / "model").language == "el"  # data.language: the model's config.json "language"


def test_resume_equals_uninterrupted(corpus, tmp_path, monkeypatch):
    cfg = _config(train__max_steps=10, train__checkpoint_every=3, train__eval_every=5)
    full = train(cfg, tmp_path / "full", data_dir=corpus)

    original = Trainer.train_step
    calls = {"n": 0}

    def crashing(self, rows):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt  # killed after step 7; last checkpoint at step 6
        return original(self, rows)

    monkeypatch.setattr(Trainer, "train_step", crashing)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "part", data_dir=corpus)
    monkeypatch.setattr(Trainer, "train_step", original)
    ckpt = load_checkpoint(tmp_path / "part" / "checkpoint.pt")
    assert ckpt["step"] == 6
    assert main(["train", "--out", str(tmp_path / "part"), "--resume", "--no-progress"]) == 0
    a, b = load_native_tensors(full.model_dir), load_native_tensors(tmp_path / "part" / "model")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=0), k
    steps = [json.loads(l)["step"] for l in (tmp_path / "part" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [json.loads(l)["step"] for l in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_two_processes_equal_one(corpus, tmp_path):
    cfg = _config(train__max_steps=6, train__dropout=0.0, train__eval_every=3, data__min_rows=2,
                  train__threads=1)
    one = train(cfg, tmp_path / "one", data_dir=corpus)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), "-m", "pyelmo", "train",
           "--config", str(tmp_path / "cfg.json"), "--data", str(corpus), "--out", str(tmp_path / "two"),
           "--no-progress"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "run.json").read_text())["world_size"] == 2
    a, b = load_native_tensors(one.model_dir), load_native_tensors(tmp_path / "two" / "model")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=0), (k, (a[k] - b[k]).abs().max())


def test_resume_refuses_another_model_size_in_one_line(trained, tmp_path, capsys):
    """--resume keeps the run's model: --set lstm.dim=64 is refused, not silently ignored."""
    import shutil

    run = shutil.copytree(trained[0], tmp_path / "run")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    assert main(["train", "--out", str(run), "--resume", "--set", "lstm.dim=64", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "lstm.dim = 64 cannot apply: the resumed run's model has lstm.dim = 32" in err and "\n" not in err, err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before  # nothing written


def test_init_from_and_export(trained, corpus, tmp_path, capfd):
    out, _ = trained
    model_dir = out / "model"
    # continue training on new text
    (tmp_path / "new.txt").write_text(_english(40, 9))
    cont = train(_config(train__max_steps=3, train__eval_every=0), tmp_path / "cont",
                 train_files=[tmp_path / "new.txt"], init_from=model_dir)
    assert Vocabulary.load(cont.model_dir).words == Vocabulary.load(model_dir).words
    assert not torch.equal(load_native_tensors(cont.model_dir)["softmax.weight"],
                           load_native_tensors(model_dir)["softmax.weight"])
    # export -> load -> identical outputs
    assert main(["export", "--model", str(model_dir), "--format", "bilm-hdf5", str(tmp_path / "exp")]) == 0
    assert {"options.json", "weights.hdf5", "softmax.hdf5", "vocab.txt"} <= {p.name for p in (tmp_path / "exp").iterdir()}
    native = from_pretrained(model_dir)
    exported = load_bilm_hdf5(tmp_path / "exp" / "options.json", tmp_path / "exp" / "weights.hdf5")
    from pyelmo.modeling.characters import batch_to_ids

    ids = batch_to_ids([["the", "cat", "sees"], ["a", "dog"]])
    with torch.no_grad():
        assert torch.equal(native(ids).layers, exported(ids).layers)
    import h5py

    with h5py.File(tmp_path / "exp" / "softmax.hdf5") as f:
        assert np.array_equal(f["softmax/W"][...], load_native_tensors(model_dir)["softmax.weight"].numpy())
    capfd.readouterr()
    assert main(["perplexity", "--model", str(model_dir), str(corpus / "test" / "part.txt"), "--json"]) == 0
    ppl = json.loads(capfd.readouterr().out)  # stdout (the file descriptor) holds the JSON document alone
    assert ppl["average"] == pytest.approx(np.sqrt(ppl["forward"] * ppl["backward"]), rel=1e-6)


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("content, message", [
    ('{"lstm": {"dim": "big"}}', "lstm.dim must be an integer"),
    ('{"lstm": {"dim": -4}}', "lstm.dim must be a positive integer"),
    ('{"data": {"batch_tokens": 0}}', "data.batch_tokens must be at least 3"),
    ('{"train": {"dropout": 1.5}}', "train.dropout must be in [0, 1)"),
    ('{"train": {"bogus": 1}}', "unknown field 'train.bogus'"),
    ('{"nosuch": {}}', "unknown section 'nosuch'"),
    ('{"optim": {"name": "sgd"}}', "optim.name must be"),
    ('{"train": {"products": "fast"}}', "train.products must be one of 'plain', 'fused'"),
    ('{"lstm": {', "not valid JSON"),
    ('{"data": {"language": "zh-CN"}}', "data.language must be a language code such as 'en' or 'zh' (or empty)"),
])
def test_bad_config_is_one_line_error(corpus, tmp_path, capsys, content, message):
    (tmp_path / "c.json").write_text(content)
    code = main(["train", "--config", str(tmp_path / "c.json"), "--data", str(corpus), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 1 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_plan_names_the_limit_that_binds_first():
    from pyelmo.training.config import TrainSection
    from pyelmo.training.report import RunLength

    epochs_first = RunLength.of(59, TrainSection(max_steps=4000, max_epochs=10))
    assert epochs_first.total == 590 and epochs_first.binding == (
        "train.max_epochs = 10 (--max-epochs) ends the run before train.max_steps = 4000 (--max-steps)")
    steps_first = RunLength.of(59, TrainSection(max_steps=100, max_epochs=10))
    assert steps_first.total == 100 and steps_first.binding.startswith("train.max_steps = 100 (--max-steps) ends")
    assert RunLength.of(59, TrainSection(max_steps=0, max_epochs=2)).binding.endswith("ends the run (no step limit)")


def test_train_says_what_it_trains_for_how_long_and_why_it_stopped(corpus, tmp_path, capsys):
    """The start summary (parameters, vocabulary, data, steps planned and the binding limit), the progress
    bar's validation perplexity, and the reason for stopping in the last line."""
    from pyelmo.lm.model import LanguageModel

    (tmp_path / "c.json").write_text(json.dumps(_config(train__eval_every=2, train__log_every=1)))
    out = tmp_path / "run"
    assert main(["train", "--config", str(tmp_path / "c.json"), "--data", str(corpus), "--out", str(out),
                 "--max-steps", "4000", "--max-epochs", "1"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    model = LanguageModel.from_pretrained(out / "model")
    words = len((out / "vocab.txt").read_text().splitlines())
    assert lines[0].startswith(f"model: {sum(p.numel() for p in model.parameters()):,} parameters (biLM ")
    assert lines[1].startswith(f"vocabulary: {words:,} words (built from the training text")
    tokens = sum(len(line.split()) for line in (corpus / "train" / "part.txt").read_text().splitlines())
    assert lines[2] == f"training data: 160 sentences, {tokens:,} tokens in 1 file(s)"
    assert lines[3].startswith("validation: 20 sentences") and lines[3].endswith("every 2 steps and at the end")
    planned = int(lines[4].split()[1])
    assert lines[4].endswith("train.max_epochs = 1 (--max-epochs) ends the run before train.max_steps = 4000 "
                             "(--max-steps)"), lines[4]
    assert lines[-1].startswith(f"trained {planned} steps, ")
    assert "; stopped: train.max_epochs = 1 (--max-epochs) reached; model: " in lines[-1]
    assert "valid_ppl=" in captured.err and "train_ppl=" in captured.err


def test_bad_overrides_and_data_are_one_line_errors(corpus, tmp_path, capsys):
    (tmp_path / "c.toml").write_text("[train]\nmax_steps = 1\n")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad\n")
    cases = [
        (["--set", "lstm.n_layers=0"], "n_layers"),
        (["--set", "lstm=3"], "section.field"),
        (["--negatives", "-5"], "softmax.negatives must be non-negative"),
        (["--data", str(tmp_path / "missing")], "data directory not found"),
        (["--train", str(tmp_path / "bin.txt")], "not UTF-8"),
    ]
    for extra, message in cases:
        args = ["train", "--config", str(tmp_path / "c.toml"), "--out", str(tmp_path / "o"), *extra]
        if "--data" not in extra and "--train" not in extra:
            args += ["--data", str(corpus)]
        code = main(args)
        err = capsys.readouterr().err
        assert code == 1 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert main(["train", "--out", str(tmp_path / "never"), "--resume"]) == 1
    assert main(["perplexity", "--model", str(tmp_path / "nomodel"), str(corpus / "test" / "part.txt")]) == 1


def test_sampled_nll_matches_tf_formula_with_expected_count_correction():
    """TF sampled_softmax_loss by hand (numpy): logits minus log expected counts, accidental hits removed."""
    vocab = 1000
    lm = _lm(vocab)
    rng = np.random.default_rng(3)
    h = torch.from_numpy(rng.normal(size=(6, 8)).astype(np.float32))
    y = torch.tensor([0, 1, 5, 40, 999, 3])
    negatives = lm.sample_negatives(8, np.random.default_rng(1))
    ids, tries = negatives.ids.numpy(), negatives.num_tries
    with torch.no_grad():
        got = lm.sampled_nll(h, y, negatives).numpy()
    w, b = lm.softmax_weight.detach().double().numpy(), lm.softmax_bias.detach().double().numpy()
    k = np.arange(vocab, dtype=np.float64)
    p = np.log((k + 2) / (k + 1)) / np.log(vocab + 1)

    def log_q(index):
        return np.log(1 - (1 - p[index]) ** tries)

    hd, yd = h.double().numpy(), y.numpy()
    true_logit = (hd * w[yd]).sum(-1) + b[yd] - log_q(yd)
    sampled = hd @ w[ids].T + b[ids] - log_q(ids)
    sampled[yd[:, None] == ids[None, :]] = -np.inf
    logits = np.concatenate([true_logit[:, None], sampled], axis=1)
    expected = np.log(np.exp(logits).sum(1)) - true_logit
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # the correction matters here: without it the loss differs by far more than the tolerance
    uncorrected = np.log(np.exp(logits + np.concatenate([log_q(yd)[:, None],
                                                         np.broadcast_to(log_q(ids), sampled.shape)], 1)).sum(1))
    assert np.abs(uncorrected - (true_logit + log_q(yd)) - expected).max() > 0.1
