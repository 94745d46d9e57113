"""Every ONNX op rule against onnxruntime: a model built with ``popart.Builder`` runs in an
inference session and in onnxruntime, and the outputs agree; PopART's own ops (losses)
against NumPy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tremula_tests_popart_helpers import infer, onnxruntime_outputs, replicated

import popart

RNG = np.random.default_rng(0)


def F(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def I64(values: Any) -> np.ndarray:
    return np.asarray(values, np.int64)


def _c(b: popart.Builder, value: np.ndarray) -> str:
    return b.aiOnnx.constant(value)


# name -> (inputs, fn(builder, input ids) -> output id, opset)
CASES: dict[str, tuple[list[np.ndarray], Callable[..., str], int]] = {
    "add_broadcast": ([F(2, 3), F(3)], lambda b, x: b.aiOnnx.add(x), 10),
    "sub": ([F(2, 3), F(2, 3)], lambda b, x: b.aiOnnx.sub(x), 10),
    "mul": ([F(4, 1), F(1, 5)], lambda b, x: b.aiOnnx.mul(x), 10),
    "div": ([F(2, 3), F(2, 3, lo=1, hi=2)], lambda b, x: b.aiOnnx.div(x), 10),
    "pow": ([F(2, 3, lo=0.5, hi=2), F(2, 3)], lambda b, x: b.aiOnnx.pow(x), 10),
    "matmul_batched": ([F(2, 3, 4), F(4, 5)], lambda b, x: b.aiOnnx.matmul(x), 10),
    "gemm": ([F(3, 4), F(5, 4), F(5)],
             lambda b, x: b.aiOnnx.gemm(x, 0.5, 2.0, 0, 1), 10),
    "gemm_transA": ([F(4, 3), F(4, 5), F(3, 5)], lambda b, x: b.aiOnnx.gemm(x, 1.0, 1.0, 1, 0), 10),
    "unary_chain": ([F(2, 5)], lambda b, x: b.aiOnnx.tanh([b.aiOnnx.sigmoid([b.aiOnnx.exp(
        [b.aiOnnx.neg([b.aiOnnx.abs(x)])])])]), 10),
    "log_sqrt": ([F(6, lo=0.1, hi=3)], lambda b, x: b.aiOnnx.log([b.aiOnnx.sqrt(x)]), 10),
    "relu_leaky": ([F(3, 4)], lambda b, x: b.aiOnnx.add([b.aiOnnx.relu(x),
                                                           b.aiOnnx.leakyrelu(x, 0.2)]), 10),
    "elu_selu": ([F(3, 4)], lambda b, x: b.aiOnnx.add([b.aiOnnx.elu(x, 0.7),
                                                         b.aiOnnx.selu(x)]), 10),
    "softmax_coerced": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.softmax(x, 1), 10),
    "softmax_13": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.softmax(x, 1), 11),
    "logsoftmax": ([F(3, 7)], lambda b, x: b.aiOnnx.logsoftmax(x, 1), 10),
    "reshape": ([F(2, 3, 4)], lambda b, x: b.reshape_const(b.aiOnnx, x, [4, -1]), 10),
    "transpose": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.transpose(x, [2, 0, 1]), 10),
    "flatten": ([F(2, 3, 4, 5)], lambda b, x: b.aiOnnx.flatten(x, 2), 10),
    "concat": ([F(2, 3), F(2, 2)], lambda b, x: b.aiOnnx.concat(x, -1), 10),
    "slice": ([F(5, 6)], lambda b, x: b.aiOnnx.slice(
        [x[0], _c(b, I64([1, 0])), _c(b, I64([4, 6])), _c(b, I64([0, 1])), _c(b, I64([2, 3]))]
    ), 10),
    "gather": ([F(4, 5)], lambda b, x: b.aiOnnx.gather([x[0], _c(b, I64([3, 0, 3]))], 1), 10),
    "reducesum": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.reducesum(x, [0, 2], 0), 10),
    "reducemean": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.reducemean(x, [-1], 1), 10),
    "reducemax_all": ([F(2, 3, 4)], lambda b, x: b.aiOnnx.reducemax(x, keepdims=0), 10),
    "squeeze_unsqueeze": ([F(2, 1, 3)], lambda b, x: b.aiOnnx.unsqueeze(
        [b.aiOnnx.squeeze(x, [1])], [0, 3]), 10),
    "split": ([F(6, 2)], lambda b, x: b.aiOnnx.concat(
        b.aiOnnx.split(x, 3, 0, [1, 2, 3])[::-1], 0), 10),
    "clip_10": ([F(3, 4)], lambda b, x: b.aiOnnx.clip(x, 0.5, -0.25), 10),
    "pad": ([F(2, 3)], lambda b, x: b.aiOnnx.pad(x, [0, 1, 2, 1], "constant", 0.5), 10),
    "cast": ([F(2, 3, lo=-5, hi=5)], lambda b, x: b.aiOnnx.cast([b.aiOnnx.cast(x, "INT32")],
                                                               "FLOAT"), 10),
    "identity_dropout": ([F(3, 3)], lambda b, x: b.aiOnnx.dropout(
        [b.aiOnnx.identity(x)], 1, 0.4)[0], 10),
    "variadic": ([F(2, 3), F(3), F(2, 3)], lambda b, x: b.aiOnnx.add(
        [b.aiOnnx.max(x), b.aiOnnx.add([b.aiOnnx.min(x), b.aiOnnx.mean(x)])]), 10),
    "where_greater": ([F(2, 3), F(2, 3)], lambda b, x: b.aiOnnx.where(
        [b.aiOnnx.greater(x), x[0], x[1]]), 10),
    "conv_group_strided": ([F(1, 4, 7, 7), F(6, 2, 3, 3), F(6)],
                           lambda b, x: b.aiOnnx.conv(x, [1, 1], 2, [3, 3], [1, 0, 1, 2],
                                                      [2, 1]), 10),
    "maxpool": ([F(2, 3, 6, 6)], lambda b, x: b.aiOnnx.maxpool(x, 1, [3, 3], 0, [],
                                                               [1, 1, 1, 1], 0, [2, 2])[0], 10),
    "averagepool": ([F(2, 3, 6, 6)], lambda b, x: b.aiOnnx.averagepool(x, [2, 2], 0, 0,
                                                                       [], [2, 2]), 10),
    "globalaveragepool": ([F(2, 3, 4, 5)], lambda b, x: b.aiOnnx.globalaveragepool(x), 10),
    "batchnorm_inference": ([F(2, 3, 4, 4), F(3), F(3), F(3), F(3, lo=0.5, hi=1.5)],
                            lambda b, x: b.aiOnnx.batchnormalization(x, 1, 1e-3)[0], 10),
    "lstm": ([F(4, 2, 3), F(1, 20, 3), F(1, 20, 5), F(1, 40)],
             lambda b, x: b.aiOnnx.lstm(x, 3, hidden_size=5)[0], 10),
    "lstm_reverse_state": ([F(3, 2, 3), F(1, 16, 3), F(1, 16, 4)],
                           lambda b, x: b.aiOnnx.lstm(x, 3, direction="reverse",
                                                      hidden_size=4)[2], 10),
    "gru_bidirectional": ([F(4, 2, 3), F(2, 15, 3), F(2, 15, 5), F(2, 30)],
                          lambda b, x: b.aiOnnx.gru(x, 2, direction="bidirectional",
                                                    hidden_size=5)[0], 10),
    "gru_linear_before_reset": ([F(3, 2, 3), F(1, 12, 3), F(1, 12, 4), F(1, 24)],
                                lambda b, x: b.aiOnnx.gru(x, 2, hidden_size=4,
                                                          linear_before_reset=1)[1], 10),
    "trigonometric": ([F(2, 5, lo=-0.9, hi=0.9)], lambda b, x: b.aiOnnx.sum(
        [b.aiOnnx.tan(x), b.aiOnnx.asin(x), b.aiOnnx.acos(x), b.aiOnnx.atan(x)]), 10),
    "atan_large": ([F(7, lo=-300, hi=300)], lambda b, x: b.aiOnnx.atan(x), 10),
    "hyperbolic": ([F(2, 5, lo=-0.9, hi=0.9)], lambda b, x: b.aiOnnx.sum(
        [b.aiOnnx.sinh(x), b.aiOnnx.cosh(x), b.aiOnnx.asinh(x), b.aiOnnx.atanh(x),
         b.aiOnnx.acosh([b.aiOnnx.add([b.aiOnnx.abs(x), _c(b, np.float32(1.5))])])]), 10),
    "asinh_negative": ([F(6, lo=-500, hi=-1)], lambda b, x: b.aiOnnx.asinh(x), 10),
    "erf": ([np.array([0.0, 1e-4, -3e-3, 0.3, -0.7, 1.5, -2.5, 4.0], np.float32)],
            lambda b, x: b.aiOnnx.erf(x), 10),
    "xor": ([F(2, 3), F(2, 3)], lambda b, x: b.aiOnnx.cast([b.aiOnnx.logical_xor(
        [b.aiOnnx.greater([x[0], _c(b, np.float32(0))]),
         b.aiOnnx.less([x[1], _c(b, np.float32(0))])])], "FLOAT"), 10),
    "resize_linear": ([F(1, 2, 3, 4)], lambda b, x: b.aiOnnx.resize(
        [x[0], _c(b, np.zeros(0, np.float32)), _c(b, np.array([1, 1, 2, 1.5], np.float32))],
        mode="linear"), 11),
    "resize_nearest_sizes": ([F(1, 2, 3, 4)], lambda b, x: b.aiOnnx.resize(
        [x[0], _c(b, np.zeros(0, np.float32)), _c(b, np.zeros(0, np.float32)),
         _c(b, I64([1, 2, 7, 3]))], coordinate_transformation_mode="asymmetric",
        nearest_mode="floor"), 11),
    "resize_10_mixed": ([F(1, 2, 4, 3)], lambda b, x: b.aiOnnx.resize(
        [x[0], _c(b, np.array([1, 1, 0.5, 2], np.float32))]), 10),
    "upsample": ([F(1, 2, 3, 2)], lambda b, x: b.aiOnnx.upsample(
        [x[0], _c(b, np.array([1, 1, 2, 3], np.float32))]), 9),
    "gatherelements": ([F(3, 4, 5)], lambda b, x: b.aiOnnx.gatherelements(
        [x[0], _c(b, I64([[[0, -1, 2, 3, 1]], [[3, 3, 0, -4, 2]], [[1, 2, 3, 0, 0]]]))], 1), 11),
    "gatherelements_computed": ([F(3, 4, 5)], lambda b, x: b.aiOnnx.gatherelements(
        [x[0], b.aiOnnx.argmax(x, 2, 1)], 2), 11),
    "scatterelements": ([F(3, 4), F(2, 4)], lambda b, x: b.aiOnnx.scatterelements(
        [x[0], _c(b, I64([[2, 0, 1, -1], [0, 1, 2, 0]])), x[1]], 0), 11),
    "round_half_even": ([np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.49999997, 2.4, -2.6, 3e7 + 1],
                                  np.float32)], lambda b, x: b.aiOnnx.round(x), 11),
    "mod_python_ints": ([np.array([7, -7, 7, -7, 0], np.int32),
                         np.array([3, 3, -3, -3, 2], np.int32)], lambda b, x: b.aiOnnx.mod(x), 10),
    "thresholded_relu": ([F(3, 4)], lambda b, x: b.aiOnnx.thresholdedrelu(x, 0.25), 10),
    "depth_space_round_trip": ([F(1, 8, 2, 3)], lambda b, x: b.aiOnnx.spacetodepth(
        [b.aiOnnx.depthtospace(x, 2, "CRD")], 2), 11),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_onnxruntime(name: str) -> None:
    inputs, fn, opset = CASES[name]
    b = popart.Builder(opsets={"ai.onnx": opset, "ai.graphcore": 1})
    ids = [b.addInputTensor(popart.TensorInfo(v), f"in{i}") for i, v in enumerate(inputs)]
    out = fn(b, ids)
    proto = b.getModelProto()
    feeds = dict(zip(ids, inputs))
    (ref,) = onnxruntime_outputs(proto, feeds, [out])
    got = infer(proto, feeds, [out])[out]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("reduction", "reduce"),
    [(popart.ReductionType.Sum, np.sum), (popart.ReductionType.Mean, np.mean),
     (popart.ReductionType.NoReduction, lambda v: v)],
)  # fmt: skip
def test_graphcore_losses(reduction: Any, reduce: Callable[..., Any]) -> None:
    x = F(4, 5)
    probs = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    labels = np.array([0, 4, 2, 1], np.int32)
    b = popart.Builder()
    xi = b.addInputTensor(popart.TensorInfo(x), "x")
    pi = b.addInputTensor(popart.TensorInfo(probs.astype(np.float32)), "p")
    li = b.addInputTensor(popart.TensorInfo(labels), "l")
    l1 = b.aiGraphcore.l1loss([xi], 0.25, reduction)
    nll = b.aiGraphcore.nllloss([pi, li], reduction)
    ident = b.aiGraphcore.identityloss([xi], reduction)
    feeds = {xi: x, pi: probs.astype(np.float32), li: labels}
    out = infer(b.getModelProto(), feeds, [l1, nll, ident])
    np.testing.assert_allclose(out[l1], 0.25 * reduce(np.abs(x)), rtol=1e-5)
    np.testing.assert_allclose(out[nll], reduce(-np.log(probs[np.arange(4), labels])), rtol=1e-5)
    np.testing.assert_allclose(out[ident], reduce(x), rtol=1e-5)


def test_graphcore_atan2() -> None:
    y, x = F(3, 4, lo=-2, hi=2), F(3, 4, lo=-2, hi=2)
    b = popart.Builder()
    yi = b.addInputTensor(popart.TensorInfo(y), "y")
    xi = b.addInputTensor(popart.TensorInfo(x), "x")
    out = b.aiGraphcore.atan2([yi, xi])
    got = infer(b.getModelProto(), {yi: y, xi: x}, [out])[out]
    np.testing.assert_allclose(got, np.arctan2(y, x), rtol=1e-5, atol=1e-6)


def test_resize_options_it_cannot_honour_are_refused_naming_the_node() -> None:
    b = popart.Builder(opsets={"ai.onnx": 11, "ai.graphcore": 1})
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 1, 2, 2]), "x")
    roi, scales = _c(b, np.zeros(0, np.float32)), _c(b, np.array([1, 1, 2, 2], np.float32))
    out = b.aiOnnx.resize([x, roi, scales], mode="cubic", exclude_outside=1)
    with pytest.raises(popart.popart_exception, match=r"Resize node .*exclude_outside=1"):
        infer(b.getModelProto(), {x: F(1, 1, 2, 2)}, [out])


def test_graphcore_remainder_round_and_increment_mod() -> None:
    """PopART's ``remainder`` (Python's %, the divisor's sign), ``round`` (halves to even)
    and ``incrementmod`` (``(x + increment) fmod modulus``) against NumPy."""
    a = np.array([7.5, -7.5, 7.5, -7.5, 4.0], np.float32)
    d = np.array([2.0, 2.0, -2.0, -2.0, 2.0], np.float32)
    i = np.array([-5, -1, 0, 3, 8], np.int32)
    b = popart.Builder()
    ai, di, ii = (
        b.addInputTensor(popart.TensorInfo(v), n) for v, n in ((a, "a"), (d, "d"), (i, "i"))
    )
    rem = b.aiGraphcore.remainder([ai, di])
    rnd = b.aiGraphcore.round([ai])
    inc = b.aiGraphcore.incrementmod([ii], 3.0, 4.0)
    out = infer(b.getModelProto(), {ai: a, di: d, ii: i}, [rem, rnd, inc])
    np.testing.assert_array_equal(out[rem], np.mod(a, d))
    np.testing.assert_array_equal(out[rnd], np.round(a))
    np.testing.assert_array_equal(out[inc], np.fmod(i + 3, 4))


def _group_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int) -> np.ndarray:
    g = x.reshape(x.shape[0], groups, -1).astype(np.float64)
    norm = (g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return norm.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)


_X = F(2, 4, 3, lo=-2, hi=2)
_GELU_TANH = 0.5 * _X * (1 + np.tanh(np.sqrt(2 / np.pi) * (_X + 0.044715 * _X**3)))
# name -> (inputs, fn(aiGraphcore, input ids) -> output id, NumPy's result); inference, so
# the dropout passes its input through, as PopART's inference sessions do
GRAPHCORE_CASES: dict[str, tuple[list[np.ndarray], Callable[..., Any], np.ndarray]] = {
    "gelu": ([_X], lambda g, x: g.gelu(x), _GELU_TANH),
    "swish": ([_X], lambda g, x: g.swish(x), _X / (1 + np.exp(-_X))),
    "detach": ([_X], lambda g, x: g.detach(x), _X),
    "expm1": ([_X], lambda g, x: g.expm1(x), np.expm1(_X)),
    "log1p": ([_X + 2.5], lambda g, x: g.log1p(x), np.log1p(_X + 2.5)),
    "fmod": ([_X * 3, np.full_like(_X, -1.25)], lambda g, x: g.fmod(x), np.fmod(_X * 3, -1.25)),
    "scale": ([_X], lambda g, x: g.scale(x, -2.5), _X * -2.5),
    "subsample": ([_X], lambda g, x: g.subsample(x, [1, 3, 2]), _X[:, ::3, ::2]),
    "printtensor": ([_X], lambda g, x: g.printtensor(x, title="x"), _X),
    "shapeddropout": ([_X], lambda g, x: g.shapeddropout(x, [2, 1, 3], 0.5), _X),
    "groupnormalization": (
        [F(2, 4, 3), F(4), F(4)],
        lambda g, x: g.groupnormalization(x, 2)[0],
        np.zeros(0),  # NumPy's result, set below
    ),
}  # fmt: skip
_GN = GRAPHCORE_CASES["groupnormalization"][0]
GRAPHCORE_CASES["groupnormalization"] = (_GN, GRAPHCORE_CASES["groupnormalization"][1],
                                         _group_norm(*_GN, groups=2))  # fmt: skip


@pytest.mark.parametrize("name", sorted(GRAPHCORE_CASES))
def test_graphcore_op_matches_numpy(name: str) -> None:
    inputs, fn, want = GRAPHCORE_CASES[name]
    b = popart.Builder()
    ids = [b.addInputTensor(popart.TensorInfo(v), f"in{i}") for i, v in enumerate(inputs)]
    out = fn(b.aiGraphcore, ids)
    got = infer(b.getModelProto(), dict(zip(ids, inputs)), [out])[out]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["allreduce", "reducescatter"])
def test_graphcore_replicated_collectives_across_two_replicas(op: str) -> None:
    x = F(2, 6)  # replica r holds x[r]
    b = popart.Builder()
    xi = b.addInputTensor(popart.TensorInfo("FLOAT", [6]), "x")
    if op == "allreduce":
        out = b.aiGraphcore.replicatedallreduce([xi])
        want = np.stack([x.sum(0)] * 2)
    else:
        out = b.aiGraphcore.replicatedreducescatter(
            [xi], collectiveOperator=popart.CollectiveOperator.Add
        )
        want = x.sum(0).reshape(2, 3)  # replica r keeps the r-th half of the sum
    got = infer(b.getModelProto(), {xi: x}, [out], userOptions=replicated(2))[out]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6)
