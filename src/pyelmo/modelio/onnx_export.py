"""The biLM as an ONNX graph (``pyelmo export --format onnx``), for ONNX Runtime and other ONNX engines.

:func:`export_onnx` writes ``OUT/model.onnx`` and ``OUT/config.json``. The graph takes character ids
``char_ids (batch, tokens, max_chars)`` int64, ``batch_to_ids``'s output without sentence boundaries, and
gives ``layers (num_layers, batch, tokens, 2 * projection_dim)`` float32 and ``mask (batch, tokens)`` bool,
the values of :meth:`pyelmo.modeling.bilm.BiLM.forward` (stateless, ``keep_sentence_boundaries=False``)
for any batch size and sentence length.

The graph is built here from the weights of a plain (unplanned) :class:`~pyelmo.modeling.bilm.BiLM` with the
``onnx`` helper API, following the model's modules one for one (character embedding, convolutions and
their max, highways, projection; per level the input-to-gate product, then the time loop of
:class:`~pyelmo.modeling.lstm.LstmWithProjection`'s cell and clipped projection). Rows are padded rather
than packed: each level runs both directions in one ``Scan`` over time steps, where a row past its length
keeps its states and gives zeros; the backward direction reads each row's tokens reversed within its own
length (``ReverseSequence``), so every row's values are those of the packed computation.

``onnx`` is imported only here, when a graph is built.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pyelmo.errors import InputError
from pyelmo.fileio import PathLike

#: The file names of an export folder.
ONNX_NAME, ONNX_CONFIG_NAME = "model.onnx", "config.json"
#: ``config.json``'s ``format``: what marks a folder as an ONNX export.
ONNX_FORMAT = "pyelmo-onnx"
#: The ONNX operator set the graph is written for (ONNX Runtime has run it since 1.13).
OPSET = 17
INPUT_NAME, OUTPUT_NAMES = "char_ids", ("layers", "mask")


def onnx_modules():
    """``(onnx, helper, numpy_helper, TensorProto)``, or one line naming the extra to install."""
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise InputError("the ONNX export needs the onnx package: pip install 'pyelmo[onnx]'") from None
    return onnx, helper, numpy_helper, TensorProto


def check_exportable(bilm: nn.Module, name: str = "the model") -> None:
    """Refuse, in one line, a biLM the graph cannot state: another token encoder (a model converted from
    ELMoForManyLangs), or a planned model (its modules swapped for an execution plan's)."""
    from pyelmo.modeling.bilm import BiLM
    from pyelmo.modeling.encoder import ConvMax, FusedConvMax, TokenEncoder
    from pyelmo.modeling.lstm import Level

    if hasattr(bilm, "save_lexicons") or not isinstance(bilm, BiLM) or type(bilm.token_encoder) is not TokenEncoder:
        raise InputError(f"{name} cannot be exported to ONNX: its token encoder is not pyelmo's character CNN "
                         "(a model converted from ELMoForManyLangs keeps their lexicons)")
    planned = [key or "the biLM" for key, module in bilm.named_modules()
               if isinstance(module, Level) and not module.differentiable
               or isinstance(module, nn.Module) and type(module).__name__.endswith("Linear") and type(module) is not nn.Linear
               or isinstance(module, ConvMax) and type(module) not in (ConvMax, FusedConvMax)]
    if planned:
        raise InputError(f"{name} cannot be exported to ONNX: it is planned for inference ({planned[0]}); "
                         "export the model as loaded (pyelmo export --format onnx OUT --model M)")


class _Graph:
    """Nodes and initializers under unique names."""

    def __init__(self, helper, numpy_helper) -> None:
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.initializers, self._count = [], [], 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, value) -> str:
        name = self.name(hint)
        self.initializers.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, outputs: int = 1, **attrs):
        names = [self.name(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, inputs, names, name=self.name(op_type), **attrs))
        return names[0] if outputs == 1 else names


def _weights(linear: nn.Linear) -> np.ndarray:
    """``W^T (in, out)`` of a linear module, float32."""
    return linear.weight.detach().float().numpy().T.copy()


