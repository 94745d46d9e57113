"""The Builder's op methods (``builder.aiOnnx.add``, ``builder.aiGraphcore.l1loss`` ...),
generated from one table: each entry names the ONNX op type, the attributes with PopART's
argument names and defaults, and the number of outputs.

Every method takes ``args`` (a list of tensor ids) first and ``debugContext`` last, and
returns the output id (or a list of ids when the op has several outputs or takes
``num_outputs``), as PopART's generated opset bindings do.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tremula.popxl._ir.core.enums import CollectiveOperator, ReductionType

if TYPE_CHECKING:
    from tremula.popart.builder import Builder

_REQUIRED = object()


def _words(text: str) -> list[str]:
    return text.split()


@dataclass(frozen=True)
class Attr:
    """One attribute: PopART's argument name, its kind (how the value becomes an ONNX
    attribute: ``i``, ``f``, ``s``, ``ints``, ``floats``, ``strings``, ``dtype``,
    ``reduction``, ``collective``, ``commgroup``, ``tensor``, ``graph``: a subgraph
    Builder), the default, and the ONNX attribute name when it differs."""

    name: str
    kind: str
    default: Any = _REQUIRED
    onnx: str | None = None


@dataclass(frozen=True)
class OnnxOpSignature:
    """One Builder method: ``onnx`` op type, attributes, outputs (a count, or ``None`` for
    a ``num_outputs`` argument), domain and the opset versions it exists in."""

    onnx: str
    attrs: tuple[Attr, ...] = ()
    outputs: int | None = 1
    domain: str = ""
    since: int = 1
    until: int = 99
    first_is_value: bool = False  # constant(value): the first argument is an array


def A(name: str, kind: str, default: Any = _REQUIRED, onnx: str | None = None) -> Attr:
    return Attr(name, kind, default, onnx)


_AXES = (A("axes", "ints", None), A("keepdims", "i", 1))
_POOL = (A("ceil_mode", "i", 0), A("dilations", "ints", ()), A("pads", "ints", ()))
_RNN = (
    A("activation_alpha", "floats", ()),
    A("activation_beta", "floats", ()),
    A("activations", "strings", ()),
    A("clip", "f", None),
    A("direction", "s", "forward"),
    A("hidden_size", "i", None),
)
_UNARY = _words(
    "Abs Acos Acosh Asin Asinh Atan Atanh Ceil Cos Cosh Erf Exp Floor Identity IsInf "
    "IsNaN Log Neg Not Reciprocal Relu Sigmoid Sign Sin Sinh Softsign Softplus Sqrt Tan "
    "Tanh Shape Size NonZero GlobalAveragePool GlobalMaxPool"
)
_BINARY = _words("Add Sub Mul Div Pow MatMul Equal Greater Less And Or Xor PRelu Expand Tile")
_VARIADIC = ["Max", "Min", "Mean", "Sum"]
_REDUCE = _words(
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare"
)

AI_ONNX: dict[str, list[OnnxOpSignature]] = {
    **{t.lower(): [OnnxOpSignature(t)] for t in _UNARY + _BINARY + _VARIADIC},
    **{t.lower(): [OnnxOpSignature(t, _AXES)] for t in _REDUCE},
    "logical_and": [OnnxOpSignature("And")],
    "logical_or": [OnnxOpSignature("Or")],
    "logical_xor": [OnnxOpSignature("Xor")],
    "logical_not": [OnnxOpSignature("Not")],
    "softmax": [OnnxOpSignature("Softmax", (A("axis", "i", 1),))],
    "logsoftmax": [OnnxOpSignature("LogSoftmax", (A("axis", "i", 1),))],
    "hardmax": [OnnxOpSignature("Hardmax", (A("axis", "i", 1),))],
    "gemm": [
        OnnxOpSignature(
            "Gemm",
            (A("alpha", "f", 1.0), A("beta", "f", 1.0), A("transA", "i", 0), A("transB", "i", 0)),
        )
    ],
    "constant": [OnnxOpSignature("Constant", (A("value", "tensor"),), first_is_value=True)],
    "reshape": [OnnxOpSignature("Reshape", since=5)],
    "transpose": [OnnxOpSignature("Transpose", (A("perm", "ints", ()),))],
    "flatten": [OnnxOpSignature("Flatten", (A("axis", "i", 1),))],
    "concat": [OnnxOpSignature("Concat", (A("axis", "i"),))],
    "gather": [OnnxOpSignature("Gather", (A("axis", "i", 0),))],
    "cast": [OnnxOpSignature("Cast", (A("to", "dtype"),))],
    "conv": [
        OnnxOpSignature(
            "Conv",
            (
                A("dilations", "ints", ()),
                A("group", "i", 1),
                A("kernel_shape", "ints", ()),
                A("pads", "ints", ()),
                A("strides", "ints", ()),
            ),
        )
    ],
    "maxpool": [
        OnnxOpSignature(
            "MaxPool",
            (
                A("kernel_shape", "ints"),
                *_POOL,
                A("storage_order", "i", 0),
                A("strides", "ints", ()),
            ),
            outputs=None,
        )
    ],
    "averagepool": [
        OnnxOpSignature(
            "AveragePool",
            (
                A("kernel_shape", "ints"),
                A("ceil_mode", "i", 0),
                A("count_include_pad", "i", 0),
                A("pads", "ints", ()),
                A("strides", "ints", ()),
            ),
        )
    ],
    "batchnormalization": [
        OnnxOpSignature(
            "BatchNormalization", (A("epsilon", "f", 1e-5), A("momentum", "f", 0.9)), None
        )
    ],
    "instancenormalization": [OnnxOpSignature("InstanceNormalization", (A("epsilon", "f", 1e-5),))],
    "dropout": [OnnxOpSignature("Dropout", (A("ratio", "f", 0.5),), outputs=None)],
    "slice": [
        OnnxOpSignature(
            "Slice", (A("starts", "ints"), A("ends", "ints"), A("axes", "ints", ())), until=9
        ),
        OnnxOpSignature("Slice", since=10),
    ],
    "split": [OnnxOpSignature("Split", (A("axis", "i", 0), A("split", "ints", ())), outputs=None)],
    "squeeze": [OnnxOpSignature("Squeeze", (A("axes", "ints", ()),))],
    "unsqueeze": [OnnxOpSignature("Unsqueeze", (A("axes", "ints"),))],
    "pad": [
        OnnxOpSignature(
            "Pad", (A("pads", "ints"), A("mode", "s", "constant"), A("value", "f", 0.0)), until=10
        ),
        OnnxOpSignature("Pad", (A("mode", "s", "constant"),), since=11),
    ],
    "clip": [
        OnnxOpSignature(
            "Clip", (A("max", "f", 3.402823e38), A("min", "f", -3.402823e38)), until=10
        ),
        OnnxOpSignature("Clip", since=11),
    ],
    "leakyrelu": [OnnxOpSignature("LeakyRelu", (A("alpha", "f", 0.01),))],
    "elu": [OnnxOpSignature("Elu", (A("alpha", "f", 1.0),))],
    "selu": [OnnxOpSignature("Selu", (A("alpha", "f", 1.67326), A("gamma", "f", 1.0507)))],
    "hardsigmoid": [OnnxOpSignature("HardSigmoid", (A("alpha", "f", 0.2), A("beta", "f", 0.5)))],
    "where": [OnnxOpSignature("Where", since=9)],
    "argmax": [OnnxOpSignature("ArgMax", (A("axis", "i", 0), A("keepdims", "i", 1)))],
    "argmin": [OnnxOpSignature("ArgMin", (A("axis", "i", 0), A("keepdims", "i", 1)))],
    "topk": [
        OnnxOpSignature("TopK", (A("k", "i"), A("axis", "i", -1)), 2, until=9),
        OnnxOpSignature("TopK", (A("axis", "i", -1),), 2, since=10),
    ],
    "onehot": [OnnxOpSignature("OneHot", (A("axis", "i", -1),), since=9)],
    "cumsum": [OnnxOpSignature("CumSum", (A("exclusive", "i", 0), A("reverse", "i", 0)), since=11)],
    "constantofshape": [OnnxOpSignature("ConstantOfShape", (A("value", "tensor", None),), since=9)],
    "range": [OnnxOpSignature("Range", since=11)],
    "scatter": [OnnxOpSignature("Scatter", (A("axis", "i", 0),), since=9)],
    "scatterelements": [OnnxOpSignature("ScatterElements", (A("axis", "i", 0),), since=11)],
    "gatherelements": [OnnxOpSignature("GatherElements", (A("axis", "i", 0),), since=11)],
    "round": [OnnxOpSignature("Round", since=11)],
    "logical_if": [
        OnnxOpSignature("If", (A("else_branch", "graph"), A("then_branch", "graph")), outputs=None)
    ],
    "loop": [OnnxOpSignature("Loop", (A("body", "graph"),), outputs=None)],
    "mod": [OnnxOpSignature("Mod", (A("fmod", "i", 0),), since=10)],
    "thresholdedrelu": [OnnxOpSignature("ThresholdedRelu", (A("alpha", "f", 1.0),), since=10)],
    "depthtospace": [
        OnnxOpSignature("DepthToSpace", (A("blocksize", "i"),), until=10),
        OnnxOpSignature("DepthToSpace", (A("blocksize", "i"), A("mode", "s", "DCR")), since=11),
    ],
    "spacetodepth": [OnnxOpSignature("SpaceToDepth", (A("blocksize", "i"),))],
    "upsample": [OnnxOpSignature("Upsample", (A("mode", "s", "nearest"),), since=9, until=9)],
    "resize": [
        OnnxOpSignature("Resize", (A("mode", "s", "nearest"),), since=10, until=10),
        OnnxOpSignature(
            "Resize",
            (
                A("coordinate_transformation_mode", "s", "half_pixel"),
                A("cubic_coeff_a", "f", -0.75),
                A("exclude_outside", "i", 0),
                A("extrapolation_value", "f", 0.0),
                A("mode", "s", "nearest"),
                A("nearest_mode", "s", "round_prefer_floor"),
            ),
            since=11,
        ),
    ],
    "lrn": [
        OnnxOpSignature(
            "LRN",
            (A("size", "i"), A("alpha", "f", 1e-4), A("beta", "f", 0.75), A("bias", "f", 1.0)),
        )
    ],
    "lstm": [OnnxOpSignature("LSTM", (*_RNN, A("input_forget", "i", 0)), outputs=None)],
    "gru": [OnnxOpSignature("GRU", (*_RNN, A("linear_before_reset", "i", 0)), outputs=None)],
    "rnn": [OnnxOpSignature("RNN", _RNN, outputs=None)],
}

_GC = "ai.graphcore"
_RED = A("reduction", "reduction", ReductionType.Mean)
AI_GRAPHCORE: dict[str, list[OnnxOpSignature]] = {
    "l1loss": [OnnxOpSignature("L1", (A("lambda", "f"), _RED), domain=_GC)],
    "call": [OnnxOpSignature("Call", (A("callee", "graph"),), outputs=None, domain=_GC)],
    "nllloss": [
        OnnxOpSignature(
            "Nll",
            (_RED, A("ignoreIndex", "i", None), A("inputIsLogProbability", "i", 0)),
            domain=_GC,
        )
    ],
    "identityloss": [OnnxOpSignature("IdentityLoss", (_RED,), domain=_GC)],
    "replicatedallreduce": [
        OnnxOpSignature(
            "ReplicatedAllReduce",
            (
                A("collectiveOperator", "collective", None, onnx="op"),
                A("commGroup", "commgroup", None, onnx="__collectiveCommGroup"),
            ),
            domain=_GC,
        )
    ],
    "replicatedreducescatter": [
        OnnxOpSignature(
            "ReplicatedReduceScatter",
            (
                A("collectiveOperator", "collective", None, onnx="op"),
                A("commGroup", "commgroup", None, onnx="__collectiveCommGroup"),
            ),
            domain=_GC,
        )
    ],
    "groupnormalization": [
        OnnxOpSignature(
            "GroupNormalization", (A("num_groups", "i"), A("epsilon", "f", 1e-5)), 3, _GC
        )
    ],
    "gelu": [OnnxOpSignature("Gelu", domain=_GC)],
    "swish": [OnnxOpSignature("Swish", domain=_GC)],
    "detach": [OnnxOpSignature("Detach", domain=_GC)],
    "round": [OnnxOpSignature("Round", domain=_GC)],
    "expm1": [OnnxOpSignature("Expm1", domain=_GC)],
    "log1p": [OnnxOpSignature("Log1p", domain=_GC)],
    "atan2": [OnnxOpSignature("Atan2", domain=_GC)],
    "fmod": [OnnxOpSignature("Fmod", domain=_GC)],
    "remainder": [OnnxOpSignature("Remainder", domain=_GC)],
    "scale": [OnnxOpSignature("Scale", (A("scale", "f"),), domain=_GC)],
    "subsample": [OnnxOpSignature("Subsample", (A("strides", "ints"),), domain=_GC)],
    "printtensor": [
        OnnxOpSignature(
            "PrintTensor", (A("print_gradient", "i", 1), A("title", "s", "")), domain=_GC
        )
    ],
    "incrementmod": [
        OnnxOpSignature("IncrementMod", (A("increment", "f"), A("modulus", "f")), domain=_GC)
    ],
    "shapeddropout": [
        OnnxOpSignature("ShapedDropout", (A("shape", "ints"), A("ratio", "f", 0.5)), domain=_GC)
    ],
}


def _signature(name: str, op: OnnxOpSignature) -> inspect.Signature:
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params.append(P("value" if op.first_is_value else "args", P.POSITIONAL_OR_KEYWORD))
    if op.outputs is None:
        params.append(P("num_outputs", P.POSITIONAL_OR_KEYWORD))
    for a in op.attrs[1:] if op.first_is_value else op.attrs:
        default = P.empty if a.default is _REQUIRED else a.default
        pname = a.name if a.name.isidentifier() and a.name != "lambda" else a.name + "_"
        params.append(P(pname, P.POSITIONAL_OR_KEYWORD, default=default))
    params.append(P("debugContext", P.POSITIONAL_OR_KEYWORD, default=""))
    return inspect.Signature(params)


def _bind(name: str, op: OnnxOpSignature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple:
    """(inputs, num_outputs, {attr: value}, debugContext) from a call's arguments."""
    names = ["value" if op.first_is_value else "args"]
    if op.outputs is None:
        names.append("num_outputs")
    attrs = op.attrs[1:] if op.first_is_value else op.attrs
    names += [a.name for a in attrs] + ["debugContext"]
    kwargs = {
        k.removesuffix("_") if k.removesuffix("_") in names else k: v for k, v in kwargs.items()
    }
    if len(args) > len(names):
        raise TypeError(f"{name}: at most {len(names)} arguments ({', '.join(names)})")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names or k in bound:
            raise TypeError(f"{name}: unexpected or repeated argument {k!r}")
        bound[k] = v
    values = {}
    for a in attrs:
        value = bound.get(a.name, a.default)
        if value is _REQUIRED:
            raise TypeError(f"{name}: missing required argument {a.name!r}")
        values[a.name] = value
    if op.first_is_value:
        values["value"] = bound.get("value", _REQUIRED)
        inputs: list[str] = []
    else:
        inputs = bound.get("args", _REQUIRED)
        if inputs is _REQUIRED:
            raise TypeError(f"{name}: missing required argument 'args'")
    n_out = bound.get("num_outputs", op.outputs)
    if n_out is _REQUIRED or n_out is None:
        raise TypeError(f"{name}: missing required argument 'num_outputs'")
    return list(inputs), int(n_out), values, str(bound.get("debugContext", ""))


