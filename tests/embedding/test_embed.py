"""The Python embedder and `pyelmo embed` write the de-facto HDF5 layout, atomically."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

from pyelmo.cli import main
from pyelmo.embedding.embedder import ElmoEmbedder
from pyelmo.errors import InputError
from pyelmo.modeling.characters import batch_to_ids

LINES = ["I deposited money in the bank .", "The boat stopped near the river bank .", "Hello"]


def _args(ref):
    return ["--options-file", str(ref.options), "--weight-file", str(ref.weights), "--no-progress"]


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("\n".join(LINES) + "\n")
    return path


@pytest.mark.parametrize("flag,shape", [("--all", (3, 7, 32)), ("--top", (7, 32)), ("--average", (7, 32))])
def test_formats_and_sentence_to_index(allennlp_reference, tiny_model, text, tmp_path, flag, shape):
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(text), str(out), flag, *_args(allennlp_reference)]) == 0
    expected = ElmoEmbedder(tiny_model).embed_sentence(LINES[0].split())
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["0", "1", "2", "sentence_to_index"]
        got = f["0"][...]
        assert got.shape == shape and got.dtype == np.float32
        reference = {"--all": expected, "--top": expected[-1], "--average": expected.mean(0)}[flag]
        np.testing.assert_allclose(got, reference, atol=1e-6)
        index = json.loads(f["sentence_to_index"][0])
        assert index == {line: str(i) for i, line in enumerate(LINES)}
        assert f.attrs["output_format"] == flag[2:] and f.attrs["precision"] == "float32"
        assert f.attrs["pyelmo_version"] and len(f.attrs["model_sha1"]) == 40 and not f.attrs["tokenize"]
        assert f.attrs["pooling"] == "none"


def test_tokenize_raw_text(allennlp_reference, tiny_model, tmp_path):
    from pyelmo.text.tokenize import tokenize

    raw = "Hello, world! It's (really) nice."
    path = tmp_path / "raw.txt"
    path.write_text(raw + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(path), str(out), "--tokenize", *_args(allennlp_reference)]) == 0
    expected = ElmoEmbedder(tiny_model).embed_sentence(tokenize(raw))
    assert len(tokenize(raw)) != len(raw.split())
    with h5py.File(out, "r") as f:
        np.testing.assert_allclose(f["0"][...], expected, atol=1e-6)
        assert f.attrs["tokenize"]


@pytest.mark.parametrize("vlen_limit", [4 * 2**20, 10])
def test_sentence_to_index_as_variable_or_streamed_fixed_length_string(allennlp_reference, tmp_path, monkeypatch,
                                                                       vlen_limit):
    """Small indexes are the layout's variable-length string; large ones are streamed into the
    file as a fixed-length string; both read back as the same JSON (repeats keep the last index)."""
    monkeypatch.setattr("pyelmo.embedding.sentence_index.SENTENCE_INDEX_VLEN_LIMIT", vlen_limit)
    lines = LINES + ['Ünïcödé "quoted" \\ back', LINES[0], "日本語 の 文"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(path), str(out), "--top", *_args(allennlp_reference)]) == 0
    expected = {line: str(i) for i, line in enumerate(lines)}
    with h5py.File(out, "r") as f:
        assert (f["sentence_to_index"].dtype.kind == "O") == (vlen_limit > 10)
        raw = f["sentence_to_index"][0]
        assert raw == json.dumps(expected).encode() and json.loads(raw) == expected
        assert sorted(f) == sorted([str(i) for i in range(len(lines))] + ["sentence_to_index"])


def test_sentence_to_index_size_limit_is_a_clear_error(allennlp_reference, text, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("pyelmo.embedding.sentence_index.SENTENCE_INDEX_MAX_BYTES", 60)
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(text), str(out), *_args(allennlp_reference)]) == 1
    assert "--forget-sentences" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["in.txt"]  # no output, no parts left
    assert main(["embed", str(text), str(out), "--forget-sentences", *_args(allennlp_reference)]) == 0


def test_forget_sentences_and_sentence_keys(allennlp_reference, text, tmp_path):
    out = tmp_path / "o.hdf5"
    assert main(["embed", str(text), str(out), "--top", "--forget-sentences", "--use-sentence-keys",
                 *_args(allennlp_reference)]) == 0
    with h5py.File(out, "r") as f:
        assert sorted(f) == sorted(LINES)


def test_blank_line_is_an_error_naming_the_line_and_leaves_nothing(allennlp_reference, tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_text("one sentence\n\nanother\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(path), str(out), *_args(allennlp_reference)]) == 1
    assert "line 2" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [path]
    assert main(["embed", str(path), str(out), "--skip-blank-lines", *_args(allennlp_reference)]) == 0
    with h5py.File(out, "r") as f:
        assert f["1"].shape == (3, 0, 32) and f["2"].shape == (3, 1, 32)


def test_existing_output_needs_overwrite(allennlp_reference, text, tmp_path, capsys):
    out = tmp_path / "out.hdf5"
    out.write_text("precious")
    assert main(["embed", str(text), str(out), *_args(allennlp_reference)]) == 1
    assert "--overwrite" in capsys.readouterr().err and out.read_text() == "precious"
    assert main(["embed", str(text), str(out), "--overwrite", *_args(allennlp_reference)]) == 0
    assert h5py.is_hdf5(out)


def test_bom_crlf_and_invalid_utf8(allennlp_reference, tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfHello world\r\nSecond line\r\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(path), str(out), *_args(allennlp_reference)]) == 0
    with h5py.File(out, "r") as f:
        assert json.loads(f["sentence_to_index"][0]) == {"Hello world": "0", "Second line": "1"}
    path.write_bytes(b"fine\nbad \xff byte\n")
    assert main(["embed", str(path), str(tmp_path / "o2.hdf5"), *_args(allennlp_reference)]) == 1
    assert "line 2" in capsys.readouterr().err
    assert not (tmp_path / "o2.hdf5").exists()


def test_embed_sentences_keeps_input_order(tiny_model):
    embedder = ElmoEmbedder(tiny_model, batch_size=2)
    sentences = [["w"] * n for n in (5, 1, 3, 8, 2)]
    outs = list(embedder.embed_sentences(sentences))
    assert [o.shape[1] for o in outs] == [5, 1, 3, 8, 2]
    for sentence, out in zip(sentences, outs):
        np.testing.assert_allclose(out, embedder.embed_sentence(sentence), atol=1e-5)


@pytest.mark.parametrize("shard", ["3/3", "-1/2", "x", "1/2/3"])
def test_bad_shard_is_a_one_line_error_and_leaves_nothing(allennlp_reference, text, tmp_path, capsys, shard):
    assert main(["embed", str(text), str(tmp_path / "o.h5"), f"--shard={shard}", *_args(allennlp_reference)]) == 1
    err = capsys.readouterr().err
    assert "shard" in err and len(err.strip().splitlines()) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["in.txt"]


def test_bad_shard_through_the_api_leaves_nothing(tiny_model, text, tmp_path):
    from pyelmo.errors import InputError

    with pytest.raises(InputError, match="0 <= I < N"):
        ElmoEmbedder(tiny_model).embed_file(text, tmp_path / "o.h5", shard=(2, 2))
    assert [p.name for p in tmp_path.iterdir()] == ["in.txt"]


def test_interrupt_says_resume_continues_and_refused_resume_names_the_setting(allennlp_reference, text, tmp_path,
                                                                              monkeypatch, capsys):
    from pyelmo.embedding import parts as embedfile

    out = tmp_path / "out.hdf5"

    def interrupted(self, filename):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(embedfile.Parts, "join_into", interrupted)
        assert main(["embed", str(text), str(out), "--no-progress", *_args(allennlp_reference)]) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and ".out.hdf5.parts" in err and not out.exists()
    assert main(["embed", str(text), str(out), "--top", "--resume", "--no-progress", *_args(allennlp_reference)]) == 1
    assert "output_format was 'all', now 'top'" in capsys.readouterr().err
    assert main(["embed", str(text), str(out), "--resume", "--no-progress", *_args(allennlp_reference)]) == 0
    assert out.exists()


def test_resume_refuses_another_execution_plan_in_one_line(allennlp_reference, text, tmp_path, monkeypatch, capsys):
    """The parts of an interrupted int8 run were made under one quantization rule: a resume under another
    (or another precision) would mix them in one file that records only the second."""
    from pyelmo.embedding import parts as embedfile

    out = tmp_path / "out.hdf5"
    int8 = ["--precision", "int8", "--int8-min-weight", "0", "--no-progress", *_args(allennlp_reference)]
    with monkeypatch.context() as m:
        m.setattr(embedfile.Parts, "join_into", lambda self, filename: (_ for _ in ()).throw(KeyboardInterrupt))
        assert main(["embed", str(text), str(out), *int8]) == 130
    capsys.readouterr()
    other_rule = [*int8[:3], "16", *int8[4:]]
    for changed, named in ((other_rule, "plan.int8_min_weight was 0, now 16"),
                           (int8[4:], "plan.precision was 'int8', now 'float32'")):
        assert main(["embed", str(text), str(out), "--resume", *changed]) == 1
        err = capsys.readouterr().err
        assert named in err and "cannot resume" in err and len(err.strip().splitlines()) == 1, err
    assert main(["embed", str(text), str(out), "--resume", *int8]) == 0  # the same plan continues
    with h5py.File(out, "r") as f:
        assert "int8_min_weight=0" in f.attrs["execution_plan"]


SENTENCES = [["a"], "the boat stopped near the river bank on a cold and windy day .".split(),
             "I deposited money in the bank".split(), ["Hello", "world"], "it was open on Monday".split()]


def test_sentence_vectors_are_the_mean_over_each_sentences_own_tokens_whatever_the_batch(tiny_model):
    """pool="mean" gives each sentence the mean of its own tokens' vectors, never of the padding, for any
    batching: one sentence per batch, fixed padded batches, or token-budget batches."""
    alone = ElmoEmbedder(tiny_model)
    expected = [alone.embed_sentence(s).mean(axis=1, dtype=np.float64) for s in SENTENCES]  # (L, D) each
    for embedder in (ElmoEmbedder(tiny_model, batch_size=1, max_tokens=None),
                     ElmoEmbedder(tiny_model, batch_size=5, max_tokens=None),  # one batch padded to 14 tokens
                     ElmoEmbedder(tiny_model, batch_size=2, max_tokens=20)):
        pooled = list(embedder.embed_sentences(SENTENCES, pool="mean"))
        assert [p.shape for p in pooled] == [(3, 32)] * len(SENTENCES) and pooled[0].dtype == np.float32
        for got, want in zip(pooled, expected):
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # what the pooling avoids: the mean over a padded batch's rows is another vector
    with torch.inference_mode():
        padded = alone.model(batch_to_ids(SENTENCES), options=alone.options).layers.numpy()  # (L, B, 14, D)
    assert np.abs(padded[:, 0].mean(axis=1) - expected[0]).max() > 1e-2
    assert list(alone.embed_sentences([[]], pool="mean"))[0].tolist() == np.zeros((3, 32)).tolist()
    with pytest.raises(InputError, match="pool must be"):
        alone.embed_sentences(SENTENCES, pool="max")


@pytest.mark.parametrize("flag,shape", [("--all", (3, 32)), ("--top", (32,)), ("--average", (32,))])
def test_sentence_vectors_file(allennlp_reference, tiny_model, tmp_path, flag, shape):
    path = tmp_path / "in.txt"
    path.write_text("\n".join([*LINES, ""]) + "\n")
    out = tmp_path / "out.hdf5"
    assert main(["embed", str(path), str(out), flag, "--sentence-vectors", "--skip-blank-lines",
                 *_args(allennlp_reference)]) == 0
    embedder = ElmoEmbedder(tiny_model)
    with h5py.File(out, "r") as f:
        assert sorted(f) == ["0", "1", "2", "3", "sentence_to_index"]
        assert f.attrs["pooling"] == "mean" and f.attrs["output_format"] == flag[2:]
        for i, line in enumerate(LINES):
            layers = embedder.embed_sentence(line.split())
            tokens = {"--all": layers, "--top": layers[-1], "--average": layers.mean(0)}[flag]
            assert f[str(i)].shape == shape and f[str(i)].dtype == np.float32
            np.testing.assert_allclose(f[str(i)][...], tokens.mean(axis=-2), atol=1e-5)
        assert not f["3"][...].any() and f["3"].shape == shape  # a blank line: zeros


def test_a_join_interrupted_after_the_first_part_became_the_output_resumes_to_the_same_file(
        allennlp_reference, text, tmp_path, monkeypatch):
    """The first part's file becomes the output (moved, not copied); interrupted after that, --resume computes
    that part again and writes what an uninterrupted run writes."""
    from pyelmo.embedding import store

    monkeypatch.setattr(store, "SEGMENT_LINES", 2)  # 3 lines: two parts
    whole, out = tmp_path / "whole.hdf5", tmp_path / "out.hdf5"
    assert main(["embed", str(text), str(whole), *_args(allennlp_reference)]) == 0
    with monkeypatch.context() as m:
        m.setattr(store, "_record_provenance", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
        assert main(["embed", str(text), str(out), *_args(allennlp_reference)]) == 130
    assert not out.exists() and len(list((tmp_path / ".out.hdf5.parts").glob("part-*.h5"))) == 1
    assert main(["embed", str(text), str(out), "--resume", *_args(allennlp_reference)]) == 0
    with h5py.File(whole, "r") as a, h5py.File(out, "r") as b:
        assert sorted(a) == sorted(b) == ["0", "1", "2", "sentence_to_index"]
        assert all(np.array_equal(a[k][...], b[k][...]) for k in a)
        ran = "kernels_used"  # what this process ran: the resumed run computed one part
        assert {k: v for k, v in a.attrs.items() if k != ran} == {k: v for k, v in b.attrs.items() if k != ran}
