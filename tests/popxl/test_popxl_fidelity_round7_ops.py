"""Probe round 7, the ops side: programs written the way PopXL's per-op integration tests
write them (an ``Ir``, variables, the op, ``host_store``, a ``Session`` on "ipu_model",
NumPy for the expected values), over the parameterisations: operands that are views of the
tensor an in-place op writes, each operand broadcast in turn with the gradients reduced
back, negative and repeated axes with ``keepdims``, float16, and in-place forms on views
that are not contiguous.

Pinned here because the round changed it: an in-place op whose other operands share
elements with the tensor it writes reads them as they were before the write (PopXL's value
semantics). ``dynamic_update_``, ``sparse_accumulate_`` and the factor tensors of
``accumulate_`` / ``scaled_add_`` used to fail graph verification ("reads and writes one
region") when the update, the indices or the factor was a view of the updated tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl.ops import var_updates as vu

RNG = np.random.default_rng(71)
F32 = np.float32
X = RNG.uniform(0.5, 1.5, (4, 4)).astype(F32)  # positive: a valid pow base and factor


def stored(outs: Sequence[popxl.Tensor]) -> list[popxl.DeviceToHostStream]:
    """A stream each of ``outs`` (main-graph tensors) is stored to."""
    streams = []
    for t in outs:
        streams.append(popxl.d2h_stream(t.shape, t.dtype))
        ops.host_store(streams[-1], t)
    return streams


def session_values(ir: popxl.Ir, streams: Sequence[popxl.DeviceToHostStream]) -> list[np.ndarray]:
    """The values ``streams`` receive in one run of ``ir``."""
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    return [got[s] for s in streams]


def run(build: Callable[..., Sequence[popxl.Tensor]], *arrays: np.ndarray) -> list[np.ndarray]:
    """Variables holding ``arrays``, ``build``'s tensors stored to the host, in sequence
    (an in-place op and the store of the tensor it writes are ordered)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        streams = stored(build(*(popxl.variable(a) for a in arrays)))
    return session_values(ir, streams)


def rows(t: popxl.Tensor, start: int, stop: int) -> popxl.Tensor:
    return ops.slice_(t, start=start, stop=stop, axis=0)


def element(t: popxl.Tensor) -> popxl.Tensor:
    """``t[0, 0]`` as a rank-0 view of ``t``."""
    return ops.reshape_(ops.slice_(t, start=[0, 0], stop=[1, 1], axis=[0, 1]), ())


def offset(*values: int) -> popxl.Tensor:
    return popxl.constant(np.array(values, np.uint32))


