"""The ONNX graph of a biLM (:func:`build_graph`), built with the ``onnx`` helper API from the weights of a plain
(unplanned) :class:`~pyelmo.modeling.bilm.BiLM`, following the model's modules one for one: character embedding,
convolutions and their max, highways, projection; per level the input-to-gate product, then the time loop of
:class:`~pyelmo.modeling.lstm.LstmWithProjection`'s cell and clipped projection.

Rows are padded rather than packed: each level runs both directions in one ``Scan`` over time steps, where a row
past its length keeps its states and gives zeros; the backward direction reads each row's tokens reversed within
its own length (``ReverseSequence``), so every row's values are those of the packed computation
(:class:`~pyelmo.modeling.rows.PackedRows`). ``onnx`` is imported only when a graph is built.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from pyelmo.errors import InputError
from pyelmo.modelio.onnx_folder import INPUT_NAME, OUTPUT_NAMES

#: The ONNX operator set the graph is written for (ONNX Runtime has run it since 1.13).
OPSET = 17


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
    from pyelmo.modeling.encoder import ByteIds, ConvMax, FusedConvMax, TokenEncoder
    from pyelmo.modeling.lstm import Level

    encoder = getattr(bilm, "token_encoder", None)
    if not isinstance(bilm, BiLM) or type(encoder) is not TokenEncoder or type(encoder.token_ids) is not ByteIds \
            or encoder.config.n_lexicon_characters or encoder.config.word_dim:
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


def _i64(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def build_graph(bilm: nn.Module, producer_version: str, metadata: dict[str, str] | None = None):
    """The ``onnx.ModelProto`` of ``bilm`` (a plain :class:`~pyelmo.modeling.bilm.BiLM`; see the module)."""
    onnx, helper, numpy_helper, TensorProto = onnx_modules()
    check_exportable(bilm)
    config = bilm.config
    g = _Graph(helper, numpy_helper)
    g.types = TensorProto
    mask, wrapped, batch, steps, full_lengths = _boundaries(g, config.char_cnn.max_characters_per_token)
    tokens = _token_encoder(g, bilm.token_encoder, wrapped, batch, steps, config.projection_dim)
    levels = _levels(g, bilm, tokens, batch, steps, full_lengths)
    _assemble(g, levels, mask, full_lengths)
    graph = helper.make_graph(
        g.nodes, "pyelmo_bilm",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.INT64,
                                       ["batch", "tokens", config.char_cnn.max_characters_per_token])],
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


def _boundaries(g: _Graph, n_chars: int):
    """The token mask (also the output ``mask``), and the ids with ``<S>``/``</S>`` (``add_sentence_boundaries``):
    ``mask (B, T)``, ``wrapped (B, T + 2, C)``, ``batch`` and ``steps`` (``T + 2``) as 1-element shapes, and
    each row's length with its boundaries."""
    from pyelmo.modeling.characters import bos_ids, eos_ids

    types, ids = g.types, INPUT_NAME
    nonzero = g.op("Cast", [g.op("Greater", [ids, g.const("zero", _i64(0))])], to=types.INT32)
    mask = g.op("Cast", [g.op("ReduceMax", [nonzero], axes=[2], keepdims=0)], "mask_bool", to=types.BOOL)
    g.nodes.append(g.helper.make_node("Identity", [mask], [OUTPUT_NAMES[1]], name="mask_output"))
    lengths = g.op("ReduceSum", [g.op("Cast", [mask], to=types.INT64), g.const("axis", _i64([1]))], keepdims=0)
    batch = g.op("Slice", [g.op("Shape", [ids]), g.const("s", _i64([0])), g.const("e", _i64([1]))], "batch")
    marker_shape = g.op("Concat", [batch, g.const("one_c", _i64([1, n_chars]))], axis=0)
    bos = g.const("bos", _i64(bos_ids(n_chars)).reshape(1, 1, n_chars))
    eos = g.const("eos", _i64(eos_ids(n_chars)).reshape(1, 1, n_chars))
    zeros = g.op("ConstantOfShape", [marker_shape], value=g.numpy_helper.from_array(_i64([0])))
    wrapped = g.op("Concat", [g.op("Expand", [bos, marker_shape]), ids, zeros], axis=1)
    steps = g.op("Slice", [g.op("Shape", [wrapped]), g.const("s", _i64([1])), g.const("e", _i64([2]))], "steps")
    position = g.op("Range", [g.const("zero", _i64(0)), g.op("Squeeze", [steps, g.const("axis", _i64([0]))]),
                              g.const("one", _i64(1))])
    position_row = g.op("Unsqueeze", [position, g.const("axis", _i64([0]))])  # (1, T + 2)
    at_eos = g.op("Equal", [position_row, g.op("Unsqueeze", [g.op("Add", [lengths, g.const("one", _i64(1))]),
                                                            g.const("axis", _i64([1]))])])
    wrapped = g.op("Where", [g.op("Unsqueeze", [at_eos, g.const("axis", _i64([2]))]), eos, wrapped])
    return mask, wrapped, batch, steps, g.op("Add", [lengths, g.const("two", _i64(2))])


