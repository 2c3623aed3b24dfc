"""A spaCy pipeline component that gives tokens ELMo vectors.

    nlp = spacy.blank("en")
    nlp.add_pipe("pyelmo", config={"model": "original", "layer": "average"})
    doc = nlp("The bank closed.")
    doc[1].vector, doc.tensor, doc._.elmo          # (dim,), (n_tokens, dim), (n_tokens, dim)
    doc[1].similarity(nlp("The river bank.")[2])   # cosine of the two contextual vectors

``doc.vector`` (a span's likewise) is the mean of its tokens' vectors: the sentence vector of
``ElmoEmbedder.embed_sentences(..., pool="mean")`` (TF Hub ELMo's ``default``) for the chosen layer.

``model``: anything ``pyelmo.load`` takes (a released name, a directory, a URL; ``null``:
the shipped English model); it is loaded when the component is made, so a bad name fails at
``add_pipe``. ``layer``: ``"average"`` (mean of the layers), ``"top"``, or a
layer index (0 = the context-independent token layer). ``nlp.pipe`` embeds ``batch_size``
documents at a time. The component is registered with spaCy through the ``spacy_factories``
entry point, so ``nlp.to_disk`` / ``spacy.load`` restore it from its config (the model is
referenced, not copied).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch

from pyelmo.errors import InputError, PyelmoError
from pyelmo.runtime import precision as precisions

LAYERS = ("average", "top")


def _doc_vector(doc: Doc) -> np.ndarray:
    return doc._.elmo.mean(axis=0) if len(doc) else np.zeros(doc._.elmo.shape[-1], dtype=np.float32)


def _span_vector(span: Span) -> np.ndarray:
    if not len(span):
        return np.zeros(span.doc._.elmo.shape[-1], dtype=np.float32)
    return span.doc._.elmo[span.start:span.end].mean(axis=0)


def _token_vector(token: Token) -> np.ndarray:
    return token.doc._.elmo[token.i]


def _norm(obj: Doc | Span | Token) -> float:
    return float(np.linalg.norm(obj.vector))


def _has_vector(obj: Doc | Span | Token) -> bool:
    return bool(obj.vector.size)


def _similarity(obj: Doc | Span | Token, other) -> float:
    """Cosine of the two ELMo vectors (spaCy's own shortcut, 1.0 for equal spellings, would ignore context)."""
    a = obj.vector
    try:
        b = other.vector
    except (AttributeError, ValueError):  # not a spaCy object; a Lexeme without static vectors
        b = None
    if b is None or np.shape(b) != a.shape:
        raise InputError(f"pyelmo component: cannot compare with a {type(other).__name__} without an ELMo vector "
                         f"of size {a.shape[-1]}; compare tokens, spans or docs made by this pipeline")
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b) / norms) if norms else 0.0


HOOKS = {"vector": (_doc_vector, _span_vector, _token_vector), "vector_norm": (_norm,) * 3,
         "has_vector": (_has_vector,) * 3, "similarity": (_similarity,) * 3}


class ElmoComponent:
    """Sets ``doc._.elmo`` and ``doc.tensor`` to one ELMo vector per token, and makes
    ``token.vector`` / ``span.vector`` / ``doc.vector`` (a span's or doc's: the mean of its tokens'),
    their ``vector_norm`` and ``similarity`` (the cosine of the vectors) use them."""

    def __init__(self, nlp: Language, name: str, model: str | None, layer: str | int, batch_size: int,
                 precision: str = precisions.DEFAULT.name) -> None:
        if not (layer in LAYERS or isinstance(layer, int) and not isinstance(layer, bool)):
            raise InputError(f"pyelmo component: layer must be 'average', 'top' or a layer index, got {layer!r}")
        if batch_size < 1:
            raise InputError(f"pyelmo component: batch_size must be at least 1, got {batch_size}")
        if precision not in precisions.names():
            raise InputError(f"pyelmo component: precision must be one of {', '.join(precisions.names())}, "
                             f"got {precision!r}")
        self.name, self.model, self.layer, self.batch_size = name, model, layer, batch_size
        from pyelmo.embedding.embedder import ElmoEmbedder

        try:  # now, so that a bad model fails at add_pipe rather than at the first nlp(...)
            self.embedder = ElmoEmbedder(model, precision=precision)
        except PyelmoError as exc:
            raise type(exc)(f"pyelmo component: model {model!r}: {exc}") from None
        n_layers = self.embedder.model.config.num_layers
        if isinstance(layer, int) and not -n_layers <= layer < n_layers:
            raise InputError(f"pyelmo component: layer {layer} does not exist; the model has {n_layers}")
        if not Doc.has_extension("elmo"):
            Doc.set_extension("elmo", default=None)

    def select(self, layers: np.ndarray) -> np.ndarray:
        """``(L, n, D)`` -> ``(n, D)`` float32 for the configured layer."""
        if self.layer == "average":
            return layers.mean(axis=0, dtype=np.float32)
        return np.ascontiguousarray(layers[-1 if self.layer == "top" else self.layer], dtype=np.float32)

    def __call__(self, doc: Doc) -> Doc:
        return next(self.pipe([doc]))

    def pipe(self, docs: Iterable[Doc], batch_size: int | None = None) -> Iterator[Doc]:
        for batch in minibatch(docs, size=batch_size or self.batch_size):
            vectors = self.embedder.embed_sentences([[token.text for token in doc] for doc in batch],
                                                    batch_size=len(batch))
            for doc, layers in zip(batch, vectors):
                self.set_annotations(doc, self.select(layers))
                yield doc

    @staticmethod
    def set_annotations(doc: Doc, vectors: np.ndarray) -> None:
        doc._.elmo = vectors
        doc.tensor = vectors
        for name, (for_doc, for_span, for_token) in HOOKS.items():
            doc.user_hooks[name] = for_doc
            doc.user_span_hooks[name] = for_span
            doc.user_token_hooks[name] = for_token


@Language.factory("pyelmo", default_config={"model": None, "layer": "average", "batch_size": 64,
                                            "precision": precisions.DEFAULT.name})
def make_elmo_component(nlp: Language, name: str, model: str | None, layer: str | int,
                        batch_size: int, precision: str) -> ElmoComponent:
    """spaCy factory ``"pyelmo"``: ``nlp.add_pipe("pyelmo", config={"model": ..., "layer": ...})``;
    ``"precision"``: a name of :mod:`pyelmo.runtime.precision` (``"int8"`` runs the biLM's large products in
    int8; ``ElmoEmbedder``'s ``precision``)."""
    return ElmoComponent(nlp, name, model, layer, batch_size, precision)
