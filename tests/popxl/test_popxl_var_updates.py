"""``popxl.ops.var_updates`` accumulators (spec popxl-fidelity 1.0-1.1): each update against
a NumPy formula written here from the spec, in float32 and float16, with number and Tensor
factors, on the "cpu" and "ipu_model" devices, over several runs (the variables keep their
values); ids, aliases and graph tensors as PopXL makes them; bad input refused with the IR
unchanged."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import PopartInternalException

V = ops.var_updates
DEVICES = ["cpu", "ipu_model"]
DTYPES = [np.float32, np.float16]
TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float16: dict(rtol=4e-3, atol=2e-3)}
RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: Any = np.float32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def session_values(
    build: Callable[[], tuple[list, list]], device: str, runs: int = 1
) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """Build in a new Ir's main graph (``build`` returns variables to read and tensors to
    store), run ``runs`` times; returns the variables' values after the runs and each
    run's stored tensors."""
    ir = popxl.Ir()
    with ir.main_graph:
        variables, tensors = build()
        streams = []
        for i, t in enumerate(tensors):
            s = popxl.d2h_stream(t.shape, t.dtype, name=f"out{i}")
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, device) as session:
        outs = [session.run() for _ in range(runs)]
        values = session.get_tensors_data(variables)
    return [values[v] for v in variables], [[o[s] for s in streams] for o in outs]


def factor(f: float, as_tensor: bool, dtype: Any = np.float32) -> Any:
    return popxl.variable(np.array(f, dtype), name="f") if as_tensor else f


# ---- the formulas (spec 1.1), float64 ----
def np_accumulate(t, x, f):
    return t + (1.0 if f is None else f) * x


def np_square(t, x, f):
    return t + f * x * x


def np_mean(t, x, step):
    b = 1.0 / (step + 1.0)
    return (1 - b) * t + b * x


def np_moving(t, x, f):
    return f * t + (1 - f) * x


def np_moving_square(t, x, f):
    return f * t + (1 - f) * x * x


