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


def run(build: Callable[..., Sequence[popxl.Tensor]], *arrays: np.ndarray) -> list[np.ndarray]:
    """Variables holding ``arrays``, ``build``'s tensors stored to the host, in sequence
    (an in-place op and the store of the tensor it writes are ordered)."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence(True):
        outs = build(*(popxl.variable(a) for a in arrays))
        streams = []
        for t in outs:
            streams.append(popxl.d2h_stream(t.shape, t.dtype))
            ops.host_store(streams[-1], t)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    return [got[s] for s in streams]


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
