"""Small PopXL programs written as PopXL's own docs and tests write them (import paths,
helper modules, dtype lists, torch host data, custom-op style helpers), each run on the
IPU Model and checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl.testing
from popxl.ops.call import CallSiteInfo
from popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set
from popxl.utils import to_numpy


def _run(ir: popxl.Ir, feeds: dict | None = None) -> dict:
    with popxl.Session(ir, "ipu_model") as session:
        return session.run(feeds or {})


def test_host_data_through_to_numpy_and_streams() -> None:
    x = np.arange(6, dtype=np.float64).reshape(2, 3)  # float64: downcast as PopXL does
    ir = popxl.Ir()
    with ir.main_graph:
        x_h2d = popxl.h2d_stream((2, 3), popxl.float32, name="x")
        w = popxl.variable(to_numpy(x), name="w")
        y = ops.host_load(x_h2d) * w + 1.0
        y_d2h = popxl.d2h_stream(y.shape, y.dtype, name="y")
        ops.host_store(y_d2h, y)
    out = _run(ir, {x_h2d: to_numpy(x)})
    np.testing.assert_allclose(out[y_d2h], x * x + 1)


def test_mnist_style_call_with_info_imports_call_site_info_from_the_module() -> None:
    class Linear(popxl.Module):
        def build(self, x: popxl.Tensor) -> popxl.Tensor:
            self.W = popxl.graph_input((3, 2), popxl.float32, "W")
            return x @ self.W

    rng = np.random.default_rng(1)
    x_np, w_np = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_np, popxl.float32)
        w = popxl.variable(w_np, popxl.float32)
        lin = Linear()
        g = ir.create_graph(lin, x)
        info = ops.call_with_info(g, x, inputs_dict={lin.W: w})
        assert isinstance(info, CallSiteInfo) and callable(ops.call)
        d2h = popxl.d2h_stream((4, 2), popxl.float32)
        ops.host_store(d2h, info.outputs[0])
    np.testing.assert_allclose(_run(ir)[d2h], x_np @ w_np, rtol=1e-5)


@pytest.mark.parametrize(
    "dtype", [d for d in popxl.testing.get_all_int_dtypes() if d.as_numpy().itemsize <= 4]
)
def test_integer_add_over_popxl_testing_dtypes(dtype) -> None:
    a = np.array([1, 2, 3]).astype(dtype.as_numpy())
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(a, dtype)
        y = ops.add(t, t)
        assert y.dtype is dtype
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    np.testing.assert_array_equal(_run(ir)[d2h], a + a)


def test_a_custom_op_helper_written_against_popxls_internals() -> None:
    """The shape of a popxl-addons op function: check inputs, read the context, build."""

    def scaled_residual(x: popxl.Tensor, r: popxl.Tensor, scale: float) -> popxl.Tensor:
        ctx = popxl.context.get_current_context()
        g = ctx.graph
        check_in_graph(g, x=x, r=r)
        check_tensor_ipu_and_tile_set(x=x, r=r)
        settings = ctx._get_op_settings("scaled_residual")
        assert settings.ipu == ctx.ipu_id == 0 and not ctx.io_tile_set
        return ops.scaled_add(x, r, scale, 1.0)

    x_np, r_np = np.ones(4, np.float32), np.arange(4, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        y = scaled_residual(popxl.variable(x_np), popxl.variable(r_np), 0.5)
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    np.testing.assert_allclose(_run(ir)[d2h], 0.5 * x_np + r_np)


def test_dtypes_from_numpy_arrays_and_python_types_build_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.constant([1, 2], popxl.dtype.as_dtype(np.zeros(1, np.int16)))
        b = popxl.constant(2.5, popxl.dtype.as_dtype(float))
        c = ops.cast(a, b.dtype) * b
        d2h = popxl.d2h_stream(c.shape, c.dtype)
        ops.host_store(d2h, c)
    assert a.dtype is popxl.int16 and b.dtype is popxl.float32
    np.testing.assert_array_equal(_run(ir)[d2h], [2.5, 5.0])


def test_torch_host_data() -> None:
    torch = pytest.importorskip("torch")
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(torch.tensor([[1.0, 2.0]], dtype=torch.float64), name="w")
        y = w * popxl.constant(torch.tensor(3, dtype=torch.int32), popxl.float32)
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    assert w.dtype is popxl.float32  # float64 downcast, as PopXL does
    np.testing.assert_array_equal(_run(ir)[d2h], [[3.0, 6.0]])


def test_random_seed_module_feeds_a_dropout() -> None:
    from popxl.random_seed import create_seeds, two_uint32_to_uint64

    seed = create_seeds(42)
    assert seed.shape == (2,) and two_uint32_to_uint64(*seed) >= 0
    x = np.ones((64,), np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2,), popxl.uint32, "seed")
        y = ops.dropout(popxl.variable(x), ops.host_load(s), 0.5)
        d2h = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(d2h, y)
    got = _run(ir, {s: seed})[d2h]
    assert set(np.unique(got)) <= {0.0, 2.0} and 0 < np.count_nonzero(got) < 64
    np.testing.assert_array_equal(_run(ir, {s: seed})[d2h], got)  # same seed, same mask


def test_tensor_counts_that_programs_assert() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(3, np.float32), name="a")
        b = popxl.variable(np.ones(3, np.float32), name="b")
        _ = a + b
        assert len(ir.main_graph.tensors) == 3 and len(ir.main_graph.variables) == 2
        c = a + 1
        assert len(ir.main_graph.tensors) == 5 and len(ir.main_graph.constants) == 1
        assert ir.main_graph.get_tensor(c.id) is c


@pytest.mark.parametrize("view_first", [False, True])
def test_a_write_through_a_view_of_a_copy_leaves_the_copied_tensor_alone(view_first: bool) -> None:
    """``reshape`` is a copy: ``concat_`` of it (a view, ``OpDefinition.view``), written in place,
    changes the copy, not ``x``, even where the lowering leaves the copy out because no one
    can tell (it follows views of views through every view op and every input)."""
    x_np = np.arange(6, dtype=np.float32)
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        x = popxl.variable(x_np, name="x")
        z = popxl.variable(np.zeros(6, np.float32), name="z")
        y = ops.reshape(x, (6,))
        c = ops.concat_([z, y] if view_first else [y, z], 0)
        ops.add_(c, popxl.constant(np.ones(12, np.float32)))
        streams = [popxl.d2h_stream((6,), popxl.float32) for _ in range(2)]
        for s, t in zip(streams, (x, y)):
            ops.host_store(s, t + 0.0)
    out = _run(ir)
    np.testing.assert_array_equal(out[streams[0]], x_np)
    np.testing.assert_array_equal(out[streams[1]], x_np + 1)
