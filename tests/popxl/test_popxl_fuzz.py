"""Fuzzing PopXL programs built from the op tables (issue 15).

Hypothesis draws small programs: one or two variables of random shapes and dtypes (float32,
float16, int32, bool), then up to three ops, each drawn from the element-wise and reduction
tables (``popxl.ops.elementwise.TABLE``, ``popxl.ops.reduce.TABLE``: their public names,
arities and NumPy references) and applied to earlier values, with random axes. Many draws
are invalid on purpose (dtypes that differ, shapes that do not broadcast, float-only ops on
integers or bools, axes out of range). Each program must either be refused with a Tremula or
PopXL error that names the op, when it is built or compiled, or run on the IPU Model and give
each op's result as its NumPy reference computes it. An exception from inside NumPy, or any
other exception type, fails the test.

Integer semantics are the device's (C, defined where C is not), which the references take
from ``tremula.numerics`` as the codelets do (integer division and remainder by zero give 0);
a float result (a reduction's) becomes an integer by the device's cast rule
(``numerics.convert``: truncation, NaN giving 0, out-of-range values saturating).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as npst

import popxl
import popxl.ops as ops
from tremula import numerics
from tremula.errors import TremulaError
from tremula.popxl.ops import elementwise, reduce

ELEMENTWISE = [e for e in elementwise.TABLE if getattr(e, "public", True) and hasattr(ops, e.name)]
REDUCTIONS = [r for r in reduce.TABLE if hasattr(ops, r.name)]
DTYPES = {
    "float32": popxl.float32,
    "float16": popxl.float16,
    "int32": popxl.int32,
    "bool": popxl.bool,
}
#: rtol, atol of float results (half is computed in float32 and rounded after every op)
TOLERANCE = {"float32": (2e-5, 1e-6), "float16": (2e-2, 2e-3)}
#: the exception types a refusal may have (Tremula's, and the built-ins PopXL raises)
REFUSALS = (TremulaError, TypeError, ValueError, NotImplementedError, IndexError)


@dataclass(frozen=True)
class Step:
    """One op of a drawn program: a table record applied to earlier values."""

    record: Any
    operands: tuple[int, ...]
    axes: tuple[int, ...] | None = None  # reductions: None for every axis
    keepdims: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return (self.record.name, self.record.op)


def _values(dtype: str, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    elements = {
        "float32": st.floats(-4, 4, width=32),
        "float16": st.floats(-4, 4, width=16),
        "int32": st.integers(-5, 5),
        "bool": st.booleans(),
    }[dtype]
    return npst.arrays(np.dtype(dtype), shape, elements=elements)


@st.composite
def programs(draw: st.DrawFn) -> tuple[list[np.ndarray], list[Step]]:
    inputs = []
    for _ in range(draw(st.integers(1, 2))):
        shape = tuple(draw(st.lists(st.integers(1, 3), max_size=3)))
        inputs.append(draw(_values(draw(st.sampled_from(sorted(DTYPES))), shape)))
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 3))):
        values = len(inputs) + len(steps)
        if draw(st.booleans()) or not REDUCTIONS:
            record = draw(st.sampled_from(ELEMENTWISE))
            operands = tuple(draw(st.integers(0, values - 1)) for _ in range(record.arity))
            steps.append(Step(record, operands))
        else:
            record = draw(st.sampled_from(REDUCTIONS))
            axes = draw(st.none() | st.lists(st.integers(-3, 3), min_size=1, max_size=2))
            steps.append(
                Step(
                    record,
                    (draw(st.integers(0, values - 1)),),
                    None if axes is None else tuple(axes),
                    draw(st.booleans()),
                )
            )
    return inputs, steps


def _apply(step: Step, tensors: list[Any]) -> Any:
    fn = getattr(ops, step.record.name)
    args = [tensors[i] for i in step.operands]
    if step.record in REDUCTIONS:
        return fn(
            args[0], axis=None if step.axes is None else list(step.axes), keepdims=step.keepdims
        )
    return fn(*args)


def _assert_refusal(exc: BaseException, names: set[str]) -> None:
    """A refusal must be one of Tremula's or PopXL's errors and name one of the ops."""
    kind = type(exc)
    assert isinstance(exc, REFUSALS), f"unexpected exception type {kind.__name__}: {exc}"
    assert not kind.__module__.startswith("numpy"), f"NumPy's own exception leaked: {exc!r}"
    text = str(exc).lower()
    assert any(n.lower() in text for n in names), f"the error does not name {names}: {exc}"


def _reference(step: Step, arrays: list[np.ndarray], out: Any) -> np.ndarray:
    """What the op's NumPy reference gives, in the dtype and shape the IR inferred."""
    want = np.dtype(out.dtype.as_numpy())
    with np.errstate(all="ignore"):
        if step.record in REDUCTIONS:
            x = arrays[0]
            axes = (
                tuple(range(x.ndim)) if step.axes is None else tuple(a % x.ndim for a in step.axes)
            )
            got = np.asarray(step.record.reference(x, axes))
        else:
            got = np.asarray(step.record.reference(*arrays))
        return numerics.convert(got, want).reshape(out.shape)  # the device's cast rule


def _compare(got: np.ndarray, want: np.ndarray, step: Step) -> None:
    kind = got.dtype.name
    if kind in TOLERANCE:
        rtol, atol = TOLERANCE[kind]
        np.testing.assert_allclose(
            got,
            want,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            err_msg=f"{step.record.name} {step.operands}",
        )
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{step.record.name} {step.operands}")


def _run(inputs: list[np.ndarray], steps: list[Step]) -> None:
    ir = popxl.Ir()
    names: set[str] = set()
    with ir.main_graph:
        tensors: list[Any] = [popxl.variable(a, DTYPES[a.dtype.name]) for a in inputs]
        for step in steps:
            names.update(step.names)
            try:
                tensors.append(_apply(step, tensors))
            except REFUSALS as exc:
                _assert_refusal(exc, set(step.names))
                return
        streams = []
        for t in tensors[len(inputs) :]:
            streams.append(popxl.d2h_stream(t.shape, t.dtype))
            ops.host_store(streams[-1], t)
    try:
        session = popxl.Session(ir, "ipu_model")
    except REFUSALS as exc:
        _assert_refusal(exc, names)
        return
    with session:
        results = session.run()
    arrays = list(inputs)
    for step, out, stream in zip(steps, tensors[len(inputs) :], streams):
        want = _reference(step, [arrays[i] for i in step.operands], out)
        _compare(results[stream].reshape(out.shape), want, step)
        arrays.append(want)


def _record(name: str) -> Any:
    return next(r for r in ELEMENTWISE + REDUCTIONS if r.name == name)


#: programs the fuzzer once found wrong, kept as fixed examples
FOUND = [
    ([np.array([1, -2, 3], np.int32)], [Step(_record("isinf"), (0,))]),  # refused by popops
    ([np.array([True, False])], [Step(_record("swish"), (0,))]),  # without naming the op
    (
        [np.array([[4, -1, 9]], np.int32)],
        [
            Step(_record("sqrt"), (0,)),  # NaN -> 0 on ints
            Step(_record("median"), (1,), (1,), True),
        ],
    ),
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # references of NaN / inf inputs
@example(FOUND[0])
@example(FOUND[1])
@example(FOUND[2])
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs())
def test_programs_from_the_op_tables_run_as_numpy_or_are_refused_naming_the_op(program):
    _run(*program)


def test_the_fuzzer_covers_the_tables():
    assert len(ELEMENTWISE) >= 30 and len(REDUCTIONS) >= 10