def build_graph(bilm: nn.Module, producer_version: str, metadata: dict[str, str] | None = None):
    """The ``onnx.ModelProto`` of ``bilm`` (a plain :class:`~pyelmo.modeling.bilm.BiLM`; see the module)."""
    from pyelmo.modeling.bilm import BACKWARD, FORWARD
    from pyelmo.modeling.characters import bos_ids, eos_ids

    onnx, helper, numpy_helper, TensorProto = onnx_modules()
    check_exportable(bilm)
    config = bilm.config
    cnn, lstm = config.char_cnn, config.lstm
    n_chars, proj = cnn.max_characters_per_token, lstm.projection_dim
    g = _Graph(helper, numpy_helper)
    i64 = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731

    # the token mask and lengths (BiLM._run: mask = char_ids.gt(0).any(-1))
    ids = INPUT_NAME
    nonzero = g.op("Cast", [g.op("Greater", [ids, g.const("zero", i64(0))])], to=TensorProto.INT32)
    mask = g.op("Cast", [g.op("ReduceMax", [nonzero], axes=[2], keepdims=0)], "mask_bool", to=TensorProto.BOOL)
    g.nodes.append(helper.make_node("Identity", [mask], [OUTPUT_NAMES[1]], name="mask_output"))
    lengths = g.op("ReduceSum", [g.op("Cast", [mask], to=TensorProto.INT64), g.const("axis", i64([1]))], keepdims=0)

    # add_sentence_boundaries: <S> first, </S> at each row's position length + 1
    shape = g.op("Shape", [ids])
    batch = g.op("Slice", [shape, g.const("s", i64([0])), g.const("e", i64([1]))], "batch")
    marker_shape = g.op("Concat", [batch, g.const("one_c", i64([1, n_chars]))], axis=0)
    bos = g.const("bos", i64(bos_ids(n_chars)).reshape(1, 1, n_chars))
    eos = g.const("eos", i64(eos_ids(n_chars)).reshape(1, 1, n_chars))
    wrapped = g.op("Concat", [g.op("Expand", [bos, marker_shape]), ids,
                              g.op("ConstantOfShape", [marker_shape], value=numpy_helper.from_array(i64([0])))], axis=1)
    steps = g.op("Slice", [g.op("Shape", [wrapped]), g.const("s", i64([1])), g.const("e", i64([2]))], "steps")
    position = g.op("Range", [g.const("zero", i64(0)), g.op("Squeeze", [steps, g.const("axis", i64([0]))]),
                              g.const("one", i64(1))])
    position_row = g.op("Unsqueeze", [position, g.const("axis", i64([0]))])  # (1, T + 2)
    at_eos = g.op("Equal", [position_row, g.op("Unsqueeze", [g.op("Add", [lengths, g.const("one", i64(1))]),
                                                            g.const("axis", i64([1]))])])
    wrapped = g.op("Where", [g.op("Unsqueeze", [at_eos, g.const("axis", i64([2]))]), eos, wrapped])
    full_lengths = g.op("Add", [lengths, g.const("two", i64(2))])
    running = g.op("Less", [position_row, g.op("Unsqueeze", [full_lengths, g.const("axis", i64([1]))])])  # (B, T+2)

    # the token encoder (TokenEncoder.forward with ConvMax): every position, padding included (masked later)
    encoder = bilm.token_encoder
    flat = g.op("Reshape", [wrapped, g.const("shape", i64([-1, n_chars]))])
    chars = g.op("Gather", [g.const("char_embedding", encoder.char_embedding.weight.detach().float().numpy()), flat])
    chars = g.op("Transpose", [chars], perm=[0, 2, 1])  # (N, emb, C)
    pooled = [g.op("ReduceMax", [g.op("Conv", [chars, g.const("conv_w", conv.weight.detach().float().numpy()),
                                               g.const("conv_b", conv.bias.detach().float().numpy())])],
                   axes=[2], keepdims=0) for conv in encoder.convolutions]
    x = g.op("Concat", pooled, axis=1)
    x = g.op("Relu" if cnn.activation == "relu" else "Tanh", [x])
    for highway in encoder.highways:  # y = t * relu(x Wt + bt) + (1 - t) * x, t = sigmoid(x Wc + bc)
        gate = g.op("Sigmoid", [_linear(g, x, highway.carry)])
        transform = g.op("Relu", [_linear(g, x, highway.transform)])
        keep = g.op("Sub", [g.const("one_f", np.float32(1.0)), gate])
        x = g.op("Add", [g.op("Mul", [gate, transform]), g.op("Mul", [keep, x])])
    x = _linear(g, x, encoder.projection)
    x = g.op("Reshape", [x, g.op("Concat", [batch, steps, g.const("p", i64([proj]))], axis=0)])
    tokens = g.op("Transpose", [x], perm=[1, 0, 2])  # time-major (T+2, B, P)

    def reverse(t: str) -> str:  # each row's first length positions reversed (time-major)
        return g.op("ReverseSequence", [t, full_lengths], batch_axis=1, time_axis=0)

    both = lambda fwd, bwd: g.op("Concat", [g.op("Unsqueeze", [fwd, g.const("axis", i64([0]))]),  # noqa: E731
                                            g.op("Unsqueeze", [bwd, g.const("axis", i64([0]))])], axis=0)
    x = both(tokens, reverse(tokens))  # (2, T+2, B, P): each direction's inputs in its own order
    step_mask = g.op("Unsqueeze", [g.op("Transpose", [running], perm=[1, 0]), g.const("axes", i64([1, 3]))])
    rows_shape = g.op("Concat", [g.const("two", i64([2])), g.const("all", i64([-1])), g.const("p", i64([proj]))], axis=0)
    gates_shape = g.op("Concat", [g.const("two", i64([2])), steps, batch, g.const("g", i64([4 * lstm.dim]))], axis=0)
    levels = [x]
    for layer in range(lstm.n_layers):
        pair = [bilm.directions[FORWARD][layer], bilm.directions[BACKWARD][layer]]
        stacked = lambda get: np.stack([get(each) for each in pair])  # noqa: E731
        w_in = g.const("input_gates", stacked(lambda d: _weights(d.input_gates)))  # (2, in, 4H)
        bias = g.const("gate_bias", stacked(lambda d: d.gate_bias().detach().float().numpy())[:, None])  # (2, 1, 4H)
        rows = g.op("Reshape", [x, rows_shape])  # (2, (T+2) B, in)
        gates = g.op("Add", [g.op("MatMul", [rows, w_in]), bias])
        gates = g.op("Transpose", [g.op("Reshape", [gates, gates_shape])], perm=[1, 0, 2, 3])  # (T+2, 2, B, 4H)
        body = _step_graph(g, helper, numpy_helper, TensorProto, pair, layer)
        h0 = g.op("ConstantOfShape", [g.op("Concat", [g.const("two", i64([2])), batch, g.const("p", i64([proj]))],
                                           axis=0)], value=numpy_helper.from_array(np.zeros(1, np.float32)))
        c0 = g.op("ConstantOfShape", [g.op("Concat", [g.const("two", i64([2])), batch,
                                                      g.const("h", i64([lstm.dim]))], axis=0)],
                  value=numpy_helper.from_array(np.zeros(1, np.float32)))
        _, _, out = g.op("Scan", [h0, c0, gates, step_mask], f"level{layer + 1}", outputs=3, body=body,
                         num_scan_inputs=2)
        out = g.op("Transpose", [out], perm=[1, 0, 2, 3])  # (2, T+2, B, P)
        if layer > 0 and lstm.use_skip_connections:
            out = g.op("Add", [out, x])
        levels.append(out)
        x = out

    # BiLM.assemble, then the boundaries dropped and the padding zeroed
    per_level = []
    for level in levels:
        fwd = g.op("Gather", [level, g.const("d", i64(0))], axis=0)
        bwd = reverse(g.op("Gather", [level, g.const("d", i64(1))], axis=0))
        per_level.append(g.op("Unsqueeze", [g.op("Concat", [fwd, bwd], axis=2), g.const("axis", i64([0]))]))
    stacked_levels = g.op("Transpose", [g.op("Concat", per_level, axis=0)], perm=[0, 2, 1, 3])  # (L+1, B, T+2, 2P)
    inner = g.op("Slice", [stacked_levels, g.const("s", i64([1])), g.const("e", i64([-1])), g.const("axis", i64([2]))])
    token_mask = g.op("Unsqueeze", [g.op("Cast", [mask], to=TensorProto.FLOAT), g.const("axes", i64([0, 3]))])
    g.nodes.append(helper.make_node("Mul", [inner, token_mask], [OUTPUT_NAMES[0]], name="layers_output"))

    graph = helper.make_graph(
        g.nodes, "pyelmo_bilm",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.INT64, ["batch", "tokens", n_chars])],
        [helper.make_tensor_value_info(OUTPUT_NAMES[0], TensorProto.FLOAT,
                                       [config.num_layers, "batch", "tokens", config.output_dim]),
         helper.make_tensor_value_info(OUTPUT_NAMES[1], TensorProto.BOOL, ["batch", "tokens"])],
        g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pyelmo",
                              producer_version=producer_version,
                              doc_string="ELMo biLM: character ids (batch, tokens, max_chars) without <S>/</S> -> "
                                         "layers (num_layers, batch, tokens, dim) and mask (batch, tokens)")
    model.ir_version = min(model.ir_version, 8)  # opset 17's IR version: readable by older runtimes too
    helper.set_model_props(model, metadata or {})
    onnx.checker.check_model(model)
    return model


