"""The one test evaluator: run a PopXL graph through a Session and on the host with the op
records' NumPy references (``OpDefinition.reference``, whose numeric rules are
``tremula.numerics``'), and central finite differences for gradient checks.

Every op test uses it (``tests/conftest.py`` loads it once as ``tremula_tests_evaluator``;
the suite runs with ``--import-mode=importlib``, so test files import it by that name):

* :func:`evaluate`: a graph on the host, op by op in creation order;
* :func:`run` / :func:`check`: a graph built over h2d-fed inputs, run by a Session and by
  :func:`evaluate`, compared with an expected NumPy value;
* :func:`fetch`: the values of tensors of an Ir's main graph, stored and run by a Session;
* :func:`finite_differences`, :func:`seeded_finite_differences`: central differences of a
  scalar function of several arrays, or of ``sum(seed * f(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import popxl
import popxl.ops as ops
from tremula.popxl.ops.base import OPS


def evaluate(
    graph: popxl.Graph,
    inputs: Sequence[np.ndarray] = (),
    feeds: Mapping[Any, np.ndarray] | None = None,
    wide: bool = False,
) -> dict[Any, np.ndarray]:
    """The values of ``graph``'s tensors on the host: graph inputs from ``inputs``,
    constants from their data, ``HostLoad`` from ``feeds`` (by stream), every other op from
    its NumPy reference, in creation order. An in-place op's modified input takes the
    result. ``wide``: float constants in float64 (for finite differences).

    Returns:
        tensor -> array, and for each ``HostStore`` its stream -> the stored array.

    Raises:
        AssertionError: an op without a reference, or a reference giving another shape.
    """
    env: dict[Any, np.ndarray] = dict(zip(graph.inputs, inputs))
    for t in graph.tensors:
        if isinstance(t, popxl.Constant):
            data = t._data
            env[t] = data.astype(np.float64) if wide and t.dtype.is_floating_point else data
    for op in graph.ops:
        if op.type == "HostLoad":
            assert feeds is not None, "a HostLoad needs feeds"
            env[op.outputs[0]] = feeds[op.attrs["stream"]]
            continue
        if op.type == "HostStore":
            env[op.attrs["stream"]] = env[op.inputs[0]]
            continue
        ref = OPS[op.type].reference
        assert ref is not None, f"op {op.type} has no NumPy reference"
        values = ref([env[i] for i in op.inputs], op.attrs)
        for t, v in zip(op.outputs, values):
            assert v.shape == t.shape, (op.type, v.shape, t.shape)
            env[t] = v
        for i in OPS[op.type].modifies:  # in place: the input holds the result
            env[op.inputs[i]] = values[0]
    return env


def outputs(graph: popxl.Graph, inputs: Sequence[np.ndarray], wide: bool = True) -> list:
    """The values of ``graph``'s outputs on ``inputs`` (float constants in float64)."""
    env = evaluate(graph, inputs, wide=wide)
    return [env[t] for t in graph.outputs]


def graph(
    build: Callable[..., Any], *arrays: np.ndarray
) -> tuple[popxl.Ir, dict[Any, np.ndarray], list[Any]]:
    """An Ir that feeds ``arrays`` through h2d streams into ``build`` and stores its
    results through d2h streams: ``(ir, feeds, output streams)``. The ops run in creation
    order (``in_sequence``): a build that writes a tensor in place and reads it elsewhere
    means that order, as PopXL programs must say (PopART refuses the ambiguity)."""
    ir = popxl.Ir()
    feeds, outs = {}, []
    with ir.main_graph, popxl.in_sequence():
        ins = []
        for i, a in enumerate(arrays):
            s = popxl.h2d_stream(a.shape, popxl.dtype.as_dtype(a.dtype), name=f"in{i}")
            ins.append(ops.host_load(s, f"x{i}"))
            feeds[s] = a
        res = build(*ins)
        for o in [res] if isinstance(res, popxl.Tensor) else list(res):
            s = popxl.d2h_stream(o.shape, o.dtype)
            ops.host_store(s, o)
            outs.append(s)
    return ir, feeds, outs


