"""pyelmo serve's JSON API, in-process: answers equal the Python API's, limits give 4xx naming the field,
the batcher groups concurrent requests, and a schema-driven fuzz finds no 5xx."""

from __future__ import annotations

import base64
import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from pyelmo.evaluation.demo import SEED_PAIRS, similarity_rows  # noqa: E402
from pyelmo.serve import Limits, build_service, create_app  # noqa: E402
from pyelmo.serve.service import Service  # noqa: E402
from pyelmo.serve.batching import Batcher  # noqa: E402

BANK = SEED_PAIRS[0][1]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    service = build_service(cache_dir=tmp_path_factory.mktemp("serve-cache"), limits=Limits(max_body_bytes=200_000))
    yield service
    service.close()


@pytest.fixture(scope="module")
def client(service):
    # raise_server_exceptions=False: a server error must come back as a response, never as an exception
    with TestClient(create_app(service), raise_server_exceptions=False) as client:
        yield client


def _sibling(service, embedder=None, predictor=None) -> Service:
    """The module's service with its own batcher (an app's shutdown closes its service's batcher)."""
    return Service(service.embedder, Batcher(embedder or service.embedder), service.corpus, service.model_info,
                   predictor, service.limits)


def test_health_models_page_and_schema(client, service):
    assert client.get("/health").json() == {"status": "ok"}
    model = client.get("/v1/models").json()["models"][0]
    assert model["layers"] == 3 and model["dim"] == 256 and model["predict"] is True
    page = client.get("/")
    assert page.status_code == 200 and "<script src=\"/static/app.js\">" in page.text
    for asset in ("app.js", "style.css"):
        assert client.get(f"/static/{asset}").status_code == 200
    assert "//" not in page.text.replace("http://www.w3.org", "")  # no CDN: every asset from this server
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/embed", "/v1/similarity", "/v1/neighbours", "/v1/predict", "/health", "/v1/models"} <= set(paths)
    assert paths["/v1/embed"]["post"]["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorResponse"}


def test_similarity_equals_the_demo(client, service):
    for word, sentences in SEED_PAIRS:
        answer = client.post("/v1/similarity", json={"sentences": sentences, "word": word}).json()
        expected = similarity_rows(service.embedder, word, sentences)
        assert len(answer["pairs"]) == len(expected)
        for pair, row in zip(answer["pairs"], expected):
            assert sentences[pair["first"]] == row.first and sentences[pair["second"]] == row.second
            for name, value in row.by_layer.items():
                assert pair["by_layer"][name] == pytest.approx(value, abs=1e-5)


def test_similarity_positions_senses_and_projection(client, service):
    sentences = [["the", "bank", "lent", "money"], ["a", "bank", "account"], ["the", "river", "bank"]]
    answer = client.post("/v1/similarity", json={"sentences": sentences, "positions": [1, 1, 2],
                                                 "senses": ["money", "money", "river"], "project": True}).json()
    m = answer["matrices"]["layer 2"]
    assert answer["senses"]["within"]["layer 2"] == pytest.approx(m[0][1], abs=1e-6)
    assert answer["senses"]["across"]["layer 2"] == pytest.approx((m[0][2] + m[1][2]) / 2, abs=1e-6)
    assert answer["senses"]["within_pairs"] == 1 and answer["senses"]["across_pairs"] == 2
    assert answer["matrices"]["layer 0"][0][1] == pytest.approx(1.0, abs=1e-5)  # context-independent layer
    projection = answer["projection"]
    n_sample = len(projection["sample"])
    assert n_sample >= 10 and {s["sense"] for s in projection["sample"]} >= {"bank/finance", "bank/river"}
    assert all(len(points) == 3 + n_sample for points in projection["points"].values())
    assert set(projection["variance_kept"]) == set(projection["points"])
    assert all(0 < kept <= 1 + 1e-9 for kept in projection["variance_kept"].values())


