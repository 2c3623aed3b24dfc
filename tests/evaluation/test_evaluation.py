"""pyelmo evaluate: data readers, the WSD split and 1-NN, the POS probe, reports and the CLI.

Everything runs offline on the fixtures in tests/data/evaluation (a few real WordNet 3.0
entries renumbered by make_wordnet_fixture.py, and a few Brown sentences) and on the tiny
reference model.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nltk")
pytest.importorskip("gensim")
pytest.importorskip("sklearn")

from pyelmo.evaluation import common, pos, report, static, wsd, wsddata  # noqa: E402
from pyelmo.evaluation.wsddata import WsdInstance  # noqa: E402
from pyelmo.modelio.weights import model_fingerprint  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "evaluation"
WORDNET = DATA / "wordnet"
BROWN = DATA / "brown"
OPTIONS = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp" / "options.json"
WEIGHTS = Path(__file__).parents[1] / "fixtures" / "reference" / "allennlp" / "lm_weights.hdf5"


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def instances(cache) -> list[WsdInstance]:
    return wsddata.load_instances(WORDNET, cache, progress=False)


@pytest.fixture
def word2vec_file(tmp_path) -> Path:
    corpus = tmp_path / "corpus"
    (corpus / "train").mkdir(parents=True)
    from pyelmo.corpus.splits import read_brown

    lines = [" ".join(w for w, _ in s) for _, s in read_brown(BROWN)]
    lines += ["he sat on the bank of the river", "the bank holds the money", "a cold day", "she plays well"] * 5
    (corpus / "train" / "part.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "model" / static.WORD2VEC_NAME
    static.train_word2vec(corpus, out, static.Word2VecOptions(vector_size=8, min_count=1, epochs=2, workers=1),
                          progress=False)
    return out


# --------------------------------------------------------------------------- WSD data


def test_wsd_split_is_deterministic_and_proportioned():
    assert wsddata.wsd_split("n", "bank", "he cashed a check at the bank") == \
        wsddata.wsd_split("n", "bank", "he cashed a check at the bank")
    counts = Counter(wsddata.wsd_split("n", f"w{i}", "s") for i in range(3000))
    assert set(counts) == {"train", "dev", "test"}
    assert abs(counts["train"] / 3000 - 0.6) < 0.04
    assert abs(counts["dev"] / 3000 - 0.1) < 0.03
    assert abs(counts["test"] / 3000 - 0.3) < 0.04


def test_wordnet_fixture_reads_through_nltk(cache):
    wn = wsddata.open_wordnet(WORDNET, cache)
    assert (wsddata.prepare_wordnet_dir(WORDNET, cache) / "lexnames").read_text().startswith("00\tadj.all\t3\n")
    senses = wsddata.lemma_senses(wn, "bank", "n")
    assert len(senses) == 10 and senses[0].name() == "bank.n.01"
    assert senses[1].lexname() == "noun.group"
    assert "goose" in wn._morphy("geese", "n")  # noun.exc


def test_wsd_instances(instances):
    by = {(i.lemma, i.pos) for i in instances}
    assert {("bank", "n"), ("abandon", "v"), ("cold", "a"), ("well", "r")} <= by
    assert ("goose", "n") not in by  # no example sentence of its senses contains it
    abandoned = [i for i in instances if i.lemma == "abandon" and i.tokens[i.index] == "abandoned"]
    assert abandoned  # an inflection found by morphy
    baking = [i for i in instances if i.lemma == "bake" and i.sense == "bake.v.04"]
    assert baking and baking[0].tokens[baking[0].index] == "baking"
    for i in instances:
        assert i.split in ("train", "dev", "test") and i.tokens[i.index]
        assert len({j.sense for j in instances if j.key == i.key}) >= 2  # ambiguous within the data
    check = next(i for i in instances if i.tokens == tuple("he cashed a check at the bank".split()))
    assert check.sense == "depository_financial_institution.n.01" and check.sense_rank == 1
    assert check.first_sense == "bank.n.01" and check.n_senses == 10
    assert check.split == wsddata.wsd_split("n", "bank", "he cashed a check at the bank")


def test_instances_are_cached_as_json(cache, instances):
    files = list(cache.glob("wsd-instances-*.json"))
    assert len(files) == 1
    again = wsddata.load_instances(WORDNET, cache, progress=False)
    assert again == instances


def test_tokenize_is_moses_style():
    assert common.tokenize("I'm afraid the film was well over budget.") == \
        ["I", "'m", "afraid", "the", "film", "was", "well", "over", "budget", "."]


# --------------------------------------------------------------------------- 1-NN


def _inst(lemma: str, sense: str, rank: int, split: str = "train", first: str = "s0") -> WsdInstance:
    return WsdInstance(lemma, "n", sense, rank, first, 3, ("a", lemma), 1, split)


def test_nearest_sense_and_fallbacks():
    train = [_inst("bank", "s0", 0), _inst("bank", "s1", 1), _inst("bank", "s1", 1), _inst("plant", "p1", 1)]
    vec = np.array([[1.0, 0.0], [0.0, 1.0], [0.2, 1.0], [1.0, 1.0]], dtype=np.float32)
    test = [_inst("bank", "s1", 1, "test"), _inst("bank", "s0", 0, "test"), _inst("cold", "c1", 1, "test", "c0"),
            _inst("bank", "s1", 1, "test")]
    qv = np.array([[0.1, 0.9], [0.9, 0.1], [1.0, 0.0], [0.5, 0.5]], dtype=np.float32)
    known = np.array([True, True, True, False])
    preds, fb = wsd.predict_1nn(vec, np.ones(4, bool), train, qv, known, test)
    # nearest centroid; an unseen lemma falls back to its first sense; an unknown query too
    assert preds == ["s1", "s0", "c0", "s0"]
    assert fb.tolist() == [False, False, True, True]
    scores = wsd.score(preds, test, fb, {("bank", "n", "s1"), ("bank", "n", "s0")})
    assert scores["accuracy"] == pytest.approx(0.5)
    assert scores["fallback_rate"] == pytest.approx(0.5)
    assert scores["accuracy_seen_senses"] == pytest.approx(2 / 3)
    assert scores["per_pos"]["noun"]["n"] == 4


def test_ties_go_to_the_more_frequent_sense():
    # a static vector: the same vector for every context of the word form
    train = [_inst("bank", "s2", 2), _inst("bank", "s1", 1)]
    vec = np.array([[1.0, 2.0], [1.0, 2.0]], dtype=np.float32)
    preds, _ = wsd.predict_1nn(vec, np.ones(2, bool), train, vec[:1], np.ones(1, bool), [_inst("bank", "s2", 2, "test")])
    assert preds == ["s1"]


def test_simplex_grid_and_mix_tuning():
    grid = wsd.simplex_grid(3, 0.5)
    assert sorted(grid) == sorted([(1, 0, 0), (0, 1, 0), (0, 0, 1), (0.5, 0.5, 0), (0.5, 0, 0.5), (0, 0.5, 0.5)])
    assert len(wsd.simplex_grid(3, 0.1)) == 66
    # layer 1 separates the senses, layers 0 and 2 are noise pointing the wrong way
    train = [_inst("bank", "s0", 0), _inst("bank", "s1", 1)]
    dev = [_inst("bank", "s0", 0, "dev"), _inst("bank", "s1", 1, "dev")]
    good = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    bad = good[::-1].copy()
    layers_tr = np.stack([bad, good, bad])
    layers_dev = np.stack([good, good, good])
    weights, acc = wsd.tune_mix(layers_tr, np.ones(2, bool), train, layers_dev, np.ones(2, bool), dev, 0.5)
    assert weights == (0.0, 1.0, 0.0) and acc == 1.0


def test_evaluate_wsd_on_tiny_model(tiny_model, instances, word2vec_file, cache):
    w2v = static.StaticVectors.load(word2vec_file)
    res = wsd.evaluate_wsd(tiny_model, instances, w2v, cache_dir=cache, progress=False)
    methods = res["methods"]
    assert list(methods) == ["first_sense", "word2vec", "layer_0", "layer_1", "layer_2", "average", "mix"]
    test = [i for i in instances if i.split == "test"]
    assert methods["first_sense"]["accuracy"] == pytest.approx(np.mean([i.sense == i.first_sense for i in test]))
    for m in methods.values():  # accuracy is a count of correct test contexts over their number, per POS too
        per_pos = m["per_pos"].values()
        assert m["per_pos"]["noun"]["n"] > 0 and sum(p["n"] for p in per_pos) == len(test)
        correct = sum(p["accuracy"] * p["n"] for p in per_pos)
        assert correct == pytest.approx(round(correct)) and m["accuracy"] == pytest.approx(correct / len(test))
    assert sum(res["data"]["contexts"].values()) == len(instances)
    assert len(res["mix"]["weights"]) == 3 and sum(res["mix"]["weights"]) == pytest.approx(1.0)
    json.dumps(res)  # serializable


# --------------------------------------------------------------------------- vectors and cache


def test_token_vectors_match_the_embedder_and_are_cached(tiny_model, cache, monkeypatch):
    from pyelmo.embedding.embedder import ElmoEmbedder

    sents = [["the", "bank", "was", "closed"], ["a", "play"]]
    vec = common.token_vectors(tiny_model, sents, [[1, 3], [1]], cache_dir=cache, tag="t", progress=False)
    direct = ElmoEmbedder(tiny_model).embed_batch(sents)
    assert vec.shape == (3, 3, 32) and vec.dtype == np.float32
    np.testing.assert_allclose(vec[:, 0], direct[0][:, 1], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(vec[:, 2], direct[1][:, 1], rtol=2e-3, atol=2e-3)
    assert len(list(cache.glob("t-*.npz"))) == 1

    def boom(*a, **k):
        raise AssertionError("the cache was not used")

    monkeypatch.setattr(ElmoEmbedder, "embed_sentences", boom)
    again = common.token_vectors(tiny_model, sents, [[1, 3], [1]], cache_dir=cache, tag="t", progress=False)
    np.testing.assert_array_equal(vec, again)
    with pytest.raises(AssertionError):  # other positions: another cache entry
        common.token_vectors(tiny_model, sents, [[0], [1]], cache_dir=cache, tag="t", progress=False)


def test_fingerprint_follows_the_weights(tiny_model):
    import torch

    fp = model_fingerprint(tiny_model)
    assert fp == model_fingerprint(tiny_model)
    with torch.no_grad():
        next(tiny_model.parameters()).add_(1.0)
    assert model_fingerprint(tiny_model) != fp


# --------------------------------------------------------------------------- word2vec


def test_word2vec_is_stored_without_pickle(word2vec_file):
    raw = word2vec_file.read_bytes()
    assert raw.split(b"\n", 1)[0].split()[1] == b"8"  # binary word2vec header: "<count> <dim>"
    vecs = static.StaticVectors.load(word2vec_file)
    assert vecs.dim == 8
    assert vecs.key("Bank") == "bank" and vecs.vector("zzzqqq") is None
    mat, known = vecs.matrix(["bank", "zzzqqq"])
    assert known.tolist() == [True, False] and not mat[1].any()
    assert len(vecs.most_similar("bank", 3)) == 3


def test_word2vec_errors(tmp_path):
    with pytest.raises(common.EvaluationError, match="train"):
        static.resolve_word2vec(None, tmp_path, None)
    with pytest.raises(common.EvaluationError, match="no pretraining text"):
        static.resolve_word2vec(None, tmp_path, tmp_path / "nothing")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a word2vec file")
    with pytest.raises(common.EvaluationError):
        static.StaticVectors.load(bad)


# --------------------------------------------------------------------------- POS


@pytest.mark.parametrize("raw, collapsed", [
    ("nn-tl", "nn"), ("np-tl-hl", "np"), ("vbd-nc", "vbd"), ("fw-nn", "nn"), ("md*", "md"), ("*", "*"),
    ("ppss+md", "ppss+md"), ("NP$", "np$"), ("nn-hl+bez-tl", "nn+bez"), (".", "."), ("--", "--"),
])
def test_collapse_tag(raw, collapsed):
    assert pos.collapse_tag(raw) == collapsed


def test_brown_reading_uses_the_file_split():
    train = pos.read_tagged(BROWN, "train")
    test = pos.read_tagged(BROWN, "test")
    assert {s.fileid for s in train} == {"ca01", "ca02"} and {s.fileid for s in test} == {"ca05"}
    assert train[0].words[:3] == ("The", "Fulton", "County") and train[0].tags[:3] == ("at", "np", "nn")
    assert [s.number for s in train if s.fileid == "ca01"] == list(range(8))


def test_sampling_is_deterministic_and_keeps_order():
    sents = pos.read_tagged(BROWN, "train")
    a = pos.sample_sentences(sents, 5, "x")
    assert a == pos.sample_sentences(sents, 5, "x") and len(a) == 5
    assert set(a) == set(pos.sample_sentences(list(reversed(sents)), 5, "x"))  # by content, not order
    assert set(a) != set(pos.sample_sentences(sents, 5, "another salt"))
    assert [sents.index(s) for s in a] == sorted(sents.index(s) for s in a)
    assert pos.sample_sentences(sents, None) == sents


def test_most_frequent_tag():
    s = [pos.TaggedSentence("ca01", 0, ("the", "run", "run", "Run"), ("at", "nn", "vb", "nn")),
         pos.TaggedSentence("ca01", 1, ("a", "run"), ("at", "vb"))]
    table = pos.most_frequent_tag(s)
    assert pos.mft_predict(["run", "RUN", "the", "zzz"], table) == ["vb", "nn", "at", "at"]


def test_linear_probe_learns_separable_data():
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 6)) * 5
    y = rng.integers(0, 4, size=400)
    x = (centers[y] + rng.normal(size=(400, 6))).astype(np.float32)
    probe = pos.train_probe(x[:300], y[:300], 4, max_iter=50)
    assert (probe.predict(x[300:]) == y[300:]).mean() > 0.95
    again = pos.train_probe(x[:300], y[:300], 4, max_iter=50)
    np.testing.assert_array_equal(probe.weight, again.weight)  # deterministic


def test_evaluate_pos_on_tiny_model(tiny_model, word2vec_file, cache):
    res = pos.evaluate_pos(tiny_model, BROWN, static.StaticVectors.load(word2vec_file), train_sentences=None,
                           test_sentences=None, max_iter=20, cache_dir=cache, progress=False)
    assert list(res["methods"]) == ["most_frequent_tag", "word2vec", "layer_0", "layer_1", "layer_2"]
    assert res["data"]["test_sentences"] == 8 and res["data"]["train_sentences"] == 19
    n_test = sum(len(s.words) for s in pos.sample_sentences(pos.read_tagged(BROWN, "test"), None, "pos-test"))
    for m in res["methods"].values():  # a count of correctly tagged test tokens over their number
        assert m["accuracy"] * n_test == pytest.approx(round(m["accuracy"] * n_test), abs=1e-6)
    assert res["methods"]["most_frequent_tag"]["accuracy"] > 0.3  # above chance on this tag set
    # the probe fits its training tokens better than chance on a tag set this size
    assert res["methods"]["layer_0"]["train_accuracy"] > 0.3


# --------------------------------------------------------------------------- neighbours, reports, CLI


def test_neighbours(tiny_model, word2vec_file, cache):
    from pyelmo.evaluation.neighbours import Query, evaluate_neighbours

    queries = [Query("bank", "river", "He sat on the bank of the river ."), Query("play", "theatre", "a new play")]
    res = evaluate_neighbours(tiny_model, BROWN, static.StaticVectors.load(word2vec_file), queries=queries, k=2,
                              cache_dir=cache, progress=False)
    assert res["data"]["occurrences"] == {"bank": 3, "play": 3}
    q = res["queries"][0]
    assert len(q["neighbours"]) == 2 and q["neighbours"][0]["cosine"] >= q["neighbours"][1]["cosine"]
    assert all("bank" in n["sentence"].lower().split() for n in q["neighbours"])
    assert res["word2vec"]["bank"] and res["queries"][1]["neighbours"][0]["genre"] == "news"
    with pytest.raises(common.EvaluationError):
        _ = Query("bank", "x", "no such word").index


def test_report_writing(tmp_path):
    fake = {"task": "pos", "data": {"tagset": "brown-collapsed", "n_tags": 3, "train_sentences": 2,
                                    "train_tokens": 9, "test_sentences": 1, "test_tokens": 4,
                                    "test_unseen_word_rate": 0.25, "test_tags_unseen_in_train": []},
            "probe": {"model": "m", "l2": 0.0, "max_iter": 1},
            "methods": {"most_frequent_tag": {"accuracy": 0.5, "accuracy_unseen_words": 0.0},
                        "layer_0": {"accuracy": 0.75, "accuracy_unseen_words": 1.0, "train_accuracy": 1.0}}}
    report.write_task(tmp_path, fake)
    md = report.write_report(tmp_path, {"model": "x"})
    text = md.read_text()
    assert "| layer 0 | 75.0 | 100.0 | 100.0 |" in text and "most frequent tag" in text
    assert (tmp_path / "pos.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "pos.json").read_text())["methods"]["layer_0"]["accuracy"] == 0.75
    assert not list(tmp_path.glob(".*.tmp"))


def test_every_registered_evaluation_has_its_runner_and_report_section():
    """The registry is the one list of evaluations: the runner and the report have an entry for each, in
    its order, and the command offers each (and ``all``)."""
    from pyelmo.cli import build_parser
    from pyelmo.evaluation import run
    from pyelmo.evaluation.registry import EVALUATIONS, NAMES, help_lines

    assert NAMES == ("wsd", "pos", "neighbours")
    assert tuple(run._RUNNERS) == tuple(report._SECTIONS) == NAMES
    evaluate = next(a for a in build_parser()._actions if a.dest == "command").choices["evaluate"]
    assert next(a for a in evaluate._actions if a.dest == "task").choices == [*NAMES, "all"]
    lines = help_lines()
    assert all(f"  {name} " in lines for name in (*NAMES, "all")) and "the three" in lines
    assert [n for n in NAMES if EVALUATIONS[n].chart] == ["wsd", "pos"]  # the two with a bar chart


def test_an_unregistered_evaluation_is_refused():
    from pyelmo.evaluation.run import EvalOptions, run_evaluation

    with pytest.raises(common.EvaluationError, match="unknown evaluation task\\(s\\): ner"):
        run_evaluation(None, ("wsd", "ner"), EvalOptions(out_dir=Path("unused")))


def test_cli_evaluate_all(tmp_path, word2vec_file, capsys, monkeypatch):
    from pyelmo.cli import main
    from pyelmo.runtime import planning

    planned, plan_model = [], planning.plan_model  # the biLMs planned: the one loaded, once
    monkeypatch.setattr(planning, "plan_model", lambda model, *a: planned.append(model) or plan_model(model, *a))
    out = tmp_path / "out"
    rc = main(["evaluate", "all", "--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS),
               "--word2vec", str(word2vec_file), "--wordnet", str(WORDNET), "--brown", str(BROWN),
               "--out", str(out), "--cache-dir", str(tmp_path / "c"), "--pos-train-sentences", "10",
               "--pos-test-sentences", "5", "--pos-max-iter", "10", "--no-progress", "--threads", "1"])
    assert rc == 0
    for name in ("wsd.json", "pos.json", "neighbours.json", "wsd.png", "pos.png", "report.md"):
        assert (out / name).exists(), name
    text = (out / "report.md").read_text()
    assert "## Word sense disambiguation" in text and "## Part-of-speech probe" in text and "### play" in text
    assert json.loads((out / "pos.json").read_text())["data"]["train_sentences"] == 10
    assert "wrote" in capsys.readouterr().out
    assert len(planned) == 1


def test_cli_errors_are_one_line(tmp_path, capsys):
    from pyelmo.cli import main

    rc = main(["evaluate", "pos", "--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS),
               "--brown", str(BROWN), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "word2vec" in err  # no baseline beside the model, no corpus
    rc = main(["evaluate", "pos", "--model", str(tmp_path / "missing"), "--no-word2vec", "--no-progress"])
    assert rc == 1
    rc = main(["evaluate", "wsd", "--no-word2vec", "--options-file", str(OPTIONS), "--weight-file", str(WEIGHTS),
               "--wordnet", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 1 and "not found" in capsys.readouterr().err


def test_report_flags_results_of_another_model(tmp_path):
    fake = {"task": "neighbours", "data": {"occurrences": {"bank": 0}, "layer": 2}, "word2vec": {"bank": []},
            "queries": [{"word": "bank", "sense": "river", "query": "q", "neighbours": []}],
            "model": {"source": "old", "fingerprint": "a" * 40}}
    report.write_task(tmp_path, fake)
    text = report.write_report(tmp_path, {"model fingerprint (sha1 of weights)": "b" * 40}).read_text()
    assert "computed with another model (old" in text and "(no Brown sentence with this word)" in text
    text = report.write_report(tmp_path, {"model fingerprint (sha1 of weights)": "a" * 40}).read_text()
    assert "another model" not in text


def test_ngram_baselines_on_a_tiny_text(tmp_path):
    from pyelmo.evaluation.ngram import ngram_perplexity
    from pyelmo.lm.vocab import Vocabulary

    train = tmp_path / "train.txt"
    train.write_text("the cat sat\nthe cat ran\nthe dog sat\n" * 5)
    vocab = Vocabulary(["<S>", "</S>", "<UNK>", "the", "cat", "dog", "sat", "ran"])
    result = ngram_perplexity(vocab, [train], [train])
    assert result.predictions == 15 * 4
    assert 1.0 < result.bigram < result.unigram < len(vocab)  # context helps on text it has seen