def _token_encoder(g: _Graph, encoder: nn.Module, wrapped: str, batch: str, steps: str, proj: int) -> str:
    """``TokenEncoder.forward`` (with ``ConvMax``) at every position, padding included (masked later): the token
    vectors time-major, ``(T + 2, B, P)``."""
    n_chars = encoder.config.max_characters_per_token
    flat = g.op("Reshape", [wrapped, g.const("shape", _i64([-1, n_chars]))])
    chars = g.op("Gather", [g.const("char_embedding", encoder.char_embedding.weight.detach().float().numpy()), flat])
    chars = g.op("Transpose", [chars], perm=[0, 2, 1])  # (N, emb, C)
    pooled = [g.op("ReduceMax", [g.op("Conv", [chars, g.const("conv_w", conv.weight.detach().float().numpy()),
                                               g.const("conv_b", conv.bias.detach().float().numpy())])],
                   axes=[2], keepdims=0) for conv in encoder.convolutions]
    x = g.op("Concat", pooled, axis=1)
    x = g.op("Relu" if encoder.config.activation == "relu" else "Tanh", [x])
    for highway in encoder.highways:  # y = t * relu(x Wt + bt) + (1 - t) * x, t = sigmoid(x Wc + bc)
        gate = g.op("Sigmoid", [_linear(g, x, highway.carry)])
        transform = g.op("Relu", [_linear(g, x, highway.transform)])
        keep = g.op("Sub", [g.const("one_f", np.float32(1.0)), gate])
        x = g.op("Add", [g.op("Mul", [gate, transform]), g.op("Mul", [keep, x])])
    x = _linear(g, x, encoder.projection)
    x = g.op("Reshape", [x, g.op("Concat", [batch, steps, g.const("p", _i64([proj]))], axis=0)])
    return g.op("Transpose", [x], perm=[1, 0, 2])


def _reverse(g: _Graph, x: str, full_lengths: str) -> str:
    """Each row's first ``length`` positions reversed (time-major ``x``): the backward direction's order."""
    return g.op("ReverseSequence", [x, full_lengths], batch_axis=1, time_axis=0)