def test_neighbours_say_how_the_layers_separate_the_senses(client, service):
    """Per layer, the mean similarity of "bank" over same-sense and different-sense pairs of the sample's
    contexts (as ``pyelmo demo``), and of the query to each sense's contexts, recomputed here."""
    sentence = "I deposited money in the bank ."
    senses = client.post("/v1/neighbours", json={"sentence": sentence, "word": "bank"}).json()["senses"]
    corpus = service.corpus
    rows = [r for r in corpus.contexts("bank") if corpus.sense_of(r)]
    labels = np.array([corpus.sense_of(r) for r in rows])
    assert senses["contexts"] == {"bank/finance": 11, "bank/river": 11}
    vectors = np.stack([service.embedder.embed_sentence(list(corpus.examples[corpus.rows[r][0]].tokens))
                        [:, corpus.rows[r][1]] for r in rows])  # (n, L, D)
    query = service.embedder.embed_sentence(sentence.split())[:, 5]
    same = (labels[:, None] == labels[None, :]) & np.triu(np.ones((len(rows),) * 2, dtype=bool), k=1)
    different = (labels[:, None] != labels[None, :]) & np.triu(np.ones((len(rows),) * 2, dtype=bool), k=1)
    for layer in range(3):
        unit = vectors[:, layer] / np.linalg.norm(vectors[:, layer], axis=-1, keepdims=True)
        sims = unit @ unit.T
        name = f"layer {layer}"
        assert senses["same_sense"][name] == pytest.approx(sims[same].mean(), abs=1e-5)
        assert senses["different_senses"][name] == pytest.approx(sims[different].mean(), abs=1e-5)
        to_query = unit @ (query[layer] / np.linalg.norm(query[layer]))
        for sense in ("bank/finance", "bank/river"):
            assert senses["query"][sense][name] == pytest.approx(to_query[labels == sense].mean(), abs=1e-5)
    assert senses["same_sense"]["layer 2"] > senses["different_senses"]["layer 2"]
    # a word the corpus has no senses of: no bars, no error
    assert client.post("/v1/neighbours", json={"sentence": "the cat sat", "word": "the"}).json()["senses"] is None


def test_embed_matches_the_embedder(client, service):
    tokens = ["The", "bank", "closed", "early", "."]
    expected = service.embedder.embed_sentence(tokens)  # (L, n, D)
    exact = client.post("/v1/embed", json={"sentences": [tokens, "A second , longer sentence is here ."],
                                           "encoding": "base64"}).json()
    item = exact["sentences"][0]
    got = np.frombuffer(base64.b64decode(item["base64"]), dtype="<f4").reshape(item["shape"])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    rounded = client.post("/v1/embed", json={"sentences": [tokens], "layers": [-1, 0], "decimals": 4}).json()
    np.testing.assert_allclose(np.array(rounded["sentences"][0]["vectors"]), expected[[2, 0]], atol=6e-5)
    average = client.post("/v1/embed", json={"sentences": [tokens], "output": "average"}).json()
    np.testing.assert_allclose(np.array(average["sentences"][0]["vectors"]), expected.mean(axis=0), atol=2e-6)
    many = client.post("/v1/embed", json={"sentences": [tokens * 4] * 64}).json()  # rendered in a thread
    assert len(many["sentences"]) == 64
    np.testing.assert_allclose(np.array(many["sentences"][63]["vectors"]),
                               service.embedder.embed_sentence(tokens * 4), atol=1e-5)
    mix = client.post("/v1/embed", json={"sentences": [tokens], "output": "mix", "layers": [1, 2],
                                         "mix_weights": [0.0, np.log(3.0)], "gamma": 2.0}).json()
    np.testing.assert_allclose(np.array(mix["sentences"][0]["vectors"]),
                               2.0 * (0.25 * expected[1] + 0.75 * expected[2]), atol=1e-5)


def test_embed_sentence_vectors(client, service):
    """pool=mean: one vector per sentence, the mean over its own tokens (a longer sentence shares the batch)."""
    sentences = [["The", "bank", "closed", "."], "A second , longer sentence is here ."]
    expected = next(service.embedder.embed_sentences([sentences[0]], pool="mean"))  # (L, D)
    body = {"sentences": sentences, "pool": "mean", "encoding": "base64"}
    for output, layers, want in (("layers", None, expected), ("average", [0, 2], expected[[0, 2]].mean(axis=0))):
        answer = client.post("/v1/embed", json={**body, "output": output, "layers": layers}).json()
        item = answer["sentences"][0]
        got = np.frombuffer(base64.b64decode(item["base64"]), dtype="<f4").reshape(item["shape"])
        assert answer["pool"] == "mean" and item["shape"] == list(want.shape)
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert client.post("/v1/embed", json={"sentences": ["a"], "pool": "max"}).status_code == 422