def _method(name: str, op: OnnxOpSignature) -> Callable[..., Any]:
    def method(self: Opset, *args: Any, **kwargs: Any) -> Any:
        inputs, n_out, values, debug = _bind(name, op, args, kwargs)
        outs = self._builder._add_node(self, op, inputs, values, n_out, debug)
        return outs[0] if op.outputs == 1 else outs

    method.__name__ = method.__qualname__ = name
    method.__signature__ = _signature(name, op)  # type: ignore[attr-defined]
    method.__doc__ = f"Add an ONNX ``{op.onnx}`` node ({op.domain or 'ai.onnx'})."
    return method


class Opset:
    """The ops of one domain at one version (``builder.aiOnnxOpset10``)."""

    domain = ""
    version = 0
    _defs: dict[str, list[OnnxOpSignature]] = {}

    def __init__(self, builder: Builder) -> None:
        self._builder = builder

    def __repr__(self) -> str:
        return f"{type(self).__name__}(domain={self.domain or 'ai.onnx'!r})"


def _opset_class(
    base_name: str, domain: str, version: int, table: dict[str, list[OnnxOpSignature]]
):
    methods: dict[str, Any] = {"domain": domain, "version": version, "_defs": table}
    for name, defs in table.items():
        for op in defs:
            if op.since <= version <= op.until:
                methods[name] = _method(name, op)
    return type(f"{base_name}{version}", (Opset,), methods)


#: ai.onnx versions a Builder offers (``aiOnnxOpset6`` ... ``aiOnnxOpset11``)
AI_ONNX_VERSIONS = range(6, 12)
AI_ONNX_OPSETS = {v: _opset_class("AiOnnxOpset", "", v, AI_ONNX) for v in AI_ONNX_VERSIONS}
AiGraphcoreOpset1 = _opset_class("AiGraphcoreOpset", _GC, 1, AI_GRAPHCORE)

#: ONNX names of collective operators (``op`` attribute values)
COLLECTIVES = {c.name: int(c) for c in CollectiveOperator}
