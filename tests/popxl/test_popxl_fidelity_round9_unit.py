"""Round-9 probe of PopXL's Python-layer unit tests (PopART repo
tests/unittests/python/popxl/: test_dtypes.py, test_context.py, test_graph.py,
test_tensor.py, test_utils.py): the private tables and fields of ``popxl.dtypes`` those tests
read, and the graph stack of ``popxl.context.Context``.

Confidence that PopXL behaves as pinned here: ``Context.pop_graph()`` taking no argument and
returning the graph (Graph.__exit__ calls it so) ~75 %; ``Context.name_scopes`` ~65 %;
``dtypes._STR_TO_POPXL`` and the dtype fields ``_np_type`` / ``_pt_type`` / ``_is_int`` ...
(set by PopXL's ``dtype._factory``) ~75 %; ``_PB_TO_POPXL`` ~60 %. The rest (to_numpy,
name scopes, tensor name/scope) agreed already and is pinned so it stays so.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import popxl
from popxl import dtypes
from popxl.context import get_current_context
from popxl.utils import to_numpy

_ALL = sorted({d for d in vars(dtypes).values() if isinstance(d, dtypes.dtype)}, key=str)


# ---- popxl.dtypes: the tables and fields PopXL's dtype factory fills in ----
@pytest.mark.parametrize("d", _ALL, ids=str)
def test_dtype_private_fields_agree_with_public_ones(d: dtypes.dtype) -> None:
    assert dtypes._STR_TO_POPXL[d.name] is d
    assert dtypes._PB_TO_POPXL[d._pb_dtype] is d
    assert d._np_type == d.as_numpy()
    assert (d._is_complex, d._is_int, d._is_floating_point, d._is_signed) == (
        d.is_complex,
        d.is_int,
        d.is_floating_point,
        d.is_signed,
    )
    if d._pt_type is None:
        with pytest.raises(TypeError):
            d.as_torch()
    else:
        assert d.as_torch() is getattr(torch, d._pt_type)


def test_dtype_private_fields_hand_checked() -> None:
    assert popxl.float16._np_type == np.dtype(np.float16)
    assert popxl.float16._pt_type == "float16"
    assert popxl.uint32._pt_type is None  # torch has no uint32 in PopXL's table
    assert popxl.uint8._is_int and not popxl.uint8._is_signed
    assert popxl.float8_152._is_floating_point and popxl.float8_152._is_signed
    assert "float" not in dtypes._STR_TO_POPXL  # aliases are not registered names
    import popart

    assert dtypes._PB_TO_POPXL[popart.DataType.DOUBLE] is popxl.float64


# ---- popxl.context: the graph stack ----
def test_pop_graph_without_argument_returns_the_innermost_graph() -> None:
    ir = popxl.Ir()
    ctx = get_current_context()
    depth = len(ctx.graphs)
    g = ir.create_empty_graph("g")
    ctx.push_graph(ir.main_graph)
    ctx.push_graph(g)
    assert ctx.graph is g
    assert ctx.pop_graph() is g
    assert ctx.graph is ir.main_graph
    assert ctx.pop_graph() is ir.main_graph
    assert len(ctx.graphs) == depth


def test_pop_graph_of_an_empty_stack_or_the_wrong_graph_is_refused_unchanged() -> None:
    ir = popxl.Ir()
    ctx = get_current_context()
    with pytest.raises(RuntimeError, match="no graph has been entered"):
        ctx.pop_graph()
    g = ir.create_empty_graph("g")
    with ir.main_graph:
        with pytest.raises(RuntimeError, match="out of order"):
            ctx.pop_graph(g)
        assert ctx.graph is ir.main_graph  # state unchanged


def test_name_scopes_lists_the_open_scopes_and_names_follow_them() -> None:
    ir = popxl.Ir()
    ctx = get_current_context()
    with ir.main_graph:
        assert ctx.name_scopes == []
        with popxl.name_scope("a"), popxl.name_scope("b"):
            assert ctx.name_scopes == ["a", "b"]
            ctx.name_scopes.append("c")  # a copy: the context is not changed
            assert ctx.name_scopes == ["a", "b"]
            v = popxl.variable(1.0, name="v")
            w = v + 1
        assert ctx.name_scopes == []
    assert v.id == "a/b/v" and v.name == "a/b/v" and v.scope == ""
    assert w.id == "a/b/add_out"


def test_subgraph_tensor_name_strips_the_graph_scope() -> None:
    ir = popxl.Ir()

    def f(a: popxl.Tensor) -> popxl.Tensor:
        return a + 1

    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        g = ir.create_graph(f, x)
    a = g.inputs[0]
    assert a.id == f"{g.name}/a" and a.name == "a" and a.scope == g.name
    assert g.outputs[0].name == "add_out"


# ---- popxl.utils.to_numpy edge cases ----
def test_to_numpy_scalars_lists_and_torch() -> None:
    one = to_numpy(1.0)
    assert one.shape == () and one.dtype == np.float32  # float64 downcast
    assert to_numpy(3).dtype == np.int32
    assert to_numpy(True).dtype == np.bool_
    assert to_numpy([1, 2]).dtype == np.int32
    assert to_numpy(1.0, downcast=False).dtype == np.float64
    t = torch.arange(3, dtype=torch.float64, requires_grad=True)
    got = to_numpy(t)
    np.testing.assert_array_equal(got, np.arange(3, dtype=np.float32))
    assert got.dtype == np.float32
    half = to_numpy(np.array([0.1, 65504.0]), popxl.float16)
    np.testing.assert_array_equal(half, np.array([0.1, 65504.0]).astype(np.float16))


def test_to_numpy_copy_semantics() -> None:
    a = np.arange(4, dtype=np.float32)
    assert not np.shares_memory(to_numpy(a), a)
    assert np.shares_memory(to_numpy(a, copy=False), a)
    b = np.arange(4, dtype=np.float64)
    c = to_numpy(b, copy=False)  # a conversion must copy, whatever `copy` says
    assert c.dtype == np.float32 and not np.shares_memory(c, b)


# ---- shapes: PopXL's TensorInfo binding refuses non-integer dimensions (~85 %) ----
@pytest.mark.parametrize("shape", [(2.5,), ("a",), (2, None)])
def test_non_integer_dimensions_are_refused_and_nothing_is_added(shape) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match="must be a sequence of integers"):
            popxl.graph_input(shape, popxl.float32)
        with pytest.raises(TypeError, match="must be a sequence of integers"):
            popxl.h2d_stream(shape, popxl.float32)
        with pytest.raises(TypeError, match="must be a sequence of integers"):
            popxl.TensorSpec(shape, popxl.float32)
    assert ir.main_graph.tensors == ()
    assert ir.get_all_h2d_streams() == set()


def test_numpy_integer_dimensions_become_python_ints() -> None:
    spec = popxl.TensorSpec((np.int64(2), np.int32(3)), popxl.float16, meta_shape=[np.uint8(4)])
    assert spec.shape == (2, 3) and spec.meta_shape == (4,)
    assert all(type(d) is int for d in spec.shape + spec.meta_shape)
