"""int8 weights kept on disk (``pyelmo.runtime.int8_cache``), an opt-in (``int8_cache=True``, ``--int8-cache``):
quantized once per model and int8 settings; a second load packs the stored numbers; the same bits with and without;
a damaged entry or another plan's settings is a miss; entries are written atomically; off, nothing is kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.modeling.bilm import BiLM
from pyelmo.modelio.weights import save_pretrained
from pyelmo.runtime import int8_cache
from pyelmo.runtime.int8_cache import Int8WeightCache, int8_key
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import Quantization

SENTENCES = [["The", "bank", "raised", "its", "rates", "."], ["We", "sat", "on", "the", "river", "bank"]]
#: the gates (4 * 512, 128) are quantized by the default rule, the rest stays float32: 2 levels x 2 directions x
#: (input, state) gates
CONFIG = ElmoConfig(char_cnn=CharCNNConfig(filters=((1, 16), (2, 16), (3, 32)), n_highway=1),
                    lstm=LSTMConfig(dim=512, projection_dim=128))
N = 8


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("int8-cache-model")
    save_pretrained(BiLM(CONFIG).eval(), path)
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder; ``quantized`` counts the weights quantized (misses) since the fixture started."""
    monkeypatch.setenv("PYELMO_INT8_CACHE", str(tmp_path / "int8"))
    calls = []
    real = int8_cache.int8_weights
    monkeypatch.setattr(int8_cache, "int8_weights", lambda w: calls.append(tuple(w.shape)) or real(w))
    return tmp_path / "int8", calls


def vectors(folder, **settings) -> list[np.ndarray]:
    """int8 vectors of ``SENTENCES``, the int8 weights kept (the opt-in) unless ``int8_cache=False``."""
    return ElmoEmbedder(str(folder), precision="int8", **{"int8_cache": True, **settings}).embed_sentences(SENTENCES)


def entries(path) -> list:
    return sorted(path.glob("*.safetensors")) if path.exists() else []


def test_a_second_load_uses_the_kept_weights_with_the_same_bits(folder, cache):
    path, quantized = cache
    fresh = ElmoEmbedder(str(folder), precision="int8").embed_sentences(SENTENCES)  # the default: off
    assert quantized == [] and entries(path) == []  # off: nothing kept
    first = vectors(folder)
    assert len(quantized) == N and all(shape == (2048, 128) for shape in quantized)
    assert len(entries(path)) == 1
    second = vectors(folder)
    assert len(quantized) == N, "the second load quantized again instead of using the kept weights"
    for a, b, c in zip(fresh, first, second):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_another_plans_settings_miss(folder, cache):
    path, quantized = cache
    vectors(folder)
    assert len(quantized) == N
    vectors(folder, quantization=Quantization(2**16))  # another rule (the projections too): another entry, quantized afresh
    assert quantized[N:].count((2048, 128)) == N and (128, 512) in quantized[N:] and len(entries(path)) == 2
    plan = ExecutionPlan.for_machine(precision="int8")
    keys = [int8_key("m", plan, True), int8_key("m", plan, False), int8_key("other", plan, True)]
    assert len({Int8WeightCache(k, path).path for k in keys}) == 3  # engine's input range, model: other entries


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_damaged_entry_is_rebuilt_never_used(folder, cache, damage):
    path, quantized = cache
    reference = vectors(folder)
    entry = entries(path)[0]
    data = bytearray(entry.read_bytes())
    if damage == "flip":  # one byte of the int8 numbers (near the end: past the header)
        data[-100] ^= 0x55
    entry.write_bytes(bytes(data[: len(data) // 2]) if damage == "truncate" else
                      b"not a safetensors file" if damage == "garbage" else bytes(data))
    again = vectors(folder)
    rebuilt = len(quantized) - N
    assert rebuilt >= 1 and (rebuilt == N or damage == "flip"), "a damaged entry was used"
    assert all(np.array_equal(a, b) for a, b in zip(reference, again))
    vectors(folder)  # rebuilt whole: the next load hits
    assert len(quantized) == N + rebuilt


def test_stored_numbers_of_another_shape_are_not_used(tmp_path):
    key = int8_key("m", ExecutionPlan.for_machine(precision="int8"), True)
    first = Int8WeightCache(key, tmp_path)
    first.packed("w", torch.randn(64, 32))
    first.save()
    assert Int8WeightCache(key, tmp_path).stored("w")[0].shape == (64, 34)
    other = Int8WeightCache(key, tmp_path)
    other.packed("w", torch.randn(32, 32))
    assert (other.hits, other.misses) == (0, 1)


def test_writes_are_atomic(folder, cache, monkeypatch):
    path, _ = cache

    def fail(tensors, filename, metadata=None):
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(int8_cache, "save_file", fail)
    with pytest.warns(RuntimeWarning, match="int8 weights not kept"):
        reference = vectors(folder)
    assert list(path.iterdir()) == []  # neither the entry nor a temporary file
    monkeypatch.undo()
    assert all(np.array_equal(a, b) for a, b in zip(reference, vectors(folder, int8_cache=False)))


def test_the_command_line_turns_it_on():
    from pyelmo.cli.common import plan_settings
    from pyelmo.cli import build_parser

    parser = build_parser()
    assert plan_settings(parser.parse_args(["env", "--precision", "int8", "--int8-cache"]))["int8_cache"] is True
    assert plan_settings(parser.parse_args(["env", "--precision", "int8"]))["int8_cache"] is False
    assert parser.parse_args(["serve", "--precision", "int8", "--int8-cache"]).int8_cache is True


def test_pyelmo_embed_keeps_them_only_when_told_to(folder, cache, tmp_path):
    import h5py

    from pyelmo.cli import main

    path, quantized = cache
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(s) for s in SENTENCES) + "\n")
    common = ["--precision", "int8", "--no-progress", "--model", str(folder)]
    assert main(["embed", str(text), str(tmp_path / "fresh.h5"), *common]) == 0
    assert entries(path) == []
    assert main(["embed", str(text), str(tmp_path / "cold.h5"), "--int8-cache", *common]) == 0
    assert main(["embed", str(text), str(tmp_path / "warm.h5"), "--int8-cache", *common]) == 0
    assert len(quantized) == N and len(entries(path)) == 1  # the cold run quantized through the cache, the warm one not
    with h5py.File(tmp_path / "fresh.h5") as a, h5py.File(tmp_path / "warm.h5") as b:
        assert all(np.array_equal(a[k][()], b[k][()]) for k in ("0", "1"))
