"""Weight files: bit-exact HDF5 round trip, native format, and clear errors for bad files."""

from __future__ import annotations

import json
import pickle

import h5py
import numpy as np
import pytest
import torch

from pyelmo.modeling.characters import batch_to_ids
from pyelmo.config import ElmoConfig, preset
from pyelmo.errors import ConfigError, WeightFileError
from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio.resolve import load
from pyelmo.modelio.weights import from_pretrained, load_bilm_hdf5, save_bilm_hdf5, save_pretrained

SENTENCES = [["The", "bank", "closed", "."], ["River", "bank"]]


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


def _outputs(model):
    with torch.no_grad():
        return model(batch_to_ids(SENTENCES)).layers


def test_hdf5_round_trip_is_bit_exact(reference, tmp_path):
    model = load_bilm_hdf5(reference.options, reference.weights)
    save_bilm_hdf5(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    original, written = _datasets(reference.weights), _datasets(tmp_path / "weights.hdf5")
    # char_embed, 5 filters x (W, b), 2 highways x 4, projection W and b, 2 directions x 2 layers x 3
    assert sorted(original) == sorted(written) and len(written) == 1 + 5 * 2 + 2 * 4 + 2 + 2 * 2 * 3
    for name, array in original.items():
        assert written[name].dtype == np.float32
        np.testing.assert_array_equal(written[name], array, err_msg=name)
    assert ElmoConfig.from_options(json.loads((tmp_path / "options.json").read_text())) == model.config


def test_native_round_trip_gives_identical_outputs(reference, tmp_path):
    model = load_bilm_hdf5(reference.options, reference.weights)
    save_pretrained(model, tmp_path / "m")
    again = from_pretrained(tmp_path / "m")
    assert torch.equal(_outputs(model), _outputs(again))
    assert torch.equal(_outputs(load(tmp_path / "m")), _outputs(model))


def test_options_round_trip_losslessly(reference):
    options = json.loads(reference.options.read_text())
    assert ElmoConfig.from_options(options).to_options() == options


def _copy_without(src, dst, drop=None, replace=None):
    with h5py.File(dst, "w") as g:
        for name, array in _datasets(src).items():
            if name == drop:
                continue
            g.create_dataset(name, data=replace[1] if replace and name == replace[0] else array)


def test_missing_dataset_shape_mismatch_and_nan_are_named(reference, tmp_path):
    bad = tmp_path / "bad.hdf5"
    _copy_without(reference.weights, bad, drop="CNN_proj/W_proj")
    with pytest.raises(WeightFileError, match="CNN_proj/W_proj"):
        load_bilm_hdf5(reference.options, bad)
    _copy_without(reference.weights, bad, replace=("CNN_proj/b_proj", np.zeros(7, np.float32)))
    with pytest.raises(WeightFileError, match=r"CNN_proj/b_proj.*\(7,\)"):
        load_bilm_hdf5(reference.options, bad)
    nan = _datasets(reference.weights)["CNN_proj/b_proj"].copy()
    nan[0] = np.nan
    _copy_without(reference.weights, bad, replace=("CNN_proj/b_proj", nan))
    with pytest.raises(WeightFileError, match="NaN"):
        load_bilm_hdf5(reference.options, bad)


def test_options_contradicting_weights(reference, tmp_path):
    options = json.loads(reference.options.read_text())
    options["lstm"]["dim"] = 32
    (tmp_path / "o.json").write_text(json.dumps(options))
    with pytest.raises(WeightFileError, match="shape"):
        load_bilm_hdf5(tmp_path / "o.json", reference.weights)


@pytest.mark.parametrize("content", [b"", b"not hdf5 at all", None])
def test_missing_truncated_or_corrupt_weight_file(reference, tmp_path, content):
    path = tmp_path / "w.hdf5"
    if content is None:
        data = reference.weights.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(content)
    with pytest.raises(WeightFileError):
        load_bilm_hdf5(reference.options, path)
    with pytest.raises(WeightFileError, match="not found"):
        load_bilm_hdf5(reference.options, tmp_path / "missing.hdf5")


@pytest.mark.parametrize("options", ["{", "[]", '{"lstm": {}}', json.dumps({"lstm": {"dim": -3, "projection_dim": 4, "n_layers": 1}, "char_cnn": {"filters": [[1, 4]], "n_highway": 0, "embedding": {"dim": 4}}}),
                                     json.dumps({"lstm": {"dim": "big", "projection_dim": 4, "n_layers": 1}, "char_cnn": {"filters": [[1, 4]], "n_highway": 0, "embedding": {"dim": 4}}})])
def test_bad_options(tmp_path, options, reference):
    (tmp_path / "o.json").write_text(options)
    with pytest.raises((WeightFileError, ConfigError), match="o.json"):  # unreadable file / bad config, named
        load_bilm_hdf5(tmp_path / "o.json", reference.weights)


def test_native_refuses_corrupt_and_pickle(tmp_path, tiny_model):
    save_pretrained(tiny_model, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError, match="safetensors"):
        from_pretrained(tmp_path / "m")

    class Boom:
        def __reduce__(self):
            return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))

    weights.write_bytes(pickle.dumps({"x": Boom()}))
    with pytest.raises(WeightFileError):
        from_pretrained(tmp_path / "m")
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(WeightFileError, match="is a file"):
        load(weights)


def test_released_original_size_builds_saves_loads_and_embeds(tmp_path):
    torch.manual_seed(0)
    model = BiLM(preset("original")).eval()
    n_params = sum(p.numel() for p in model.parameters())
    assert abs(n_params - 93.6e6) < 0.1e6, n_params
    save_bilm_hdf5(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    again = load_bilm_hdf5(tmp_path / "options.json", tmp_path / "weights.hdf5")
    ids = batch_to_ids([["Hello", "world", "."]])
    with torch.no_grad():
        a, b = model(ids).layers, again(ids).layers
    assert a.shape == (3, 1, 3, 1024)
    assert torch.equal(a, b)


def test_a_parameter_the_bilm_tf_layout_has_no_dataset_for_is_refused_before_writing(reference, tmp_path):
    model = load_bilm_hdf5(reference.options, reference.weights)
    model.directions[0][1].extra = torch.nn.Parameter(torch.zeros(3))  # a new part of the cell, say
    with pytest.raises(WeightFileError, match=r"no dataset for directions\.0\.1\.extra"):
        save_bilm_hdf5(model, tmp_path / "options.json", tmp_path / "weights.hdf5")
    assert not list(tmp_path.iterdir())  # nothing written