def run(
    build: Callable[..., Any], *arrays: np.ndarray, device: str = "cpu"
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Feed ``arrays`` through h2d streams, build the graph, run it; returns the outputs of
    the Session and of :func:`evaluate`."""
    ir, feeds, outs = graph(build, *arrays)
    with popxl.Session(ir, device) as session:
        got = session.run(feeds)
    env = evaluate(ir.main_graph, feeds=feeds)
    return [got[s] for s in outs], [env[s] for s in outs]


def fetch(
    ir: popxl.Ir, *ts: popxl.Tensor, device: str = "ipu_model", variables: Sequence = ()
) -> list[np.ndarray]:
    """The values of the main-graph tensors ``ts`` after one run of ``ir``, then those of
    ``variables`` after it: each of ``ts`` is stored through a d2h stream, after whatever
    the graph wrote (``in_sequence``, chained to the test's own), and the Session runs
    without feeds."""
    streams = []
    with ir.main_graph, popxl.in_sequence():
        for t in ts:
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            streams.append(s)
    with popxl.Session(ir, device) as session:
        out = session.run()
        return [out[s] for s in streams] + [session.get_tensor_data(v) for v in variables]


def values(fn: Callable[..., Any], *arrays: np.ndarray) -> list[np.ndarray]:
    """The values of ``fn``'s tensors (one or a sequence) over variables of ``arrays``."""
    ir = popxl.Ir()
    with ir.main_graph:
        outs = fn(*(popxl.variable(a) for a in arrays))
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return fetch(ir, *outs)


def torch_grads(
    fn: Callable[..., Any], arrays: Sequence[np.ndarray], seed: np.ndarray
) -> list[np.ndarray]:
    """The gradients of ``sum(seed * fn(*arrays))`` by torch autograd, in float64 (the
    reference for :func:`gradients`; torch is imported here, so that the evaluator itself
    does not need it)."""
    import torch

    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    (fn(*ts) * torch.tensor(seed.astype(np.float64))).sum().backward()
    return [t.grad.numpy() for t in ts]


class Linear(popxl.Module):
    """The user guide's and tutorial 1's Linear (``examples/popxl/listing_9_6``): the
    weight and bias are graph inputs, bound at each call site."""

    def __init__(self) -> None:
        self.W: popxl.Tensor | None = None
        self.b: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor, out_features: int, bias: bool = True) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b
        return y


def gradients(
    fn: Callable[..., popxl.Tensor],
    arrays: Sequence[np.ndarray],
    seed: np.ndarray,
    wrt: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """The gradients of ``sum(seed * fn(*arrays))`` with respect to the inputs ``wrt`` (all
    by default): ``fn`` in a subgraph, ``autodiff``, the grad graph called with ``seed`` in
    an "ipu_model" session."""
    ir = popxl.Ir()
    with ir.main_graph:
        inputs = [popxl.variable(a) for a in arrays]
        graph = ir.create_graph(fn, *(t.spec for t in inputs))
        chosen = range(len(arrays)) if wrt is None else wrt
        required = [graph.inputs[i] for i in chosen]
        info = popxl.transforms.autodiff(graph, grads_required=required)
        site = ops.call_with_info(graph, *inputs)
        outs = ops.call(info.graph, popxl.constant(seed), inputs_dict=info.inputs_dict(site))
    return fetch(ir, *outs)


def check(
    build: Callable[..., Any],
    expected: Any,
    *arrays: np.ndarray,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    device: str = "cpu",
) -> list[np.ndarray]:
    """:func:`run`, then both the Session's and the references' outputs must equal
    ``expected`` (one array or a list) within ``rtol`` / ``atol``."""
    got, ref = run(build, *arrays, device=device)
    expected = expected if isinstance(expected, (list, tuple)) else [expected]
    for g, r, e in zip(got, ref, expected):
        e = np.asarray(e)
        assert g.shape == e.shape and r.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e, rtol=rtol, atol=atol)
        np.testing.assert_allclose(r.astype(np.float64), e, rtol=rtol, atol=atol)
    return got


def finite_differences(
    f: Callable[[list[np.ndarray]], float], arrays: Sequence[np.ndarray], eps: float = 1e-6
) -> list[np.ndarray | None]:
    """Central differences ``(f(x + eps) - f(x - eps)) / 2 eps`` of the scalar ``f`` with
    respect to each element of each float array (in float64); None for other arrays."""
    wide = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in arrays]
    grads: list[np.ndarray | None] = []
    for i, a in enumerate(wide):
        if np.asarray(a).dtype.kind != "f":
            grads.append(None)
            continue
        g = np.zeros_like(a)
        for k in np.ndindex(a.shape):
            vals = [w.copy() for w in wide]
            vals[i][k] = a[k] + eps
            up = f(vals)
            vals[i][k] = a[k] - eps
            g[k] = (up - f(vals)) / (2 * eps)
        grads.append(g)
    return grads


def finite_difference(
    f: Callable[[np.ndarray], float], x: np.ndarray, eps: float = 1e-6
) -> np.ndarray:
    """:func:`finite_differences` of a function of one array."""
    (g,) = finite_differences(lambda vals: f(vals[0]), [np.asarray(x, np.float64)], eps)
    assert g is not None
    return g


def seeded_finite_differences(
    forward: Callable[[list[np.ndarray]], Sequence[np.ndarray]],
    arrays: Sequence[np.ndarray],
    seeds: Sequence[np.ndarray],
    eps: float = 1e-3,
) -> list[np.ndarray | None]:
    """:func:`finite_differences` of ``sum_i sum(seeds[i] * forward(arrays)[i])``: what a
    backward pass seeded with ``seeds`` gives for each input."""

    def loss(values: list[np.ndarray]) -> float:
        outs = forward(values)
        return sum(float(np.sum(s.astype(np.float64) * np.asarray(o))) for s, o in zip(seeds, outs))

    return finite_differences(loss, arrays, eps)