def test_tokenize_neighbours_and_predict(client, service):
    from pyelmo.lm.predict import WordPredictor
    from pyelmo.text.tokenize import tokenize

    text = "The boat stopped near the river bank."
    assert client.post("/v1/tokenize", json={"sentences": [text]}).json()["sentences"][0]["tokens"] == tokenize(text)

    answer = client.post("/v1/neighbours", json={"sentence": text, "word": "bank", "k": 4}).json()
    assert set(answer["layers"]) == {"layer 0", "layer 1", "layer 2", "average"}
    for name, found in answer["layers"].items():
        assert len(found) == 4 and all(nb["word"].lower() == "bank" for nb in found)
        assert all(nb["sentence"] != " ".join(tokenize(text)) for nb in found)  # not the query itself
        sims = [nb["similarity"] for nb in found]
        assert sims == sorted(sims, reverse=True)
    assert all(nb["similarity"] > 0.9999 for nb in answer["layers"]["layer 0"])  # one spelling, one vector
    anywhere = client.post("/v1/neighbours", json={"sentence": text, "word": "boat", "same_word": False}).json()
    assert len(anywhere["layers"]["layer 2"]) == 5

    got = client.post("/v1/predict", json={"sentence": "The boat stopped near the river ___ .", "k": 5}).json()
    expected = WordPredictor.from_pretrained().predict(got["tokens"], k=5)
    for direction in ("forward", "backward", "combined"):
        assert [p["word"] for p in got[direction]] == [w for w, _ in getattr(expected, direction)]
        assert [p["probability"] for p in got[direction]] == pytest.approx([p for _, p in getattr(expected, direction)],
                                                                          abs=1e-6)


def test_neighbour_similarities_are_cosines_of_the_vectors(client, service):
    """Each neighbour's similarity equals the cosine of the two tokens' vectors, embedded here on their own."""
    answer = client.post("/v1/neighbours", json={"sentence": "I sat on the bank of the river .", "word": "bank",
                                                  "k": 3}).json()
    query = service.embedder.embed_sentence(answer["tokens"])[:, answer["position"]]  # (L, D)
    query = np.concatenate([query, query.mean(axis=0, keepdims=True)])
    names = [f"layer {i}" for i in range(len(query) - 1)] + ["average"]
    assert set(answer["layers"]) == set(names)
    for k, name in enumerate(names):
        for nb in answer["layers"][name]:
            other = service.embedder.embed_sentence(nb["sentence"].split(" "))[:, nb["position"]]
            other = np.concatenate([other, other.mean(axis=0, keepdims=True)])[k]
            cosine = float(query[k] @ other / (np.linalg.norm(query[k]) * np.linalg.norm(other)))
            assert nb["similarity"] == pytest.approx(cosine, abs=1e-5), (name, nb)
    assert np.linalg.norm(query[-1]) > 2  # the vectors are far from unit length: an unnormalised query would show


@pytest.mark.parametrize("path, body, field", [
    ("/v1/embed", lambda tokens: {"sentences": ["ok", tokens]}, "sentences[1]"),
    ("/v1/embed", lambda tokens: {"sentences": [" ".join(tokens)]}, "sentences[0]"),
    ("/v1/neighbours", lambda tokens: {"sentence": tokens, "word": "bank"}, "sentence"),
    ("/v1/predict", lambda tokens: {"sentence": tokens, "position": 1}, "sentence"),
    ("/v1/predict", lambda tokens: {"sentence": " ".join(["___", *tokens[1:]])}, "sentence"),
])
def test_a_sentence_of_exactly_the_token_limit_is_accepted(client, service, path, body, field):
    limit = service.limits.max_tokens
    at_limit = ["the", "bank", *["w"] * (limit - 2)]
    response = client.post(path, json=body(at_limit))
    assert response.status_code == 200, response.text
    over = client.post(path, json=body([*at_limit, "w"]))
    assert over.status_code == 422 and over.json()["error"]["field"] == field, over.text
    assert f"{limit + 1} tokens; at most {limit}" in over.json()["error"]["message"]


