"""Throwaway: POST /v1/sentence_similarity through FastAPI's TestClient equals the embedder's pooled cosines."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from pyelmo.serve import build_service, create_app  # noqa: E402


def test_sentence_similarity_equals_pooled_cosines(tmp_path):
    service = build_service(cache_dir=tmp_path / "cache")
    sentences = ["I deposited money in the bank .", ["We", "sat", "on", "the", "river", "bank"], "Cash at the bank"]
    with TestClient(create_app(service), raise_server_exceptions=False) as client:
        answer = client.post("/v1/sentence_similarity", json={"sentences": sentences})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert client.post("/v1/sentence_similarity", json={"sentences": ["one"]}).status_code == 422
        assert "/v1/sentence_similarity" in client.get("/openapi.json").json()["paths"]
    assert body["layers"] == ["layer 0", "layer 1", "layer 2", "average"]
    tokens = [s["tokens"] for s in body["sentences"]]
    assert tokens[1] == sentences[1] and tokens[0][-1] == "."
    pooled = np.stack([service.embedder.embed_sentence(t).mean(axis=1) for t in tokens])  # (n, L, D)
    for k, name in enumerate(body["layers"]):
        v = pooled.mean(axis=1) if name == "average" else pooled[:, k]
        unit = v / np.linalg.norm(v, axis=-1, keepdims=True)
        np.testing.assert_allclose(body["matrices"][name], unit @ unit.T, atol=1e-5)
    matrix = np.asarray(body["matrices"]["layer 2"])
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-5)
    assert matrix[0, 1] < 0.9999 and matrix[0, 2] < 0.9999  # different sentences are not the same vector
