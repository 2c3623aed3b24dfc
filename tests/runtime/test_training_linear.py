"""Training's faster execution (``train.products``; "onednn": pyelmo.runtime.training_linear.PrepackedTrainingLinear
swapped in for the token encoder's linears) computes the same values and gradients as the plain modules (the
trainer's option: tests/training/test_training.py)."""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.lm.model import LanguageModel
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.runtime import plan as plan_module
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import onednn_available
from pyelmo.runtime.products import PLAIN
from pyelmo.runtime.rows import PackedRows
from pyelmo.runtime.training_linear import PackedWeight, PrepackedTrainingLinear, prepacked_linear
from pyelmo.training.step import swap_training_linears, training_run_options

PRODUCTS = ["fused", pytest.param("onednn", marks=pytest.mark.skipif(not onednn_available(), reason="no oneDNN"))]


@pytest.fixture(autouse=True)
def every_product_through_onednn(monkeypatch):
    """oneDNN for every product size (not only the large ones), so the tiny models exercise it; one
    thread (tiny products: threads only add synchronisation on a busy machine)."""
    monkeypatch.setattr(plan_module, "ONEDNN_MIN_WORK", 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _config(skip: bool = False, clip: float | None = 3.0) -> ElmoConfig:
    return ElmoConfig(
        char_cnn=CharCNNConfig(filters=((1, 4), (2, 8), (3, 8), (5, 16)), n_highway=2, embedding_dim=6),
        lstm=LSTMConfig(dim=24, projection_dim=10, n_layers=2, cell_clip=clip, proj_clip=clip,
                        use_skip_connections=skip),
    )


def _model(seed: int = 0, dropout: float = 0.0, **kwargs) -> LanguageModel:
    torch.manual_seed(seed)
    model = LanguageModel(_config(**kwargs), 40, dropout=dropout)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.4)  # large enough that the clips and all gates matter
    return model


def _batch(n: int = 7, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = random.Random(seed)
    words = ["the", "a", "cat", "élan", "naïve", "x" * 60, "dog", "ran", ".", "banana", "日本"]
    sentences = [[rng.choice(words) for _ in range(rng.randint(1, 11))] for _ in range(n)]
    char_ids = batch_to_ids(sentences)
    targets = torch.full((n, char_ids.shape[1] + 2), -1)
    for i, s in enumerate(sentences):
        targets[i, : len(s) + 2] = torch.tensor([rng.randrange(40) for _ in range(len(s) + 2)])
    return char_ids, targets


def _training(model, products: str):
    """A copy of ``model`` (a LanguageModel or BiLM) as the trainer runs it with ``products``, and the options."""
    options, trained = training_run_options(products), copy.deepcopy(model)
    swap_training_linears(getattr(trained, "bilm", trained), options)
    return trained, options


def _loss_and_grads(model: LanguageModel, options: RunOptions, negatives: bool, seed: int = 5):
    char_ids, targets = _batch()
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the dropout masks
    neg = ()
    if negatives:
        n = model.sample_negatives(12, np.random.default_rng(3))
        neg = (n.ids, n.log_q, n.num_tries)
    sums = model(char_ids, targets, *neg, options=options)
    sums.sum().backward()
    return sums.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


def _assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, g in want.items():
        scale = float(g.abs().max()) + 1e-12
        assert float((got[name] - g).abs().max()) <= 2e-5 * scale, name


@pytest.mark.parametrize("products", PRODUCTS)
@pytest.mark.parametrize("negatives, dropout, skip, clip", [(True, 0.0, False, 3.0), (False, 0.0, True, None),
                                                            (True, 0.3, False, 3.0)])
def test_values_and_gradients_equal_the_plain_modules(products, negatives, dropout, skip, clip):
    model = _model(dropout=dropout, skip=skip, clip=clip).train()
    want_loss, want = _loss_and_grads(model, RunOptions(), negatives)
    got_loss, got = _loss_and_grads(*_training(model, products), negatives)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
    _assert_close(got, want)
    assert all(g.abs().sum() > 0 for name, g in want.items() if "bias" not in name or "gates" in name)


@pytest.mark.parametrize("products", PRODUCTS)
def test_all_layers_and_states_equal_the_plain_modules_from_given_states(products):
    bilm = BiLM(_config(skip=True))
    with torch.no_grad():
        for p in bilm.parameters():
            p.normal_(0, 0.4)
    char_ids, _ = _batch(5, seed=1)
    torch.manual_seed(2)
    state = (torch.randn(2, 2, 5, 10, requires_grad=True), torch.randn(2, 2, 5, 24, requires_grad=True))
    results = []
    for model, options in ((bilm, RunOptions()), _training(bilm, products)):
        out = model(char_ids, options=options, initial_state=state)
        loss = (out.layers ** 2).sum() + out.final_state[0].sum() + 0.5 * out.final_state[1].sum()
        grads = torch.autograd.grad(loss, [*state, *model.parameters()])
        results.append((out, grads))
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got.layers, want.layers, rtol=1e-5, atol=1e-5)
    for g, w in zip(got.final_state, want.final_state):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=2e-5 * (float(w.abs().max()) + 1e-12))