@pytest.mark.parametrize("path, body, status, field", [
    ("/v1/embed", {"sentences": []}, 422, "sentences"),
    ("/v1/embed", {"sentences": ["x"] * 65}, 422, "sentences"),
    ("/v1/embed", {"sentences": ["ok", " ".join(["w"] * 101)]}, 422, "sentences[1]"),
    ("/v1/embed", {"sentences": ["x" * 2001]}, 422, "sentences[0]"),
    ("/v1/embed", {"sentences": [["a", " "]]}, 422, "sentences[0][1]"),
    ("/v1/embed", {"sentences": ["   "]}, 422, "sentences[0]"),
    ("/v1/embed", {"sentences": [[]]}, 422, "sentences[0]"),
    ("/v1/embed", {"sentences": [7]}, 422, "sentences[0]"),
    ("/v1/embed", {"sentences": ["a"], "layers": [3]}, 422, "layers[0]"),
    ("/v1/embed", {"sentences": ["a"], "layers": [0] * 1000}, 422, "layers"),
    ("/v1/embed", {"sentences": ["a"], "layers": []}, 422, "layers"),
    ("/v1/embed", {"sentences": ["a"], "output": "mix"}, 422, "mix_weights"),
    ("/v1/embed", {"sentences": ["a"], "decimals": 12}, 422, "decimals"),
    ("/v1/embed", {"sentences": ["a"], "surprise": 1}, 422, "surprise"),
    ("/v1/similarity", {"sentences": ["a bank", "the shore"], "word": "bank"}, 422, "word"),
    ("/v1/similarity", {"sentences": ["a bank", "a bank"], "positions": [1, 5]}, 422, "positions[1]"),
    ("/v1/similarity", {"sentences": ["a bank", "a bank"], "positions": [1]}, 422, "positions"),
    ("/v1/similarity", {"sentences": ["a bank", "a bank"]}, 422, "word"),
    ("/v1/similarity", {"sentences": ["a bank", "a bank"], "word": "bank", "senses": ["x"]}, 422, "senses"),
    ("/v1/neighbours", {"sentence": "a zyzzyva", "word": "zyzzyva"}, 422, "word"),
    ("/v1/neighbours", {"sentence": "a bank", "word": "bank", "k": 51}, 422, "k"),
    ("/v1/neighbours", {"sentence": "a bank", "word": "bank", "k": 0}, 422, "k"),
    ("/v1/predict", {"sentence": "no blank here"}, 422, "sentence"),
    ("/v1/predict", {"sentence": "two ___ blanks ___"}, 422, "sentence"),
    ("/v1/predict", {"sentence": ["a", "b"], "position": 2}, 422, "position"),
])
def test_bad_requests_name_the_field(client, path, body, status, field):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["field"] == field


def test_malformed_and_oversized_bodies(client):
    cases = [
        (b"{not json", {"content-type": "application/json"}, 400),
        (b'{"sentences": ["\\ud800"]}', {"content-type": "application/json"}, 422),  # a lone surrogate
        (b"", {"content-type": "application/json"}, 422),
        (b"[1, 2]", {"content-type": "application/json"}, 422),
        (b"x" * 300_000, {"content-type": "application/json"}, 413),
    ]
    for content, headers, status in cases:
        response = client.post("/v1/embed", content=content, headers=headers)
        assert response.status_code == status, (content[:20], response.text)
        assert set(response.json()["error"]) >= {"status", "field", "message"}

    def chunks():  # no content-length: the limit is counted while reading
        for _ in range(30):
            yield b"x" * 10_000

    assert client.post("/v1/embed", content=chunks()).status_code == 413
    assert client.get("/no/such/page").json()["error"]["status"] == 404
    assert client.get("/v1/embed").status_code == 405


def test_an_internal_error_is_json_without_a_traceback(service):
    class Broken:
        def embed_batch(self, batch):
            raise RuntimeError("secret internals")

    with TestClient(create_app(_sibling(service, Broken())), raise_server_exceptions=False) as client:
        response = client.post("/v1/embed", json={"sentences": ["a b"]})
        assert response.status_code == 500
        assert response.json() == {"error": {"status": 500, "field": None,
                                             "message": "internal error (the server log has the details)"}}
        assert "Traceback" not in response.text and "secret" not in response.text
        assert client.post("/v1/predict", json={"sentence": "a ___"}).status_code == 404  # no LM head here
        assert client.get("/health").status_code == 200  # still serving


