"""A planned biLM (pyelmo.runtime.planning.plan_model: an execution plan's products, the token
cache) and the embedder's speed-ups (token-budget batching, background writing) compute the same
numbers as the model's own differentiable modules, within 1e-5, with every float32 kernel."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.modeling.encoder import FusedConvMax, conv_max_gemm, encode_distinct, padded_conv_weights
from pyelmo.modeling.lstm import Workspace, run_lstm
from pyelmo.runtime.linear import BFloat16Linear
from pyelmo.runtime.planning import INPUT_GATE_CHUNK_ROWS, PlannedConvMax, plan_model
from pyelmo.runtime.options import CarriedStates, RunOptions
from pyelmo.runtime.plan import KERNELS, ExecutionPlan, onednn_available
from pyelmo.runtime.precision import bf16_supported
from pyelmo.runtime.kernels import onednn_rows
from pyelmo.runtime.products import Products
from pyelmo.modeling.rows import PackedRows
from pyelmo.runtime.token_cache import TokenCache
from pyelmo.text.batching import token_budget_batches

ATOL = 1e-5
#: An explicit bfloat16 plan: bfloat16 products on any CPU (through torch's bfloat16 matmul where the
#: CPU has no bfloat16 instructions, slowly), unlike ``precision="bfloat16"`` for this machine
#: (``for_machine``), which stays exact there.
BF16 = ExecutionPlan(precision="bfloat16")


@pytest.fixture(params=[k for k in KERNELS if k != "onednn" or onednn_available()])
def plan(request) -> ExecutionPlan:
    """The tests that take it run once per float32 kernel, forced for every product."""
    return ExecutionPlan(kernels=request.param)


def _config(skip: bool = True, activation: str = "relu", clip: float | None = 3.0) -> ElmoConfig:
    return ElmoConfig(
        char_cnn=CharCNNConfig(filters=((1, 4), (2, 8), (3, 8), (5, 16)), n_highway=2, embedding_dim=6,
                               activation=activation),
        lstm=LSTMConfig(dim=24, projection_dim=10, n_layers=2, cell_clip=clip, proj_clip=clip,
                        use_skip_connections=skip),
    )


def _model(seed: int = 0, **kwargs) -> BiLM:
    torch.manual_seed(seed)
    model = BiLM(_config(**kwargs))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.4)  # large enough that the clips and all gates matter
    return model.eval()


def _sentences(n: int, seed: int, max_len: int = 12) -> list[list[str]]:
    rng = random.Random(seed)
    words = ["the", "a", "cat", "élan", "naïve", "<S>", "x" * 60, "dog", "ran", ".", ",", "日本"]
    return [[rng.choice(words) for _ in range(rng.randint(1, max_len))] for _ in range(n)]


def _layers(model: BiLM, ids: torch.Tensor, plan: ExecutionPlan | None = None, keep: bool = False,
            grad: bool = False, options: RunOptions | None = None) -> torch.Tensor:
    """The model's own modules (no ``plan``, no ``options``), or a copy of it planned for ``plan``'s inference
    options (or ``options``'), made once per options."""
    if options is None:
        options = RunOptions.inference(plan) if plan is not None else RunOptions()
    with torch.set_grad_enabled(grad):
        return _run_model(model, options)(ids, keep_sentence_boundaries=keep, options=options).layers


def _run_model(model: BiLM, options: RunOptions) -> BiLM:
    """``model`` for differentiable ``options``, else its copy planned for them (made on first use, then kept)."""
    if options.plan is None:
        return model
    kept = getattr(options, "_planned_copy", None)
    if kept is None or kept[0] is not model:
        kept = options._planned_copy = (model, plan_model(copy.deepcopy(model), options))
    return kept[1]


@pytest.mark.parametrize("kwargs", [{}, {"skip": False}, {"activation": "tanh"}, {"clip": None}])
@pytest.mark.parametrize("keep", [False, True])
def test_inference_equals_differentiable(kwargs, keep, plan):
    model = _model(**kwargs)
    ids = batch_to_ids(_sentences(9, seed=1))
    plain = _layers(model, ids, keep=keep)
    fast = _layers(model, ids, plan, keep=keep)
    assert fast.shape == plain.shape
    assert (plain - fast).abs().max() < ATOL
    assert plain.abs().max() > 0.1  # not trivially zero


def test_differentiable_backend_with_grad_equals_inference(plan):
    model = _model()
    ids = batch_to_ids(_sentences(5, seed=2))
    with_grad = _layers(model, ids, grad=True)
    assert with_grad.requires_grad
    with_grad.sum().backward()
    assert all(p.grad is not None for p in model.directions.parameters())
    assert model.token_encoder.convolutions[0].weight.grad.abs().sum() > 0
    fast = _layers(model, ids, plan)
    assert not fast.requires_grad and not _layers(model, ids, plan, grad=True).requires_grad  # planned: frozen
    assert (with_grad.detach() - fast).abs().max() < ATOL


def test_dropout_applies_in_both_backends(plan):
    model = _model()
    model.dropout.p = 0.5
    model.train()
    ids = batch_to_ids(_sentences(4, seed=3))
    for used in (None, plan):
        a, b = _layers(model, ids, used), _layers(model, ids, used)
        assert (a - b).abs().max() > 1e-3
    model.eval()
    assert (_layers(model, ids, plan) - _layers(model, ids)).abs().max() < ATOL


def test_stateful_inference_equals_differentiable(plan):
    model = _model()
    fast_options, plain_options = RunOptions.inference(plan, stateful=True), RunOptions(states=CarriedStates())
    for i, n in enumerate([4, 6, 2, 5]):  # growing and shrinking batches: carried rows
        ids = batch_to_ids(_sentences(n, seed=10 + i))
        plain = _layers(model, ids, options=plain_options)
        fast = _layers(model, ids, options=fast_options)
        assert (plain - fast).abs().max() < ATOL
    for a, b in [(fast_options.states.h, plain_options.states.h), (fast_options.states.c, plain_options.states.c)]:
        assert a.shape[2] == 6 and (a - b).abs().max() < ATOL


def test_options_are_validated():
    with pytest.raises(ValueError, match="token cache"):
        RunOptions(token_cache=TokenCache())
    assert RunOptions().differentiable and not RunOptions.inference().differentiable
    assert RunOptions().products is None and RunOptions.inference().products.plan == RunOptions.inference().plan
    assert RunOptions.inference(token_cache_size=3).token_cache.max_size == 3
    assert RunOptions.inference().token_cache is None and not RunOptions.inference().stateful


def test_inference_keeps_its_own_precision_under_autocast(plan):
    """An enclosing bfloat16 autocast (e.g. a bf16 training step around validation) does not reach the
    inference backend, whose products choose their own precision: the same outputs as without it."""
    model = _model()
    ids = batch_to_ids(_sentences(9, seed=1))
    expected = _layers(model, ids, plan)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _layers(model, ids, plan)
    assert got.dtype == torch.float32 and torch.equal(got, expected)


def test_workspace_buffers_are_reused_across_calls_and_grow(plan):
    """The inference loop's gate buffer is kept by the backend's workspace: the same memory at the next
    call of the same size, a larger one for a larger batch, and the outputs unchanged."""
    model = _model()
    options = RunOptions.inference(plan)
    workspace = _run_model(model, options).level.workspace
    small, large = batch_to_ids(_sentences(3, seed=2)), batch_to_ids(_sentences(40, seed=3))
    first = _layers(model, small, options=options)
    kept = workspace._buffers["gates"]
    again = _layers(model, small, options=options)
    assert workspace._buffers["gates"] is kept and torch.equal(first, again)
    big = _layers(model, large, options=options)
    assert workspace._buffers["gates"].numel() > kept.numel()
    assert (big - _layers(model, large)).abs().max() < ATOL
    assert torch.equal(_layers(model, small, options=options), first)
    workspace = Workspace()
    view = workspace.buffer("x", (2, 3), torch.zeros(1, dtype=torch.bfloat16))
    assert view.shape == (2, 3) and view.dtype == torch.bfloat16
    assert workspace.buffer("x", (3, 2), torch.zeros(1)).dtype == torch.float32  # another dtype: a new buffer


def test_both_backends_reproduce_reference(reference, plan):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    for used in (plan, None):
        top = _layers(model, batch_to_ids(batch), used)[-1].numpy()
        for k, sentence in enumerate(batch):
            np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)


