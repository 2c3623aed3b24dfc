"""The one disk cache of vectors: its key rule, hits, misses, damaged entries, and its three users."""

from __future__ import annotations

import numpy as np
import pytest

from pyelmo.embedding.vector_cache import VectorCache, cache_key, plan_vectors_key
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import Quantization

INPUTS = [["the", "bank"], ["a", "river", "bank"]]


def test_the_key_follows_the_model_the_plan_what_and_the_inputs():
    base = ("model-a", "", "layers:float16", INPUTS)
    key = cache_key(*base)
    assert cache_key(*base) == key  # deterministic
    others = [("model-b", "", "layers:float16", INPUTS), ("model-a", "int8:1", "layers:float16", INPUTS),
              ("model-a", "", "layers:float32", INPUTS), ("model-a", "", "layers:float16", INPUTS[:1]),
              ("model-a", "", "layers:float16", [["the", "Bank"], ["a", "river", "bank"]])]
    assert len({key, *(cache_key(*other) for other in others)}) == len(others) + 1


def test_the_plans_vectors_key_is_part_of_it():
    assert plan_vectors_key(None) == plan_vectors_key(ExecutionPlan()) == ""
    assert plan_vectors_key(ExecutionPlan(precision="int8")) != ""
    cache = VectorCache("/nowhere")
    exact = cache.entry("m", plan_vectors_key(None), "vectors", INPUTS)
    assert cache.entry("m", plan_vectors_key(ExecutionPlan(precision="int8")), "vectors", INPUTS) != exact
    assert exact.name.startswith("vectors-") and exact.suffix == ".npz"


def test_hit_miss_and_a_damaged_entry(tmp_path):
    cache = VectorCache(tmp_path / "c")
    path = cache.entry("m", "", "neighbours", INPUTS)
    assert cache.load(path, ("vectors",)) is None  # miss: nothing there
    vectors = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert cache.save(path, vectors=vectors)
    np.testing.assert_array_equal(cache.load(path, ("vectors",))["vectors"], vectors)  # hit
    assert cache.load(path, ("layers",)) is None  # another layout: a miss
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    path.write_bytes(path.read_bytes()[:40])  # truncated
    assert cache.load(path, ("vectors",)) is None
    path.write_bytes(b"not an npz at all")
    assert cache.load(path, ("vectors",)) is None
    assert cache.save(path, vectors=vectors + 1)  # rebuilt in place
    np.testing.assert_array_equal(cache.load(path, ("vectors",))["vectors"], vectors + 1)


def test_an_entry_holding_a_pickle_is_not_loaded(tmp_path):
    path = tmp_path / "vectors-x.npz"
    np.savez(path, vectors=np.array([{"a": 1}], dtype=object))
    assert VectorCache.load(path, ("vectors",)) is None


def test_an_unwritable_cache_only_costs_the_recomputation(tmp_path):
    (tmp_path / "file").write_text("x")
    cache = VectorCache(tmp_path / "file" / "below")
    assert not cache.save(cache.entry("m", "", "vectors", INPUTS), vectors=np.zeros(3))


def test_evaluation_vectors_rebuild_a_damaged_entry(tiny_model, tmp_path, monkeypatch):
    from pyelmo.embedding.embedder import ElmoEmbedder
    from pyelmo.evaluation import common

    sents = [["the", "bank", "was", "closed"], ["a", "play"]]
    first = common.token_vectors(tiny_model, sents, cache_dir=tmp_path, tag="t", progress=False)
    (entry,) = tmp_path.glob("t-*.npz")
    entry.write_bytes(b"damaged")
    calls = []
    embed = ElmoEmbedder.embed_sentences
    monkeypatch.setattr(ElmoEmbedder, "embed_sentences", lambda self, *a: calls.append(1) or embed(self, *a))
    again = common.token_vectors(tiny_model, sents, cache_dir=tmp_path, tag="t", progress=False)
    assert calls and np.array_equal(first, again)  # computed again, the same values
    assert VectorCache.load(entry, ("vectors",)) is not None  # and the entry rewritten
    common.token_vectors(ElmoEmbedder(tiny_model, precision="int8", quantization=Quantization(1)), sents, cache_dir=tmp_path, tag="t",
                         progress=False)
    assert len(list(tmp_path.glob("t-*.npz"))) == 2  # another plan's vectors: another entry


def test_task_layers_rebuild_a_damaged_entry(tiny_model, tmp_path):
    from pyelmo.tasks.features import LayerCache

    sents = [("the", "bank"), ("a", "river", "bank")]
    first = LayerCache(tiny_model, progress=False, cache_dir=tmp_path)
    first.add(sents)
    (entry,) = tmp_path.glob("layers-*.npz")
    entry.write_bytes(entry.read_bytes()[:100])
    second = LayerCache(tiny_model, progress=False, cache_dir=tmp_path)
    second.add(sents)
    for s in sents:
        np.testing.assert_array_equal(first[s], second[s])
    assert VectorCache.load(entry, ("layers", "lengths")) is not None
    LayerCache(tiny_model, progress=False, cache_dir=tmp_path, dtype=np.float32).add(sents)
    assert len(list(tmp_path.glob("layers-*.npz"))) == 2  # float32 layers: another entry