def test_the_command_refuses_bad_settings_on_one_line(capsys, tmp_path):
    import socket

    import torch

    from pyelmo.cli import main

    threads = torch.get_num_threads()  # the command sets them for its process; restore for the other tests
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 1
        assert "cannot listen on 127.0.0.1" in capsys.readouterr().err
    for argv, message in ((["--port", "70000"], "--port out of range"), (["--max-tokens", "0"], "--max-tokens"),
                          (["--model", str(tmp_path / "missing"), "--port", "0"], "missing")):
        assert main(["serve", *argv]) == 1
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    torch.set_num_threads(threads)


class _CountingEmbedder:
    """Records the batches it is given; each call takes ``delay`` seconds."""

    def __init__(self, delay: float = 0.05) -> None:
        self.calls: list[int] = []
        self.delay = delay

    def embed_batch(self, batch):
        self.calls.append(len(batch))
        time.sleep(self.delay)
        return [np.full((1, len(s), 1), float(len(s[0])), dtype=np.float32) for s in batch]


@pytest.mark.parametrize("batching", [True, False])
def test_the_batcher_groups_concurrent_requests(batching):
    embedder = _CountingEmbedder()
    batcher = Batcher(embedder, batching=batching, max_wait=0.02)
    requests = [[["x" * (i + 1)] * (i % 3 + 1)] for i in range(12)]  # distinct first tokens
    futures = [None] * len(requests)

    def submit(i):
        futures[i] = batcher.submit(requests[i])

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, future in enumerate(futures):
        (vectors,) = future.result(timeout=10)
        assert vectors.shape == (1, i % 3 + 1, 1) and vectors[0, 0, 0] == i + 1  # each gets its own rows
    batcher.close()
    if batching:
        assert len(embedder.calls) < len(requests) / 2 and sum(embedder.calls) == len(requests)
    else:
        assert embedder.calls == [1] * len(requests)


def test_the_batcher_survives_errors_and_cancellations():
    embedder = _CountingEmbedder(delay=0.2)
    batcher = Batcher(embedder, max_wait=0.0)
    first = batcher.submit([["a"]])  # occupies the worker
    time.sleep(0.05)
    cancelled = batcher.submit([["gone"]])
    assert cancelled.cancel()
    assert first.result(timeout=5)[0][0, 0, 0] == 1
    failing = batcher.call(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=5)
    assert batcher.submit([["abc"]]).result(timeout=5)[0][0, 0, 0] == 3
    batcher.close()
    assert embedder.calls == [1, 1]  # the cancelled request was never computed


def test_a_client_that_leaves_cancels_its_queued_work():
    import asyncio

    from pyelmo.serve.errors import BodyLimit

    embedder = _CountingEmbedder(delay=0.3)
    batcher = Batcher(embedder, max_wait=0.0)
    busy = batcher.submit([["a"]])  # the worker is busy when the next request arrives
    sent = []

    async def app(scope, receive, send):
        await batcher.embed([["never", "computed"]])
        sent.append("answered")

    async def scenario():
        messages = [{"type": "http.request", "body": b"{}", "more_body": False}, {"type": "http.disconnect"}]

        async def receive():
            if messages:
                await asyncio.sleep(0.05)
                return messages.pop(0)
            await asyncio.Event().wait()

        async def send(message):
            sent.append(message)

        await asyncio.wait_for(BodyLimit(app, 1000)({"type": "http", "headers": []}, receive, send), timeout=5)

    asyncio.run(scenario())
    busy.result(timeout=5)
    batcher.close()
    assert sent == [] and embedder.calls == [1]


def test_batched_vectors_equal_unbatched(service):
    sentences = [["a", "bank"], ["The", "river", "bank", "was", "muddy", "after", "the", "rain", "."], ["Hi", "."]]
    futures = [service.batcher.submit([s]) for s in sentences]
    for sentence, future in zip(sentences, futures):
        np.testing.assert_allclose(future.result(timeout=30)[0], service.embedder.embed_sentence(sentence), atol=1e-5)


