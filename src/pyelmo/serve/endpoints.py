"""The work of the API's endpoints (:class:`Api`), kept apart from routing (:mod:`pyelmo.serve.app`)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Callable, Sequence

import numpy as np
from fastapi.responses import Response

from pyelmo.embedding.pooling import mean_pool
from pyelmo.errors import InputError
from pyelmo.evaluation.senses import find_word
from pyelmo.serve.errors import ApiError, AsciiJSONResponse
from pyelmo.serve.schemas import EmbedRequest, NeighboursRequest, PredictRequest, Sentence, SimilarityRequest
from pyelmo.serve.service import Service

#: Answers with more floats than this are rendered in a worker thread.
LARGE_ANSWER = 200_000

JSON_ROUNDING = "float32 values rounded to `decimals` decimal places (default 6); encoding=base64 gives them exactly"


class Api:
    """The endpoints' work, kept apart from routing."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.limits = service.limits

    # ------------------------------------------------------------------ input

    def tokens(self, sentence: Sentence, where: str, tokenizer: Callable[[str], list[str]] | None = None
               ) -> list[str]:
        """Validated tokens of a raw-text (split by ``tokenizer``, default the service's language's
        tokenizer) or pre-tokenized sentence."""
        limits = self.limits
        if isinstance(sentence, str):
            if len(sentence) > limits.max_chars:
                raise ApiError(422, where, f"longer than {limits.max_chars} characters")
            _check_text(sentence, where)
            try:
                tokens = tokenizer(sentence) if tokenizer else self.service.embedder.tokenize(sentence, self.service.lang)
            except InputError as exc:  # its language's segmenter is not installed on this server
                raise ApiError(422, where, f"{exc} on the server, or send the sentence as a list of tokens") from None
        else:
            for j, token in enumerate(sentence):
                _check_text(token, f"{where}[{j}]")
                if not token.strip():
                    raise ApiError(422, f"{where}[{j}]", "a token must not be empty or only whitespace")
            tokens = list(sentence)
        if not tokens:
            raise ApiError(422, where, "the sentence has no tokens")
        if len(tokens) > limits.max_tokens:
            raise ApiError(422, where, f"{len(tokens)} tokens; at most {limits.max_tokens} per sentence")
        return tokens

    def sentences(self, sentences: Sequence[Sentence], name: str = "sentences") -> list[list[str]]:
        if len(sentences) > self.limits.max_sentences:
            raise ApiError(422, name, f"{len(sentences)} sentences; at most {self.limits.max_sentences} per request")
        return [self.tokens(s, f"{name}[{i}]") for i, s in enumerate(sentences)]

    def check_k(self, k: int) -> None:
        if k > self.limits.max_k:
            raise ApiError(422, "k", f"at most {self.limits.max_k}")

    def position(self, tokens: list[str], word: str | None, position: int | None, where: str) -> int:
        """The token index named by ``word`` (first case-insensitive match) or ``position``."""
        if (word is None) == (position is None):
            raise ApiError(422, "word", "give either `word` or `position`")
        if position is not None:
            if not 0 <= position < len(tokens):
                raise ApiError(422, where, f"position {position} is outside the sentence ({len(tokens)} tokens)")
            return position
        try:
            return find_word(tokens, word, where=where)
        except InputError as exc:
            raise ApiError(422, "word", str(exc)) from None

    # ------------------------------------------------------------------ endpoints

    async def embed(self, body: EmbedRequest) -> Response:
        tokens = self.sentences(body.sentences)
        n = self.service.n_layers
        layers = list(range(n)) if body.layers is None else body.layers
        if not 1 <= len(layers) <= n:
            raise ApiError(422, "layers", f"name 1 to {n} layers")
        for i, layer in enumerate(layers):
            if not -n <= layer < n:
                raise ApiError(422, f"layers[{i}]", f"layer {layer} does not exist; the model has {n} (0..{n - 1})")
        layers = [layer % n for layer in layers]
        weights = None
        if body.output == "mix":
            if body.mix_weights is None or len(body.mix_weights) != len(layers):
                raise ApiError(422, "mix_weights", f"output=mix needs one weight per chosen layer ({len(layers)})")
            w = np.asarray(body.mix_weights, dtype=np.float64)
            w = np.exp(w - w.max())
            weights = (w / w.sum()).astype(np.float32)
        elif body.mix_weights is not None:
            raise ApiError(422, "mix_weights", "mix_weights go with output=mix")

        vectors = await self.service.batcher.embed(tokens)

        def render() -> bytes:
            results = []
            for toks, v in zip(tokens, vectors):
                chosen = v[layers]
                if body.output == "average":
                    chosen = chosen.mean(axis=0)
                elif body.output == "mix":
                    chosen = body.gamma * np.tensordot(weights, chosen, axes=1)
                if body.pool == "mean":
                    chosen = mean_pool(chosen)
                chosen = np.ascontiguousarray(chosen, dtype="<f4")
                item: dict[str, Any] = {"tokens": toks, "shape": list(chosen.shape)}
                if body.encoding == "base64":
                    item["base64"] = base64.b64encode(chosen.tobytes()).decode("ascii")
                else:
                    item["vectors"] = np.round(chosen.astype(np.float64), body.decimals).tolist()
                results.append(item)
            return AsciiJSONResponse(None).render({
                "model": self.service.model_info["id"], "layers": layers, "output": body.output,
                "pool": body.pool, "dtype": "float32", "encoding": body.encoding,
                "rounding": JSON_ROUNDING if body.encoding == "json" else "exact little-endian float32",
                "sentences": results})

        # A large answer (up to 64 x 100 x 3 x 256 floats) is built off the event loop; a small one
        # is not worth the hand-over to another thread.
        size = sum(len(t) for t in tokens) * len(layers) * vectors[0].shape[-1]
        content = await asyncio.to_thread(render) if size > LARGE_ANSWER else render()
        return Response(content, media_type="application/json")

    async def similarity(self, body: SimilarityRequest) -> dict:
        from pyelmo.evaluation.senses import cosine_matrix, with_average_layer

        tokens = self.sentences(body.sentences)
        if body.positions is not None and len(body.positions) != len(tokens):
            raise ApiError(422, "positions", f"one position per sentence ({len(tokens)})")
        if body.senses is not None and len(body.senses) != len(tokens):
            raise ApiError(422, "senses", f"one sense label per sentence ({len(tokens)})")
        positions = [self.position(t, body.word, None if body.positions is None else body.positions[i],
                                   f"sentences[{i}]" if body.positions is None else f"positions[{i}]")
                     for i, t in enumerate(tokens)]
        outputs = await self.service.batcher.embed(tokens)
        vectors = np.stack([out[:, p] for out, p in zip(outputs, positions)])  # (n, L, D)
        vectors, names = with_average_layer(vectors)
        sims = {name: cosine_matrix(vectors[:, k]) for k, name in enumerate(names)}
        n = len(tokens)
        pairs = [{"first": i, "second": j, "by_layer": {name: float(sims[name][i, j]) for name in names}}
                 for i in range(n) for j in range(i + 1, n)]
        result: dict[str, Any] = {
            "layers": names,
            "sentences": [{"tokens": t, "position": p, "word": t[p]} for t, p in zip(tokens, positions)],
            "pairs": pairs,
            "matrices": {name: sims[name].tolist() for name in names},
            "senses": None,
        }
        if body.senses is not None:
            result["senses"] = _sense_means(sims, names, body.senses)
        if body.project:
            result["projection"] = self._projection(vectors, names, tokens[0][positions[0]])
        return result

    def _projection(self, vectors: np.ndarray, names: list[str], word: str) -> dict:
        """2-D PCA per layer of the word in the request's sentences and in the sample corpus."""
        from pyelmo.evaluation.demo import pca2

        corpus = self.service.corpus
        rows = corpus.contexts(word)
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        sample = corpus.unit_vectors(rows)  # (L + 1, m, D)
        points, kept = {}, {}
        for k, name in enumerate(names):
            layer = np.concatenate([unit[:, k], sample[k]])
            xy = pca2(layer)
            total = float(((layer - layer.mean(axis=0)) ** 2).sum())
            points[name] = np.round(xy, 5).tolist()
            kept[name] = float((xy ** 2).sum() / total) if xy.any() else 1.0  # all on one spot: nothing lost
        examples = [corpus.examples[corpus.rows[r][0]] for r in rows]
        return {"points": points, "variance_kept": kept, "sentences": len(vectors),
                "sample": [{"sense": corpus.sense_of(r) or "other", "sentence": " ".join(e.tokens)}
                           for r, e in zip(rows, examples)]}

    async def neighbours(self, body: NeighboursRequest) -> dict:
        self.check_k(body.k)
        tokens = self.tokens(body.sentence, "sentence")
        position = self.position(tokens, body.word, body.position, "position" if body.word is None else "sentence")
        corpus = self.service.corpus
        word = tokens[position]
        rows = corpus.contexts(word) if body.same_word else np.arange(len(corpus.rows))
        if len(rows) == 0:
            raise ApiError(422, "word", f"{word!r} does not occur in the sample corpus; "
                                        "same_word=false searches all of its tokens")
        (vectors,) = await self.service.batcher.embed([tokens])
        query = vectors[:, position]
        query = np.concatenate([query, query.mean(axis=0, keepdims=True)])
        names = [f"layer {i}" for i in range(corpus.n_layers)] + ["average"]
        found = corpus.nearest(query, rows, body.k, exclude=tokens)
        layers = {}
        for name, neighbours in zip(names, found):
            layers[name] = [{"sentence": " ".join(corpus.examples[nb.sentence].tokens), "position": nb.position,
                             "word": corpus.examples[nb.sentence].tokens[nb.position],
                             "sense": corpus.sense_of(nb.row), "similarity": nb.similarity} for nb in neighbours]
        return {"tokens": tokens, "position": position, "word": word,
                "corpus": {"sentences": len(corpus.examples), "contexts": int(len(rows))}, "layers": layers,
                "senses": corpus.senses(word, query, exclude=tokens)}

    async def predict(self, body: PredictRequest) -> dict:
        from pyelmo.lm.predict import BLANK, blank_tokens

        predictor = self.service.predictor
        if predictor is None:
            raise ApiError(404, "model", "the served model has no LM head (softmax and vocabulary); "
                                         "predictions need a model trained by `pyelmo train`")
        self.check_k(body.k)
        sentence = body.sentence
        if isinstance(sentence, str) and body.position is None:
            if sentence.count(BLANK) != 1:
                raise ApiError(422, "sentence", f"mark exactly one word to predict with {BLANK}")
            language = self.service.lang  # the blank counts as one token, the text around it as any sentence's
            tokens = self.tokens(sentence, "sentence", lambda text: blank_tokens(
                text, split=lambda part: self.service.embedder.tokenize(part, language)))
        else:
            tokens = self.tokens(sentence, "sentence")
        if body.position is None:
            if tokens.count(BLANK) != 1:
                raise ApiError(422, "sentence", f"mark exactly one word to predict with {BLANK}")
            position = tokens.index(BLANK)
        else:
            position = self.position(tokens, None, body.position, "position")
        found = await self.service.batcher.run(lambda: predictor.predict(tokens, position, body.k))

        def listed(pairs):
            return [{"word": w, "probability": p} for w, p in pairs]

        return {"tokens": tokens, "position": position, "forward": listed(found.forward),
                "backward": listed(found.backward), "combined": listed(found.combined)}


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(422, where, "not valid Unicode text (a lone surrogate)") from None


def _sense_means(sims: dict[str, np.ndarray], names: list[str], senses: list[str]) -> dict:
    """Mean similarity over pairs of sentences with the same sense label, and with different ones."""
    n = len(senses)
    within = [(i, j) for i in range(n) for j in range(i + 1, n) if senses[i] == senses[j]]
    across = [(i, j) for i in range(n) for j in range(i + 1, n) if senses[i] != senses[j]]

    def mean(pairs):
        if not pairs:
            return None
        return {name: float(np.mean([sims[name][i, j] for i, j in pairs])) for name in names}

    return {"within": mean(within), "across": mean(across), "within_pairs": len(within), "across_pairs": len(across)}