def _linear(g: _Graph, x: str, linear: nn.Linear) -> str:
    """``x W^T + b`` of an ``nn.Linear``."""
    y = g.op("MatMul", [x, g.const("weight", _weights(linear))])
    if linear.bias is None:
        return y
    return g.op("Add", [y, g.const("bias", linear.bias.detach().float().numpy())])


def _step_graph(g: _Graph, helper, numpy_helper, TensorProto, pair, layer: int):
    """The ``Scan`` body of one level's time step, both directions at once (``LstmWithProjection.cell`` and
    ``clip_projection`` after the recurrent product, as ``run_lstm``): states ``h (2, B, P)``, ``c (2, B, H)``,
    step inputs the input-to-gate values ``(2, B, 4H)`` and ``running (1, B, 1)``; a row no longer running
    keeps its states and gives zeros."""
    cell = pair[0]
    dim, proj = cell.dim, cell.projection_dim
    body = _Graph(helper, numpy_helper)
    body._count = g._count  # names unique across the graphs
    h, c, gates, running = (f"l{layer}_h_prev", f"l{layer}_c_prev", f"l{layer}_gates_t", f"l{layer}_running_t")
    w_state = body.const("state_gates", np.stack([_weights(d.state_gates) for d in pair]))  # (2, P, 4H)
    w_proj = body.const("projection", np.stack([_weights(d.projection) for d in pair]))  # (2, H, P)
    gates_t = body.op("Add", [gates, body.op("MatMul", [h, w_state])])
    i, j, f, o = body.op("Split", [gates_t], outputs=4, axis=2)
    new_c = body.op("Add", [body.op("Mul", [body.op("Sigmoid", [f]), c]),
                            body.op("Mul", [body.op("Sigmoid", [i]), body.op("Tanh", [j])])])
    if cell.cell_clip is not None:
        new_c = body.op("Clip", [new_c, body.const("lo", np.float32(-cell.cell_clip)),
                                 body.const("hi", np.float32(cell.cell_clip))])
    hidden = body.op("Mul", [body.op("Sigmoid", [o]), body.op("Tanh", [new_c])])
    new_h = body.op("MatMul", [hidden, w_proj])
    if cell.proj_clip is not None:
        new_h = body.op("Clip", [new_h, body.const("lo", np.float32(-cell.proj_clip)),
                                 body.const("hi", np.float32(cell.proj_clip))])
    outputs = [f"l{layer}_h", f"l{layer}_c", f"l{layer}_y"]
    body.nodes.append(helper.make_node("Where", [running, new_h, h], [outputs[0]], name=body.name("keep_h")))
    body.nodes.append(helper.make_node("Where", [running, new_c, c], [outputs[1]], name=body.name("keep_c")))
    body.nodes.append(helper.make_node("Where", [running, new_h, body.const("zero_f", np.float32(0.0))],
                                       [outputs[2]], name=body.name("out")))
    g._count = body._count
    f32 = TensorProto.FLOAT
    return helper.make_graph(
        body.nodes, f"level{layer + 1}_step",
        [helper.make_tensor_value_info(h, f32, [2, "batch", proj]),
         helper.make_tensor_value_info(c, f32, [2, "batch", dim]),
         helper.make_tensor_value_info(gates, f32, [2, "batch", 4 * dim]),
         helper.make_tensor_value_info(running, TensorProto.BOOL, [1, "batch", 1])],
        [helper.make_tensor_value_info(outputs[0], f32, [2, "batch", proj]),
         helper.make_tensor_value_info(outputs[1], f32, [2, "batch", dim]),
         helper.make_tensor_value_info(outputs[2], f32, [2, "batch", proj])],
        body.initializers)


