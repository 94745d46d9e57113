"""``ops.collectives.all_reduce`` and its ``_identical_inputs`` / ``_identical_grad_inputs``
variants (spec popxl-fidelity 5): tensors on the IPUs of a replica reduced against NumPy,
outputs placed on their IPUs, with replication; the autodiff rules (flags swapped in the
grad op, only "add"); PopXL's errors with the IR unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula.errors import PopartException

C = ops.collectives
RNG = np.random.default_rng(3)
NP = {
    "add": lambda s: s.sum(0),
    "mean": lambda s: s.mean(0),
    "mul": lambda s: s.mean(0),  # PopXL maps "mul" to Mean
    "max": lambda s: s.max(0),
    "min": lambda s: s.min(0),
    "square_add": lambda s: (s * s).sum(0),
}


def on_ipus(data: list[np.ndarray]) -> list[popxl.Tensor]:
    """One tensor per IPU (a variable plus 0, so an op places it there)."""
    out = []
    for k, d in enumerate(data):
        with popxl.ipu(k):
            out.append(popxl.variable(d, name=f"v{k}") + 0)
    return out


def fetch(ir: popxl.Ir, tensors: list[popxl.Tensor], replicas: int = 1) -> list[np.ndarray]:
    streams = []
    with ir.main_graph:
        for i, t in enumerate(tensors):
            try:
                ipu = t.ipu
            except ValueError:  # a call's output: no IPU of its own
                ipu = 0
            with popxl.ipu(ipu):
                s = popxl.d2h_stream(t.shape, t.dtype, name=f"out{i}")
                ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    return [out[s] for s in streams]


@pytest.mark.parametrize("op", list(NP))
@pytest.mark.parametrize("n", [2, 3])
def test_all_reduce_matches_numpy(n, op):
    data = [RNG.uniform(0.5, 2, (2, 5)).astype(np.float32) for _ in range(n)]
    ir = popxl.Ir()
    with ir.main_graph:
        outs = C.all_reduce(on_ipus(data), op=op)
        assert [o.ipu for o in outs] == list(range(n))
        assert all(o.shape == (2, 5) and o.dtype == popxl.float32 for o in outs)
    got = fetch(ir, outs)
    want = NP[op](np.stack(data).astype(np.float64))
    for g in got:
        np.testing.assert_allclose(g, want, rtol=1e-5)


def test_explicit_ipus_place_the_outputs():
    data = [np.arange(4, dtype=np.int32) * (k + 1) for k in range(2)]
    ir = popxl.Ir()
    with ir.main_graph:
        ts = on_ipus(data)
        outs = C.all_reduce_identical_grad_inputs(ts, ipus=[1, 0])
        assert [o.ipu for o in outs] == [1, 0]
    got = fetch(ir, outs)
    for g in got:
        np.testing.assert_array_equal(g, data[0] + data[1])


def test_identical_inputs_is_an_identity_forward():
    """PopART's AllReduceToIdentity pattern: the inputs are declared identical, so each
    output is its input, with no exchange (here they differ, which shows it)."""
    data = [np.full(3, k + 1, np.float32) for k in range(3)]
    ir = popxl.Ir()
    with ir.main_graph:
        outs = C.all_reduce_identical_inputs(on_ipus(data))
    for g, d in zip(fetch(ir, outs), data):
        np.testing.assert_array_equal(g, d)


def test_with_replication_each_replica_reduces_its_own():
    R = 2
    ir = popxl.Ir(replication=R)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=1)
        ts = []
        for k in range(2):
            with popxl.ipu(k):
                v = popxl.variable(np.arange(R * 3, dtype=np.float32).reshape(R, 3) * (k + 1),
                                   replica_grouping=rg)  # fmt: skip
                ts.append(v + 0)
        outs = C.all_reduce(ts, op="max")
    got = fetch(ir, outs, R)
    want = np.arange(R * 3, dtype=np.float32).reshape(R, 3) * 2
    for g in got:
        np.testing.assert_array_equal(g, want)


# ---- autodiff ----
GRADS = {  # variant -> gradient of input j from the outputs' gradients g
    "all_reduce": lambda g, j: sum(g),
    "all_reduce_identical_inputs": lambda g, j: sum(g),
    "all_reduce_identical_grad_inputs": lambda g, j: g[j],
}


@pytest.mark.parametrize("variant", list(GRADS))
def test_gradients_swap_the_flags(variant):
    fn = getattr(C, variant)
    ir = popxl.Ir()
    seeds = [RNG.uniform(-1, 1, 4).astype(np.float32) for _ in range(2)]
    with ir.main_graph:
        spec = popxl.TensorSpec((4,), popxl.float32)

        def fwd(a: popxl.Tensor, b: popxl.Tensor) -> Any:
            return tuple(fn([a, b], ipus=[0, 1]))

        graph = ir.create_graph(fwd, spec, spec)
        info = popxl.transforms.autodiff(graph)
        with popxl.ipu(0):
            x0 = popxl.variable(np.ones(4, np.float32))
        with popxl.ipu(1):
            x1 = popxl.variable(np.ones(4, np.float32))
        call = ops.call_with_info(graph, x0, x1)
        g = [popxl.constant(s) for s in seeds]
        grads = ops.call(info.graph, *g, inputs_dict=info.inputs_dict(call))
        assert len(grads) == 2
        types = [op.type for op in info.graph.ops if op.type == "AllReduce"]
        assert types == ["AllReduce"]
        (grad_op,) = [op for op in info.graph.ops if op.type == "AllReduce"]
        fwd_op = next(op for op in graph.ops if op.type == "AllReduce")
        assert grad_op.attrs["identical_inputs"] == fwd_op.attrs["identical_grad_inputs"]
        assert grad_op.attrs["identical_grad_inputs"] == fwd_op.attrs["identical_inputs"]
    got = fetch(ir, list(grads))
    for j in range(2):
        np.testing.assert_allclose(got[j], GRADS[variant](seeds, j), rtol=1e-6)


def test_only_add_has_a_gradient():
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((4,), popxl.float32)
        graph = ir.create_graph(lambda a, b: tuple(C.all_reduce([a, b], [0, 1], "max")), spec, spec)
        with pytest.raises(PopartException, match="Cannot create grad op for AllReduceOp"):
            popxl.transforms.autodiff(graph)


# ---- bad input ----
def _p() -> tuple[popxl.Ir, dict]:
    ir = popxl.Ir()
    with ir.main_graph:
        p = {
            "a": popxl.variable(np.ones(3, np.float32), name="a"),
            "b": popxl.variable(np.ones(3, np.float32), name="b"),
            "c": popxl.variable(np.ones(2, np.float32), name="c"),
            "i": popxl.variable(np.ones(3, np.int32), name="i"),
        }
    return ir, p


BAD = [
    ("no ipus", ValueError, r"Could not automatically infer the IPU of all input Tensors",
     lambda p: C.all_reduce([p["a"], p["b"]])),
    ("count", ValueError, r"Number of specified tensor does not equal number of specified "
     r"IPUs. 2 != 3", lambda p: C.all_reduce([p["a"], p["b"]], [0, 1, 2])),
    ("op", ValueError, r"Not a valid op: sub. Must choose from: add, mean, mul",
     lambda p: C.all_reduce([p["a"], p["b"]], [0, 1], "sub")),
    ("op dtype", TypeError, r"op 'and' does not apply to 'a' of dtype popxl.dtypes.float32",
     lambda p: C.all_reduce([p["a"], p["b"]], [0, 1], "and")),
    ("info", PopartException, r"input 1 \(popxl.dtypes.float32 \(2,\)\) does not have the "
     r"TensorInfo of input 0", lambda p: C.all_reduce([p["a"], p["c"]], [0, 1])),
    ("dtype", PopartException, r"TensorInfo",
     lambda p: C.all_reduce_identical_inputs([p["a"], p["i"]], [0, 1])),
    ("empty", PopartException, r"needs at least one input", lambda p: C.all_reduce([], [])),
    ("not a tensor", TypeError, r"The input `ts_1` is not a Tensor",
     lambda p: C.all_reduce([p["a"], 3.0], [0, 1])),
    ("not a list", TypeError, r"ts must be a list of Tensors, got Variable",
     lambda p: C.all_reduce(p["a"], [0])),
]  # fmt: skip


@pytest.mark.parametrize("case, error, match, action", BAD, ids=[b[0] for b in BAD])
def test_bad_input(case, error, match, action):
    ir, p = _p()
    with ir.main_graph:
        before = (len(ir.main_graph.tensors), len(ir.main_graph.ops))
        with pytest.raises(error, match=match):
            action(p)
        assert (len(ir.main_graph.tensors), len(ir.main_graph.ops)) == before


def test_public_names():
    for name in ("all_reduce", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs"):
        assert name in C.__all__ and callable(getattr(C, name))