def test_prepacked_weights_are_repacked_after_each_optimizer_step():
    if not onednn_available():
        pytest.skip("no oneDNN")
    plain = _model().train()
    model, options = _training(plain, "onednn")
    encoder = model.bilm.token_encoder
    swapped = [encoder.projection, *(h.carry for h in encoder.highways), *(h.transform for h in encoder.highways)]
    assert all(type(m) is PrepackedTrainingLinear for m in swapped)
    assert all(type(d.input_gates) is torch.nn.Linear for d in model.bilm.directions[0])  # the LSTM's stay
    assert list(model.state_dict()) == list(plain.state_dict())  # checkpoints and saved models unchanged
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    projection = encoder.projection
    assert any(p is projection.weight for p in optimizer.param_groups[0]["params"])  # the Parameter itself
    packed = []
    for _ in range(2):
        want_loss, _ = _loss_and_grads(plain, RunOptions(), True)
        got_loss, _ = _loss_and_grads(model, options, True)
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
        packed.append((projection.packed.get(projection.weight), projection.packed.get(projection.weight, True)))
        assert projection.packed.get(projection.weight) is packed[-1][0]  # kept while the weight is unchanged
        optimizer.step()
        plain.load_state_dict(model.state_dict())
    assert packed[0][0] is not packed[1][0] and packed[0][1] is not packed[1][1]


def test_a_plan_applied_to_a_trained_copy_runs_its_planned_linears():
    """Validation runs a planned copy of the model being trained: its oneDNN training linears are swapped
    like any nn.Linear, and the copy packs nothing of the original's."""
    plain = _model().bilm.eval()
    trained, options = _training(plain, "onednn")
    ids, _ = _batch(4)
    trained(ids, options=options)  # packs the training linears' weights
    inference = RunOptions.inference()
    with torch.no_grad():
        got, want = trained(ids, options=inference).layers, plain(ids, options=inference).layers
    assert torch.equal(got, want)
    planned = copy.deepcopy(trained).apply_plan(inference)
    assert not any(isinstance(m, PrepackedTrainingLinear) for m in planned.modules())


def test_packed_rows_are_time_major_and_cover_each_position_once():
    rows = PackedRows(torch.tensor([4, 3, 2]), 4)
    assert rows.batch_sizes == [3, 3, 2, 1]
    # row * steps + t, step by step, rows sorted by length
    assert rows.forward_src.tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 3]


def test_training_run_options():
    plain, fused, onednn = (training_run_options(p) for p in ("plain", "fused", "onednn"))
    assert plain.backend.products is PLAIN and not plain.backend.fused_conv
    assert fused.backend.products is PLAIN and fused.backend.fused_conv
    assert onednn.backend.products.trained_linear is PrepackedTrainingLinear and onednn.backend.fused_conv
    assert plain.backend.products.trained_linear is None and onednn.backend.products.differentiable
    assert all(o.backend.differentiable and o.plan is None and o.token_cache is None for o in (plain, fused, onednn))


def test_onednn_rows_padding_keeps_values():
    x, w = torch.randn(37, 9), torch.randn(5, 9)
    y = prepacked_linear(x, w, None, PackedWeight())
    torch.testing.assert_close(y, x @ w.t(), rtol=1e-5, atol=1e-5)
    assert math.isfinite(float(y.sum()))


@pytest.mark.parametrize("products", PRODUCTS)
def test_padding_positions_are_not_encoded(products, monkeypatch):
    """The differentiable backend encodes only the positions within each row's length: a padded batch's
    all-zero "token" has no padding characters, so in a chunk of the fused convolution it made every
    word of the chunk compute all window positions. Values and gradients are unchanged."""
    from pyelmo.modeling import encoder as encoder_module

    model = _model()
    ids = batch_to_ids([["a", "cat", "ran"], ["dogs"]])  # the second row is padded: an all-zero token
    assert not bool(ids[1, -1].any())
    seen = []
    real = encoder_module.TokenEncoder.forward
    monkeypatch.setattr(encoder_module.TokenEncoder, "forward",
                        lambda self, chars, *a, **k: seen.append(chars.clone()) or real(self, chars, *a, **k))
    weights = None
    layers = {}
    for name, (bilm, options) in (("fused", _training(model.bilm, products)), ("plain", (model.bilm, RunOptions()))):
        seen.clear()
        bilm.zero_grad()
        out = bilm(ids, options=options).layers
        if weights is None:
            weights = torch.arange(out.numel()).view_as(out).sin()
        (out * weights).sum().backward()
        layers[name] = (out.detach(), [p.grad.clone() for p in bilm.parameters()])
        encoded = torch.cat([c.reshape(-1, c.shape[-1]) for c in seen])
        assert encoded.any(dim=1).all()  # no all-zero (padding) row reached the encoder
        assert len(torch.unique(encoded, dim=0)) == 6  # the 4 distinct words and <S>, </S>
    (fused, fused_grads), (plain, plain_grads) = layers["fused"], layers["plain"]
    assert (fused - plain).abs().max() < 1e-5 and plain.abs().max() > 0.1
    assert (fused[:, 1, 1:] == 0).all()  # padding positions stay zero
    for got, expected in zip(fused_grads, plain_grads):
        assert (got - expected).abs().max() < 1e-5


def test_a_trained_linear_is_the_differentiable_products_choice_only():
    from pyelmo.runtime.swap import swap_linears
    from pyelmo.runtime.plan import ExecutionPlan
    from pyelmo.runtime.products import Products

    with pytest.raises(ValueError, match="not a plan's"):
        Products(ExecutionPlan(), trained_linear=PrepackedTrainingLinear)
    with pytest.raises(ValueError, match="have none"):
        swap_linears(torch.nn.Linear(3, 2), PLAIN)
    layer = torch.nn.Sequential(torch.nn.Linear(3, 2))
    weight = layer[0].weight
    swap_linears(layer, Products(trained_linear=PrepackedTrainingLinear))
    assert type(layer[0]) is PrepackedTrainingLinear and layer[0].weight is weight
