"""Types and shapes of a Builder's tensors: ONNX shape inference for the ``ai.onnx`` ops,
and the output rules of the ``ai.graphcore`` ops ONNX does not know (losses, element-wise
ops, group normalisation, subsampling), iterated until nothing new is learnt."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tremula.popart import onnxutil

Shape = tuple[int, ...]
#: Graphcore op type -> (input shapes, node attributes) -> output shapes (None: unknown)
_RULES: dict[str, Callable[[list[Shape], dict[str, Any]], list[Shape] | None]] = {}


def _loss(shapes: list[Shape], attrs: dict[str, Any], reduced_from: int) -> list[Shape]:
    red = attrs.get("reduction", b"Mean")
    red = red.decode() if isinstance(red, bytes) else red
    return [shapes[reduced_from] if red == "None" else ()]


def _same(shapes: list[Shape], attrs: dict[str, Any]) -> list[Shape]:
    return [shapes[0]]


def _group_norm(shapes: list[Shape], attrs: dict[str, Any]) -> list[Shape]:
    stats = (shapes[0][0] * int(attrs["num_groups"]),)  # one mean / inv-std per (sample, group)
    return [shapes[0], stats, stats]


_SAME = (  # element-wise: the output is typed and shaped as input 0
    *("Gelu", "Swish", "Detach", "Round", "Expm1", "Log1p", "Scale", "PrintTensor"),
    *("IncrementMod", "ShapedDropout", "ReplicatedAllReduce", "Atan2", "Fmod", "Remainder"),
)

_RULES.update(
    {
        "L1": lambda s, a: _loss(s, a, 0),
        "IdentityLoss": lambda s, a: _loss(s, a, 0),
        "Nll": lambda s, a: _loss(s, a, 1),
        "GroupNormalization": _group_norm,
        "Subsample": lambda s, a: [tuple(math.ceil(d / st) for d, st in zip(s[0], a["strides"]))],
        **dict.fromkeys(_SAME, _same),
    }
)


def _known(infos: dict[str, Any]) -> dict[str, tuple[int, Shape]]:
    """{id: (elem type, shape)} of value infos with a full static shape."""
    out = {}
    for name, vi in infos.items():
        shape = onnxutil.value_shape(vi)
        if shape is not None and all(isinstance(d, int) for d in shape):
            out[name] = (vi.type.tensor_type.elem_type, shape)
    return out  # type: ignore[return-value]


def infer_value_infos(model: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """``{tensor id: ValueInfoProto}`` for every tensor whose type can be inferred."""
    ox = onnxutil.onnx()
    helper = ox.helper
    graph_known = {vi.name: vi for vi in model.graph.input}
    for _ in range(1 + sum(n.domain == "ai.graphcore" for n in model.graph.node)):
        inferred = ox.shape_inference.infer_shapes(model, strict_mode=False)
        infos = dict(graph_known)
        infos.update({vi.name: vi for vi in inferred.graph.value_info})
        known = _known(infos)
        added = []
        for node in model.graph.node:
            rule = _RULES.get(node.op_type) if node.domain == "ai.graphcore" else None
            if rule is None or any(o in known for o in node.output):
                continue
            if not node.input or any(i not in known for i in node.input):
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            shapes = rule([known[i][1] for i in node.input], attrs)
            elem = known[node.input[0]][0]
            for out, shape in zip(node.output, shapes or []):
                added.append(helper.make_tensor_value_info(out, elem, list(shape)))
        if not added:
            return infos
        model = _with_value_info(model, added)
    return infos


def _with_value_info(model: Any, extra: list[Any]) -> Any:
    copy = type(model)()
    copy.CopyFrom(model)
    copy.graph.value_info.extend(extra)
    return copy