def _levels(g: _Graph, bilm: nn.Module, tokens: str, batch: str, steps: str, full_lengths: str) -> list[str]:
    """Each level's ``(2, T + 2, B, P)`` (the token vectors, then each LSTM level's outputs), each direction in
    its own order: per level the input-to-gate product of all steps, then one ``Scan`` of both directions."""
    from pyelmo.modeling.bilm import BACKWARD, FORWARD

    lstm = bilm.config.lstm
    unsqueeze = lambda t: g.op("Unsqueeze", [t, g.const("axis", _i64([0]))])  # noqa: E731
    x = g.op("Concat", [unsqueeze(tokens), unsqueeze(_reverse(g, tokens, full_lengths))], axis=0)
    running = g.op("Less", [g.op("Unsqueeze", [g.op("Range", [g.const("zero", _i64(0)), g.op(
        "Squeeze", [steps, g.const("axis", _i64([0]))]), g.const("one", _i64(1))]), g.const("axis", _i64([1]))]),
        g.op("Unsqueeze", [full_lengths, g.const("axis", _i64([0]))])])  # (T + 2, B)
    step_mask = g.op("Unsqueeze", [running, g.const("axes", _i64([1, 3]))])  # (T + 2, 1, B, 1)
    two = g.const("two", _i64([2]))
    rows_shape = g.op("Concat", [two, g.const("all", _i64([-1])), g.const("p", _i64([lstm.projection_dim]))], axis=0)
    gates_shape = g.op("Concat", [two, steps, batch, g.const("g", _i64([4 * lstm.dim]))], axis=0)
    zeros = lambda size: g.op("ConstantOfShape", [g.op("Concat", [two, batch, g.const("n", _i64([size]))], axis=0)],  # noqa: E731
                              value=g.numpy_helper.from_array(np.zeros(1, np.float32)))
    levels = [x]
    for layer in range(lstm.n_layers):
        pair = [bilm.directions[FORWARD][layer], bilm.directions[BACKWARD][layer]]
        w_in = g.const("input_gates", np.stack([_weights(d.input_gates) for d in pair]))  # (2, in, 4H)
        bias = g.const("gate_bias", np.stack([d.gate_bias().detach().float().numpy() for d in pair])[:, None])
        gates = g.op("Add", [g.op("MatMul", [g.op("Reshape", [x, rows_shape]), w_in]), bias])  # (2, (T+2) B, 4H)
        gates = g.op("Transpose", [g.op("Reshape", [gates, gates_shape])], perm=[1, 0, 2, 3])  # (T+2, 2, B, 4H)
        body = _step_graph(g, g.helper, g.numpy_helper, g.types, pair, layer)
        _, _, out = g.op("Scan", [zeros(lstm.projection_dim), zeros(lstm.dim), gates, step_mask], f"level{layer + 1}",
                         outputs=3, body=body, num_scan_inputs=2)
        out = g.op("Transpose", [out], perm=[1, 0, 2, 3])  # (2, T+2, B, P)
        if layer > 0 and lstm.use_skip_connections:
            out = g.op("Add", [out, x])
        levels.append(out)
        x = out
    return levels


def _assemble(g: _Graph, levels: list[str], mask: str, full_lengths: str) -> None:
    """``BiLM.assemble``, the boundaries dropped and the padding zeroed: the output ``layers``."""
    per_level = []
    for level in levels:
        fwd = g.op("Gather", [level, g.const("d", _i64(0))], axis=0)
        bwd = _reverse(g, g.op("Gather", [level, g.const("d", _i64(1))], axis=0), full_lengths)
        per_level.append(g.op("Unsqueeze", [g.op("Concat", [fwd, bwd], axis=2), g.const("axis", _i64([0]))]))
    stacked = g.op("Transpose", [g.op("Concat", per_level, axis=0)], perm=[0, 2, 1, 3])  # (L+1, B, T+2, 2P)
    inner = g.op("Slice", [stacked, g.const("s", _i64([1])), g.const("e", _i64([-1])), g.const("axis", _i64([2]))])
    token_mask = g.op("Unsqueeze", [g.op("Cast", [mask], to=g.types.FLOAT), g.const("axes", _i64([0, 3]))])
    g.nodes.append(g.helper.make_node("Mul", [inner, token_mask], [OUTPUT_NAMES[0]], name="layers_output"))


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


__all__ = ["OPSET", "build_graph", "check_exportable", "onnx_modules"]
