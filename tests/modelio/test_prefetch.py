"""A bilm-tf model's weights read beside the caller before PyTorch is imported (``ResolvedModel.prefetch``, what
``pyelmo embed`` does): in a thread, or in a forked process in a process without PyTorch; the same model and
fingerprint as a plain load, the loader's errors, no PyTorch."""

from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.errors import WeightFileError
from pyelmo.modelio.layouts import transposed
from pyelmo.modelio.resolve import resolve_model
from pyelmo.modelio.weights import load_bilm_hdf5, model_fingerprint
from pyelmo.runtime.rules import WEIGHT_ALIGNMENT


def _prefetched(options, weights):
    source = resolve_model(options, weights)
    source.prefetch()
    return source


def test_prefetched_weights_make_the_same_model_with_its_fingerprint(reference):
    interval = sys.getswitchinterval()
    source = _prefetched(reference.options, reference.weights)
    model, plain = source.load_bilm(), load_bilm_hdf5(reference.options, reference.weights)
    ours, theirs = model.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert source.known_fingerprint() == model_fingerprint(model) == model_fingerprint(plain)
    # the arrays are the parameters, laid out as the planned products keep them (no copy at planning)
    assert all(p.is_contiguous() and p.data_ptr() % WEIGHT_ALIGNMENT == 0 for p in model.parameters())
    assert sys.getswitchinterval() == interval  # the reader's shorter interval ends with it
    again = source.load_bilm()  # prefetched arrays serve one model: the next is read anew, its own
    assert not {p.data_ptr() for p in model.parameters()} & {p.data_ptr() for p in again.parameters()}


def test_a_plain_resolved_model_knows_no_fingerprint_until_asked(reference):
    source = resolve_model(reference.options, reference.weights)
    source.load_bilm()
    assert source.known_fingerprint() is None
    assert source.fingerprint == source.known_fingerprint() == model_fingerprint(source.load_bilm())


def _copy_with(src, dst, name, value):
    with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
        for key in _datasets(f):
            g.create_dataset(key, data=value if key == name else f[key][...])


def _datasets(f) -> list[str]:
    names: list[str] = []
    f.visititems(lambda key, obj: names.append(key) if isinstance(obj, h5py.Dataset) else None)
    return names


def _bad_weights(reference, tmp_path, fault: str):
    """A copy of the reference weights with ``fault`` (``missing``: no file)."""
    bad = tmp_path / "bad.hdf5"
    with h5py.File(reference.weights, "r") as f:
        bias = f["CNN_proj/b_proj"][...]
    if fault == "nan":
        bias[0] = np.nan
        _copy_with(reference.weights, bad, "CNN_proj/b_proj", bias)
    elif fault == "shape":
        _copy_with(reference.weights, bad, "CNN_proj/b_proj", np.zeros(7, np.float32))
    elif fault == "conv shape":  # a shape the conversion itself cannot take
        _copy_with(reference.weights, bad, "CNN/W_cnn_0", np.zeros((3, 2), np.float32))
    return bad


@pytest.mark.parametrize("fault,match", [("nan", "NaN"), ("shape", r"CNN_proj/b_proj.*\(7,\)"),
                                         ("conv shape", r"CNN/W_cnn_0.*has shape \(3, 2\)"), ("missing", "not found")])
def test_a_prefetched_bad_file_fails_at_load_with_the_loaders_message(reference, tmp_path, fault, match):
    bad = _bad_weights(reference, tmp_path, fault)
    source = _prefetched(reference.options, bad)
    with pytest.raises(WeightFileError, match=match):
        source.load_bilm()
    with pytest.raises(WeightFileError, match=match):  # as the plain loader says it
        load_bilm_hdf5(reference.options, bad)


def test_resolving_and_prefetching_import_no_torch(allennlp_reference):
    code = ("import sys; from pyelmo.modelio.resolve import resolve_model; "
            f"s = resolve_model({str(allennlp_reference.options)!r}, {str(allennlp_reference.weights)!r}); "
            "s.prefetch(); assert len(s.__dict__['_reading'].result().fingerprint) == 40; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _without_torch(code: str) -> str:
    """``code``'s output, run in a fresh interpreter (no PyTorch imported: :func:`prefetch` forks there)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_a_process_without_torch_reads_in_a_forked_process_the_same_arrays(allennlp_reference):
    code = f"""
import numpy as np
from pyelmo.modelio import layouts, prefetch
from pyelmo.runtime.rules import WEIGHT_ALIGNMENT
files = {str(allennlp_reference.options)!r}, {str(allennlp_reference.weights)!r}
reading = prefetch.prefetch(*files)
assert isinstance(reading, prefetch.ForkedRead), reading
forked, plain = reading.result(), layouts.read_weights(*files, with_fingerprint=True)
assert reading.result() is forked
assert forked.fingerprint == plain.fingerprint and forked.file_shapes == plain.file_shapes
assert forked.config == plain.config and forked.parameters.keys() == plain.parameters.keys()
for name, array in plain.parameters.items():
    got = forked.parameters[name]
    assert got.dtype == array.dtype and np.array_equal(got, array), name
    assert got.flags.writeable and got.ctypes.data % WEIGHT_ALIGNMENT == 0, name
import torch
from pyelmo.modelio.weights import load_bilm_hdf5, model_fingerprint
model = load_bilm_hdf5(*files, forked)
assert model_fingerprint(model) == forked.fingerprint
print("ok")
"""
    assert _without_torch(code) == "ok"


@pytest.mark.parametrize("fault,match", [("nan", "NaN"), ("missing", "not found")])
def test_a_forked_reader_that_fails_gives_the_loaders_message(reference, tmp_path, fault, match):
    bad = _bad_weights(reference, tmp_path, fault)
    code = f"""
from pyelmo.errors import WeightFileError
from pyelmo.modelio import prefetch
reading = prefetch.prefetch({str(reference.options)!r}, {str(bad)!r})
assert isinstance(reading, prefetch.ForkedRead), reading
try:
    reading.result()
except WeightFileError as exc:
    print(exc)
"""
    message = _without_torch(code)
    with pytest.raises(WeightFileError, match=match) as plain:
        load_bilm_hdf5(reference.options, bad)
    assert message == str(plain.value)


def test_embed_records_the_fingerprint_read_with_the_weights(allennlp_reference, tmp_path):
    text, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    text.write_text("The bank closed .\nRiver bank\n")
    assert main(["embed", str(text), str(out), "--options-file", str(allennlp_reference.options),
                 "--weight-file", str(allennlp_reference.weights), "--no-progress"]) == 0
    with h5py.File(out, "r") as f:
        assert f.attrs["model_sha1"] == model_fingerprint(load_bilm_hdf5(allennlp_reference.options,
                                                                         allennlp_reference.weights))


@pytest.mark.parametrize("shape", [(1, 1), (3, 300), (257, 129), (128, 256)])
def test_tiled_transpose_is_the_transpose(shape):
    array = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = transposed(array)
    assert np.array_equal(out, array.T) and out.flags.c_contiguous and out.ctypes.data % WEIGHT_ALIGNMENT == 0
