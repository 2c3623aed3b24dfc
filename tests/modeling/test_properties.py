"""Property-based checks (hypothesis) beyond test_characters.py / test_model.py: config JSON round trips,
invalid configs always raise ConfigError, padding invariance, vocabulary round trips, corrupt
weight files, and the memory bound for one very long sentence."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyelmo.config import CharCNNConfig, ElmoConfig, LSTMConfig
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import ConfigError, WeightFileError
from pyelmo.lm.vocab import SPECIALS, Vocabulary
from pyelmo.modelio.weights import load_bilm_hdf5, load_options

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"

max_chars = st.integers(3, 60)


@st.composite
def valid_configs(draw):
    m = draw(max_chars)
    filters = tuple(draw(st.lists(st.tuples(st.integers(1, m), st.integers(1, 64)), min_size=1, max_size=4)))
    clip = st.one_of(st.none(), st.integers(1, 10), st.floats(0.01, 100, allow_nan=False))
    return ElmoConfig(
        char_cnn=CharCNNConfig(filters=filters, n_highway=draw(st.integers(0, 3)),
                               embedding_dim=draw(st.integers(1, 32)), n_characters=draw(st.sampled_from([261, 262])),
                               max_characters_per_token=m, activation=draw(st.sampled_from(["relu", "tanh"]))),
        lstm=LSTMConfig(dim=draw(st.integers(1, 4096)), projection_dim=draw(st.integers(1, 1024)),
                        n_layers=draw(st.integers(1, 4)), cell_clip=draw(clip), proj_clip=draw(clip),
                        use_skip_connections=draw(st.booleans())))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(valid_configs())
def test_config_json_round_trip(tmp_path, config):
    assert ElmoConfig.from_options(json.loads(config.to_json())) == config
    path = tmp_path / "options.json"
    path.write_text(config.to_json())
    assert load_options(path) == config


BAD_VALUES = [-1, 0, -4096, 1.5, "8", None, True, [], {}, float("nan")]
FIELDS = [("lstm", "dim"), ("lstm", "projection_dim"), ("lstm", "n_layers"), ("lstm", "cell_clip"),
          ("lstm", "proj_clip"), ("lstm", "use_skip_connections"), ("char_cnn", "n_highway"),
          ("char_cnn", "n_characters"), ("char_cnn", "max_characters_per_token"), ("char_cnn", "activation"),
          ("char_cnn", "filters"), ("char_cnn", "embedding")]


@settings(max_examples=120, deadline=None)
@given(valid_configs(), st.sampled_from(FIELDS), st.sampled_from(BAD_VALUES))
def test_invalid_config_always_raises_config_error(config, field, value):
    options = config.to_options()
    section, name = field
    if name in ("cell_clip", "proj_clip") and (value is None or value == 1.5):
        value = -1.0  # null and positive numbers are valid there
    if name == "use_skip_connections" and isinstance(value, bool):
        value = 1
    if name == "n_highway" and value == 0:
        value = -1
    if name == "filters":
        value = [[0, 4]] if value in (0, -1) else ([] if value is None else value)
    options[section][name] = value
    with pytest.raises(ConfigError):
        ElmoConfig.from_options(options)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12), min_size=1, max_size=6),
       st.integers(1, 30))
def test_stateless_output_invariant_to_padding(tiny_model, words, extra):
    tokens = [w.split()[0] if w.split() else "x" for w in words]
    embedder = ElmoEmbedder(tiny_model)
    alone = embedder.embed_sentence(tokens)
    partner = tokens + ["pad"] * extra  # a longer batch partner forces padding
    padded = embedder.embed_batch([partner, tokens])[1]
    np.testing.assert_allclose(alone, padded, atol=1e-5, rtol=0)


word = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=20).filter(
    lambda w: w == w.strip() and not any(c.isspace() for c in w) and w not in SPECIALS and not w.startswith("\ufeff"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(word, unique=True, max_size=30))
def test_vocabulary_round_trip_for_unicode_words(tmp_path, words):
    vocab = Vocabulary(list(SPECIALS) + words)
    path = vocab.save(tmp_path / "v" / "vocab.txt")
    assert Vocabulary.load(path).words == vocab.words


def _hdf5_corruptions():
    """(description, corrupted bytes, number of bytes changed or None for a truncation)."""
    data = REF.joinpath("lm_weights.hdf5").read_bytes()
    rng = random.Random(7)
    for _ in range(12):
        blob = bytearray(data)
        start = rng.randrange(0, len(blob))
        end = min(len(blob), start + rng.randrange(1, 4096))
        for i in range(start, end):
            blob[i] = rng.randrange(256)
        yield bytes(blob), end - start
    for keep in (0, 1, 8, 512, len(data) // 3, len(data) - 1):
        yield data[:keep], None


def test_corrupt_hdf5_either_loads_finite_weights_or_raises(tmp_path):
    clean = load_bilm_hdf5(REF / "options.json", REF / "lm_weights.hdf5").state_dict()
    outcomes = {"loaded": 0, "refused": 0}
    for i, (blob, changed) in enumerate(_hdf5_corruptions()):
        path = tmp_path / f"w{i}.hdf5"
        path.write_bytes(blob)
        try:
            model = load_bilm_hdf5(REF / "options.json", path)
        except WeightFileError:
            outcomes["refused"] += 1
            continue
        assert changed is not None, f"a truncated file (corruption {i}) was accepted"
        outcomes["loaded"] += 1  # bytes changed inside a dataset's values: finite, and only those values differ
        state = model.state_dict()
        assert all(torch.isfinite(p).all() for p in state.values())
        differing = sum(int((state[k] != clean[k]).sum()) for k in clean)
        assert differing <= changed // 4 + 2, (i, differing, changed)
    assert outcomes["refused"] >= 6 and outcomes["loaded"] + outcomes["refused"] == 18, outcomes


# -- one very long sentence: works, memory grows linearly (docs/RELIABILITY.md) ------------------------
MEASURE = """
import resource, sys, numpy as np
from pyelmo.modelio.weights import load_bilm_hdf5
from pyelmo.embedding.embedder import ElmoEmbedder
m = load_bilm_hdf5(sys.argv[1], sys.argv[2])
e = ElmoEmbedder(m)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = e.embed_sentence(["w%d" % (i % 997) for i in range(int(sys.argv[3]))])
assert np.isfinite(out).all()
print(out.shape[1], (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


@pytest.mark.slow
@pytest.mark.parametrize("n_tokens, max_growth_mb", [(20_000, 150)])
def test_long_sentence_memory_is_bounded(n_tokens, max_growth_mb):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(REF / "options.json"), str(REF / "lm_weights.hdf5"),
                           str(n_tokens)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tokens, growth = proc.stdout.split()
    assert int(tokens) == n_tokens
    assert float(growth) <= max_growth_mb, growth


@pytest.mark.slow
def test_100000_token_line_embeds_through_the_cli(tmp_path, allennlp_reference):
    import h5py

    (tmp_path / "long.txt").write_text(" ".join(f"w{i % 991}" for i in range(100_000)) + "\nshort line\n")
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-m", "pyelmo", "embed", str(tmp_path / "long.txt"), str(tmp_path / "o.h5"),
                           "--top", "--no-progress", "--options-file", str(allennlp_reference.options),
                           "--weight-file", str(allennlp_reference.weights)], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    with h5py.File(tmp_path / "o.h5", "r") as f:
        assert f["0"].shape == (100_000, 32) and f["1"].shape == (2, 32)
        assert np.isfinite(f["0"][...]).all()
