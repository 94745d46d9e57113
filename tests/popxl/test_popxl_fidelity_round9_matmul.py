"""Probe round 9, the matmul family and the elementwise long tail: what PopXL's
``tests/integration/popxl/ops/test_matmul.py`` and the per-op files of the simple unary and
binary ops (``test_abs.py``, ``test_exp.py``, ``test_div.py``, ``test_fmod.py``,
``test_pow.py``, ``test_sub.py``, ``test_isnan.py``, ...) check, against torch / NumPy.

Mismatch fixed:

- The gradient matmuls of ``ops.matmul(..., partials_type=, available_memory_proportion=)``
  keep the forward's partials type and memory proportion, as PopART's MatMulLhsGradOp /
  MatMulRhsGradOp copy them from the forward MatMulOp and its grad patterns hand them to the
  matmuls they become (was: the defaults, float partials and no proportion). ~80 %.

Pinned as they already agreed: the gradients of every NumPy shape class of matmul (1-D
operands, broadcast batches summed back to each operand); integer division truncating
toward zero and integer ``fmod`` taking the dividend's sign (PopLibs' integer ``div`` /
``rem`` are C's, ~85 %); the reversed scalar dunders' gradients; the unary long tail's values
and gradients; ``isnan`` / ``isinf`` / ``isfinite`` of the special values as bool.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tremula_tests_evaluator import gradients, torch_grads, values

import popxl
import popxl.ops as ops
from popxl.transforms import autodiff

F32 = np.float32
RNG = np.random.default_rng(9090)


# ---- matmul: the gradient matmuls keep the forward's options ----


def grad_matmuls(**kwargs: object) -> list:
    ir = popxl.Ir()
    with ir.main_graph:
        fwd = ir.create_graph(
            lambda x, y: ops.matmul(x, y, **kwargs),  # type: ignore[arg-type]
            popxl.TensorSpec((5, 2, 3), popxl.float16),
            popxl.TensorSpec((3, 4), popxl.float16),
        )
        bwd = autodiff(fwd).graph
    return [op for op in bwd._pb_graph.getOps() if op.opType() == "MatMul"]


def test_gradient_matmuls_keep_the_forward_s_partials_type_and_memory_proportion() -> None:
    from popart._internal.ir.op import MatMulPartialsType as P

    mms = grad_matmuls(partials_type=popxl.float16, available_memory_proportion=0.4)
    assert len(mms) == 2  # d/dlhs and d/drhs
    assert [m.getPartialsType() for m in mms] == [P.HALF, P.HALF]
    assert [m.getAvailableMemoryProportion() for m in mms] == pytest.approx([0.4, 0.4])
    mms = grad_matmuls(partials_type="float", available_memory_proportion=0.25)
    assert [m.getPartialsType() for m in mms] == [P.FLOAT, P.FLOAT]
    assert [m.getAvailableMemoryProportion() for m in mms] == pytest.approx([0.25, 0.25])
    mms = grad_matmuls()
    assert [m.getPartialsType() for m in mms] == [P.FLOAT, P.FLOAT]
    assert [m.getAvailableMemoryProportion() for m in mms] == [None, None]


def test_float16_gradients_with_half_partials_are_float16_and_near_torch_s() -> None:
    a = RNG.standard_normal((5, 2, 3)).astype(np.float16)
    b = RNG.standard_normal((3, 4)).astype(np.float16)
    seed = RNG.standard_normal((5, 2, 4)).astype(np.float16)
    got = gradients(lambda x, y: ops.matmul(x, y, partials_type=popxl.float16), [a, b], seed)
    for g, want in zip(got, torch_grads(torch.matmul, [a, b], seed)):
        assert g.dtype == np.float16 and g.shape == want.shape
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=2e-2, atol=2e-2)


# ---- matmul: values and gradients of every shape class against torch ----

SHAPES = [
    ((3,), (3,)),  # vector . vector: a scalar
    ((3,), (3, 4)),  # vector-matrix
    ((2, 3), (3,)),  # matrix-vector
    ((2, 1, 3, 4), (5, 4, 6)),  # both batches broadcast
    ((4,), (2, 4, 3)),  # a vector against a batch
    ((2, 3, 4), (4,)),
    ((1, 3), (5, 3, 2)),  # the lhs broadcast over the rhs's batch: its gradient summed
    ((5, 2, 3), (1, 3, 2)),
    ((6, 1, 2, 3), (6, 3, 4)),
]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_values_and_gradients_of_each_shape_class_agree_with_torch(shapes) -> None:
    a = RNG.standard_normal(shapes[0]).astype(F32)
    b = RNG.standard_normal(shapes[1]).astype(F32)
    (got,) = values(lambda x, y: x @ y, a, b)
    want = torch.matmul(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
    assert got.shape == tuple(want.shape) and got.dtype == F32
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    seed = RNG.standard_normal(got.shape).astype(F32)
    for g, w, x in zip(
        gradients(ops.matmul, [a, b], seed), torch_grads(torch.matmul, [a, b], seed), (a, b)
    ):
        assert g.shape == x.shape and g.dtype == F32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_float16_matmul_to_a_float32_output_keeps_float16_gradients() -> None:
    a = RNG.standard_normal((2, 3)).astype(np.float16)
    b = RNG.standard_normal((3, 4)).astype(np.float16)
    (got,) = values(lambda x, y: ops.matmul(x, y, output_type=popxl.float32), a, b)
    assert got.dtype == F32
    np.testing.assert_allclose(got, a.astype(F32) @ b.astype(F32), rtol=1e-2, atol=1e-2)
    seed = np.ones((2, 4), F32)
    ga, gb = gradients(lambda x, y: ops.matmul(x, y, output_type=popxl.float32), [a, b], seed)
    assert ga.dtype == gb.dtype == np.float16
    np.testing.assert_allclose(ga, np.ones((2, 4)) @ b.T.astype(F32), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(gb, a.T.astype(F32) @ np.ones((2, 4)), rtol=1e-2, atol=1e-2)


# ---- binary: integer semantics, reversed scalars ----


def test_integer_division_truncates_toward_zero_and_fmod_takes_the_dividend_s_sign() -> None:
    i = np.array([-7, 7, -8, 5, -1], np.int32)
    j = np.array([2, -2, 3, 5, 3], np.int32)
    quot, rem, rem2 = values(lambda x, y: (x / y, ops.fmod(x, y), x % y), i, j)
    assert quot.dtype == rem.dtype == np.int32
    np.testing.assert_array_equal(quot, [-3, -3, -2, 1, 0])  # C's /, not NumPy's //
    np.testing.assert_array_equal(rem, np.fmod(i, j))  # [-1, 1, -2, 0, -1]
    np.testing.assert_array_equal(rem2, np.fmod(i, j))


def test_a_float_scalar_with_an_integer_tensor_becomes_an_integer_constant() -> None:
    i = np.array([-7, 7, 3], np.int32)
    times, plus, over = values(lambda x: (x * 1.5, x + 1.7, x / 2), i)
    for got in (times, plus, over):
        assert got.dtype == np.int32
    np.testing.assert_array_equal(times, i)  # 1.5 -> 1
    np.testing.assert_array_equal(plus, i + 1)
    np.testing.assert_array_equal(over, [-3, 3, 1])


REVERSED = [
    (lambda t: 2 - t, lambda t: 2 - t),
    (lambda t: 2 / t, lambda t: 2 / t),
    (lambda t: 2**t, lambda t: 2**t),
    (lambda t: 3 * t, lambda t: 3 * t),
    (lambda t: 1.5 + t, lambda t: 1.5 + t),
]


@pytest.mark.parametrize("ours, theirs", REVERSED, ids=["rsub", "rdiv", "rpow", "rmul", "radd"])
def test_reversed_scalar_dunders_and_their_gradients_agree_with_torch(ours, theirs) -> None:
    x = RNG.uniform(0.5, 2.0, (2, 3)).astype(F32)
    (got,) = values(ours, x)
    want = theirs(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    seed = RNG.standard_normal(x.shape).astype(F32)
    (g,) = gradients(ours, [x], seed)
    np.testing.assert_allclose(g, torch_grads(theirs, [x], seed)[0], rtol=1e-4, atol=1e-5)


def test_reversed_fmod_of_a_scalar_by_a_tensor() -> None:
    x = np.array([1.5, -0.75, 4.0, -3.0], F32)
    (got,) = values(lambda t: 2 % t, x)
    np.testing.assert_allclose(got, np.fmod(np.float32(2), x))


# ---- unary long tail ----

UNARY = {
    "abs": (ops.abs, torch.abs, False),
    "negate": (ops.negate, torch.neg, False),
    "exp": (ops.exp, torch.exp, False),
    "log": (ops.log, torch.log, True),
    "log2": (ops.log2, torch.log2, True),
    "sqrt": (ops.sqrt, torch.sqrt, True),
    "sin": (ops.sin, torch.sin, False),
    "cos": (ops.cos, torch.cos, False),
    "tan": (ops.tan, torch.tan, False),
    "tanh": (ops.tanh, torch.tanh, False),
    "sigmoid": (ops.sigmoid, torch.sigmoid, False),
    "erf": (ops.erf, torch.erf, False),
    "relu": (ops.relu, torch.relu, False),
    "swish": (ops.swish, torch.nn.functional.silu, False),
    "gelu": (ops.gelu, lambda t: torch.nn.functional.gelu(t, approximate="tanh"), False),
    "geluerf": (ops.geluerf, torch.nn.functional.gelu, False),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_values_and_gradients_agree_with_torch(name: str) -> None:
    ours, theirs, positive = UNARY[name]
    x = RNG.uniform(0.2, 1.4, (3, 4))
    x = (x if positive else x * np.sign(RNG.standard_normal((3, 4)))).astype(F32)
    (got,) = values(ours, x)
    want = theirs(torch.tensor(x, dtype=torch.float64)).numpy()
    assert got.dtype == F32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    seed = RNG.standard_normal(x.shape).astype(F32)
    (g,) = gradients(ours, [x], seed)
    np.testing.assert_allclose(g, torch_grads(theirs, [x], seed)[0], rtol=1e-3, atol=1e-4)


def test_rounding_ops_and_sign_of_halves_and_signed_zeros_with_zero_gradients() -> None:
    r = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.2, 1.7, 0.0, -0.0], F32)
    for ours, ref in ((ops.ceil, np.ceil), (ops.floor, np.floor), (ops.sign, np.sign)):
        (got,) = values(ours, r)
        np.testing.assert_array_equal(got, ref(r))
        (g,) = gradients(ours, [r], np.ones_like(r))
        np.testing.assert_array_equal(g, np.zeros_like(r))


def test_isnan_isinf_isfinite_of_the_special_values_are_bool() -> None:
    sp = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0, -3.5], F32)
    got = values(lambda t: (ops.isnan(t), ops.isinf(t), ops.isfinite(t)), sp)
    for g, ref in zip(got, (np.isnan, np.isinf, np.isfinite)):
        assert g.dtype == np.bool_
        np.testing.assert_array_equal(g, ref(sp))


def test_gradients_at_zero_follow_popart_s_grad_ops() -> None:
    """abs: ``sign(x) * g`` (0 at 0, as torch); relu: where the output is > 0; sqrt:
    ``g / (2 sqrt(x))``, inf at +0 and -inf at -0."""
    z = np.array([0.0, -0.0, 1.0, -1.0], F32)
    one = np.ones(4, F32)
    (g,) = gradients(ops.abs, [z], one)
    np.testing.assert_array_equal(g, [0, 0, 1, -1])
    (g,) = gradients(ops.relu, [z], one)
    np.testing.assert_array_equal(g, [0, 0, 1, 0])
    (g,) = gradients(ops.sqrt, [z[:3]], one[:3])
    np.testing.assert_array_equal(g, [np.inf, -np.inf, 0.5])