CASES = {
    "accumulate_": (V.accumulate_, np_accumulate, 0.75),
    "accumulate_/none": (V.accumulate_, np_accumulate, None),
    "accumulate_square_": (V.accumulate_square_, np_square, 0.5),
    "accumulate_moving_average_": (V.accumulate_moving_average_, np_moving, 0.9),
    "accumulate_moving_average_square_": (
        V.accumulate_moving_average_square_, np_moving_square, 0.99
    ),
}  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16"])
@pytest.mark.parametrize(
    ("case", "as_tensor"),
    [
        pytest.param(case, as_tensor, id=f"{case}-{'tensor' if as_tensor else 'number'}")
        for case, (_, _, factor) in CASES.items()
        for as_tensor in (False, True)
        if factor is not None or not as_tensor  # a tensor factor only where there is one
    ],
)
def test_accumulators_match_numpy(case, as_tensor, dtype, device):
    fn, formula, f = CASES[case]
    t0, x = rand(2, 5, dtype=dtype), rand(2, 5, dtype=dtype)
    made = {}

    def build():
        t = popxl.variable(t0, name="t")
        xs = popxl.constant(x, name="x")
        args = (t, xs) if f is None else (t, xs, factor(f, as_tensor))
        out = fn(*args)
        made["out"] = out
        return [t], [out]

    (t_after,), outs = session_values(build, device, runs=3)
    want = t0.astype(np.float64)
    for run in range(3):
        want = formula(want, x.astype(np.float64), f)
        np.testing.assert_allclose(outs[run][0].astype(np.float64), want, **TOL[dtype])
    assert t_after.dtype == dtype
    np.testing.assert_allclose(t_after.astype(np.float64), want, **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16"])
def test_accumulate_mean_over_steps(dtype, device):
    """A running mean: step counts the values seen so far (a float32 variable the graph
    increments); after n runs t is the mean of the n values."""
    xs = rand(4, 3, dtype=dtype)
    feed = {}

    def build():
        t = popxl.variable(np.zeros(3, dtype), name="mean")
        step = popxl.variable(np.float32(0), name="step")
        s = popxl.h2d_stream((3,), popxl.dtype.as_dtype(dtype), name="x")
        feed["s"] = s
        V.accumulate_mean_(t, ops.host_load(s), step)
        V.accumulate_(step, popxl.constant(np.float32(1)))
        return [t, step], []

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        (t, step), _ = build()
    with popxl.Session(ir, device) as session:
        for row in xs:
            session.run({feed["s"]: row})
        got = session.get_tensors_data([t, step])
    assert got[step] == 4
    np.testing.assert_allclose(got[t], xs.astype(np.float64).mean(0), **TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("step", [2.0, "tensor"])
def test_accumulate_mean_formula(step, device):
    t0, x = rand(3, 2), rand(3, 2)

    def build():
        t = popxl.variable(t0)
        s = popxl.variable(np.float32(2.0)) if step == "tensor" else step
        return [t], [V.accumulate_mean_(t, popxl.constant(x), s)]

    (t_after,), outs = session_values(build, device)
    np.testing.assert_allclose(t_after, np_mean(t0.astype(np.float64), x, 2.0), rtol=1e-5)
    np.testing.assert_array_equal(outs[0][0], t_after)


@pytest.mark.parametrize("device", DEVICES)
def test_inputs_of_other_dtypes_are_cast_to_t(device):
    """X and a Tensor factor are cast to t's dtype (PopART casts them when lowering): an int
    constant into a float variable (as popxl-addons counts steps), float32 X into a float16
    accumulator, a float16 factor for a float32 accumulator."""
    x16 = rand(4, dtype=np.float16)

    def build():
        count = popxl.variable(np.float32(0.5), name="count")
        V.accumulate_(count, popxl.constant(1))  # int32 constant
        half = popxl.variable(np.zeros(4, np.float16), name="half")
        V.accumulate_(half, popxl.constant(x16.astype(np.float32)), 2.0)
        single = popxl.variable(np.ones(4, np.float32), name="single")
        V.accumulate_moving_average_(single, popxl.constant(x16), popxl.constant(np.float16(0.5)))
        sq = popxl.variable(np.zeros(4, np.float32), name="sq")
        V.accumulate_square_(sq, popxl.constant(np.arange(4, dtype=np.int32)))
        return [count, half, single, sq], []

    (count, half, single, sq), _ = session_values(build, device)
    assert count == 1.5 and half.dtype == np.float16
    np.testing.assert_allclose(half, 2 * x16.astype(np.float64), rtol=2e-3)
    np.testing.assert_allclose(single, 0.5 + 0.5 * x16.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(sq, [0, 1, 4, 9])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16"])
def test_accumulator_scale_and_zero(dtype, device):
    t0 = rand(3, 4, dtype=dtype)

    def build():
        a = popxl.variable(t0, name="a")
        b = popxl.variable(t0, name="b")
        c = popxl.variable(t0, name="c")
        V.accumulator_scale_(a, 0.5)
        V.accumulator_scale_(b, popxl.variable(np.float32(-2.0)))
        V.accumulator_zero_(c)
        return [a, b, c], []

    (a, b, c), _ = session_values(build, device, runs=2)
    np.testing.assert_allclose(a.astype(np.float64), t0 * 0.25, **TOL[dtype])
    np.testing.assert_allclose(b.astype(np.float64), t0 * 4.0, **TOL[dtype])
    np.testing.assert_array_equal(c, np.zeros_like(t0))


def np_sparse(t, x, indices, axis, f):
    """t[indices along axis] += f x, x of the gathered shape; repeats add up."""
    out = np.moveaxis(t.astype(np.float64).copy(), axis, 0)
    idx = np.asarray(indices).reshape(-1)
    rows = np.moveaxis(x.astype(np.float64).reshape(
        *t.shape[:axis], idx.size, *t.shape[axis + 1:]), axis, 0)  # fmt: skip
    for i, r in zip(idx, rows):
        if 0 <= i < out.shape[0]:
            out[i] += f * r
    return np.moveaxis(out, 0, axis)


SPARSE = [  # (t shape, indices, axis, f)
    ((5, 3), [0, 3, 3, 1], 0, None),
    ((5, 3), [[4, 0], [2, 0]], 0, 0.5),
    ((2, 6, 3), [5, 1, 5], 1, "tensor"),
    ((4, 3), [2, 2, 4, -1], -1, 2.0),  # axis -1; indices out of range (4, -1) ignored
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float16"])
@pytest.mark.parametrize("case", range(len(SPARSE)))
def test_sparse_accumulate(case, dtype, device):
    shape, indices, axis, f = SPARSE[case]
    idx = np.array(indices, np.int32)
    ax = axis % len(shape)
    xshape = (*shape[:ax], *idx.shape, *shape[ax + 1 :])
    t0, x = rand(*shape, dtype=dtype), rand(*xshape, dtype=dtype)
    fv = 1.5 if f == "tensor" else f

    def build():
        t = popxl.variable(t0, name="table")
        w = popxl.variable(t0, name="layout")
        ff = popxl.constant(np.float32(fv)) if f == "tensor" else f
        out = V.sparse_accumulate_(t, popxl.constant(x), popxl.constant(idx), axis, ff, w)
        assert out.id == "sparse_accumulate__table" and out.shape == shape
        return [t], []

    (t_after,), _ = session_values(build, device)
    want = np_sparse(t0, x, idx, ax, 1.0 if fv is None else fv)
    np.testing.assert_allclose(t_after.astype(np.float64), want, **TOL[dtype])


# ---- ids, aliases and graph tensors (spec 1.0) ----
PREFIXES = [
    ("accumulate__", lambda t, x: V.accumulate_(t, x, 0.5)),
    ("accumulate_square__", lambda t, x: V.accumulate_square_(t, x)),
    ("accumulate_mean__", lambda t, x: V.accumulate_mean_(t, x, popxl.constant(np.float32(1)))),
    ("accumulate_moving_avg__", lambda t, x: V.accumulate_moving_average_(t, x, 0.5)),
    ("accumulate_moving_avg_square__", lambda t, x: V.accumulate_moving_average_square_(t, x, 0.5)),
    ("accumulator_scale__", lambda t, x: V.accumulator_scale_(t, 0.5)),
    ("accumulator_scale__", lambda t, x: V.accumulator_zero_(t)),
    ("updated__", lambda t, x: V.copy_var_update_(t, x)),
]  # fmt: skip


@pytest.mark.parametrize(
    "prefix, update", PREFIXES, ids=[p[0] + str(i) for i, p in enumerate(PREFIXES)]
)
def test_update_returns_a_new_alias_named_after_t(prefix, update):
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros(3, np.float32), name="w")
        x = popxl.variable(np.ones(3, np.float32), name="g")
        before = len(ir.main_graph.tensors)
        out = update(t, x)
        assert out is not t and out.id == prefix + "w"
        assert out.shape == t.shape and out.dtype == t.dtype
        assert out in ir.main_graph.tensors
        # float factors add no tensor; the mean's step is a tensor made by the caller
        assert len(ir.main_graph.tensors) == before + 1 + (prefix == "accumulate_mean__")
        op = out.producer
        assert op.inputs[0] is t and 0 in op.modified


def test_graph_tensor_counts():
    """spec 1.0: a float factor adds no tensor; a float step for the mean does."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros(3, np.float32))
        x = popxl.variable(np.ones(3, np.float32))
        V.accumulate_(t, x, 0.3)
        assert len(ir.main_graph.tensors) == 3
        V.accumulate_mean_(t, x, 2.0)  # step becomes a float32 constant
        assert len(ir.main_graph.tensors) == 5
        step = [c for c in ir.main_graph.constants]
        assert len(step) == 1 and step[0].dtype == popxl.float32


# ---- bad input: PopXL's errors, the IR unchanged ----
def _bad(action: Callable[[dict], Any], error: type, match: str) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        p = {
            "t": popxl.variable(np.zeros((2, 3), np.float32), name="t"),
            "x": popxl.variable(np.ones((2, 3), np.float32), name="x"),
            "row": popxl.variable(np.ones(3, np.float32), name="row"),
            "vec": popxl.variable(np.ones(2, np.float32), name="vec"),
            "idx": popxl.variable(np.zeros(2, np.int32), name="idx"),
        }
        before = (len(ir.main_graph.tensors), len(ir.main_graph.ops))
        with pytest.raises(error, match=match):
            action(p)
        assert (len(ir.main_graph.tensors), len(ir.main_graph.ops)) == before


BAD = [
    ("not a tensor", TypeError, r"The input `X` is not a Tensor. Type: <class 'numpy.ndarray'>",
     lambda p: V.accumulate_(p["t"], np.ones((2, 3)))),
    ("factor elements", ValueError, r"f 'vec' must have one element",
     lambda p: V.accumulate_(p["t"], p["x"], p["vec"])),
    ("factor type", TypeError, r"f must be a popxl.Tensor, a number or None, got str",
     lambda p: V.accumulate_square_(p["t"], p["x"], "0.5")),
    ("moving average f None", TypeError, r"f must be a popxl.Tensor or a number, got None",
     lambda p: V.accumulate_moving_average_(p["t"], p["x"], None)),
    ("mean step", TypeError, r"step must be a popxl.Tensor or a number",
     lambda p: V.accumulate_mean_(p["t"], p["x"], None)),
    ("scale", TypeError, r"The input `t` is not a Tensor",
     lambda p: V.accumulator_scale_(3.0, 0.5)),
    ("sparse shape", ValueError, r"rows of 't' \(2, 3\) at 'idx' \(2,\) along axis 0 have "
     r"shape \(2, 3\)", lambda p: V.sparse_accumulate_(p["t"], p["row"], p["idx"])),
    ("sparse indices", TypeError, r"indices 'x' must be integers",
     lambda p: V.sparse_accumulate_(p["t"], p["x"], p["x"])),
    ("sparse axis", ValueError, r"axis 2 is out of range",
     lambda p: V.sparse_accumulate_(p["t"], p["x"], p["idx"], 2)),
]  # fmt: skip
# an X of another shape than t: made (PopART's VarUpdateOp::setup copies t's info), refused
# when lowered: tests/popxl/test_popxl_ops_fidelity_checks.py


@pytest.mark.parametrize("case, error, match, action", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_the_ir_unchanged(case, error, match, action):
    _bad(action, error, match)


def test_a_tensor_of_another_graph_is_refused():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros(3, np.float32), name="t")
    g = ir.create_empty_graph("sub")
    with g:
        x = popxl.graph_input((3,), popxl.float32, "x")
        n = len(g.tensors)
        match = r"The input tensor `t` is not in the current Graph sub"
        with pytest.raises(ValueError, match=match):
            V.accumulate_(t, x)
        assert len(g.tensors) == n


def test_tensors_on_different_ipus_are_refused():
    ir = popxl.Ir()
    with ir.main_graph:
        t0 = popxl.variable(np.zeros(3, np.float32))
        with popxl.ipu(0):
            a = t0 + 1
        with popxl.ipu(1):
            b = t0 + 2
        with pytest.raises(ValueError, match=r"`t` and `X` are located on different IPUs: 0 != 1"):
            V.accumulate_(a, b)


@pytest.mark.parametrize("fn", [V.accumulate_, V.accumulate_square_])
def test_a_constant_zero_dampening_factor_fails_at_lowering(fn):
    """spec 1.1: the IR takes it; PopART's lowering refuses a constant factor of 0."""
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros(3, np.float32), name="t")
        fn(t, popxl.constant(np.ones(3, np.float32)), 0.0)
    with pytest.raises(PopartInternalException, match="constant f of 0 is not allowed"):
        popxl.Session(ir, "cpu")


def test_accumulate_gradient_with_a_constant_factor():
    """The Add / DampenedAdd / DampenedAddSquare rules (a Tremula extension) against the
    formula's derivatives."""
    ir = popxl.Ir()
    with ir.main_graph:
        x0, t0 = rand(3), rand(3)

        def fwd(t: popxl.Tensor, x: popxl.Tensor) -> popxl.Tensor:
            return V.accumulate_square_(ops.identity(t), x, 0.5)

        g = ir.create_graph(fwd, popxl.TensorSpec((3,), popxl.float32),
                            popxl.TensorSpec((3,), popxl.float32))  # fmt: skip
        grad = popxl.transforms.autodiff(g)
        tv, xv = popxl.variable(t0), popxl.variable(x0)
        info = ops.call_with_info(g, tv, xv)
        seed = popxl.constant(np.ones(3, np.float32))
        gt, gx = ops.call(grad.graph, seed, inputs_dict=grad.inputs_dict(info))
        streams = []
        for y in (gt, gx):
            s = popxl.d2h_stream(y.shape, y.dtype)
            ops.host_store(s, y)
            streams.append(s)
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
    np.testing.assert_allclose(out[streams[0]], np.ones(3))
    np.testing.assert_allclose(out[streams[1]], 2 * 0.5 * x0, rtol=1e-6)
