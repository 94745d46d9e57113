"""Probe round 7, the IR side: graph contexts, tensor ids and name scopes, ``create_graph``'s
inputs, call sites, Tensor operators, autodiff's connections and replica-grouping
transposes, written as PopXL's unit tests (``test_graph.py``, ``test_tensor.py``,
``test_context.py``, ``ops/test_call.py``, ``transforms/test_autodiff.py``,
``test_replica_grouping.py``) check them.

The one mismatch found: selecting no graph raised with Tremula's own wording; PopXL's
context says "Trying to access a graph, but no graph has been selected. Hint - ..." and its
``test_graph.py`` matches that first sentence as a prefix.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popxl import transforms
from popxl.context import debug_context_frame_offset
from popxl.transforms import ExpectedConnectionType

NO_GRAPH = "Trying to access a graph, but no graph has been selected."


@pytest.mark.parametrize("get", [popxl.gcg, popxl.gmg, popxl.gir])
def test_no_graph_selected_is_popxl_runtime_error(get) -> None:
    with pytest.raises(RuntimeError) as info:
        get()
    assert str(info.value).startswith(NO_GRAPH)
    assert "`with graph_instance:`" in str(info.value)


def test_graph_context_manager_selects_and_restores() -> None:
    ir = popxl.Ir()
    main = ir.main_graph
    with main:
        assert popxl.gcg() == main and popxl.gmg() == main and popxl.gir() is ir
        sub = ir.create_empty_graph("sub")
        with sub:
            assert popxl.gcg() == sub and popxl.gmg() == main
        assert popxl.gcg() == main
    with pytest.raises(RuntimeError, match=NO_GRAPH):
        popxl.gcg()


def test_tensor_ids_unique_in_an_ir_and_independent_across_irs() -> None:
    ir1, ir2 = popxl.Ir(), popxl.Ir()
    with ir1.main_graph:
        ids = [
            popxl.variable(1, name="tensor").id,
            popxl.variable(1, name="tensor").id,
            popxl.constant(1, name="tensor").id,
        ]
    with ir2.main_graph:
        other = popxl.variable(1, name="tensor")
    assert ids[0] == "tensor" and len(set(ids)) == 3
    assert other.id == "tensor"
    assert ir1.main_graph.get_tensor("tensor") != other  # same id, another Ir


def test_name_scopes_prefix_tensors_and_end_with_their_block() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        with popxl.name_scope("foo"):
            v = popxl.variable(1, name="v")
            y = x + 1
            with popxl.name_scope("bar"):
                z = ops.relu(y)
        after = ops.relu(x)

        def body(t: popxl.Tensor) -> popxl.Tensor:
            with popxl.name_scope("in"):
                return ops.relu(t)

        sub = ir.create_graph(body, x)
    assert (v.id, y.id, z.id, after.id) == ("foo/v", "foo/add_out", "foo/bar/relu_out", "relu_out")
    (out,) = sub.outputs
    assert out.id == f"{sub.id}/in/relu_out" and out.name == "in/relu_out"


def test_create_graph_inputs_follow_the_signature() -> None:
    """Positional arguments, then keyword arguments, then ``graph_input`` calls inside, each
    named after its parameter; a TensorSpec makes an input of its shape and dtype, a
    non-tensor argument is passed through."""

    def fn(x, y, scale, *, z):
        w = popxl.graph_input((2,), popxl.float32, "w")
        return (x * y + z * w) * scale

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        spec = popxl.TensorSpec((2,), popxl.float32)
        g = ir.create_graph(fn, a, spec, 2.0, z=a)
    assert [t.name for t in g.inputs] == ["x", "y", "z", "w"]
    assert [t.id for t in g.inputs] == [f"{g.id}/{n}" for n in ("x", "y", "z", "w")]
    assert all(t.spec == spec for t in g.inputs)
    assert g._pb_graph.getInputIds() == [t.id for t in g.inputs]
    assert len(g.outputs) == 1 and g.outputs[0].shape == (2,)


def _values(ir: popxl.Ir, tensors: dict[str, popxl.Tensor]) -> dict[str, np.ndarray]:
    """Run ``ir`` once, reading each tensor of the main graph through a d2h stream."""
    streams = {}
    with ir.main_graph, popxl.in_sequence():
        for name, t in tensors.items():
            streams[name] = popxl.d2h_stream(t.shape, t.dtype, name=f"{name}_d2h")
            ops.host_store(streams[name], t)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    return {name: out[s] for name, s in streams.items()}


def test_call_site_info_maps_parent_and_graph_tensors() -> None:
    def fn(x, y):
        return x * y, x + y

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1.0, 2.0], np.float32), name="a")
        b = popxl.variable(np.array([3.0, 5.0], np.float32), name="b")
        g = ir.create_graph(fn, a, b)
        info = ops.call_with_info(g, b, a)  # swapped on purpose
    assert isinstance(info, ops.CallSiteInfo) and info.called_graph == g
    assert info.parent_graph == ir.main_graph
    assert info.inputs == (b, a) and len(info.outputs) == 2
    assert info.parent_input(0) is b and info.parent_input(1) is a
    assert info.graph_to_parent(g.inputs[0]) is b and info.parent_to_graph(a) is g.inputs[1]
    for i in range(2):
        assert info.graph_to_parent(g.outputs[i]) is info.parent_output(i)
    assert info._op.opType() == "Call" and isinstance(info._op, _ir.op.CallOp)
    with pytest.raises(IndexError):
        info.parent_input(2)
    with pytest.raises(IndexError):
        info.parent_output(2)
    with ir.main_graph:
        c = popxl.variable(np.zeros(2, np.float32), name="c")
    with pytest.raises(ValueError):
        info.parent_to_graph(c)
    got = _values(ir, {"prod": info.outputs[0], "sum": info.outputs[1]})
    np.testing.assert_array_equal(got["prod"], [3.0, 10.0])
    np.testing.assert_array_equal(got["sum"], [4.0, 7.0])


BINARY = [
    (operator.add, "Add", _ir.op.AddOp),
    (operator.sub, "Sub", _ir.op.SubtractOp),
    (operator.mul, "Mul", _ir.op.MulOp),
    (operator.truediv, "Div", _ir.op.DivOp),
    (operator.pow, "Pow", _ir.op.PowOp),
    (operator.mod, "Fmod", _ir.op.FmodOp),
    (operator.matmul, "MatMul", _ir.op.MatMulOp),
]


@pytest.mark.parametrize("fn, op_type, cls", BINARY, ids=[b[1] for b in BINARY])
def test_tensor_operators_build_one_popart_op(fn, op_type, cls) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.full((2, 2), 3.0, np.float32))
        b = popxl.variable(np.full((2, 2), 2.0, np.float32))
        out = fn(a, b)
    (op,) = ir.main_graph._pb_graph.getOps()
    assert op.opType() == op_type and isinstance(op, cls)
    assert [t.id for t in op.getInputTensors()] == [a.id, b.id]
    assert len(ir.main_graph.tensors) == 3
    want = fn(np.full((2, 2), 3.0, np.float32), np.full((2, 2), 2.0, np.float32))
    np.testing.assert_allclose(_values(ir, {"out": out})["out"], want, rtol=1e-6)


def test_reflected_operators_make_a_constant_of_the_tensors_dtype() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1.0, 4.0], np.float16))
        outs = {"radd": 1 + a, "rsub": 1 - a, "rmul": 2 * a, "rdiv": 2 / a, "rpow": 2**a}
    assert [op.opType() for op in ir.main_graph._pb_graph.getOps()] == [
        "Add", "Sub", "Mul", "Div", "Pow"
    ]  # fmt: skip
    assert len(ir.main_graph.constants) == 5
    assert all(c.dtype == popxl.float16 and c.shape == () for c in ir.main_graph.constants)
    for op in ir.main_graph._pb_graph.getOps():  # the host value is the lhs
        assert op.getInputTensors()[1].id == a.id
    got = _values(ir, outs)
    x = np.array([1.0, 4.0], np.float16)
    for name, want in {"radd": 1 + x, "rsub": 1 - x, "rmul": 2 * x, "rdiv": 2 / x}.items():
        np.testing.assert_array_equal(got[name], want)
    np.testing.assert_array_equal(got["rpow"], [2.0, 16.0])


def test_logical_operators_on_bool_tensors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(np.array([True, True, False, False]))
        q = popxl.variable(np.array([True, False, True, False]))
        outs = {"and": p & q, "or": p | q, "not": ~p, "neg": -popxl.constant(np.ones(2))}
    types = [(op.opType(), type(op)) for op in ir.main_graph._pb_graph.getOps()]
    assert types == [
        ("And", _ir.op.AndOp), ("Or", _ir.op.OrOp), ("Not", _ir.op.NotOp),
        ("Neg", _ir.op.NegateOp)
    ]  # fmt: skip
    got = _values(ir, outs)
    np.testing.assert_array_equal(got["and"], [True, False, False, False])
    np.testing.assert_array_equal(got["or"], [True, True, True, False])
    np.testing.assert_array_equal(got["not"], [False, False, True, True])
    np.testing.assert_array_equal(got["neg"], [-1.0, -1.0])


def test_tensor_equality_is_identity_and_builds_nothing() -> None:
    """Tensors are dict keys (streams maps, ``inputs_dict``): ``==`` compares ids and Irs,
    it is not ``ops.equal``."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1, name="a")
        b = popxl.variable(1, name="b")
        same = ir.main_graph.get_tensor("a")
    assert (a == same) is True and (a == b) is False and (a != b) is True
    assert hash(a) == hash(same) and {a: 1, b: 2}[same] == 1
    assert ir.main_graph._pb_graph.getOps() == []