def test_the_corpus_vectors_are_cached(service, tmp_path):
    from pyelmo.serve.neighbours import SampleCorpus

    class Counting:
        calls = 0
        options = service.embedder.options  # its plan is part of the key

        def embed_sentences(self, sentences):
            Counting.calls += 1
            return service.embedder.embed_sentences(sentences)

    first = SampleCorpus.load(Counting(), "fingerprint-a", tmp_path)
    second = SampleCorpus.load(Counting(), "fingerprint-a", tmp_path)
    assert Counting.calls == 1 and len(list(tmp_path.glob("neighbours-*.npz"))) == 1
    np.testing.assert_array_equal(first.unit_vectors(np.arange(5)), second.unit_vectors(np.arange(5)))
    SampleCorpus.load(Counting(), "fingerprint-b", tmp_path)  # another model: computed again
    assert Counting.calls == 2 and len(list(tmp_path.glob("neighbours-*.npz"))) == 2


def test_the_page_language_follows_lang():
    """--lang zh serves the page in Chinese (its <html lang> names the message table); others in English."""
    from pyelmo.serve.app import _static_dir, page_html

    english = page_html(_static_dir(), "en")
    assert '<html lang="en">' in english and "{{" not in english
    assert (_static_dir() / "header.html").read_text(encoding="utf-8").strip() in english  # the export's header too
    assert page_html(_static_dir(), "auto") == page_html(_static_dir(), "ja") == english
    assert page_html(_static_dir(), "zh") == english.replace('<html lang="en">', '<html lang="zh-CN">')


def test_the_chinese_sample_corpus_is_segmented_as_the_server_segments():
    """--lang zh adds the Chinese sample corpus to the English one; its tokens are jieba's, so the words
    of a Chinese sentence typed on the page find their contexts there."""
    pytest.importorskip("jieba")
    from collections import Counter

    from pyelmo.evaluation.senses import read_sense_examples
    from pyelmo.serve.neighbours import sample_corpus_path, sample_corpus_paths
    from pyelmo.text.tokenize import tokenize

    assert sample_corpus_paths("auto") == sample_corpus_paths("en") == [sample_corpus_path()]
    english, chinese = sample_corpus_paths("zh")
    assert english == sample_corpus_path() and chinese.name == "sample_corpus_zh.tsv"
    examples = read_sense_examples(chinese)
    for example in examples:
        assert tokenize("".join(example.tokens), "zh") == list(example.tokens), example
    senses = Counter((e.word, e.sense) for e in examples)
    assert len({word for word, _ in senses}) == 8 and set(senses.values()) == {5}, senses


# ---------------------------------------------------------------------------- schema fuzz


NON_FINITE = (float("nan"), float("inf"), float("-inf"))

#: A valid body per operation, into which each numeric field is set to NaN, +-Infinity or too large a value.
VALID = {
    "/v1/embed": {"sentences": ["a bank"], "output": "mix", "layers": [1, 2], "mix_weights": [0.0, 1.0]},
    "/v1/similarity": {"sentences": ["a bank", "the bank"], "positions": [1, 1]},
    "/v1/neighbours": {"sentence": "a bank", "position": 1},
    "/v1/predict": {"sentence": ["a", "bank"], "position": 1},
}


def _numeric_fields(schema: dict, name: str) -> dict[str, bool]:
    """The request model's numeric fields, each with whether it is a list of numbers."""
    components = schema["components"]["schemas"]
    model = components[name]
    fields = {}
    for field, spec in model["properties"].items():
        for option in spec.get("anyOf", [spec]):
            if option.get("type") in ("number", "integer"):
                fields[field] = False
            elif option.get("type") == "array" and option["items"].get("type") in ("number", "integer"):
                fields[field] = True
    return fields


def test_every_numeric_field_refuses_non_finite_and_huge_values(client):
    schema = client.get("/openapi.json").json()
    paths = schema["paths"]
    checked = set()
    for path, body in VALID.items():
        assert client.post(path, json=body).status_code == 200, path
        ref = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        fields = _numeric_fields(schema, ref.rsplit("/", 1)[1])
        assert fields, path
        for field, is_list in fields.items():
            for bad in (*NON_FINITE, 1e300, -1e300, 10**30):
                broken = dict(body)
                if is_list:
                    broken[field] = [bad] + list(body.get(field) or [0] * 1)[1:]
                else:
                    broken[field] = bad
                response = client.post(path, content=json.dumps(broken, allow_nan=True),
                                       headers={"content-type": "application/json"})
                assert response.status_code == 422, (path, field, bad, response.text)
                assert response.json()["error"]["field"].startswith(field), (path, field, bad, response.text)
                checked.add((path, field))
    assert ("/v1/embed", "mix_weights") in checked and ("/v1/embed", "gamma") in checked


