"""``adam_updater``, ``lamb_updater``, ``adamax_updater`` and ``adam_var_update`` (spec
popxl-fidelity 1.2-1.3) against NumPy formulas written here from the spec: bias correction,
weight decay, epsilon outside the square root, LAMB's trust ratio; float32 and float16;
number and Tensor hyper-parameters; the time step incremented in place; whole Adam and LAMB
training steps as popxl-addons writes them; PopXL's errors with the IR unchanged."""

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
RNG = np.random.default_rng(11)
F64 = np.float64


def rand(*shape: int, dtype: Any = np.float32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(dtype)


def run(build: Callable[[], tuple[list, list]], device: str, runs: int = 1) -> tuple[list, list]:
    """Variables' values after ``runs`` runs, and each run's stored tensors."""
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
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


# ---- the spec's formulas (float64) ----
def np_updater(m, v, *, w=None, step=None, wd=0.0, b1=None, b2=None, eps=1e-7, adamax=False):
    """Adam / Lamb / AdaMax update term; ``step`` is the time step after its increment."""
    m, v = m.astype(F64), v.astype(F64)
    c1 = 1 - b1**step if step is not None else 1.0
    c2 = 1 - b2**step if step is not None and not adamax else 1.0
    m_hat = m / c1
    x = m_hat / (v + eps) if adamax else m_hat / (np.sqrt(v / c2) + eps)
    if wd:
        x = x + wd * w.astype(F64)
    return x


def np_trust_ratio(r1, r2, mwn=None, tensor_mwn=False):
    if r1 == 0 or r2 == 0 or (tensor_mwn and mwn == 0):
        return 1.0
    n1 = np.sqrt(r1) if mwn is None else min(np.sqrt(r1), mwn)
    return n1 / np.sqrt(r2)


def hyper(value: float, tensor: bool, dtype: Any = np.float32) -> Any:
    return popxl.variable(np.array(value, dtype)) if tensor else value


# ---- the updaters ----
UPDATERS = {  # name -> (function, kwargs of the formula, kwargs of the call)
    "adam/no-bias": ("adam", {}, {}),
    "adam/bias": ("adam", {"b1": 0.9, "b2": 0.999}, {"beta1": 0.9, "beta2": 0.999}),
    "adam/decay": ("adam", {"wd": 0.01}, {"weight_decay": 0.01}),
    "adam/all": ("adam", {"b1": 0.8, "b2": 0.95, "wd": 0.1, "eps": 1e-3},
                 {"beta1": 0.8, "beta2": 0.95, "weight_decay": 0.1, "epsilon": 1e-3}),
    "lamb/bias": ("lamb", {"b1": 0.9, "b2": 0.99, "wd": 0.02},
                  {"beta1": 0.9, "beta2": 0.99, "weight_decay": 0.02}),
    "lamb/no-bias": ("lamb", {"wd": 0.02}, {"weight_decay": 0.02}),
    "adamax": ("adamax", {"b1": 0.9, "adamax": True}, {}),
    "adamax/decay": ("adamax", {"b1": 0.7, "wd": 0.05, "adamax": True},
                     {"beta1": 0.7, "weight_decay": 0.05}),
}  # fmt: skip
FNS = {"adam": V.adam_updater, "lamb": V.lamb_updater, "adamax": V.adamax_updater}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("tensors", [False, True], ids=["numbers", "tensors"])
@pytest.mark.parametrize("case", list(UPDATERS))
def test_updater_matches_numpy_over_steps(case, tensors, device):
    """Three runs: the step variable is incremented in place before each update (the
    caller's tensor changes), so the bias corrections follow it."""
    kind, formula, call = UPDATERS[case]
    m0, v0, w0 = rand(2, 3), rand(2, 3, lo=0.0, hi=2.0), rand(2, 3)
    bias = "b1" in formula

    def build():
        m, v, w = popxl.constant(m0), popxl.constant(v0), popxl.variable(w0, name="w")
        step = popxl.variable(np.float32(3), name="step") if bias else None
        kwargs = {k: hyper(x, tensors) for k, x in call.items()}
        x = FNS[kind](m, v, weight=w, time_step=step, **kwargs)
        return ([step] if bias else []), [x]

    variables, outs = run(build, device, runs=3)
    for i in range(3):
        want = np_updater(m0, v0, w=w0, step=4.0 + i if bias else None, **formula)
        np.testing.assert_allclose(outs[i][0], want, rtol=3e-5, atol=1e-6)  # 1 - b2^t in float32
    if bias:
        assert variables[0] == 6.0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "m_type, v_type, w_type",
    [(np.float16, np.float16, np.float16), (np.float16, np.float32, np.float32),
     (np.float32, np.float32, np.float16), (np.float16, np.float32, None)],
)  # fmt: skip
def test_updater_dtypes(m_type, v_type, w_type, device):
    """m / c1 is cast to v's dtype and computed there; the result has w's dtype when w is
    connected (weight decay), else m's."""
    m0, v0 = rand(4, 2, dtype=m_type), rand(4, 2, dtype=v_type, lo=0.1, hi=1.0)
    w0 = rand(4, 2, dtype=w_type) if w_type else None

    def build():
        step = popxl.variable(np.float32(0))
        w = popxl.variable(w0) if w_type else None
        x = V.adam_updater(
            popxl.constant(m0), popxl.constant(v0), w, step, 0.01 if w_type else None,
            popxl.constant(np.float16(0.9)), 0.999, 1e-4,
        )  # fmt: skip
        assert x.dtype == popxl.dtype.as_dtype(w_type or m_type)
        return [], [x]

    _, ((got,),) = run(build, device)
    m_hat = (m0.astype(F64) / (1 - F64(np.float16(0.9)))).astype(v_type)
    want = np_updater(m_hat, v0, w=w0, step=1.0, wd=0.01 if w_type else 0.0, b1=0.0,
                      b2=0.999, eps=1e-4)  # fmt: skip
    assert got.dtype == (w_type or m_type)
    half = np.float16 in (v_type, got.dtype)
    np.testing.assert_allclose(got.astype(F64), want, rtol=5e-3 if half else 1e-5, atol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
def test_adam_training_steps_as_popxl_addons_writes_them(dtype, device):
    """popxl-addons' Adam: moving averages of the gradient, adam_updater with bias
    correction and weight decay, then scaled_add_(w, x, b=-lr)."""
    w0, grads = rand(3, 4, dtype=dtype), [rand(3, 4, dtype=dtype) for _ in range(3)]
    b1, b2, eps, wd, lr = 0.9, 0.999, 1e-5, 0.01, 0.1
    feed: dict = {}

    def build():
        w = popxl.variable(w0, name="w")
        m = popxl.variable(np.zeros((3, 4), dtype), name="m")
        v = popxl.variable(np.zeros((3, 4), np.float32), name="v")
        step = popxl.variable(np.float32(0), name="step")
        s = popxl.h2d_stream((3, 4), popxl.dtype.as_dtype(dtype), name="g")
        feed["s"] = s
        g = ops.host_load(s)
        V.accumulate_moving_average_(m, g, f=b1)
        V.accumulate_moving_average_square_(v, g, f=b2)
        x = V.adam_updater(m, v, weight=w, weight_decay=wd, time_step=step, beta1=b1,
                           beta2=b2, epsilon=eps)  # fmt: skip
        ops.scaled_add_(w, x, b=-lr)
        return [w, m, v, step], []

    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        (w, m, v, step), _ = build()
    with popxl.Session(ir, device) as session:
        for g in grads:
            session.run({feed["s"]: g})
        got = session.get_tensors_data([w, m, v, step])
    W, M, Vv = w0.astype(F64), np.zeros((3, 4)), np.zeros((3, 4))
    for t, g in enumerate(grads, start=1):
        M = b1 * M + (1 - b1) * g
        Vv = b2 * Vv + (1 - b2) * g.astype(F64) ** 2
        W = W - lr * np_updater(M, Vv, w=W, step=t, wd=wd, b1=b1, b2=b2, eps=eps)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-2, atol=5e-3)
    assert got[step] == 3
    np.testing.assert_allclose(got[v], Vv, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got[m].astype(F64), M, **tol)
    np.testing.assert_allclose(got[w].astype(F64), W, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("mwn", [None, 0.5, "tensor"])
def test_lamb_training_steps(mwn, dtype, device):
    """LAMB: lamb_updater, the squared norms from ops.lamb_square (float32), and
    adam_var_update applying the trust ratio (max_weight_norm clipping sqrt(r1))."""
    w0, g = rand(4, 4, dtype=dtype), rand(4, 4, dtype=dtype)
    b1, b2, eps, wd, lr = 0.9, 0.99, 1e-6, 0.01, 0.05
    mwn_value = 0.5 if mwn == "tensor" else mwn

    def build():
        w = popxl.variable(w0, name="w")
        m = popxl.variable(np.zeros((4, 4), np.float32), name="m")
        v = popxl.variable(np.zeros((4, 4), np.float32), name="v")
        step = popxl.variable(np.float32(0), name="step")
        gg = popxl.constant(g)
        V.accumulate_moving_average_(m, gg, b1)
        V.accumulate_moving_average_square_(v, gg, b2)
        x = V.lamb_updater(m, v, w, step, wd, b1, b2, eps)
        r1, r2 = ops.lamb_square(w), ops.lamb_square(x)
        assert r1.dtype == popxl.float32 and r1.shape == ()
        limit = popxl.constant(np.float32(0.5)) if mwn == "tensor" else mwn
        out = V.adam_var_update(w, x, r1, r2, popxl.constant(np.float32(lr)), limit)
        assert out.id == "adam_var_update_out"
        return [w], []

    (got,), _ = run(build, device, runs=3)
    W, M, Vv = w0.astype(F64), np.zeros((4, 4)), np.zeros((4, 4))
    for t in range(1, 4):
        M = b1 * M + (1 - b1) * g
        Vv = b2 * Vv + (1 - b2) * g.astype(F64) ** 2
        x = np_updater(M, Vv, w=W, step=t, wd=wd, b1=b1, b2=b2, eps=eps)
        if dtype == np.float16:
            x = x.astype(np.float16).astype(F64)
        ratio = np_trust_ratio(np.sum(W**2), np.sum(x**2), mwn_value)
        W = W - lr * ratio * x
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-2, atol=4e-3)
    np.testing.assert_allclose(got.astype(F64), W, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "r1, r2, mwn, tensor_mwn",
    [(4.0, 16.0, None, False), (4.0, 16.0, 1.0, False), (0.0, 16.0, None, False),
     (4.0, 0.0, 3.0, False), (4.0, 16.0, 0.0, True), (9.0, 1.0, 2.0, True)],
)  # fmt: skip
def test_adam_var_update_trust_ratio(r1, r2, mwn, tensor_mwn, device):
    """ratio = min(sqrt(r1), mwn) / sqrt(r2), forced to 1 when r1 or r2 is 0 or a Tensor
    mwn is 0; t <- t - lr * ratio * x."""
    t0, x0, lr = rand(5), rand(5), 0.3

    def build():
        t = popxl.variable(t0)
        limit = popxl.constant(np.float32(mwn)) if tensor_mwn else mwn
        c = popxl.constant
        V.adam_var_update(t, c(x0), c(np.float32(r1)), c(np.float32(r2)), lr, limit)
        return [t], []

    (got,), _ = run(build, device)
    ratio = np_trust_ratio(r1, r2, mwn, tensor_mwn)
    np.testing.assert_allclose(got, t0 - lr * ratio * x0.astype(F64), rtol=1e-6, atol=1e-7)


