"""``Graph.tensors`` / ``variables`` / ``constants`` list what PopART's graph holds
(spec/popxl-fidelity.md section 10): every tensor of that graph only, sorted by id, with
the stream tensors, ``init`` helpers and in-place outputs PopXL programs count."""

from __future__ import annotations

import numpy as np

import popxl
import popxl.ops as ops

F = np.ones((2,), np.float32)


def _main(build):
    ir = popxl.Ir()
    with ir.main_graph:
        extra = build(ir)
    return ir, extra


def _ids(g: popxl.Graph) -> list[str]:
    return [t.id for t in g.tensors]


def test_sorted_by_id_and_filtered_by_kind() -> None:
    ir, _ = _main(lambda ir: popxl.variable(F, name="b") + popxl.constant(F, name="a"))
    assert _ids(ir.main_graph) == sorted(_ids(ir.main_graph)) == ["a", "add_out", "b"]
    assert [t.id for t in ir.main_graph.variables] == ["b"]
    assert [t.id for t in ir.main_graph.constants] == ["a"]
    assert all(type(t) is popxl.Tensor for t in ir.main_graph.tensors if t.id == "add_out")


def test_counts_of_simple_programs() -> None:
    def two_vars(op):
        return lambda ir: op(popxl.variable(F), popxl.variable(F))

    cases = {
        "var + var": (two_vars(lambda a, b: a + b), 3, 0),
        "var + 2": (lambda ir: popxl.variable(F) + 2, 3, 1),
        "add_": (two_vars(ops.add_), 3, 0),
        "cast": (lambda ir: ops.cast(popxl.variable(F), popxl.int32), 2, 0),
        "concat of 3": (lambda ir: ops.concat([popxl.variable(F) for _ in range(3)]), 4, 0),
        "no-op slice": (lambda ir: ops.slice(popxl.variable(F), axis=0), 1, 0),
        "ipu_copy": (lambda ir: ops.ipu_copy(popxl.variable(F), 1, 0), 2, 0),
    }
    for name, (build, n, n_const) in cases.items():
        ir, _ = _main(build)
        assert len(ir.main_graph.tensors) == n, (name, _ids(ir.main_graph))
        assert len(ir.main_graph.constants) == n_const, name


def test_iadd_keeps_the_constant_and_the_in_place_output() -> None:
    def iadd(ir):
        v = popxl.variable(F)
        v += 1
        return v

    ir, v = _main(iadd)
    assert len(ir.main_graph.tensors) == 3 and v in ir.main_graph


def test_calls_keep_subgraph_tensors_in_the_subgraph() -> None:
    def build(ir):
        a = popxl.variable(F)
        ident = ir.create_graph(lambda x: x, a)
        ops.call(ident, a)
        adder = ir.create_graph(lambda x, y: x + y, a, a)
        return ident, adder

    ir, (ident, adder) = _main(build)
    assert len(ir.main_graph.tensors) == 2 and len(ident.tensors) == 1 and len(adder.tensors) == 3
    ir, _ = _main(lambda ir: [ops.call(ir.create_graph(lambda x: x, v), v)
                              for v in [popxl.variable(F) for _ in range(4)]])  # fmt: skip
    assert len(ir.main_graph.tensors) == 8


def test_conditional_adds_its_outputs() -> None:
    def build(ir):
        a, b, c = popxl.variable(F), popxl.variable(F), popxl.variable(True)
        g = ir.create_graph(lambda x: x + 1, a)
        ops.conditional(c, g, g, [a], [b])

    ir, _ = _main(build)
    assert len(ir.main_graph.tensors) == 4


def test_streams_are_main_graph_tensors_and_loads_have_an_init() -> None:
    ir, _ = _main(lambda ir: ops.host_load(popxl.h2d_stream((2,), popxl.float32, "x")))
    assert len(ir.main_graph.tensors) == 3  # the stream, the init, the loaded tensor
    assert "x" in _ids(ir.main_graph)

    def in_subgraph(ir):
        g = ir.create_empty_graph("g")
        with g:
            ops.host_load(popxl.h2d_stream((2,), popxl.float32, "y"))
        return g

    ir, g = _main(in_subgraph)
    assert _ids(ir.main_graph) == ["y"] and len(g.tensors) == 2
    ir, _ = _main(lambda ir: popxl.d2h_stream((2,), popxl.float32, "z"))
    assert _ids(ir.main_graph) == ["z"]


def test_remote_load_with_an_int_offset() -> None:
    def build(ir):
        buf = popxl.remote_buffer((2,), popxl.float32, 2)
        return ops.remote_load(buf, 1)

    ir, t = _main(build)
    assert t.shape == (2,) and t.dtype is popxl.float32
    assert len(ir.main_graph.tensors) == 3  # the offset constant, the init, the output
    (offset,) = ir.main_graph.constants
    assert offset.name == "offset" and offset.dtype is popxl.uint32 and offset._data == 1


def test_loads_and_stores_still_compute() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, 2)
        x = ops.host_load(popxl.h2d_stream((2,), popxl.float32, "x"))
        ops.remote_store(buf, 1, x * 2)
        y = popxl.d2h_stream((2,), popxl.float32, "y")
        ops.host_store(y, ops.remote_load(buf, 1) + 1)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({ir.get_all_h2d_streams().pop(): np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(out[y], [3.0, 5.0])
