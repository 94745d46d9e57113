"""Conditionals (popxl/ops/control.py) and printing / placement copies (popxl/ops/debug.py)
through a Session."""

from __future__ import annotations

import numpy as np
import pytest
from tremula_tests_evaluator import check, run

import popxl
import popxl.ops as ops
from tremula.errors import PopartException, UndefinedValue


def _branches(ir):
    def then_fn(x: popxl.Tensor, y: popxl.Tensor):
        return x + y, x * 2

    def else_fn(x: popxl.Tensor):
        return x - 1, x

    x_spec = popxl.TensorSpec((3,), popxl.float32)
    then_g = ir.create_graph(then_fn, x_spec, x_spec)
    else_g = ir.create_graph(else_fn, x_spec)
    return then_g, else_g


@pytest.mark.parametrize("flag", [True, False])
def test_conditional_runs_one_branch(flag):
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y = np.array([10.0, 20.0, 30.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        c_s = popxl.h2d_stream((), popxl.bool, name="c")
        x_s = popxl.h2d_stream((3,), popxl.float32, name="x")
        c, xt = ops.host_load(c_s), ops.host_load(x_s)
        yt = popxl.constant(y)
        then_g, else_g = _branches(ir)
        info = ops.conditional_with_info(c, then_g, else_g, [xt, yt], [xt])
        a, b = info.outputs
        outs = []
        for t in (a, b):
            s = popxl.d2h_stream(t.shape, t.dtype)
            ops.host_store(s, t)
            outs.append(s)
    assert info.called_graph == (then_g, else_g)
    assert info.is_parent_index_in_then_branch(2) and not info.is_parent_index_in_then_branch(3)
    assert info.graph_to_parent_input_index(0, then_branch=False) == 3
    assert info.parent_to_graph(yt) is then_g.inputs[1]
    assert info.graph_to_parent(else_g.inputs[0]) is xt
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run({c_s: np.array(flag), x_s: x})
    want = (x + y, x * 2) if flag else (x - 1, x)
    for s, w in zip(outs, want):
        np.testing.assert_allclose(got[s], w)


def test_conditional_site_info_as_popxl():
    """spec popxl-fidelity 6: index methods per branch (then_branch=True), IndexError
    outside, set_parent_input_modified not implemented, outputs named <then>_or_<else>."""
    ir = popxl.Ir()
    with ir.main_graph:
        then_g, else_g = _branches(ir)
        x = popxl.constant(np.zeros(3, np.float32), name="x")
        y = popxl.constant(np.ones(3, np.float32), name="y")
        info = ops.conditional_with_info(popxl.constant(True), then_g, else_g, [x, y], [y])
        then_names = [t.name for t in then_g.outputs]
        else_names = [t.name for t in else_g.outputs]
        assert [t.name for t in info.outputs] == [
            f"{a}_or_{b}" for a, b in zip(then_names, else_names)
        ]
        assert info.graph_to_parent_input_index(1) == 2
        assert info.graph_to_parent_input_index(0, then_branch=False) == 3
        assert info.parent_to_graph_input_index(3, then_branch=False) == 0
        assert info.parent_to_graph_input_index(2) == 1
        assert info.parent_input(3) is y
        with pytest.raises(IndexError, match="Invalid graph input index 2"):
            info.graph_to_parent_input_index(2)
        with pytest.raises(IndexError, match="Invalid graph input index 1"):
            info.graph_to_parent_input_index(1, then_branch=False)
        with pytest.raises(IndexError, match="Invalid parent graph input index 3"):
            info.parent_to_graph_input_index(3)
        with pytest.raises(IndexError, match="Invalid parent graph input index 0"):
            info.parent_to_graph_input_index(0, then_branch=False)
        with pytest.raises(IndexError, match="Invalid parent graph input index 7"):
            info.is_parent_index_in_then_branch(7)
        with pytest.raises(NotImplementedError, match="set_parent_input_modified"):
            info.set_parent_input_modified(x)


@pytest.mark.parametrize("flag", [0, 3])
def test_conditional_takes_any_one_element_condition_and_one_graph_twice(flag):
    """The condition is not checked for bool (non-zero is true); one graph may serve both
    branches with different inputs."""
    ir = popxl.Ir()
    with ir.main_graph:
        g = ir.create_graph(lambda t: t * 2, popxl.TensorSpec((2,), popxl.float32))
        a = popxl.constant(np.array([1, 2], np.float32))
        b = popxl.constant(np.array([5, 7], np.float32))
        (out,) = ops.conditional(popxl.constant(np.int32(flag)), g, g, [a], [b])
        s = popxl.d2h_stream(out.shape, out.dtype)
        ops.host_store(s, out)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[s]
    np.testing.assert_array_equal(got, [2, 4] if flag else [10, 14])


def test_conditional_refuses_by_ref_inputs():
    ir = popxl.Ir()

    def inc(x: popxl.TensorByRef):
        ops.var_updates.copy_var_update_(x, x + 1)

    def keep(x: popxl.Tensor):
        pass

    with ir.main_graph:
        v = popxl.variable(np.float32(5), name="v")
        inc_g, keep_g = ir.create_graph(inc, v), ir.create_graph(keep, v)
        n = len(ir.main_graph.ops)
        with pytest.raises(NotImplementedError, match="TensorByRef is not implemented for the "
                           "conditional op"):  # fmt: skip
            ops.conditional(popxl.constant(True), inc_g, keep_g, [v], [v])
        assert len(ir.main_graph.ops) == n


def test_conditional_errors():
    ir = popxl.Ir()
    with ir.main_graph:
        then_g, else_g = _branches(ir)
        x = popxl.constant(np.zeros(3, np.float32))
        with pytest.raises(ValueError, match="one element"):
            ops.conditional(popxl.constant([True, False]), then_g, else_g, [x, x], [x])
        one = ir.create_graph(lambda t: t, popxl.TensorSpec((3,), popxl.float32))
        with pytest.raises(
            ValueError,
            match=r"^`then_branch` graph and `else_branch` graph must have the same number of "
            r"outputs: 2 != 1",
        ):
            ops.conditional(popxl.constant(True), then_g, one, [x, x], [x])
        with pytest.raises(ValueError, match="Not enough inputs have been provided"):
            ops.conditional(popxl.constant(True), then_g, else_g, [x], [x])


def test_else_outputs_of_other_infos_fail_when_compiled():
    """PopXL takes the output infos from the then-branch and checks nothing else."""
    ir = popxl.Ir()
    with ir.main_graph:
        spec = popxl.TensorSpec((3,), popxl.float32)
        g1 = ir.create_graph(lambda t: t + 1, spec)
        g2 = ir.create_graph(lambda t: ops.cast(t, popxl.int32), spec)
        x = popxl.constant(np.zeros(3, np.float32))
        (out,) = ops.conditional(popxl.constant(True), g1, g2, [x], [x])
        assert out.dtype == popxl.float32
    with pytest.raises(PopartException, match=r"output 0 is .*float32 \(3,\) in .* but "):
        popxl.Session(ir, "cpu")


def test_print_tensor_prints_at_run_time(capfd):
    x = np.arange(4, dtype=np.float32)

    def build(t):
        a = ops.print_tensor(t)
        b = ops.print_tensor(t * 2, title="doubled")
        return a, b

    got, _ = run(build, x)
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], 2 * x)
    printed = capfd.readouterr()
    assert "print_x0" in printed.out + printed.err and "doubled" in printed.out + printed.err


