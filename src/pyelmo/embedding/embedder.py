"""Contextual vectors for sentences: the ``ElmoEmbedder`` API (files: ``pyelmo.embedding.store``)."""

from __future__ import annotations

import copy
import os
import warnings
from typing import BinaryIO, Iterable, Iterator, Sequence

import numpy as np
import torch

from pyelmo.text.batching import (DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, DEFAULT_TOKEN_CACHE_SIZE, SORT_WINDOW,
                                  chunks, token_budget_batches)
from pyelmo.modeling.bilm import BiLM
from pyelmo.modeling.characters import batch_to_ids
from pyelmo.embedding.pooling import check_pool, mean_pool
from pyelmo.errors import InputError
from pyelmo.runtime.options import RunOptions
from pyelmo.runtime.plan import ExecutionPlan
from pyelmo.runtime.precision import Quantization
from pyelmo.runtime.transfer import to_device, to_host


class LanguageWarning(UserWarning):
    """Text of another language than the one the model was trained on."""


def _language_fix(language: str, name: str) -> str:
    """What to use for text of ``language`` (called ``name``): its shipped model when this installation has it."""
    from pyelmo.modelio.hub import SHIPPED, shipped_for

    shipped = shipped_for(language)
    if shipped is None or not SHIPPED[shipped].present:
        return f"load a model trained on {name} text"
    return f"use the shipped {name} model: --model {shipped}, or ElmoEmbedder({shipped!r})"