def _with_non_finite(value, draw):
    """``value`` with its numbers (and, at random, some other leaves) replaced by NaN or +-Infinity."""
    from hypothesis import strategies as st

    if isinstance(value, dict):
        return {k: _with_non_finite(v, draw) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_non_finite(v, draw) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool) or draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(NON_FINITE))
    return value


def test_fuzzed_requests_never_get_a_server_error(service):
    """Requests generated from the OpenAPI schema, valid and not, a few dozen per operation, and the same
    bodies with NaN or +-Infinity in place of numbers (JSON's parser accepts them): no 5xx."""
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    app = create_app(_sibling(service, predictor=service.predictor))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    schema.config.generation.update(allow_x00=True)  # NUL characters in strings too
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/embed", "/v1/similarity", "/v1/neighbours", "/v1/predict"}
    statuses: dict[str, set[int]] = {}
    non_finite: dict[str, set[int]] = {}
    with TestClient(app, raise_server_exceptions=False) as client:
        for operation in operations:
            with_body = operation.method.upper() == "POST"  # the others have nothing to get wrong
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)[:2 if with_body else 1]:
                @given(case=operation.as_strategy(mode), data=st.data())
                @settings(max_examples=15, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
                def check(case, data):
                    response = case.call()
                    statuses.setdefault(case.path, set()).add(response.status_code)
                    assert response.status_code < 500, (case.path, case.body, response.text[:300])
                    if response.status_code >= 400:
                        assert "message" in response.json()["error"]
                    if case.method == "POST" and isinstance(case.body, (dict, list)):
                        body = json.dumps(_with_non_finite(case.body, data.draw), allow_nan=True)
                        response = client.post(case.formatted_path, content=body,
                                               headers={"content-type": "application/json"})
                        non_finite.setdefault(case.path, set()).add(response.status_code)
                        assert response.status_code < 500, (case.path, body[:300], response.text[:300])

                check()
    assert set(statuses) == {op.path for op in operations}, statuses  # every operation was called
    assert set(non_finite) >= set(VALID), non_finite


@pytest.mark.parametrize("flags, rule", [([], None), (["--int8-min-weight", "0"], {"min_weight": 0})])
def test_the_command_lines_int8_rule_reaches_the_workers_as_one_rule(monkeypatch, capsys, flags, rule):
    """``--int8-min-weight N`` travels in the workers' JSON settings as the rule (``{"min_weight": N}``, null
    when not given) and reaches ``build_service`` as a :class:`~pyelmo.runtime.precision.Quantization`."""
    import json

    from pyelmo.cli import main
    from pyelmo.runtime.precision import Quantization
    from pyelmo.serve import app as serve_app
    from pyelmo.serve import process

    got = {}
    monkeypatch.setattr(process, "run_server",
                        lambda settings, **kw: got.update(settings=json.loads(json.dumps(settings))))
    assert main(["serve", "--precision", "int8", *flags, "--host", "127.0.0.1", "--port", "0"]) == 0
    assert got["settings"]["quantization"] == rule and "int8_min_weight" not in got["settings"]
    monkeypatch.setattr(serve_app, "build_service", lambda model, weight_file, **kw: got.update(built=kw) or "service")
    monkeypatch.setattr(serve_app, "create_app", lambda service: service)
    assert serve_app.app_from_settings({k: v for k, v in got["settings"].items() if k != "threads"}) == "service"
    assert got["built"]["quantization"] == (rule and Quantization(**rule)) and got["built"]["precision"] == "int8"
    for bad in (["--precision", "int8", "--int8-min-weight", "-1"], ["--int8-min-weight", "5"]):
        capsys.readouterr()
        assert main(["serve", *bad, "--host", "127.0.0.1", "--port", "0"]) == 1
        err = capsys.readouterr().err
        assert "--int8-min-weight" in err and len(err.strip().splitlines()) == 1, err