def character_vocabulary(max_chars: int) -> dict:
    """How tokens become the graph's character ids (:mod:`pyelmo.modeling.characters`), for a caller outside Python."""
    from pyelmo.modeling import characters as ch

    return {
        "scheme": "utf-8 bytes",
        "rule": (f"a token is its UTF-8 bytes cut to {max_chars - 2}, as [BOW, bytes..., EOW, PAD, ...] of "
                 f"{max_chars} characters; every id is the character + 1 (0: no token); a sentence is a row of "
                 "tokens, shorter rows padded with all-zero tokens; <S> and </S> are added by the model"),
        "max_characters_per_token": max_chars, "id_offset": 1, "padding_id": 0,
        "characters": {"bytes": [0, 255], "begin_sentence": ch.BOS_CHAR, "end_sentence": ch.EOS_CHAR,
                       "begin_word": ch.BOW_CHAR, "end_word": ch.EOW_CHAR, "padding": ch.PAD_CHAR},
        "begin_sentence_ids": list(ch.bos_ids(max_chars)), "end_sentence_ids": list(ch.eos_ids(max_chars)),
    }


def export_config(bilm: nn.Module, fingerprint: str, source: str, language: str | None) -> dict:
    """``config.json`` of an export folder."""
    from pyelmo import __version__

    config = bilm.config
    return {
        "format": ONNX_FORMAT, "format_version": 1, "pyelmo_version": __version__, "model": source,
        "language": language, "fingerprint": fingerprint, "opset": OPSET, "options": config.to_options(),
        "characters": character_vocabulary(config.char_cnn.max_characters_per_token),
        "inputs": {INPUT_NAME: {"shape": ["batch", "tokens", config.char_cnn.max_characters_per_token],
                                "dtype": "int64"}},
        "outputs": {OUTPUT_NAMES[0]: {"shape": [config.num_layers, "batch", "tokens", config.output_dim],
                                      "dtype": "float32"},
                    OUTPUT_NAMES[1]: {"shape": ["batch", "tokens"], "dtype": "bool"}},
    }