def test_constant_max_weight_norm_of_zero_fails_at_lowering():
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.ones(3, np.float32))
        one = popxl.constant(np.float32(1))
        V.adam_var_update(t, popxl.constant(np.ones(3, np.float32)), one, one, 0.1, 0.0)
    with pytest.raises(PopartInternalException, match="constant max_weight_norm of 0"):
        popxl.Session(ir, "cpu")


# ---- graph tensors (spec 1.2, 1.3) ----
def test_graph_tensor_counts():
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = (popxl.variable(np.ones(3, np.float32)) for _ in range(2))
        V.adam_updater(m, v)
        assert len(ir.main_graph.tensors) == 3
    ir = popxl.Ir()
    with ir.main_graph:
        m, v = (popxl.variable(np.ones(3, np.float32)) for _ in range(2))
        t = popxl.variable(np.float32(0))
        V.adam_updater(m, v, time_step=t, beta1=0.9, beta2=0.99)
        assert len(ir.main_graph.tensors) == 4
    ir = popxl.Ir()
    with ir.main_graph:
        m, v, w = (popxl.variable(np.ones(3, np.float32)) for _ in range(3))
        wd = popxl.variable(np.float32(0.1))
        V.adam_updater(m, v, weight=w, weight_decay=wd)
        assert len(ir.main_graph.tensors) == 5
        t = popxl.variable(np.float32(0))
        V.lamb_updater(m, v, w, t, wd, 0.9, 0.99)
        assert len(ir.main_graph.tensors) == 7  # the 6 of spec 1.2 plus the first output
    ir = popxl.Ir()
    with ir.main_graph:
        t, x = (popxl.variable(np.ones(3, np.float32)) for _ in range(2))
        r1, r2 = (popxl.variable(np.float32(1)) for _ in range(2))
        V.adam_var_update(t, x, r1, r2, 0.1, 1.0)
        assert len(ir.main_graph.tensors) == 5


