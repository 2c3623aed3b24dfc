"""The model reproduces the original implementation's outputs on the two reference models."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.cli import main
from pyelmo.runtime.options import CarriedStates, RunOptions
from pyelmo.modelio.weights import load_bilm_hdf5

ATOL = 1e-5


def _top(model, batch, options=None, final_state=True):
    with torch.no_grad():
        return model(batch_to_ids(batch), options=options, final_state=final_state).layers[-1].numpy()


def _stateful(backend: str) -> RunOptions:
    return RunOptions(states=CarriedStates()) if backend == "differentiable" else RunOptions.inference(stateful=True)


@pytest.mark.parametrize("final_state", [True, False])
@pytest.mark.parametrize("backend", ["differentiable", "inference"])
def test_first_batch_stateless(reference, backend, final_state):
    model = load_bilm_hdf5(reference.options, reference.weights)
    batch = reference.batch(0)
    top = _top(model, batch, None if backend == "differentiable" else RunOptions.inference(), final_state)
    for k, sentence in enumerate(batch):
        np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, 0), atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", ["differentiable", "inference"])
def test_all_batches_stateful(reference, backend):
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = _stateful(backend)
    for i in range(10):
        batch = reference.batch(i)
        top = _top(model, batch, options)
        for k, sentence in enumerate(batch):
            np.testing.assert_allclose(top[k, : len(sentence)], reference.expected(k, i), atol=ATOL, rtol=0)


def test_final_states_continue_explicitly(reference):
    """Stateful mode by hand: each call's ``final_state`` as the next call's ``initial_state``."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    state = None
    for i in range(3):
        batch = reference.batch(i)
        with torch.no_grad():
            output = model(batch_to_ids(batch), initial_state=state)
        state = output.final_state
        for k, sentence in enumerate(batch):
            np.testing.assert_allclose(output.layers[-1, k, : len(sentence)].numpy(), reference.expected(k, i),
                                       atol=ATOL, rtol=0)


def test_stateless_differs_from_stateful_after_first_batch(reference):
    """Guards the test above: batches 1..9 really need the carried states."""
    model = load_bilm_hdf5(reference.options, reference.weights)
    top = _top(model, reference.batch(1))
    assert np.abs(top[0, : len(reference.batch(1)[0])] - reference.expected(0, 1)).max() > 1e-3


@pytest.mark.parametrize("backend", ["differentiable", "inference"])
def test_reset_states_restarts_from_zero(reference, backend):
    model = load_bilm_hdf5(reference.options, reference.weights)
    options = _stateful(backend)
    first = _top(model, reference.batch(0), options)
    _top(model, reference.batch(1), options)
    options.states.reset()
    np.testing.assert_array_equal(_top(model, reference.batch(0), options), first)


def test_token_encoder_matches_dumped_token_embeddings(allennlp_reference):
    ref = allennlp_reference
    model = load_bilm_hdf5(ref.options, ref.weights)
    vocab = [w for w in (ref.dir / "vocab_test.txt").read_text().split("\n") if w]
    with h5py.File(ref.dir / "elmo_token_embeddings.hdf5", "r") as f:
        expected = f["embedding"][...]
    assert len(vocab) == len(expected)
    with torch.no_grad():
        got = model.token_encoder(batch_to_ids([[w] for w in vocab]))[:, 0].numpy()
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)


def test_cli_embed_stateful_reproduces_reference(reference, tmp_path):
    lines = [" ".join(s) for i in range(10) for s in reference.batch(i)]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.hdf5"
    code = main(["embed", str(text), str(out), "--all", "--stateful", "--batch-size", "3", "--no-progress",
                 "--options-file", str(reference.options), "--weight-file", str(reference.weights)])
    assert code == 0
    with h5py.File(out, "r") as f:
        assert len(f) == 31  # 30 sentences + sentence_to_index
        for i in range(10):
            for k in range(3):
                got = f[str(3 * i + k)][...]
                assert got.shape == (3, len(reference.batch(i)[k]), 32)
                np.testing.assert_allclose(got[-1], reference.expected(k, i), atol=ATOL, rtol=0)


def test_stateful_rows_keep_their_states_when_a_batch_shrinks(reference):
    """Batches of 4, 6, 2, 5 sentences: each row continues from the last batch that had that row.

    The expectation is computed independently: one batch-of-one stateful stream per row.
    """
    from pyelmo.embedding.embedder import ElmoEmbedder

    words = [s.split() for group in reference.sentences for s in group]
    sizes, batches, start = (4, 6, 2, 5), [], 0
    for size in sizes:
        batches.append([words[(start + i) % len(words)] for i in range(size)])
        start += size
    embedder = ElmoEmbedder(load_bilm_hdf5(reference.options, reference.weights), stateful=True)
    got = [embedder.embed_batch(batch) for batch in batches]
    for row in range(max(sizes)):
        stream = ElmoEmbedder(load_bilm_hdf5(reference.options, reference.weights), stateful=True)
        for b, batch in enumerate(batches):
            if row < len(batch):
                expected = stream.embed_sentence(batch[row])
                np.testing.assert_allclose(got[b][row], expected, atol=ATOL, rtol=0, err_msg=f"batch {b} row {row}")