def test_inference_reproduces_stateful_reference_with_token_cache(reference, plan):
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = RunOptions.inference(plan, stateful=True, token_cache_size=7)  # small: evictions happen
    with torch.no_grad():
        for i in range(10):
            top = model(batch_to_ids(reference.batch(i)), options=options).layers[-1].numpy()
            for k, sentence in enumerate(reference.batch(i)):
                np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, i), atol=ATOL, rtol=0)
    assert options.token_cache.hits > 0 and len(options.token_cache) == 7


def test_inference_on_random_inputs_of_the_reference_models(reference, plan):
    """Random sentences (unknown words, long tokens, length 1 to 30) through the released models."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    ids = batch_to_ids(_sentences(12, seed=21, max_len=30))
    plain, fast = _layers(model, ids), _layers(model, ids, plan)
    assert (plain - fast).abs().max() < ATOL and plain.abs().max() > 0.1


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_char_cnn_as_one_product_equals_convolutions(activation, plan):
    encoder = _model(activation=activation).token_encoder
    ids = batch_to_ids(_sentences(6, seed=4)).reshape(-1, 50)
    with torch.no_grad():
        chars = encoder.char_embedding(ids).transpose(1, 2)
        expected = torch.cat([conv(chars).amax(-1) for conv in encoder.convolutions], -1)
        plain = encoder(ids)
        for fused in (FusedConvMax(), PlannedConvMax(Products(plan))):  # torch products; the plan's kernel
            got = conv_max_gemm(encoder.char_embedding, ids, fused.fused(encoder.convolutions))
            assert (got - expected).abs().max() < ATOL
            encoder.conv_max = fused
            assert (encoder(ids) - plain).abs().max() < ATOL


def test_char_cnn_pools_bfloat16_responses_before_converting():
    """In the bfloat16 mode the convolution responses stay bfloat16 until after the max: the same
    numbers as converting every response to float32 first (the max commutes with the conversion)."""
    encoder = _model().token_encoder
    ids = batch_to_ids(_sentences(6, seed=4)).reshape(-1, 50)
    products = Products(ExecutionPlan(precision="bfloat16", kernels="mm"))  # runs (slowly) on any CPU
    with torch.no_grad():
        got = conv_max_gemm(encoder.char_embedding, ids, PlannedConvMax(products).fused(encoder.convolutions))
        weight, bias, _ = padded_conv_weights(encoder.convolutions)
        assert got.dtype == torch.float32
        converted = BFloat16Linear(weight, None, products).native(torch.zeros(1, weight.shape[1]))
        assert converted.dtype == torch.bfloat16
        chars = encoder.char_embedding(ids).to(torch.bfloat16).float().transpose(1, 2)
        expected = torch.cat([conv(chars).amax(-1) for conv in encoder.convolutions], -1)
        assert (got - expected).abs().max() < 0.05  # bfloat16 products
        # exactly the float32 max of the same bfloat16 products
        original_native = BFloat16Linear.native
        BFloat16Linear.native = lambda self, x: original_native(self, x).float()
        try:
            products = Products(ExecutionPlan(precision="bfloat16", kernels="mm"))
            fused = PlannedConvMax(products).fused(encoder.convolutions)
            assert torch.equal(conv_max_gemm(encoder.char_embedding, ids, fused), got)
        finally:
            BFloat16Linear.native = original_native


def test_token_cache_equals_encoder_and_stays_bounded(plan):
    encoder = _model().token_encoder
    cache = TokenCache(max_size=5)
    plain = copy.deepcopy(encoder)
    encoder.conv_max = PlannedConvMax(Products(plan))
    with torch.no_grad():
        for seed in range(4):
            ids = batch_to_ids(_sentences(5, seed=seed)).reshape(-1, 50)
            ids = ids[ids.gt(0).any(-1)]
            assert (encode_distinct(encoder, ids, cache) - plain(ids)).abs().max() < ATOL
            assert (encode_distinct(encoder, ids) - plain(ids)).abs().max() < ATOL
            assert len(cache) <= 5 and cache._vectors.shape[0] <= 5
        assert cache.hits > 0 and cache.misses > 0


def test_token_cache_follows_weight_updates():
    encoder = _model().token_encoder
    cache = TokenCache()
    ids = batch_to_ids([["a", "cat"]])[0]
    with torch.no_grad():
        encode_distinct(encoder, ids, cache=cache)
        encoder.projection.bias.add_(1.0)  # in-place update, as an optimizer step does
        assert (encode_distinct(encoder, ids, cache=cache) - encoder(ids)).abs().max() < ATOL


def test_onednn_row_sizes_are_few_and_close():
    """oneDNN keeps a kernel per input shape: row counts are padded to a few sizes, with little waste."""
    sizes = [onednn_rows(rows) for rows in range(1, 13_000)]
    assert all(size >= rows for rows, size in enumerate(sizes, start=1))
    assert sizes[:64] == list(range(1, 65))  # the fixed rule's oneDNN products (at most 64 rows) are not padded
    assert all(size <= 1.125 * rows + 8 for rows, size in enumerate(sizes, start=1))
    assert len(set(sizes)) <= 64 + 48


def test_prepared_weights_follow_weight_updates(plan):
    """Weights packed (oneDNN) or stacked for the planned products, and the fused convolutions' weights, are
    remade when new weights are loaded."""
    model = _model()
    ids = batch_to_ids(_sentences(6, seed=6))
    options = RunOptions.inference(plan)
    _layers(model, ids, options=options)  # prepares the weights
    other = _model(seed=1)
    _run_model(model, options).load_state_dict(other.state_dict())
    assert (_layers(model, ids, options=options) - _layers(other, ids)).abs().max() < ATOL


def test_packed_batch_covers_every_position_once():
    lengths = torch.tensor([3, 7, 1, 7, 4])
    packed = PackedRows(lengths, steps=7)
    expected = sorted(r * 7 + p for r, n in enumerate(lengths.tolist()) for p in range(n))
    assert sorted(packed.forward_src.tolist()) == expected
    assert sorted(packed.backward_src.tolist()) == expected
    assert packed.batch_sizes == [5, 4, 4, 3, 2, 2, 2]
    # backward reads each row reversed within its length
    row = packed.forward_src // 7
    assert torch.equal(packed.backward_src // 7, row)
    assert torch.equal(packed.forward_src % 7 + packed.backward_src % 7, lengths[row] - 1)


def test_gate_blocks_cover_the_steps_in_order_within_the_chunk():
    packed = PackedRows(torch.tensor([3, 7, 1, 7, 4]), steps=7)  # step sizes 5, 4, 4, 3, 2, 2, 2
    blocks = packed.gate_blocks(8)
    assert [t for a, b in blocks for t in range(a, b)] == list(range(7))
    assert blocks == [(0, 1), (1, 3), (3, 6), (6, 7)]  # 5 | 4 + 4 | 3 + 2 + 2 | 2
    assert packed.gate_blocks(4) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 7)]  # a 5-row step alone
    assert packed.gate_blocks(None) == [(0, 7)]  # the differentiable backend: one product
    assert packed.gate_blocks(INPUT_GATE_CHUNK_ROWS) == [(0, 7)]  # 22 rows in all


def _one_direction(layer, x: torch.Tensor, rows: PackedRows, h0: torch.Tensor, c0: torch.Tensor):
    """A step-by-step loop with ``torch`` products for one direction over packed ``x (n_packed, in)``,
    states in sorted row order: the outputs ``(n_packed, P)`` and the final ``h``, ``c``."""
    h, c, outputs = h0.clone(), c0.clone(), []
    for t, n in enumerate(rows.batch_sizes):  # the first n sorted rows are still running
        step = x[rows.offsets[t] : rows.offsets[t] + n]
        gates = F.linear(step, layer.input_gates.weight, layer.gate_bias()) + F.linear(h[:n], layer.state_gates.weight)
        hidden, c[:n] = layer.cell(gates, c[:n])
        h[:n] = layer.clip_projection(F.linear(hidden, layer.projection.weight))
        outputs.append(h[:n].clone())
    return torch.cat(outputs), h, c


def test_direction_fusion_equals_each_direction_alone(plan):
    """``run_lstm`` over both directions of a level (inference, and differentiable) equals each direction
    run alone, and a plain step-by-step loop."""
    model = _model()
    lengths = torch.tensor([6, 3, 6, 1])
    packed = PackedRows(lengths, steps=6)
    assert packed.order.tolist() == [0, 2, 1, 3]
    torch.manual_seed(5)
    x = torch.randn(2, packed.n_packed, 10)
    h0, c0 = torch.randn(2, 4, 10), torch.randn(2, 4, 24)
    pair = [model.directions[0][0], model.directions[1][0]]
    options = RunOptions.inference(plan)
    planned = _run_model(model, options)  # its planned linears
    fast = [planned.directions[0][0], planned.directions[1][0]]
    work = (planned.level.workspace, planned.level.chunk_rows)
    with torch.no_grad():
        both = {"inference": run_lstm(fast, x, packed, h0.clone(), c0.clone(), *work),
                "differentiable": run_lstm(pair, x, packed, h0.clone(), c0.clone())}
        for d in range(2):
            alone = run_lstm([fast[d]], x[d : d + 1], packed, h0[d : d + 1].clone(), c0[d : d + 1].clone(), *work)
            expected = _one_direction(pair[d], x[d], packed, h0[d], c0[d])
            assert expected[0].abs().max() > 0.1
            for out, h, c in [*both.values(), alone]:
                k = d if out.shape[0] == 2 else 0
                assert (out[k] - expected[0]).abs().max() < ATOL
                assert (h[k] - expected[1]).abs().max() < ATOL and (c[k] - expected[2]).abs().max() < ATOL


def test_token_budget_batches():
    lengths = [1, 3, 3, 5, 8, 8, 20]
    order = list(range(len(lengths)))
    batches = token_budget_batches(order, lengths, batch_size=2, max_tokens=20)
    assert [i for b in batches for i in b] == order
    for b in batches:
        assert len(b) == 1 or len(b) * (max(lengths[i] for i in b) + 2) <= 20
    assert token_budget_batches(order, lengths, 3, None) == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize("stateful", [False, True])
def test_embedder_batching_and_cache_do_not_change_vectors(stateful, plan):
    model = _model()
    sentences = _sentences(40, seed=6, max_len=15) + [[]]
    reference = ElmoEmbedder(model, batch_size=1, stateful=stateful, max_tokens=None, token_cache_size=0, plan=plan)
    expected = list(reference.embed_sentences(sentences))
    for max_tokens, cache in [(None, 0), (30, 0), (64, 4), (10_000, 1000)]:
        embedder = ElmoEmbedder(_model(), batch_size=1 if stateful else 4, stateful=stateful,
                                max_tokens=max_tokens, token_cache_size=cache, plan=plan)
        assert embedder.options.plan is plan
        got = list(embedder.embed_sentences(sentences))
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.shape == b.shape
            assert np.abs(a - b).max(initial=0) < ATOL


def test_embed_file_defaults_equal_differentiable_settings(tmp_path, plan):
    sentences = [" ".join(s) for s in _sentences(50, seed=7)]
    sentences += sentences[:5] + ["the cat"]  # repeated sentences: sentence_to_index keeps the last index
    text = tmp_path / "in.txt"
    text.write_text("\n".join(sentences) + "\n")
    fast_out, plain_out = tmp_path / "fast.hdf5", tmp_path / "plain.hdf5"
    ElmoEmbedder(_model(), plan=plan).embed_file(text, fast_out)
    plain = ElmoEmbedder(_model(), max_tokens=None, token_cache_size=0)
    plain.options = RunOptions()  # the differentiable backend
    plain.embed_file(text, plain_out)
    with h5py.File(fast_out, "r") as f, h5py.File(plain_out, "r") as g:
        assert set(f) == set(g) == {str(i) for i in range(len(sentences))} | {"sentence_to_index"}
        for key in f:
            if key != "sentence_to_index":
                assert np.abs(f[key][...] - g[key][...]).max(initial=0) < ATOL
        index = f["sentence_to_index"][0]
        index = index.decode() if isinstance(index, bytes) else index
        expected = {}
        for i, s in enumerate(sentences):
            expected[s] = str(i)
        assert index == json.dumps(expected)
        assert f.attrs["execution_plan"] == plan.summary()
        assert set(json.loads(f.attrs["kernels_used"]).values()) == {plan.kernels}  # the forced kernel
        assert "execution_plan" not in g.attrs  # no plan: the differentiable backend's torch products


def test_embed_file_sentence_keys_keep_first(tmp_path):
    text = tmp_path / "in.txt"
    text.write_text("a cat\nthe dog\na cat\n")
    out = tmp_path / "out.hdf5"
    count = ElmoEmbedder(_model()).embed_file(text, out, use_sentence_keys=True)
    assert count == 2
    with h5py.File(out, "r") as f:
        assert set(f) == {"a cat", "the dog", "sentence_to_index"}
        index = f["sentence_to_index"][0]
        assert json.loads(index) == {"a cat": "0", "the dog": "1"}


def test_shards_merge_to_the_unsharded_file(tmp_path):
    from pyelmo.cli import main
    from pyelmo.embedding.merge import merge_shards
    from pyelmo.modelio.weights import save_bilm_hdf5

    sentences = [" ".join(s) for s in _sentences(21, seed=8)] + ["a cat", "the dog", "a cat"]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(sentences) + "\n")
    save_bilm_hdf5(_model(), tmp_path / "options.json", tmp_path / "weights.hdf5")
    model_args = ["--options-file", str(tmp_path / "options.json"), "--weight-file", str(tmp_path / "weights.hdf5")]
    assert main(["embed", str(text), str(tmp_path / "full.hdf5"), "--no-progress", *model_args]) == 0
    for rank in range(3):
        assert main(["embed", str(text), str(tmp_path / "part{rank}.hdf5"), "--shard", f"{rank}/3",
                     "--no-progress", *model_args]) == 0
    shards = [str(tmp_path / f"part{r}.hdf5") for r in range(3)]
    assert merge_shards(shards, tmp_path / "linked.hdf5", links=True) == len(sentences)
    assert main(["embed-merge", *shards, str(tmp_path / "merged.hdf5")]) == 0
    with h5py.File(tmp_path / "linked.hdf5", "r") as f:
        assert f.get("0", getlink=True).__class__ is h5py.ExternalLink
    for shard in shards:  # the default merge is self-contained: it reads without the shard files
        Path(shard).rename(shard + ".moved")
    with h5py.File(tmp_path / "full.hdf5", "r") as f, h5py.File(tmp_path / "merged.hdf5", "r") as g:
        assert set(f) == set(g)
        for key in f:
            if key != "sentence_to_index":
                assert np.abs(f[key][...] - g[key][...]).max(initial=0) < ATOL
        assert json.loads(f["sentence_to_index"][0]) == json.loads(g["sentence_to_index"][0])
    with h5py.File(tmp_path / "part1.hdf5.moved", "r") as f:
        assert set(f) == {str(i) for i in range(1, len(sentences), 3)} | {"sentence_to_index"}



needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU has no bfloat16 instructions")
without_bf16 = pytest.mark.skipif(bf16_supported(), reason="this CPU has bfloat16 instructions")


@without_bf16
def test_bf16_request_stays_exact_without_bf16_instructions():
    """Where bfloat16 products would be far slower than float32, ``precision="bfloat16"`` computes exact float32."""
    model = _model()
    ids = batch_to_ids(_sentences(5, seed=3))
    exact = _layers(model, ids, ExecutionPlan.for_machine())
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="no bfloat16 matrix instructions"):
        options = RunOptions.inference(precision="bfloat16")
    assert options.plan.precision == "float32" and options.products.dtype is None and options.dtype == torch.float32
    assert (_layers(model, ids, options=options) - exact).abs().max() == 0


@without_bf16
def test_bf16_request_warns_without_bf16_instructions():
    """... and says so (as ``pyelmo embed --help`` promises)."""
    with pytest.warns(RuntimeWarning, match="no bfloat16 matrix instructions"):
        RunOptions.inference(precision="bfloat16")


@needs_bf16
def test_bf16_request_runs_bfloat16_with_bf16_instructions():
    options = RunOptions.inference(precision="bfloat16")
    assert options.plan.precision == "bfloat16" and options.dtype == torch.bfloat16


def test_bf16_mode_is_close_to_exact_and_switches_back():
    """The explicit reduced-precision mode: bfloat16 products, float32 states; relative error ~1e-2.
    (An explicit bfloat16 plan: it runs on any CPU.)"""
    model = _model()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.25)  # a realistic scale (the default _model saturates every gate)
    ids = batch_to_ids(_sentences(9, seed=3))
    exact = _layers(model, ids, ExecutionPlan())
    options = RunOptions.inference(BF16)
    low = _layers(model, ids, options=options)
    assert options.dtype == torch.bfloat16 and low.dtype == torch.float32
    error = float((low - exact).abs().max() / exact.abs().max())
    assert 0 < error < 3e-2
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)  # weights change: the bfloat16 copies must follow
    again = _layers(model, ids, BF16)  # the weights changed: planned again
    exact2 = _layers(model, ids, ExecutionPlan())
    error2 = float((again - exact2).abs().max() / exact2.abs().max())
    assert 0 < error2 < 3e-2
    assert (_layers(model, ids) - exact2).abs().max() < ATOL


def test_embed_bf16_flag(tmp_path):
    """``--bf16``: bfloat16 products where the CPU has bfloat16 instructions, else exact float32; the
    file records which."""
    from pyelmo.cli import main
    from pyelmo.modelio.weights import save_bilm_hdf5

    model = _model()
    options, weights = tmp_path / "o.json", tmp_path / "w.hdf5"
    save_bilm_hdf5(model, options, weights)
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in _sentences(20, seed=4)) + "\n", encoding="utf-8")
    args = ["--options-file", str(options), "--weight-file", str(weights), "--no-progress"]
    assert main(["embed", str(text), str(tmp_path / "a.h5"), *args]) == 0
    assert main(["embed", str(text), str(tmp_path / "b.h5"), "--bf16", *args]) == 0
    with h5py.File(tmp_path / "a.h5") as f, h5py.File(tmp_path / "b.h5") as g:
        diffs = [float(np.abs(f[k][...] - g[k][...]).max()) for k in f if k != "sentence_to_index"]
        precision = "bfloat16" if bf16_supported() else "float32"
        assert f"precision={precision} " in g.attrs["execution_plan"]
        assert g.attrs["precision"] == precision and f.attrs["precision"] == "float32"  # the one spelling
    assert (0 < max(diffs) < 0.1) if bf16_supported() else max(diffs) == 0