def _rows_2_3(update: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """X with rows 2..3 replaced by ``update(rows 2..3, rows 1..2)``, in float64."""
    want = X.astype(np.float64)
    want[2:4] = update(want[2:4], X[1:3].astype(np.float64))
    return want


F = float(X[0, 0])
ALIASED: dict[str, tuple[Callable[[popxl.Tensor], object], np.ndarray]] = {
    # rows 2..3 updated from rows 1..2 (row 2 is both read and written)
    "dynamic_update_": (
        lambda t: ops.dynamic_update_(t, offset(2), rows(t, 1, 3), [0], [2]),
        _rows_2_3(lambda a, b: b),
    ),
    "dynamic_update_/2 axes": (
        lambda t: ops.dynamic_update_(t, offset(2, 0), rows(t, 1, 3), [0, 1], [2, 4]),
        _rows_2_3(lambda a, b: b),
    ),
    "copy_var_update_": (
        lambda t: vu.copy_var_update_(rows(t, 2, 4), rows(t, 1, 3)),
        _rows_2_3(lambda a, b: b),
    ),
    "accumulate_": (lambda t: vu.accumulate_(rows(t, 2, 4), rows(t, 1, 3)), _rows_2_3(np.add)),
    "accumulate_square_": (
        lambda t: vu.accumulate_square_(rows(t, 2, 4), rows(t, 1, 3), 0.5),
        _rows_2_3(lambda a, b: a + 0.5 * b * b),
    ),
    "add_": (lambda t: ops.add_(rows(t, 2, 4), rows(t, 1, 3)), _rows_2_3(np.add)),
    "pow_": (lambda t: ops.pow_(rows(t, 2, 4), rows(t, 1, 3)), _rows_2_3(np.power)),
    "scaled_add_": (
        lambda t: ops.scaled_add_(rows(t, 2, 4), rows(t, 1, 3), 2.0, 3.0),
        _rows_2_3(lambda a, b: 2 * a + 3 * b),
    ),
    # a factor that is an element of the tensor written
    "accumulate_/f=t[0,0]": (
        lambda t: vu.accumulate_(t, popxl.constant(X), element(t)),
        X.astype(np.float64) * (1 + F),
    ),
    "accumulator_scale_/f=t[0,0]": (
        lambda t: vu.accumulator_scale_(t, element(t)),
        X.astype(np.float64) * F,
    ),
    "scaled_add_/a=t[0,0]": (
        lambda t: ops.scaled_add_(t, popxl.constant(X), element(t), 2.0),
        X.astype(np.float64) * (F + 2),
    ),
    "scaled_add_/b=t[0,0]": (
        lambda t: ops.scaled_add_(t, popxl.constant(X), 1.0, element(t)),
        X.astype(np.float64) * (1 + F),
    ),
    "div_/t[0,0]": (lambda t: ops.div_(t, element(t)), X.astype(np.float64) / F),
}


@pytest.mark.parametrize("name", list(ALIASED))
def test_in_place_ops_read_operands_that_view_the_tensor_they_write_before_writing(
    name: str,
) -> None:
    build, want = ALIASED[name]

    def written(t: popxl.Tensor) -> list[popxl.Tensor]:
        build(t)
        return [t]

    (got,) = run(written, X)
    np.testing.assert_allclose(got, want.astype(F32), rtol=1e-6)


def test_sparse_accumulate_of_rows_of_the_accumulator_scaled_by_one_of_its_elements() -> None:
    idx = np.array([3, 0, 3], np.int32)

    def build(t: popxl.Tensor, i: popxl.Tensor) -> list[popxl.Tensor]:
        vu.sparse_accumulate_(t, rows(t, 1, 4), i, axis=0, f=element(t))
        return [t]

    (got,) = run(build, X, idx)
    want = X.astype(np.float64)
    np.add.at(want, idx, F * X[1:4].astype(np.float64))
    np.testing.assert_allclose(got, want.astype(F32), rtol=1e-6)


def test_dynamic_update_with_its_offset_read_from_the_tensor_it_updates() -> None:
    t0 = np.array([[1, 0, 0], [5, 6, 7]], np.uint32)

    def build(t: popxl.Tensor) -> list[popxl.Tensor]:
        at = ops.reshape_(ops.slice_(t, start=[0, 0], stop=[1, 1], axis=[0, 1]), (1,))
        ops.dynamic_update_(t, at, popxl.constant(np.full((2, 1), 9, np.uint32)), [1], [1])
        return [t]

    (got,) = run(build, t0)
    np.testing.assert_array_equal(got, [[1, 9, 0], [5, 9, 7]])  # column t[0, 0] == 1


# ---- binary ops: each operand broadcast in turn, gradients reduced back to it ----


def grads(
    fn: Callable[..., popxl.Tensor], arrays: Sequence[np.ndarray], seed: np.ndarray
) -> list[np.ndarray]:
    """The gradients of ``sum(seed * fn(*arrays))`` with respect to every input: ``fn`` in a
    subgraph, ``autodiff``, the grad graph called with ``seed``."""
    ir = popxl.Ir()
    with ir.main_graph:
        inputs = [popxl.variable(a) for a in arrays]
        graph = ir.create_graph(fn, *(t.spec for t in inputs))
        info = popxl.transforms.autodiff(graph)
        site = ops.call_with_info(graph, *inputs)
        outs = ops.call(info.graph, popxl.constant(seed), inputs_dict=info.inputs_dict(site))
        streams = stored(outs)
    return session_values(ir, streams)


def sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``g`` summed over the axes broadcasting added or stretched to reach it from
    ``shape``."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


#: op -> (popxl op, its partial derivatives d/da, d/db from float64 a and b)
BINARY: dict[str, tuple[Callable[..., popxl.Tensor], Callable[..., tuple[np.ndarray, ...]]]] = {
    "add": (ops.add, lambda a, b: (np.ones_like(a * b), np.ones_like(a * b))),
    "sub": (ops.sub, lambda a, b: (np.ones_like(a * b), -np.ones_like(a * b))),
    "mul": (ops.mul, lambda a, b: (b + 0 * a, a + 0 * b)),
    "div": (ops.div, lambda a, b: (1 / b + 0 * a, -a / (b * b))),
    "pow": (ops.pow, lambda a, b: (b * a ** (b - 1), np.log(a) * a**b)),
    "atan2": (ops.atan2, lambda a, b: (b / (a * a + b * b), -a / (a * a + b * b))),
}
SHAPES = [((2, 3), (3,)), ((3,), (2, 3)), ((2, 1), (1, 3)), ((), (2, 3)), ((2, 3), ()), ((1,), ())]


@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_op_gradients_are_summed_back_to_each_broadcast_operand(
    name: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    op, partials = BINARY[name]
    a = RNG.uniform(0.5, 2.0, shapes[0]).astype(F32)
    b = RNG.uniform(0.5, 2.0, shapes[1]).astype(F32)
    seed = RNG.uniform(-1, 1, np.broadcast_shapes(a.shape, b.shape)).astype(F32)
    da, db = partials(a.astype(np.float64), b.astype(np.float64))
    got_a, got_b = grads(op, [a, b], seed)
    np.testing.assert_allclose(got_a, sum_to(seed * da, a.shape).reshape(a.shape), rtol=1e-5)
    np.testing.assert_allclose(got_b, sum_to(seed * db, b.shape).reshape(b.shape), rtol=1e-5)


# ---- in-place unary ops on a view that is not contiguous ----

UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs,
    "exp": np.exp,
    "negate": np.negative,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "sin": np.sin,
    "sqrt": lambda x: np.sqrt(np.abs(x)),
    "tanh": np.tanh,
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", list(UNARY))
def test_in_place_unary_op_on_columns_of_a_transposed_view(name: str, dtype: type) -> None:
    """``op_(slice_(transpose_(x)))`` changes columns 1..2 of ``x`` and nothing else."""
    x = RNG.uniform(-2, 2, (3, 4)).astype(dtype)
    if name == "sqrt":
        x = np.abs(x)

    def build(t: popxl.Tensor) -> list[popxl.Tensor]:
        view = ops.slice_(ops.transpose_(t), start=1, stop=3, axis=0)
        return [getattr(ops, name + "_")(view), t]

    got_view, got = run(build, x)
    want = x.astype(np.float64)
    want[:, 1:3] = UNARY[name](want[:, 1:3])
    tol = 1e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(got, want.astype(dtype), rtol=tol, atol=tol)
    np.testing.assert_allclose(got_view, want[:, 1:3].T.astype(dtype), rtol=tol, atol=tol)
