"""popxl-addons' ``linear_layout`` served in Python: the values pass unchanged, the copy
is mapped linearly with the grain ``bs``, through the binding (``ParameterizedOp``'s
``create_op_in_graph``) and popxl-addons' wrapper; the profile names the op's copy."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from tremula import poplar, target
from tremula.popxl.custom_ops import SERVED
from tremula.popxl.custom_ops import linear_layout as served
from tremula.popxl.custom_ops.linear_layout_lowering import relayout


def _store(t):
    d = popxl.d2h_stream(t.shape, t.dtype)
    ops.host_store(d, t)
    return d


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_the_wrapper_copies_values(addons, dtype) -> None:
    ll = addons("linear_layout")
    x = (np.arange(30 * 100) % 251).reshape(30, 100).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        y = ll.linear_layout(popxl.variable(x), 7)
        d = _store(y)
    assert y.shape == x.shape and y.id.startswith("linear_layout")
    (op,) = [o for o in ir.main_graph.ops if o.type == "LinearLayout"]
    assert op.attrs == {"bs": 7}
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[d]
    np.testing.assert_array_equal(got, x)
    programs = session.engine.get_graph_profile()["programs"]
    assert any(p.get("name", "").startswith("LinearLayout/copy") for p in programs)


@pytest.mark.parametrize("n, bs", [(3000, 7), (3000, 1), (50, 16), (10_000, 64)])
def test_the_copy_is_mapped_linearly_with_grain_bs(n, bs) -> None:
    graph = poplar.Graph(target.ipu2())
    t = graph.add_variable(poplar.FLOAT, (n,), "t")
    graph.set_tile_mapping(t, 5)  # all on one tile
    prog = poplar.Sequence()
    out = relayout(graph, t, bs, prog, "LinearLayout")
    tiles = graph.tiles_of(out)
    counts = np.bincount(tiles, minlength=graph.num_tiles)
    used = counts[counts > 0]
    # poputil: ceil(grains / tiles) grains per tile from tile 0 on, the last the remainder
    grains = -(-n // bs)
    per = -(-grains // graph.num_tiles)
    assert np.all(np.diff(tiles) >= 0) and tiles[0] == 0
    assert np.all(used[:-1] == per * bs)
    assert used.sum() == n and len(used) == -(-grains // per)
    (copy,) = prog.programs
    assert isinstance(copy, poplar.Copy) and copy.src is t and copy.dst is out


def test_binding_surface_and_errors() -> None:
    impl = served
    assert impl.LinearLayoutOp.default_opid()[:3] == ("popxl.addons.ops", "LinearLayout", 1)
    assert SERVED[("popxl.addons.ops", "LinearLayout", 1)] == served.__name__
    params = impl.LinearLayoutParams(4)
    params.bs = 8
    assert params.bs == 8
    with pytest.raises(TypeError, match="bs must be a positive int"):
        impl.LinearLayoutParams(0)
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.zeros(4, np.float32))
        with pytest.raises(TypeError, match="params must be LinearLayoutParams"):
            impl.LinearLayoutOp.create_op_in_graph(g._pb_graph, {0: x.id}, {}, 4, None)
    assert not g.ops
    from tremula.popxl.ops.base import OPS

    assert not OPS["LinearLayout"].differentiable  # ParameterizedOp: no getGradOps
