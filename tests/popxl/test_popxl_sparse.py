"""``popxl.ops.sparse.fully_connected``: PopSparse's dynamic sparse layer in PopXL.

Forward, GradA and GradW run through a Session ("cpu" and "ipu_model", element-wise and 4x4
blocks) against dense NumPy; autodiff against finite differences of the op references; a new
pattern written to the same Session runs without recompiling; bad input is refused with
errors that name it and leave the graph as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import tremula_tests_evaluator as evaluator

import popxl
import popxl.ops as ops
from tremula.errors import GraphError
from tremula.libs.popsparse import COOMatrix, PopsparseError, dynamic
from tremula.lowering import LOWERING_RULES
from tremula.popxl.ops import sparse
from tremula.popxl.ops.base import OPS, create_op

F32 = np.float32
OUT, IN, BATCH = 16, 24, 8
BOTH = {"doGradAPass": True, "doGradWPass": True}
TYPES = ("SparseFullyConnected", "SparseFullyConnectedGradA", "SparseFullyConnectedGradW")


# ---- a layer ----


def fc_params(block: int = 1, density: float = 0.25, batch: int = BATCH) -> Any:
    sp = dynamic.SparsityParams(block_dimensions=(block, block))
    return dynamic.FullyConnectedParams.create_with_nz_ratio(sp, density, batch, 1, IN, OUT)


def pattern(params: Any, seed: int) -> COOMatrix:
    """A random pattern with the layer's number of non-zero blocks, values in [-1, 1]."""
    rng = np.random.default_rng(seed)
    b = params.sparsity_params.block_dimensions[0]
    grid = (OUT // b, IN // b)
    k = params.get_num_non_zero_values() // (b * b)
    rows, cols = np.divmod(rng.choice(grid[0] * grid[1], k, replace=False), grid[1])
    values = rng.uniform(-1, 1, k * b * b).astype(F32)
    return COOMatrix(values, rows * b, cols * b, (b, b), OUT, IN)


class Layer:
    """Host data of one pattern of a layer partitioned for ``device``."""

    def __init__(
        self,
        block: int,
        device: str,
        seed: int = 0,
        options: Any = BOTH,
        dtype: popxl.dtype = popxl.float32,
    ) -> None:
        self.params = fc_params(block)
        self.options, self.device, self.dtype = options, device, dtype
        self.part = sparse.partitioner(self.params, options, device, dtype)
        self.coo = pattern(self.params, seed)
        self.impl = self.part.create_sparsity_data_impl(self.coo)
        self.dense = self.coo.to_dense().astype(np.float64)
        self.mask = np.zeros((OUT, IN), bool)
        rows, cols = sparse.slots(self.part.plan, self.impl.meta_info)
        self.mask[rows[rows >= 0], cols[rows >= 0]] = True

    def variables(self) -> tuple[popxl.Variable, popxl.Variable]:
        meta = popxl.variable(self.impl.meta_info, popxl.uint16, name="meta_info")
        nz = popxl.variable(self.impl.nz_values, self.dtype, name="nz_values")
        return meta, nz

    def fc(self, x: popxl.Tensor, meta: popxl.Tensor, nz: popxl.Tensor) -> popxl.Tensor:
        return ops.sparse.fully_connected(x, meta, nz, self.params, self.options, self.device)

    def attrs(self) -> dict[str, Any]:
        """The attributes of the layer's ops (what ``fully_connected`` records)."""
        plan = self.part.plan
        return {"params": self.params, "options": plan.options, "plan": plan}

    def grad_w(self, flat: np.ndarray) -> np.ndarray:
        """A GradW result (nz layout) as a dense ``[out][in]`` matrix."""
        return self.part.grad_w_to_coo_matrix(self.impl.meta_info, flat).to_dense()


def _run(ir: popxl.Ir, feeds: dict, outs: Sequence, device: str) -> list[np.ndarray]:
    with popxl.Session(ir, device) as session:
        got = session.run(feeds)
    return [got[s] for s in outs]


def _stream_in(a: np.ndarray, name: str) -> tuple[Any, popxl.Tensor]:
    s = popxl.h2d_stream(a.shape, popxl.dtype.as_dtype(a.dtype), name=name)
    return s, ops.host_load(s, name)


def _stream_out(t: popxl.Tensor) -> Any:
    s = popxl.d2h_stream(t.shape, t.dtype, name=f"out_{t.name}")
    ops.host_store(s, t)
    return s


DEVICES = ["cpu", "ipu_model"]
CASES = [(d, b, popxl.float32) for d in DEVICES for b in (1, 4)]
CASES += [(d, 1, popxl.float16) for d in DEVICES]


@pytest.mark.parametrize(("device", "block", "dtype"), CASES)
def test_forward_grad_a_grad_w_match_dense_numpy(device: str, block: int, dtype: Any) -> None:
    layer = Layer(block, device, dtype=dtype)
    rng = np.random.default_rng(1)
    host = dtype.as_numpy()
    x = rng.uniform(-1, 1, (BATCH, IN)).astype(host)
    dy = rng.uniform(-1, 1, (BATCH, OUT)).astype(host)
    ir = popxl.Ir()
    with ir.main_graph:
        meta, nz = layer.variables()
        xs, xt = _stream_in(x, "x")
        gs, gt = _stream_in(dy, "dy")
        y = layer.fc(xt, meta, nz)
        (dx,) = create_op("SparseFullyConnectedGradA", [gt, meta, nz], layer.attrs())
        (dw,) = create_op("SparseFullyConnectedGradW", [meta, gt, xt], layer.attrs())
        outs = [_stream_out(t) for t in (y, dx, dw)]
    got_y, got_dx, got_dw = _run(ir, {xs: x, gs: dy}, outs, device)
    w = layer.dense
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == popxl.float32 else {"rtol": 1e-2, "atol": 1e-2}
    assert got_y.dtype == got_dx.dtype == got_dw.dtype == host
    np.testing.assert_allclose(got_y, x64 @ w.T, **tol)
    np.testing.assert_allclose(got_dx, dy64 @ w, **tol)
    assert got_dw.shape == layer.impl.nz_values.shape
    np.testing.assert_allclose(layer.grad_w(got_dw), (dy64.T @ x64) * layer.mask, **tol)
    padding = sparse.slots(layer.part.plan, layer.impl.meta_info)[0] < 0
    np.testing.assert_array_equal(got_dw[padding], 0.0)


def test_the_variables_are_mapped_as_the_library_maps_its_weights() -> None:
    """Each bucket on its PN's tile, as ``create_fully_connected_weights`` maps them."""
    from tremula import poplar

    layer = Layer(1, "ipu_model")
    ir = popxl.Ir()
    with ir.main_graph:
        meta, nz = layer.variables()
        _, xt = _stream_in(np.zeros((BATCH, IN), F32), "x")
        _stream_out(layer.fc(xt, meta, nz))
    session = popxl.Session(ir, "ipu_model")
    graph = session.engine.graph
    scratch = poplar.Graph(graph.target)
    want = dynamic.create_fully_connected_weights(
        scratch, poplar.FLOAT, layer.params, layer.options
    )
    assert layer.part.plan.num_buckets > 1
    for var, made in ((meta, want.meta_info), (nz, want.nz_values)):
        tensor = session._lowerer.variables[var].tensor
        assert graph.get_tile_mapping(tensor) == scratch.get_tile_mapping(made)


# ---- autodiff against finite differences ----


def _autodiff_case(
    layer: Layer, specs: Sequence[tuple[tuple[int, ...], Any]], body: Callable[..., popxl.Tensor]
) -> None:
    """``body(*inputs)`` over graph inputs of ``specs``: autodiff's gradient of
    ``sum(seed * output)`` against central differences of the references, for each float
    input."""
    rng = np.random.default_rng(7)
    data = [
        layer.impl.meta_info if dt == popxl.uint16 else rng.uniform(-1, 1, shape).astype(F32)
        for shape, dt in specs
    ]
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(body, *(popxl.TensorSpec(s, dt) for s, dt in specs))
        floats = [t for t in graph.inputs if t.dtype == popxl.float32]
        info = popxl.transforms.autodiff(graph, grads_required=floats)
        ins, feeds = [], {}
        for i, (a, (s, dt)) in enumerate(zip(data, specs)):
            stream = popxl.h2d_stream(s, dt, name=f"in{i}")
            feeds[stream] = a
            ins.append(ops.host_load(stream, f"in{i}"))
        call = ops.call_with_info(graph, *ins)
        seed_shape = graph.outputs[0].shape
        seed = rng.uniform(-1, 1, seed_shape).astype(F32)
        seed_stream = popxl.h2d_stream(seed_shape, popxl.float32, name="seed")
        feeds[seed_stream] = seed
        grads = ops.call(info.graph, ops.host_load(seed_stream), inputs_dict=info.inputs_dict(call))
        outs = [_stream_out(g) for g in grads]
    got = _run(ir, feeds, outs, layer.device)

    def forward(values: list[np.ndarray]) -> list[np.ndarray]:
        return evaluator.outputs(graph, values, wide=False)[:1]  # autodiff may add outputs

    fds = evaluator.seeded_finite_differences(forward, data, [seed], eps=1e-3)
    float_idx = [i for i, (_, dt) in enumerate(specs) if dt == popxl.float32]
    for k, i in enumerate(float_idx):
        fd = fds[i]
        assert fd is not None
        g = got[k]
        if specs[i][0] == layer.impl.nz_values.shape:  # padding slots: meaningless
            used = sparse.slots(layer.part.plan, layer.impl.meta_info)[0] >= 0
            g, fd = g[used], fd[used]
        np.testing.assert_allclose(g, fd, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize(("device", "block"), [("cpu", 1), ("cpu", 4), ("ipu_model", 1)])
def test_autodiff_of_the_layer_matches_finite_differences(device: str, block: int) -> None:
    layer = Layer(block, device)
    n_meta, n_nz = layer.impl.meta_info.size, layer.impl.nz_values.size
    specs = [((BATCH, IN), popxl.float32), ((n_meta,), popxl.uint16), ((n_nz,), popxl.float32)]

    def body(x: popxl.Tensor, m: popxl.Tensor, nz: popxl.Tensor) -> popxl.Tensor:
        y = layer.fc(x, m, nz)
        return y * y  # smooth (central differences of a square are exact)

    _autodiff_case(layer, specs, body)


@pytest.mark.parametrize("op_type", TYPES[1:])
def test_autodiff_of_grad_a_and_grad_w_matches_finite_differences(op_type: str) -> None:
    """Second order: GradA's gradients are the forward pass and GradW, GradW's the forward
    pass and GradA."""
    layer = Layer(1, "cpu")
    meta = ((layer.impl.meta_info.size,), popxl.uint16)
    dy = ((BATCH, OUT), popxl.float32)
    if op_type == "SparseFullyConnectedGradA":
        specs = [dy, meta, ((layer.impl.nz_values.size,), popxl.float32)]
    else:
        specs = [meta, dy, ((BATCH, IN), popxl.float32)]
    _autodiff_case(layer, specs, lambda *ts: create_op(op_type, list(ts), layer.attrs())[0])


# ---- a new pattern, same Session ----


@pytest.mark.parametrize("device", DEVICES)
def test_a_new_pattern_runs_in_the_same_session_without_recompiling(
    device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = Layer(1, device, seed=0), Layer(1, device, seed=1)
    assert not np.array_equal(first.mask, second.mask)
    x = np.random.default_rng(2).uniform(-1, 1, (BATCH, IN)).astype(F32)
    ir = popxl.Ir()
    with ir.main_graph:
        meta, nz = first.variables()
        xs, xt = _stream_in(x, "x")
        out = _stream_out(first.fc(xt, meta, nz))
    session = popxl.Session(ir, device)
    engine = session.engine
    built: list[str] = []
    from tremula.engine.engine import Engine
    from tremula.lowering import Lowerer

    for cls, name in ((Engine, "__init__"), (Lowerer, "lower_main")):
        original = getattr(cls, name)

        def spy(*args: Any, _f: Any = original, _n: str = name, **kwargs: Any) -> Any:
            built.append(_n)
            return _f(*args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    with session:
        y0 = session.run({xs: x})[out]
        session.write_variables_data({meta: second.impl.meta_info, nz: second.impl.nz_values})
        y1 = session.run({xs: x})[out]
    assert session.engine is engine and not built
    np.testing.assert_allclose(y0, x @ first.dense.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y1, x @ second.dense.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(session.get_tensor_data(meta), second.impl.meta_info)


# ---- bad input ----


def _bad_args(layer: Layer) -> dict[str, tuple[type[Exception], str, Callable[..., Any]]]:
    """name -> (exception, text of the message, ``make(x, meta, nz)`` giving the arguments of
    a ``fully_connected`` call that must be refused)."""
    p, o, d = layer.params, layer.options, layer.device
    n_meta, n_nz = layer.impl.meta_info.size, layer.impl.nz_values.size

    def var(shape: Any, dtype: Any, name: str) -> popxl.Variable:
        return popxl.variable(np.zeros(shape, dtype), name=name)

    return {
        "meta int32": (
            TypeError, "meta_info 'meta32' must be uint16",
            lambda x, m, nz: (x, var(n_meta, np.int32, "meta32"), nz, p, o, d),
        ),
        "meta length": (
            ValueError, f"meta_info 'meta_short' must have shape ({n_meta},)",
            lambda x, m, nz: (x, var(n_meta - 1, np.uint16, "meta_short"), nz, p, o, d),
        ),
        "meta 2-D": (
            ValueError, "meta_info 'meta2d' must have shape",
            lambda x, m, nz: (x, var((1, n_meta), np.uint16, "meta2d"), nz, p, o, d),
        ),
        "nz float16": (
            TypeError, "nz_values 'nz16' must have the dtype of x",
            lambda x, m, nz: (x, m, var(n_nz, np.float16, "nz16"), p, o, d),
        ),
        "nz length": (
            ValueError, f"nz_values 'nz_long' must have shape ({n_nz},)",
            lambda x, m, nz: (x, m, var(n_nz + 2, F32, "nz_long"), p, o, d),
        ),
        "host array": (
            TypeError, "meta_info must be a popxl.Tensor",
            lambda x, m, nz: (x, layer.impl.meta_info, nz, p, o, d),
        ),
        "x int32": (
            TypeError, "must be float32 or float16",
            lambda x, m, nz: (ops.cast(x, popxl.int32), m, nz, p, o, d),
        ),
        "batch mismatch": (
            ValueError, f"must be [batch, input channels] = [{BATCH}, {IN}]",
            lambda x, m, nz: (x[: BATCH // 2], m, nz, p, o, d),
        ),
        "params of another layer": (
            ValueError, "must have shape",
            lambda x, m, nz: (x, m, nz, fc_params(1, density=0.5), o, d),
        ),
        "params not FC": (
            TypeError, "params must be popsparse dynamic.FullyConnectedParams",
            lambda x, m, nz: (x, m, nz, {"batch": BATCH}, o, d),
        ),
        "unknown option": (
            PopsparseError, "unknown option(s) ['doGradXPass']",
            lambda x, m, nz: (x, m, nz, p, {"doGradXPass": True}, d),
        ),
        "options of another plan": (
            ValueError, "must have shape",
            lambda x, m, nz: (x, m, nz, p, {"doGradWPass": False}, d),
        ),
        "device": (
            ValueError, "device must be 'ipu_model', 'ipu_hw', 'cpu'",
            lambda x, m, nz: (x, m, nz, p, o, "gpu"),
        ),
    }  # fmt: skip


BAD = list(_bad_args(Layer(1, "cpu")))


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_by_name_and_leaves_the_graph_unchanged(case: str) -> None:
    layer = Layer(1, "cpu")
    error, text, make = _bad_args(layer)[case]
    ir = popxl.Ir()
    with ir.main_graph:
        meta, nz = layer.variables()
        _, xt = _stream_in(np.zeros((BATCH, IN), F32), "x")
        args = make(xt, meta, nz)
        graph = ir.main_graph
        before = (list(graph.ops), list(graph.tensors))
        with pytest.raises(error) as info:
            ops.sparse.fully_connected(*args)
        assert (list(graph.ops), list(graph.tensors)) == before
        assert text in str(info.value)
        layer.fc(xt, meta, nz)  # the graph is still usable


def test_a_layer_partitioned_for_another_device_is_refused_by_the_session() -> None:
    layer = Layer(1, "ipu_model")
    ir = popxl.Ir()
    with ir.main_graph:
        meta, nz = layer.variables()
        _, xt = _stream_in(np.zeros((BATCH, IN), F32), "x")
        _stream_out(layer.fc(xt, meta, nz))
    with pytest.raises(GraphError, match=r"partitioned for 1472 tiles per IPU .* compiles for 1 "):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize(("options", "wrt"), [({"doGradAPass": True}, 2), ({}, 0)])
def test_autodiff_needs_the_passes_planned_and_leaves_the_ir_unchanged(
    options: dict, wrt: int
) -> None:
    layer = Layer(1, "cpu", options=options)
    n_meta, n_nz = layer.impl.meta_info.size, layer.impl.nz_values.size
    ir = popxl.Ir()
    with ir.main_graph:
        graph = ir.create_graph(
            layer.fc,
            popxl.TensorSpec((BATCH, IN), popxl.float32),
            popxl.TensorSpec((n_meta,), popxl.uint16),
            popxl.TensorSpec((n_nz,), popxl.float32),
        )
        graphs, outputs = list(ir.graphs), list(graph.outputs)
        flag = "doGradWPass" if wrt == 2 else "doGradAPass"
        with pytest.raises(ValueError, match=f"needs the sparse layer planned with option {flag}"):
            popxl.transforms.autodiff(graph, grads_required=[graph.inputs[wrt]])
        assert list(ir.graphs) == graphs and list(graph.outputs) == outputs


def test_every_sparse_op_type_has_a_reference_a_lowering_and_a_gradient_rule() -> None:
    types = [t for t, d in OPS.items() if d.infer.__module__ == sparse.__name__]
    assert sorted(types) == sorted(TYPES)
    for t in types:
        assert t in LOWERING_RULES and OPS[t].reference is not None and OPS[t].grad is not None