def test_print_tensor_prints_to_stderr(capfd):
    run(lambda t: ops.print_tensor(t), np.zeros(2, np.float32))
    assert "print_x0" in capfd.readouterr().err


@pytest.mark.parametrize("replicas, ipus", [(1, 2), (2, 4), (3, 6)])
def test_virtual_ipus_get_their_own_tiles(replicas, ipus):
    """``ipu_model`` has 2**ceil(log2(ipus per replica x replicas)) IPUs (exactly that
    product when the replicas do not divide the power of two); variables and ops inside
    ``popxl.ipu(n)`` live on IPU n's tiles of their replica; the numbers are unchanged."""
    ir = popxl.Ir(replication=replicas)
    x = np.arange(8, dtype=np.float32)
    with ir.main_graph:
        with popxl.ipu(0):
            a = popxl.variable(x, name="a")
            b = a * 2
        c = ops.ipu_copy(b, 1)
        with popxl.ipu(1):
            w = popxl.variable(x + 1, name="w")
            d = c + w
        s = popxl.d2h_stream(d.shape, d.dtype)
        ops.host_store(s, d)
    session = popxl.Session(ir, "ipu_model")
    with session:
        got = session.run()[s]
    np.testing.assert_array_equal(got.reshape(-1, 8), np.broadcast_to(2 * x + x + 1, (replicas, 8)))
    target = session._device.target
    assert target.num_ipus == ipus
    graph, per = session._lowerer._ipu_graphs[0], target.tiles_per_ipu
    assert graph.num_tiles == per * ipus // replicas
    tiles = {v.id: graph.tiles_of(h.tensor) for v, h in session._lowerer.variables.items()}
    assert np.all(tiles["a"] < per) and np.all((tiles["w"] >= per) & (tiles["w"] < 2 * per))


def test_ipu_copy_and_io_tile_copy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)

    def build(t):
        with popxl.ipu(0):
            u = t + 1
        v = ops.ipu_copy(u, 1)
        w = u.copy_to_ipu(1)
        assert v.ipu == 1 and w.ipu == 1
        io = ops.io_tile_copy(v)
        back = ops.io_tile_copy(io)
        assert io.tile_set == "io" and back.tile_set == "compute"
        return v, back

    check(build, [x + 1, x + 1], x, device="ipu_model")  # two IPUs: not 'cpu'
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(x, name="v")  # no op makes or uses it: its IPU is undefined
        with pytest.raises(ValueError, match="Could not infer the ipu for Tensor 'v'"):
            ops.ipu_copy(v, 1)
        assert ops.ipu_copy(v + 0, 1).producer.attrs["source"] == 0  # ops default to IPU 0

    # spec popxl-fidelity 7: popxl.ipu(None) places ops on no IPU, so ipu_copy cannot
    # infer the source
    def unplaced(t):
        assert (t + 0).ipu == 0
        with popxl.ipu(None):
            y = t + 1
        with pytest.raises(UndefinedValue, match="Tensor's IPU is undefined"):
            y.ipu  # noqa: B018
        return ops.ipu_copy(y, 1)

    with pytest.raises(ValueError, match="Could not infer the ipu for Tensor"):
        run(unplaced, x)
    got, _ = run(lambda t: ops.ipu_copy(t, 1), x, device="ipu_model")  # t on IPU 0
    np.testing.assert_array_equal(got[0], x)