def test_weight_is_connected_only_with_weight_decay():
    ir = popxl.Ir()
    with ir.main_graph:
        m, v, w = (popxl.variable(np.ones(3, np.float32), name=n) for n in "mvw")
        x = V.adam_updater(m, v, weight=w)  # no decay: w is not an input
        assert w not in x.producer.inputs and x.dtype == popxl.float32
        x = V.adam_updater(m, v, weight=w, weight_decay=0.0)
        assert w not in x.producer.inputs
        x = V.adam_updater(m, v, weight=w, weight_decay=0.5)
        assert w in x.producer.inputs


# ---- bad input ----
BAD = [
    ("decay without weight", ValueError, r"^Weight decay requires weight to not be None\.$",
     lambda p: V.adam_updater(p["m"], p["v"], weight_decay=0.1)),
    ("tensor decay without weight", ValueError, r"Weight decay requires weight",
     lambda p: V.lamb_updater(p["m"], p["v"], weight_decay=p["s"])),
    ("bias without beta2", ValueError,
     r"^Bias correction requires both beta1 and beta2 to not be None\.$",
     lambda p: V.adam_updater(p["m"], p["v"], time_step=p["s"], beta1=0.9)),
    ("lamb bias without betas", ValueError, r"Bias correction requires both beta1 and beta2",
     lambda p: V.lamb_updater(p["m"], p["v"], time_step=p["s"])),
    ("adamax without step", ValueError, r"^AdaMax requires time_step to not be None\.$",
     lambda p: V.adamax_updater(p["m"], p["v"])),
    ("moment not a tensor", TypeError, r"The input `acc_second_order` is not a Tensor",
     lambda p: V.adam_updater(p["m"], [1.0, 2.0])),
    ("shapes", ValueError, r"acc_second_order 'short' has shape \(2,\); it must have the "
     r"shape \(3,\)", lambda p: V.adam_updater(p["m"], p["short"])),
    ("beta elements", ValueError, r"beta1 'short' must have one element",
     lambda p: V.adam_updater(p["m"], p["v"], None, p["s"], None, p["short"], 0.9)),
    ("hyper type", TypeError, r"epsilon must be a popxl.Tensor, a number or None, got str",
     lambda p: V.adam_updater(p["m"], p["v"], epsilon="1e-7")),
    ("var update shapes", ValueError, r"x 'short' has shape \(2,\); it must have the shape",
     lambda p: V.adam_var_update(p["m"], p["short"], p["s"], p["s"], 0.1)),
    ("var update lr", TypeError, r"learning_rate must be a popxl.Tensor or a number, got None",
     lambda p: V.adam_var_update(p["m"], p["v"], p["s"], p["s"])),
    ("var update norms", ValueError, r"r1 'v' must have one element",
     lambda p: V.adam_var_update(p["m"], p["v"], p["v"], p["s"], 0.1)),
]  # fmt: skip


@pytest.mark.parametrize("case, error, match, action", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_and_the_ir_unchanged(case, error, match, action):
    ir = popxl.Ir()
    with ir.main_graph:
        p = {
            "m": popxl.variable(np.ones(3, np.float32), name="m"),
            "v": popxl.variable(np.ones(3, np.float32), name="v"),
            "short": popxl.variable(np.ones(2, np.float32), name="short"),
            "s": popxl.variable(np.float32(1), name="s"),
        }
        before = (len(ir.main_graph.tensors), len(ir.main_graph.ops))
        with pytest.raises(error, match=match):
            action(p)
        assert (len(ir.main_graph.tensors), len(ir.main_graph.ops)) == before