def test_debug_context_frame_offset_keeps_the_function() -> None:
    @debug_context_frame_offset(1)
    def double(t: popxl.Tensor) -> popxl.Tensor:
        """Twice t."""
        return t + t

    ir = popxl.Ir()
    with ir.main_graph:
        out = double(popxl.variable(np.array([1.5], np.float32)))
    assert double.__name__ == "double" and double.__doc__ == "Twice t."
    np.testing.assert_array_equal(_values(ir, {"out": out})["out"], [3.0])


def test_autodiff_connections_and_gradient_values() -> None:
    """``expected_inputs`` starts with the gradients provided (``FwdGrad``), then the forward
    tensors the grad graph reads (``Fwd``); ``expected_outputs`` are the gradients of the
    forward graph's inputs, in order. ``inputs_dict`` fills the ``Fwd`` inputs from a
    forward call site and ``fwd_parent_ins_to_grad_parent_outs`` maps each forward parent
    input to its gradient."""

    def fwd(x, w):
        return ops.relu(ops.matmul(x, w))

    rng = np.random.default_rng(7)
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    wv = rng.standard_normal((4, 2)).astype(np.float32)
    seed = rng.standard_normal((3, 2)).astype(np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(xv, name="x")
        w = popxl.variable(wv, name="w")
        g = ir.create_graph(fwd, x, w)
        info = transforms.autodiff(g)
        fwd_site = ops.call_with_info(g, x, w)
        grad_site = ops.call_with_info(
            info.graph, popxl.constant(seed), inputs_dict=info.inputs_dict(fwd_site)
        )
    (y,) = g.outputs
    first = info.expected_inputs[0]
    assert (first.connection_type, first.fwd_tensor) == (ExpectedConnectionType.FwdGrad, y)
    assert all(c.connection_type == ExpectedConnectionType.Fwd for c in info.expected_inputs[1:])
    assert [(c.connection_type, c.fwd_tensor) for c in info.expected_outputs] == [
        (ExpectedConnectionType.FwdGrad, t) for t in g.inputs
    ]
    assert info.forward_graph == g and len(info.graph.inputs) == len(info.expected_inputs)
    assert len(info.graph.outputs) == 2
    fed = info.inputs_dict(fwd_site)
    assert len(fed) == len(info.expected_inputs) - 1
    for grad_in, parent in fed.items():  # each Fwd input is fed by its forward tensor
        conn = info.expected_inputs[info.graph.inputs.index(grad_in)]
        assert fwd_site.graph_to_parent(conn.fwd_tensor) is parent
    by_parent = info.fwd_parent_ins_to_grad_parent_outs(fwd_site, grad_site)
    assert set(by_parent) == {x, w}
    got = _values(ir, {"dx": by_parent[x], "dw": by_parent[w]})
    dy = seed * (xv @ wv > 0)
    np.testing.assert_allclose(got["dx"], dy @ wv.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["dw"], xv.T @ dy, rtol=1e-5, atol=1e-6)


def test_autodiff_grads_required_subset() -> None:
    def fwd(x, w):
        return x * w

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
        g = ir.create_graph(fwd, x, x)
    info = transforms.autodiff(g, grads_required=[g.inputs[1]])
    assert [c.fwd_tensor for c in info.expected_outputs] == [g.inputs[1]]
    assert len(info.graph.outputs) == 1
    with pytest.raises(ValueError):  # a tensor of another graph
        transforms.autodiff(g, grads_required=[x])


@pytest.mark.parametrize(
    "stride, group_size, transposed",
    [(1, 8, (1, 1)), (1, 4, (4, 2)), (4, 2, (1, 4)), (2, 4, (1, 2)), (1, 1, (1, 8))],
)
def test_replica_grouping_transpose_swaps_groups_and_members(
    stride, group_size, transposed
) -> None:
    """The transpose's groups are the original's members at one position: replica r of
    group k of the transpose is the k-th member of the r-th group."""
    ir = popxl.Ir(replication=8)
    rg = ir.replica_grouping(stride=stride, group_size=group_size)
    t = rg.transpose()
    assert (t.stride, t.group_size) == transposed
    assert t.num_groups == rg.group_size and t.group_size == rg.num_groups
    groups = {}
    for r, k in enumerate(rg.assignment):
        groups.setdefault(k, []).append(r)
    members = np.array([groups[k] for k in sorted(groups)])  # [num_groups, group_size]
    want = np.empty(8, int)
    for position, replicas in enumerate(members.T):
        want[replicas] = position
    assert t.assignment == want.tolist()