def check_output(outdir: PathLike, overwrite: bool) -> Path:
    """Refuse an output path that is a file, or a folder holding anything, unless ``overwrite``."""
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise InputError(f"output path is a file, expected a folder: {outdir}")
    if outdir.is_dir() and any(outdir.iterdir()) and not overwrite:
        raise InputError(f"{outdir} is not empty (use --overwrite to replace it)")
    return outdir


def export_onnx(model=None, outdir: PathLike = "", *, weight_file: PathLike | None = None, overwrite: bool = False,
                bilm: nn.Module | None = None) -> dict:
    """Write ``model.onnx`` and ``config.json`` into ``outdir`` (written in a temporary folder beside it, then
    renamed). ``model`` (with ``weight_file``): anything :func:`pyelmo.modelio.resolve.resolve_model` takes;
    ``bilm``: that model already loaded (unplanned). Returns ``{"folder", "seconds", "bytes"}``."""
    from pyelmo import __version__
    from pyelmo.modelio.resolve import resolve_model
    from pyelmo.modelio.weights import model_fingerprint

    outdir = check_output(outdir, overwrite)
    onnx = onnx_modules()[0]
    started = time.perf_counter()
    resolved = None if bilm is not None and model is None else resolve_model(model, weight_file)
    name = resolved.describe() if resolved is not None else "the biLM"
    if resolved is not None and resolved.format == "elmoformanylangs":
        raise InputError(f"{name} cannot be exported to ONNX: it was converted from ELMoForManyLangs and its "
                         "token encoder (their lexicons) is not pyelmo's character CNN")
    if resolved is not None and resolved.format == "onnx":
        raise InputError(f"{name} is an ONNX export already")
    bilm = resolved.load_bilm() if bilm is None else bilm
    check_exportable(bilm, name)
    fingerprint = model_fingerprint(bilm)
    config = export_config(bilm, fingerprint, name, resolved.language if resolved is not None else None)
    with torch.no_grad():
        proto = build_graph(bilm.eval(), __version__, {"fingerprint": fingerprint, "format": ONNX_FORMAT})
    outdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's folder is private; the export is an ordinary folder
        onnx.save(proto, str(tmp / ONNX_NAME))
        (tmp / ONNX_CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if outdir.exists():
            old = outdir.with_name(f".{outdir.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            outdir.rename(old)
            tmp.rename(outdir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(outdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"folder": outdir, "seconds": time.perf_counter() - started, "bytes": (outdir / ONNX_NAME).stat().st_size}


def _umask() -> int:
    import os

    mask = os.umask(0o022)
    os.umask(mask)
    return mask


__all__ = ["ONNX_FORMAT", "ONNX_NAME", "OPSET", "build_graph", "check_exportable", "export_onnx"]
