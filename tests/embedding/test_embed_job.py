"""An embed request (``EmbedJob``) is checked once, when it is made, before any work."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import h5py
import numpy as np
import pytest

from pyelmo.cli import main
from pyelmo.embedding.job import EmbedJob
from pyelmo.errors import InputError

REF = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp"
MODEL = ["--options-file", str(REF / "options.json"), "--weight-file", str(REF / "lm_weights.hdf5"), "--no-progress"]


@pytest.fixture
def text(tmp_path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("the bank was closed\na river bank\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("options, message", [
    ({"lang": "en"}, "needs tokenize=True"),
    ({"output_format": "middle"}, "output format must be one of"),
    ({"pool": "max"}, "pool must be None or one of"),
    ({"shard": (2, 2)}, "shard I/N needs 0 <= I < N"),
    ({"batch_size": 0}, "batch size must be at least 1"),
])
def test_bad_options_are_refused_when_the_job_is_made(text, tmp_path, options, message):
    with pytest.raises(InputError, match=message) as error:
        EmbedJob(text, tmp_path / "out.h5", **options)
    assert "\n" not in str(error.value)


def test_outputs_and_streams_are_checked(text, tmp_path):
    (tmp_path / "old.h5").write_bytes(b"")
    with pytest.raises(InputError, match="output file exists"):
        EmbedJob(text, tmp_path / "old.h5")
    assert EmbedJob(text, tmp_path / "old.h5", overwrite=True).output == tmp_path / "old.h5"
    with pytest.raises(InputError, match="output path is a directory"):
        EmbedJob(text, tmp_path)
    with pytest.raises(InputError, match="needs an input file, not a stream"):
        EmbedJob(io.BytesIO(b"a b\n"), tmp_path / "out.h5", resume=True)
    with pytest.raises(InputError, match="needs an input file"):
        EmbedJob("-", tmp_path / "out.h5", resume=True)
    with pytest.raises(InputError, match="cannot continue a --stateful run"):
        EmbedJob(text, tmp_path / "out.h5", resume=True).check_run(stateful=True)


def test_a_job_is_frozen_and_normalized(text, tmp_path):
    job = EmbedJob(text, str(tmp_path / "out.h5"), tokenize=True, shard=[0, 2])
    assert job.lang == "auto" and job.shard == (0, 2) and job.output == tmp_path / "out.h5"
    assert EmbedJob(text, tmp_path / "out.h5").lang is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.resume = True  # type: ignore[misc]


def test_embed_job_and_embed_file_write_the_same_file(tiny_model, text, tmp_path):
    from pyelmo.embedding.embedder import ElmoEmbedder

    embedder = ElmoEmbedder(tiny_model)
    assert embedder.embed_job(EmbedJob(text, tmp_path / "a.h5", output_format="top", pool="mean")) == 2
    assert embedder.embed_file(text, tmp_path / "b.h5", output_format="top", pool="mean") == 2
    with h5py.File(tmp_path / "a.h5", "r") as a, h5py.File(tmp_path / "b.h5", "r") as b:
        assert sorted(a) == sorted(b) == ["0", "1", "sentence_to_index"]
        for key in ("0", "1"):
            assert a[key].shape == (32,) and np.array_equal(a[key][...], b[key][...])
        assert dict(a.attrs) == dict(b.attrs) and a.attrs["pooling"] == "mean"


@pytest.mark.parametrize("args, message", [
    (["--resume", "--stateful"], "cannot continue a --stateful run"),
    (["--shard", "3/2"], "shard I/N needs 0 <= I < N"),
    (["--lang", "en"], "--lang chooses how --tokenize splits raw text"),
])
def test_the_command_refuses_before_the_model_loads(text, tmp_path, monkeypatch, capsys, args, message):
    from pyelmo.embedding import embedder

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(embedder.ElmoEmbedder, "__init__", no_model)
    assert main(["embed", str(text), str(tmp_path / "out.h5"), *args, *MODEL]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("*.h5")) and not list(tmp_path.glob(".*parts"))


def test_the_shard_rank_names_the_output(text, tmp_path, capsys):
    assert main(["embed", str(text), str(tmp_path / "part{rank}.h5"), "--shard", "1/2", *MODEL]) == 0
    with h5py.File(tmp_path / "part1.h5", "r") as f:
        assert sorted(f) == ["1", "sentence_to_index"]
    assert f"to {tmp_path / 'part1.h5'}" in capsys.readouterr().out