class ElmoEmbedder:
    """Per-token ELMo vectors from a biLM, and sentence vectors (``embed_sentences(..., pool="mean")``).

    ``ElmoEmbedder()`` uses the shipped English model, ``ElmoEmbedder("chinese")`` the shipped Chinese one;
    ``ElmoEmbedder(DIR)`` a native model; ``ElmoEmbedder(OPTIONS, WEIGHTS)`` the released format; anything
    :func:`pyelmo.modelio.resolve.resolve_model` takes (or its record); or pass a ``BiLM``. Stateless
    unless ``stateful=True`` (then each batch row continues from the states the same row
    reached in the previous batch, as the original implementations do).

    Speed options (the vectors do not depend on them, within float rounding):
    ``max_tokens`` - stateless mode packs length-sorted sentences into batches of at most
    this many token positions instead of ``batch_size`` sentences (``None``: fixed
    ``batch_size`` batches); ``token_cache_size`` - token-encoder outputs kept across
    batches (0 disables the cache). ``precision`` (:mod:`pyelmo.runtime.precision`): ``"float32"`` (default,
    exact), or an explicit reduced-precision mode: ``"bfloat16"`` (the matrix products run in bfloat16) or
    ``"int8"`` (CPU: the products with large weights, the LSTM's and the highways', on int8 weights
    quantized per output channel once here, and int8 activations; ``quantization``: which weights it
    quantizes, :class:`pyelmo.runtime.precision.Quantization` (``Quantization(min_weight=N)``: those of at
    least N elements; default :data:`pyelmo.runtime.precision.INT8_MIN_WEIGHT`);
    ``int8_cache=True``, an opt-in: the int8 weights of a model it loads are kept on disk and reused by the next
    load instead of being quantized again, :mod:`pyelmo.runtime.int8_cache`, the same bits either way).
    Their accuracy and speed: benchmarks/RESULTS.md. A model the embedder loads itself is planned once,
    here (:func:`pyelmo.runtime.planning.plan_model`: its modules swapped for the plan's; in int8 mode only
    the int8 copies of those weights are kept). A ``BiLM`` passed in that was planned already runs as it is,
    with its plan (``plan_model(bilm, RunOptions.inference(...))``: one copy of its weights); any other
    ``BiLM`` passed in is left as it is, free to train: the embedder plans a copy of it, here.
    The products follow an execution plan (:class:`pyelmo.runtime.plan.ExecutionPlan`, ``plan``): by default a
    fixed rule of this machine, so the same input gives the same bits in every process; ``steps``: how the LSTM's
    time steps run (on a CUDA device by default as CUDA graphs: :mod:`pyelmo.runtime.steps`).

    ``runtime="onnxruntime"`` runs the model as an ONNX graph in ONNX Runtime instead of PyTorch (``model``: a
    folder ``pyelmo export --format onnx`` wrote, or any model, exported once into ``~/.cache/pyelmo/onnx/``;
    float32, stateless, CPU; the extra ``pyelmo[onnx]``): the same vectors within float rounding.

    Raw text (``embed_sentence(text, tokenize=True)``, ``embed_file(..., tokenize=True)``,
    :meth:`tokenize`) is split by ``pyelmo.text.tokenize`` in the language ``lang``: ``auto``
    (default: from the script of the text), ``en``, or ``zh``/``ja``/``th`` (word segmentation
    by jieba, SudachiPy or PyThaiNLP: the extras ``pyelmo[zh]``, ``pyelmo[ja]``, ``pyelmo[th]``).
    When the model's language is known (``language``: the released models and ``english`` are
    English, ``chinese`` Chinese) and the text's is another, a :class:`LanguageWarning` is issued once
    per language, naming the shipped model of the text's language when there is one;
    for a model of Chinese, Japanese or Thai text, text without that script's letters (taken
    from the script: ``lang="auto"``) warns too, once.

    An embedder keeps state between calls (token cache, buffers, carried states): one per thread, as ``pyelmo serve``.
    """

    def __init__(self, model: BiLM | str | os.PathLike | None = None, weight_file: str | os.PathLike | None = None,
                 *, batch_size: int = DEFAULT_BATCH_SIZE, stateful: bool = False, device: str = "cpu",
                 max_tokens: int | None = DEFAULT_MAX_TOKENS,
                 token_cache_size: int = DEFAULT_TOKEN_CACHE_SIZE,
                 kernels: str | None = None, plan: ExecutionPlan | None = None, precision: str | None = None,
                 quantization: Quantization | None = None, int8_cache: bool = False, runtime: str = "torch",
                 steps: str | None = None) -> None:
        from pyelmo.modelio.onnx_runtime import check_runtime
        from pyelmo.modelio.resolve import resolve_model
        from pyelmo.runtime.planning import planned_products

        if batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        if max_tokens is not None and max_tokens < 1:
            raise InputError(f"max tokens must be at least 1, got {max_tokens}")
        self.batch_size, self.max_tokens = batch_size, max_tokens
        #: The execution backend (:data:`pyelmo.modelio.onnx_runtime.RUNTIMES`).
        self.runtime = check_runtime(runtime)
        if self.runtime == "onnxruntime":
            return self._init_onnx(model, weight_file, stateful, device, kernels, plan, precision, quantization)
        try:
            self.device = torch.device(device)
        except RuntimeError as exc:
            raise InputError(f"device {device!r} is not usable here: {str(exc).splitlines()[0]}") from None
        planned = planned_products(model) if isinstance(model, BiLM) else None
        if planned is not None and (plan or kernels or precision or steps or quantization is not None) and \
                (plan or ExecutionPlan.for_machine(kernels=kernels, device=self.device, precision=precision,
                                                   quantization=quantization, steps=steps)) != planned.plan:
            raise InputError(f"this biLM was planned already ({planned.plan.summary()}): it runs with that plan")
        # the plan is checked before the model loads
        self.options = RunOptions.inference(planned.plan if planned else plan, stateful=stateful,
                                            token_cache_size=token_cache_size, kernels=kernels, device=self.device,
                                            precision=precision, quantization=quantization, steps=steps,
                                            products=planned)
        source = None if isinstance(model, BiLM) else resolve_model(model, weight_file)
        if source is not None:
            model = BiLM.from_pretrained(source)
        elif planned is None:  # the caller's, free to train: a copy is planned here
            model = copy.deepcopy(model)
        self.model = model
        #: The language of the model's training text ("en"), or None when not known.
        self.language = None if source is None else source.language
        self._warned_languages: set[str] = set()
        try:
            self.model.to(self.device).eval()
        except (RuntimeError, AssertionError) as exc:  # CUDA missing in this torch
            raise InputError(f"device {device!r} is not usable here: {str(exc).splitlines()[0]}") from None
        self._fingerprint: str | None = None if source is None else source.known_fingerprint()
        products = self.options.products
        if products.int8 and not any(products.quantizes(p if isinstance(p, torch.Tensor) else p.weight)
                                     for p in self.model.plan_products().values()):
            rule = self.options.plan.quantization
            warnings.warn(f"int8: none of this model's weights has {rule.min_weight} elements or "
                          f"more, the size from which the plan quantizes; it runs exact float32 (a smaller "
                          f"rule, --int8-min-weight or quantization=Quantization(N), quantizes smaller weights)",
                          RuntimeWarning, stacklevel=2)
        if planned is None:  # ours: planned once, here (int8: only int8 weights kept)
            if products.int8:
                self._fingerprint = self.fingerprint
            self._apply_plan(int8_cache)

    def _init_onnx(self, model, weight_file, stateful: bool, device: str, kernels, plan, precision,
                   quantization) -> None:
        """``runtime="onnxruntime"``: the model as an ONNX graph run by ONNX Runtime (an export folder, or the
        model exported once into the cache: :func:`pyelmo.modelio.onnx_runtime.embedder_model`)."""
        from pyelmo.modelio.onnx_runtime import embedder_model

        self.model, source = embedder_model(model, weight_file, stateful=stateful, device=device, kernels=kernels,
                                            plan=plan, precision=precision, quantization=quantization)
        self.device, self.options = torch.device("cpu"), RunOptions()  # no plan, no token cache, stateless
        self.language, self._warned_languages = (None if source is None else source.language), set()
        self._fingerprint = self.model.fingerprint

    def _apply_plan(self, kept: bool) -> None:
        """The plan swapped into the model loaded or copied here (:func:`pyelmo.runtime.planning.plan_model`); in
        int8 mode the weights it quantizes quantized here, or (``kept``, the opt-in ``int8_cache``) packed from the
        numbers kept on disk for this model and plan (:mod:`pyelmo.runtime.int8_cache`, written on a miss)."""
        from pyelmo.runtime.planning import plan_model

        products = self.options.products
        if not (products.int8 and kept):
            plan_model(self.model, self.options)
            return
        from pyelmo.runtime.int8_cache import Int8WeightCache, int8_key

        cache = Int8WeightCache(int8_key(self._fingerprint, self.options.plan, products.int8_reduce_range))
        plan_model(self.model, self.options, cache.packed)
        cache.save()

    @property
    def fingerprint(self) -> str:
        """The model's weights' fingerprint (:func:`pyelmo.modelio.weights.model_fingerprint`; in int8 mode, of
        the weights as loaded, before they were quantized)."""
        from pyelmo.modelio.weights import model_fingerprint

        return self._fingerprint or model_fingerprint(self.model)

    def explain(self) -> dict:
        """The execution plan as it applies to this model (``pyelmo env``): per product weight and row
        class the kernel and precision, per row class the directions' order."""
        from pyelmo.modeling.bilm import STEP_PRODUCTS
        from pyelmo.runtime.planning import explain

        if self.runtime != "torch":
            return {"runtime": self.runtime, "model": str(self.model.folder)}
        return explain(self.options.products, self.model.plan_products(), STEP_PRODUCTS)

    @property
    def stateful(self) -> bool:
        return self.options.stateful

    def reset_states(self) -> None:
        """Stateful mode: forget the carried LSTM states (the next batch starts from zeros)."""
        if self.options.states is not None:
            self.options.states.reset()

    @torch.inference_mode()
    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One ``(L, n_tokens, D)`` float32 array per sentence (an empty sentence gives ``(L, 0, D)``)."""
        if not batch:
            return []
        if isinstance(batch, str) or any(isinstance(sentence, str) for sentence in batch):
            raise InputError("pass each sentence as a list of tokens, not a string: e.g. text.split(), "
                             "or embed_sentence(text, tokenize=True)")
        ids = to_device(batch_to_ids(batch, self.model.config.char_cnn.max_characters_per_token), self.device)
        layers = to_host(self.model(ids, options=self.options, final_state=False).layers.float()).numpy()
        return [np.ascontiguousarray(layers[:, row, : len(sentence)]) for row, sentence in enumerate(batch)]

    def tokenize(self, text: str, lang: str = "auto") -> list[str]:
        """Raw ``text`` split into tokens (``lang``: ``auto``, ``en``, ``zh``, ``ja``, ``th``; see the class)."""
        from pyelmo.text.tokenize import LANGUAGE_NAMES, SEGMENTED, text_language, tokenize

        language = text_language(text, lang)
        # None: a script written with spaces, which is a mismatch for a model of a script written without
        other = language != self.language and (language is not None or self.language in SEGMENTED)
        if self.language and other and (language or "") not in self._warned_languages:
            self._warned_languages.add(language or "")
            model, ours = (LANGUAGE_NAMES.get(x, repr(x)) for x in (self.language, language))
            what = f"is {ours}" if language else f"has no {model} characters"
            fix = _language_fix(language, ours) if language else f"give it {model} text"
            warnings.warn(f"the model was trained on {model} text and this text {what}: expect vectors of little "
                          f"use ({fix})", LanguageWarning, stacklevel=2)
        return tokenize(text, language or "en")

    def embed_sentence(self, tokens: Sequence[str] | str, tokenize: bool = False, lang: str = "auto") -> np.ndarray:
        """``(L, n_tokens, D)`` for one tokenized sentence (``tokenize=True``: a string of raw text, split by
        :meth:`tokenize` in the language ``lang``)."""
        if tokenize and isinstance(tokens, str):
            tokens = self.tokenize(tokens, lang)
        return self.embed_batch([tokens])[0]

    def embed_sentences(self, sentences: Iterable[Sequence[str]], batch_size: int | None = None,
                        pool: str | None = None) -> Iterator[np.ndarray]:
        """One array per sentence (an iterator), in input order, computing in batches: ``(L, n_tokens, D)``, or with
        ``pool="mean"`` one ``(L, D)`` sentence vector (:func:`mean_pool`: the mean over the sentence's own
        tokens, never over padding, so it does not depend on the batching).

        Stateful: batches are ``batch_size`` consecutive sentences. Stateless: sentences are sorted by length
        within a window of ``SORT_WINDOW * batch_size`` sentences and cut into batches of at most ``max_tokens``
        token positions (or ``batch_size`` sentences when ``max_tokens`` is None), which wastes no padding and
        keeps the matrix products large for short sentences.
        """
        check_pool(pool)
        vectors = self._batched(sentences, batch_size or self.batch_size)
        return vectors if pool is None else map(mean_pool, vectors)

    def _batched(self, sentences: Iterable[Sequence[str]], batch_size: int) -> Iterator[np.ndarray]:
        window = batch_size if self.stateful else batch_size * SORT_WINDOW
        for chunk in chunks(sentences, window):
            if self.stateful:
                batches = [list(range(len(chunk)))]
            else:
                order = sorted(range(len(chunk)), key=lambda i: len(chunk[i]))
                batches = token_budget_batches(order, [len(s) for s in chunk], batch_size, self.max_tokens)
            results: list[np.ndarray | None] = [None] * len(chunk)
            for rows in batches:
                for row, emb in zip(rows, self.embed_batch([chunk[r] for r in rows])):
                    results[row] = emb
            yield from results  # type: ignore[misc]

    def embed_file(self, input_file: str | os.PathLike | BinaryIO, output_file: str | os.PathLike,
                   output_format: str = "all", batch_size: int | None = None, forget_sentences: bool = False,
                   use_sentence_keys: bool = False, skip_blank_lines: bool = False, overwrite: bool = False,
                   progress: bool = False, shard: tuple[int, int] | None = None, resume: bool = False,
                   tokenize: bool = False, lang: str | None = None, pool: str | None = None,
                   overlap_writes: bool = True) -> int:
        """Embed a file of whitespace-tokenized sentences (one per line) into an HDF5 file (``pool="mean"``: one
        sentence vector per line, ``(L, D)`` or ``(D,)``, instead of the token vectors).

        Work goes into ``.OUTPUT.parts/`` (one file per ``SEGMENT_LINES`` input lines, each
        written atomically); the output appears, complete, only at the end. An input error
        leaves nothing behind; after an interruption, ``resume=True`` continues from the
        finished segments. Returns the number of sentences written.

        ``shard=(i, n)`` embeds only the lines whose index is ``i`` modulo ``n`` (keys stay
        the global line indexes), so ``n`` processes can split a corpus; ``merge_shards``
        joins their files. ``tokenize=True``: the lines are raw text, split by :meth:`tokenize` in
        the language ``lang`` (default ``auto``) instead of on whitespace. ``overlap_writes``: the file is written
        in a background thread while the next batches are computed (``False``: between batches; the same bytes).
        """
        from pyelmo.embedding.job import EmbedJob

        return self.embed_job(EmbedJob(input_file, output_file, output_format=output_format, pool=pool,
                                       batch_size=batch_size, forget_sentences=forget_sentences,
                                       use_sentence_keys=use_sentence_keys, skip_blank_lines=skip_blank_lines,
                                       tokenize=tokenize, lang=lang, shard=shard, resume=resume,
                                       overwrite=overwrite, progress=progress, overlap_writes=overlap_writes))

    def embed_job(self, job) -> int:
        """Run an :class:`~pyelmo.embedding.job.EmbedJob` (checked when it was made; see :meth:`embed_file`):
        the number of sentences written."""
        from pyelmo.embedding.store import write_embeddings

        return write_embeddings(self, job)

