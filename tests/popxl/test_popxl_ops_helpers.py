"""Helpers shared by the ``test_popxl_ops_*`` files (loaded by path: the tests run with
``--import-mode=importlib``): build a graph over h2d-fed inputs, run it through a Session,
and evaluate the same graph with the op records' NumPy references (that every op type has a
reference, a lowering and a gradient rule is checked by ``test_popxl_op_registry.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from tremula.popxl.ops.base import OPS


def run(
    build: Callable[..., Any], *arrays: np.ndarray, device: str = "cpu"
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Feed ``arrays`` through h2d streams, build the graph, run it; returns the outputs of
    the Session and of the op records' NumPy references (ops evaluated in order)."""
    ir = popxl.Ir()
    feeds, outs = {}, []
    with ir.main_graph:
        ins = []
        for i, a in enumerate(arrays):
            s = popxl.h2d_stream(a.shape, popxl.dtype.as_dtype(a.dtype), name=f"in{i}")
            ins.append(ops.host_load(s, f"x{i}"))
            feeds[s] = a
        res = build(*ins)
        res = [res] if isinstance(res, popxl.Tensor) else list(res)
        for o in res:
            s = popxl.d2h_stream(o.shape, o.dtype)
            ops.host_store(s, o)
            outs.append(s)
    with popxl.Session(ir, device) as session:
        got = session.run(feeds)
    return [got[s] for s in outs], reference_run(ir, feeds, outs)


def reference_run(ir: popxl.Ir, feeds: dict, outs: Sequence) -> list[np.ndarray]:
    env: dict[Any, np.ndarray] = {}
    stored = {}
    for t in ir.main_graph.tensors:
        if isinstance(t, popxl.Constant):
            env[t] = t._data
    for op in ir.main_graph.ops:
        if op.type == "HostLoad":
            env[op.outputs[0]] = feeds[op.attrs["stream"]]
        elif op.type == "HostStore":
            stored[op.attrs["stream"]] = env[op.inputs[0]]
        else:
            ref = OPS[op.type].reference
            assert ref is not None, f"op {op.type} has no NumPy reference"
            values = ref([env[i] for i in op.inputs], op.attrs)
            for t, v in zip(op.outputs, values):
                assert v.shape == t.shape, (op.type, v.shape, t.shape)
                env[t] = v
            for i in OPS[op.type].modifies:  # in place: the input holds the result
                env[op.inputs[i]] = values[0]
    return [stored[s] for s in outs]


def check(build, expected, *arrays, rtol=1e-5, atol=1e-6, device="cpu"):
    got, ref = run(build, *arrays, device=device)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    for g, r, e in zip(got, ref, expected):
        e = np.asarray(e)
        assert g.shape == e.shape and r.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e, rtol=rtol, atol=atol)
        np.testing.assert_allclose(r.astype(np.float64), e, rtol=rtol, atol=atol)
    return got
