"""The errors ``spec/popxl.md`` names: each is raised with the spec's exception type, its
message names the tensor, graph, stream or grouping involved, and a refused call leaves the
Ir (and the Session) as it was and usable.

Errors already tested elsewhere are not repeated here: streams missing or unexpected and bad
host-buffer shapes (``test_popxl_replication_io.py``), ``write_variable_data`` type, shape
and retrieval-mode errors and the replica-sharded factories
(``test_popxl_replication_variables.py``), autodiff of a graph that modifies its inputs
(``test_popxl_autodiff_graphs.py``), conditional branches (``test_popxl_ops_control.py``),
collective arguments (``test_popxl_replication_collectives.py``) and float8 ``log2_scale``
at run time (``test_popxl_ops_fp8.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import popart
import popxl
import popxl.ops as ops
from tremula.errors import UndefinedValue, VariableDataError
from tremula.popxl.context import atomic

W = np.arange(6, dtype=np.float32).reshape(2, 3)


@dataclass
class Program:
    """A small program that works: ``y = add1(w)`` stored to the stream ``y``; plus
    constants ``sc`` (a float32 scalar) and ``flag`` (True), a graph ``two_outputs`` of one
    input and two outputs, and a graph ``other`` holding a constant ``oc``."""

    ir: popxl.Ir
    w: popxl.Tensor
    sc: popxl.Tensor
    add1: popxl.Graph
    two_outputs: popxl.Graph
    other: popxl.Graph
    oc: popxl.Tensor
    flag: popxl.Tensor
    y: Any


def add1(u):
    return u + 1.0


def two_outputs(u):
    return u, u + 1.0


def program() -> Program:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():  # session_program writes w after the call
        w = popxl.variable(W, name="w")
        sc = popxl.constant(np.float32(2), name="sc")
        flag = popxl.constant(True, name="flag")
        g = ir.create_graph(add1, w)
        two = ir.create_graph(two_outputs, w)
        other = ir.create_empty_graph("other")
        with other:
            oc = popxl.constant(np.ones((2, 3), np.float32), name="oc")
        (out,) = ops.call(g, w)
        y = popxl.d2h_stream(out.shape, out.dtype, name="y")
        ops.host_store(y, out)
    return Program(ir, w, sc, g, two, other, oc, flag, y)


def state(ir: popxl.Ir) -> tuple:
    """What a refused call must not change: every graph's tensors, ops (and their outputs),
    inputs and outputs; the streams, remote buffers, name counters and replication."""
    graphs = tuple(
        (
            g.name,
            tuple(t.id for t in g.tensors),
            tuple((op.type, len(op.outputs)) for op in g.ops),
            tuple(t.id for t in g.inputs),
            tuple(t.id for t in g.outputs),
        )
        for g in ir.graphs
    )
    streams = tuple(s.tensor_id for s in ir._streams)
    buffers = tuple(b.remote_buffer_id for b in ir._remote_buffers)
    return graphs, streams, buffers, ir._next_subgraph, ir._next_rb, ir.replication_factor


def runs(p: Program) -> None:
    """The program still compiles and computes ``w + 1``."""
    with popxl.Session(p.ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[p.y], W + 1)


def refused(p: Program, error: type, match: str, fn: Callable[[], Any]) -> None:
    before = state(p.ir)
    with pytest.raises(error, match=match):
        fn()
    assert state(p.ir) == before


# ---- building: (id, exception, match, action on a fresh Program) ----
def _in_main(p: Program, fn: Callable[[], Any]) -> Any:
    with p.ir.main_graph:
        return fn()


def _mixed_list(p: Program) -> None:
    def f(xs):
        return xs[0]

    _in_main(p, lambda: p.ir.create_graph(f, [p.w, 1.0]))


def _mixed_args(p: Program) -> None:
    def f(*parts):
        return parts[0]

    _in_main(p, lambda: p.ir.create_graph(f, p.w, 1.0))


def _mixed_kwargs(p: Program) -> None:
    def f(**parts):
        return parts["a"]

    _in_main(p, lambda: p.ir.create_graph(f, a=p.w, b=1.0))


def _bad_return(p: Program) -> None:
    def returns_int(u):
        u + 1.0  # an op was added before the refusal
        return 3

    _in_main(p, lambda: p.ir.create_graph(returns_int, p.w))


def _raising_fn(p: Program) -> None:
    def fails(u):
        popxl.h2d_stream((1,), popxl.float32, name="made_inside")
        popxl.remote_buffer((1,), popxl.float32)
        u * 2.0
        raise KeyError("from fn")

    _in_main(p, lambda: p.ir.create_graph(fails, p.w))


def _nest_irs(p: Program) -> None:
    with p.ir.main_graph, popxl.Ir().main_graph:
        pass


def _iadd(p: Program) -> None:
    def go():
        p.w += np.ones(5, np.float32)

    _in_main(p, go)


def _variable_in_subgraph(p: Program) -> None:
    with p.other:
        popxl.variable(np.zeros(2, np.float32), name="v_sub")


def _graph_output_elsewhere(p: Program) -> None:
    with p.other:
        popxl.graph_output(p.w)


def _grouped_data(p: Program) -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        popxl.variable(np.zeros((3, 2), np.float32), name="gv", replica_grouping=rg)


def _buffer_entries(p: Program) -> None:
    _in_main(p, lambda: popxl.remote_buffer((2,), popxl.float32, entries=0))


def _shard_over_too_big(p: Program) -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        popxl.replica_sharded_buffer((4,), popxl.float32, shard_over=8)


def _conditional_second_branch(p: Program) -> None:
    # the then-branch's host value becomes a constant before the else-branch is refused
    _in_main(p, lambda: ops.conditional(p.flag, p.add1, p.add1, [W], [p.oc]))


def _remote_code_load_inside(p: Program) -> None:
    with p.add1:
        ops.remote_code_load(p.add1, "executable")


def _main(fn: Callable[[Program], Any]) -> Callable[[Program], Any]:
    """``fn`` run in the main graph of the program."""
    return lambda p: _in_main(p, lambda: fn(p))


#: (id, exception, message pattern, action on a fresh Program)
BUILD_CASES: list[tuple[str, type, str, Callable[[Program], Any]]] = [
    # spec 1.3: create_graph
    ("mixed list", TypeError, r"argument 'xs' can't contain a mixture of Tensors", _mixed_list),
    ("mixed *args", TypeError, r"'\*parts' can't contain a mixture of Tensors", _mixed_args),
    ("mixed **kwargs", TypeError, r"'\*\*parts' can't contain a mixture of", _mixed_kwargs),
    (
        "bad return",
        ValueError,
        r"Output of subgraph must be None, .* Output type: int \(create_graph\(.*"
        r"returns_int_subgraph\(3\)\)\)",
        _bad_return,
    ),
    (
        "bad arity",
        ValueError,
        r"create_graph\(add1\): arguments do not match",
        lambda p: p.ir.create_graph(add1),
    ),
    ("fn raises", KeyError, "from fn", _raising_fn),
    # spec 1.4: Graph
    ("Graph()", TypeError, "cannot be constructed directly", lambda p: popxl.Graph()),
    (
        "nest Irs",
        RuntimeError,
        r"main_graph\] of Ir\[id=\d+\], but the previous context.s "
        r"Ir is different .*do not nest",
        _nest_irs,
    ),
    (
        "in graph",
        TypeError,
        "`in` on graph 'main_graph' needs a Tensor",
        lambda p: "w" in p.ir.main_graph,
    ),
    (
        "graph ==",
        TypeError,
        "cannot compare graph 'main_graph' with int",
        lambda p: p.ir.main_graph == 3,
    ),
    # spec 1.5: Tensor
    (
        "empty operand",
        ValueError,
        "The value has 0 elements: cannot combine tensor 'w'",
        _main(lambda p: p.w + np.array([])),
    ),
    ("getitem", TypeError, "cannot index tensor 'w' with 'a'", _main(lambda p: p.w["a"])),
    (
        "mixed return",
        TypeError,
        r"Output of subgraph can't contain a mixture of Tensors and other types: "
        r"create_graph\(.*\) returned Tensors and int",
        _main(lambda p: p.ir.create_graph(lambda u: (u + 1.0, 3), p.w)),
    ),
    (
        "diag",
        ValueError,
        r"Diag expected a 2d tensor. Tensor 'sc' has shape \(\)",
        lambda p: p.sc.diag(),
    ),
    (
        "transpose axis",
        ValueError,
        r"Values in permutation must be less than the tensor's rank 2. Found 2 "
        r"\(transpose of 'w' by \(0, 2\)\)",
        _main(lambda p: p.w.transpose((0, 2))),
    ),
    (
        "squeeze size",
        ValueError,
        r"Can't squeeze axis 0 of 'w' \(shape \(2, 3\)\)",
        _main(lambda p: ops.squeeze(p.w, [0])),
    ),
    (
        "duplicate axes",
        ValueError,
        r"Axes contains duplicates: \[1, 1\] \(squeeze of 'w'\)",
        _main(lambda p: ops.squeeze(p.w, [1, 1])),
    ),
    (
        "matmul partials",
        ValueError,
        r"matmul: partials_type must be 'float' or 'half', got popxl.dtypes.int32",
        _main(lambda p: ops.matmul(p.w, p.w, partials_type=popxl.int32)),
    ),
    ("len scalar", ValueError, "Tensor 'sc' doesn't have a length", lambda p: len(p.sc)),
    ("iter", TypeError, "tensor 'w' is not iterable", lambda p: iter(p.w)),
    ("contains", TypeError, "not supported on tensor 'w'", lambda p: 1.0 in p.w),
    (
        "operator refused",
        ValueError,
        r"contracting dimensions unequal: .*MatMul in graph 'main_graph', inputs 'w', 't'",
        _main(lambda p: p.w @ np.ones(5, np.float32)),
    ),
    (
        "+= refused",
        ValueError,
        r"broadcasting failed on 'Op Add', frames \[2, 3\] and \[5\] are not aligned.*"
        r"AddInplace .*inputs 'w', 't'",
        _iadd,
    ),
    (
        "ipu undefined",
        UndefinedValue,
        "IPU is undefined. Tensor 'sc' of graph 'main_graph'",
        lambda p: p.sc.ipu,
    ),
    (
        "tile set undefined",
        UndefinedValue,
        "tile set is undefined. Tensor 'sc'",
        lambda p: p.sc.tile_set,
    ),
    (
        "variable in subgraph",
        ValueError,
        r"You cannot initialise a variable tensor within a graph .*other",
        _variable_in_subgraph,
    ),
    (
        "graph_output",
        ValueError,
        r"The input tensor `t` is not in the current Graph other_subgraph\(2\): 'w' belongs",
        _graph_output_elsewhere,
    ),
    ("grouped data", VariableDataError, r"'gv'.*possibly appended outer dimension", _grouped_data),
    (
        "shard_over > group",
        ValueError,
        "shard_over 8 must divide the group size 4",
        _shard_over_too_big,
    ),
    # spec 1.6: contexts
    ("gcg", RuntimeError, "no graph has been selected", lambda p: popxl.gcg()),
    ("gmg", RuntimeError, "no graph has been selected", lambda p: popxl.gmg()),
    ("gir", RuntimeError, "no graph has been selected", lambda p: popxl.gir()),
    (
        "in_sequence(None)",
        TypeError,
        "`None` cannot be passed to in_sequence",
        lambda p: popxl.in_sequence(None).__enter__(),
    ),
    # spec 1.8: RemoteBuffer
    (
        "entries 0",
        ValueError,
        r"Entries must be a non-zero, positive integer. Got 0 \(RemoteBuffer\(.*\(2,\)\)\)",
        _buffer_entries,
    ),
    # spec 1.14: call, repeat, conditional, remote_code_load
    (
        "call too many",
        ValueError,
        r"Too many inputs have been provided to the called graph 'add1_subgraph\(0\)' "
        r"\(call\): 2 given, it takes 1",
        _main(lambda p: ops.call(p.add1, p.w, p.w)),
    ),
    (
        "call not in parent",
        ValueError,
        r"Parent input tensor 'other_subgraph\(2\)/oc' at position 0 is not in parent graph "
        r"'main_graph'",
        _main(lambda p: ops.call(p.add1, p.oc)),
    ),
    (
        "call twice",
        ValueError,
        r"Graph input tensor is specified twice, .*'add1_subgraph\(0\)/u'",
        _main(lambda p: ops.call(p.add1, p.w, inputs_dict={p.add1.inputs[0]: p.w})),
    ),
    (
        "call missing",
        ValueError,
        r"Not enough inputs have been provided for the called graph 'add1_subgraph\(0\)' "
        r"\(call\): inputs \['add1_subgraph\(0\)/u'\] are not given",
        _main(lambda p: ops.call(p.add1)),
    ),
    (
        "call coerce",
        TypeError,
        "Input at position 0 could not be coerced into a tensor: the value for "
        "'add1_subgraph\\(0\\)/u'",
        _main(lambda p: ops.call(p.add1, object())),
    ),
    (
        "call coerce shape",
        popart.popart_exception,
        r"CallOp input \(@0\) does not match callee input tensor \(@0\) of "
        r"'add1_subgraph\(0\)' \(call\): 't' is FLOAT \[4\]",
        _main(lambda p: ops.call(p.add1, np.ones(4, np.float32))),
    ),
    ("conditional 2nd", ValueError, r"'other_subgraph\(2\)/oc'", _conditional_second_branch),
    (
        "repeat count",
        ValueError,
        "Repeat count must be >= 0 \\(an integer\\), got -1",
        _main(lambda p: ops.repeat(p.add1, -1, p.w)),
    ),
    (
        "repeat outputs",
        ValueError,
        r"To repeat the subgraph \(two_outputs_subgraph\(1\)\) the number of inputs must "
        r"be greater than or equal to the number of outputs",
        _main(lambda p: ops.repeat(p.two_outputs, 2, p.w)),
    ),
    (
        "code load inside",
        ValueError,
        r"code of 'add1_subgraph\(0\)' from inside it",
        _remote_code_load_inside,
    ),
    (
        "code load dest",
        NotImplementedError,
        r"'add1_subgraph\(0\)' to destination 'io_buffer' is not implemented",
        _main(lambda p: ops.remote_code_load(p.add1, "io_buffer")),
    ),
    # (accumulate_ with an X of another shape is made, as PopART's VarUpdateOp::setup takes
    # it, and refused when lowered: tests/popxl/test_popxl_ops_fidelity_checks.py)
]


@pytest.mark.parametrize("case, error, match, action", BUILD_CASES, ids=[c[0] for c in BUILD_CASES])
def test_refused_build_leaves_the_ir_as_it_was(case, error, match, action) -> None:
    p = program()
    refused(p, error, match, lambda: action(p))
    with pytest.raises(RuntimeError):
        popxl.gcg()  # the graph context stack is back to empty
    runs(p)


def test_refused_create_graph_gives_its_name_to_the_next_graph() -> None:
    p = program()
    with pytest.raises(KeyError):
        _raising_fn(p)
    with p.ir.main_graph:
        g = p.ir.create_graph(add1, p.w)
        h2d = popxl.h2d_stream((1,), popxl.float32, name="made_inside")
        buf = popxl.remote_buffer((1,), popxl.float32)
    assert g.name == "add1_subgraph(3)"  # not (4): the refused trace took no number
    assert h2d.tensor_id == "made_inside" and buf.remote_buffer_id == 1


def test_undefined_value_is_popxl_errors_undefined_value_and_a_value_error() -> None:
    import popxl.errors

    assert popxl.errors.UndefinedValue is UndefinedValue
    assert issubclass(UndefinedValue, ValueError)
    p = program()
    with p.ir.main_graph, popxl.ipu(1):
        on_ipu = p.w + 1.0
    assert on_ipu.ipu == 1


def test_grouped_data_error_is_a_popart_exception() -> None:
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        rg = ir.replica_grouping(group_size=2)
        with pytest.raises(popart.popart_exception, match=r"'gv'.*leading axis of 2"):
            popxl.variable(np.zeros(3, np.float32), name="gv", replica_grouping=rg)
        v = popxl.variable(np.zeros((2, 3), np.float32), name="gv", replica_grouping=rg)
    assert v.id == "gv" and v.shape == (3,)


def test_replication_factor_is_fixed_once_a_session_exists() -> None:
    p = program()
    popxl.Session(p.ir, "cpu")
    with pytest.raises(RuntimeError, match=r"Ir\[id=\d+\]: replication_factor cannot change"):
        p.ir.replication_factor = 2
    assert p.ir.replication_factor == 1
    runs(p)


def test_cpu_device_refuses_programs_that_need_several_ipus() -> None:
    p = program()
    p.ir.replication_factor = 2
    with pytest.raises(ValueError, match=r"'cpu' device has one IPU; this Ir needs 2 .*factor 2"):
        popxl.Session(p.ir, "cpu")
    p.ir.replication_factor = 1  # the refused Session did not take the Ir
    with p.ir.main_graph:
        with popxl.ipu(0):
            a = p.w * 1.0
        ops.ipu_copy(a, 1)
    with pytest.raises(ValueError, match=r"needs 2 \(2 per replica"):
        popxl.Session(p.ir, "cpu")
    with popxl.Session(p.ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[p.y], W + 1)


# ---- Session (spec 1.10) ----
def session_program() -> tuple[Program, Any, popxl.Tensor, popxl.Session]:
    p = program()
    with p.ir.main_graph, popxl.in_sequence():  # after program()'s, which read w
        xin = popxl.h2d_stream((2, 3), popxl.float32, name="xin")
        x = ops.host_load(xin, "x")
        ops.var_updates.copy_var_update_(p.w, x)
    return p, xin, x, popxl.Session(p.ir, "cpu")


@pytest.mark.parametrize(
    "method, call",
    [
        ("run", lambda s, feeds: s.run(feeds)),
        ("run_with_outputs", lambda s, feeds: s.run_with_outputs(feeds, s.create_host_outputs())),
        ("weights_to_host", lambda s, feeds: s.weights_to_host()),
        ("weights_from_host", lambda s, feeds: s.weights_from_host()),
    ],
)
def test_session_calls_need_an_attached_session(method, call) -> None:
    p, xin, _, session = session_program()
    feeds = {xin: np.full((2, 3), 7, np.float32)}
    with pytest.raises(ValueError, match=rf"Session.{method}: the session is not attached"):
        call(session, feeds)
    np.testing.assert_array_equal(session.get_tensor_data(p.w), W)  # host copy untouched
    with session:
        session.run(feeds)
    np.testing.assert_array_equal(session.get_tensor_data(p.w), np.full((2, 3), 7))


def test_session_input_and_data_errors_name_the_stream_or_tensor() -> None:
    p, xin, x, session = session_program()
    with session:
        with pytest.raises(ValueError, match=r"stream 'xin' \(float32\): <U11 data cannot become"):
            session.run({xin: "not numbers"})
        with pytest.raises(
            TypeError,
            match=r"Tensor xin is not of type Constant or Variable\. .*HostToDeviceStream\[xin",
        ):
            session.get_tensor_data(xin)
        with pytest.raises(
            TypeError, match=r"Tensor x is not of type Constant or Variable\. .*Tensor\[x"
        ):
            session.get_tensors_data([p.w, x])
        with pytest.raises(TypeError, match=r"Tensor sc is not of type Variable\. .*Constant\[sc"):
            session.write_variables_data({p.w: np.zeros((2, 3), np.float32), p.sc: 1.0})
        np.testing.assert_array_equal(session.get_tensor_data(p.w), W)  # nothing written
        out = session.run({xin: np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out[p.y], W + 1)
    np.testing.assert_array_equal(session.get_tensor_data(p.w), np.ones((2, 3)))


def test_a_run_refused_at_run_time_leaves_the_session_usable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 2), np.float32), name="a")
        scale_in = popxl.h2d_stream((), popxl.int32, name="scale")
        zero = popxl.constant(0, popxl.int32, name="zero")
        a8 = ops.pow2scale_cast_to_fp8(a, data_type=popxl.float8_143, log2_scale=zero)
        r = ops.matmul_pow2scaled(a8, a8, ops.host_load(scale_in, "log2_scale"))
        out = popxl.d2h_stream(r.shape, r.dtype, name="r")
        ops.host_store(out, r)
    with popxl.Session(ir, "ipu_model") as session:
        with pytest.raises(
            popart.poplar_application_runtime_error, match=r"tensor 'log2_scale'.*= 40"
        ):
            session.run({scale_in: np.int32(40)})
        np.testing.assert_array_equal(session.run({scale_in: np.int32(1)})[out], np.full((2, 2), 4))


# ---- transforms (spec 1.12) ----
def test_io_tile_exchange_refusal_undoes_the_block() -> None:
    p = program()
    with p.ir.main_graph, popxl.in_sequence():  # after program()'s, which read w
        xin = popxl.h2d_stream((2, 3), popxl.float32, name="xin")
        before = state(p.ir)
        with (
            pytest.raises(RuntimeError, match="2 ops remain in graph 'main_graph'"),
            popxl.transforms.io_tile_exchange(),
        ):
            made = ops.host_load(xin, "made") + 1.0
        assert state(p.ir) == before
        with pytest.raises(
            ValueError, match=r"Mul: input 0 'add_out(__t\d+)?' is no longer in graph 'main_graph'"
        ):
            made * 2.0
        assert state(p.ir) == before
    runs(p)


def test_io_tile_exchange_does_not_count_the_ops_of_refused_calls() -> None:
    @atomic
    def adds_then_refuses(t: popxl.Tensor) -> None:
        t + 1.0  # an op, undone when the call is refused
        raise ValueError("refused")

    p = program()
    with p.ir.main_graph, popxl.in_sequence():  # after program()'s, which read w
        xin = popxl.h2d_stream((2, 3), popxl.float32, name="xin")
        with popxl.transforms.io_tile_exchange():
            loaded = ops.host_load(xin, "loaded")
            with pytest.raises(ValueError, match="refused"):
                adds_then_refuses(loaded)
        assert loaded.producer.tile_set == "io"
        assert [op.type for op in p.ir.main_graph.ops][-1] == "MultiExchange"


# ---- ReplicaGrouping (spec 2.1, 2.2) ----
@pytest.mark.parametrize(
    "args, match",
    [
        # PopXL's words first ("Stride must be", "Group size must be"), then the values
        ({"stride": 0}, "^Stride must be a positive divisor of the replication factor 8, got 0"),
        ({"stride": 16}, "^Stride must be .* divisor of the replication factor 8, got 16"),
        ({"stride": 3}, "^Stride must be a positive divisor of the replication factor 8, got 3"),
        ({"group_size": 0}, r"^Group size must be .* \(1\) divides the replication factor 8"),
        ({"group_size": 16}, "^Group size must be .* divides the replication factor 8, got 16"),
        ({"stride": 2, "group_size": 8}, r"^Group size must be .*stride \(2\).* 8, got 8"),
    ],
)
def test_replica_grouping_arguments(args, match) -> None:
    with pytest.raises(ValueError, match=match):
        popxl.Ir(replication=8).replica_grouping(**args)


@pytest.mark.parametrize(
    "assignment, match",
    [
        ([0, 0, 0, 1, 1, 1, 1, 1], "groups must have equal sizes"),
        ([1, 1, 0, 0, 1, 1, 0, 0], "numbered in order of first appearance"),
        ([0, 0, 1, 1], r"4 entries; expected one per replica \(8\)"),
    ],
)
def test_replica_grouping_from_assignments_arguments(assignment, match) -> None:
    with pytest.raises(ValueError, match=match):
        popxl.Ir(replication=8).replica_grouping_from_assignments(assignment)


def test_replica_grouping_misuse() -> None:
    ir = popxl.Ir(replication=8)
    with pytest.raises(RuntimeError, match=r"constructed directly: use ir.replica_grouping"):
        popxl.ReplicaGrouping()
    nc = ir.replica_grouping_from_assignments([0, 0, 1, 1, 0, 0, 1, 1])
    named = r"ReplicaGrouping\(assignment=\[0, 0, 1, 1, 0, 0, 1, 1\]\)"
    with pytest.raises(NotImplementedError, match=named + " has no stride"):
        nc.stride  # noqa: B018
    with pytest.raises(NotImplementedError, match=named + " is not a constant-stride"):
        nc._pb_replica_grouping  # noqa: B018
    with pytest.raises(TypeError, match=named + " with int"):
        nc == 3  # noqa: B015
    with ir.main_graph:
        t = popxl.variable(np.ones(2, np.float32), name="t")
        before = state(ir)
        with pytest.raises(NotImplementedError, match=r"replicated_all_reduce of 't': " + named):
            ops.collectives.replicated_all_reduce(t, group=nc)
        assert state(ir) == before
    assert nc.const_rg.stride == 1 and nc.group_size == 4


# ---- code_copy (spec 1.14: exists, not exported, always NotImplementedError) ----
def test_code_copy_is_not_implemented() -> None:
    from popxl.ops.code_copy import code_copy

    assert "code_copy" not in ops.__all__
    p = program()
    with pytest.raises(NotImplementedError, match=r"code of graph 'add1_subgraph\(0\)'"):
        code_copy(p.add1, "executable", "executable")


# ---- PopXL's exception types and message openings (spec/popxl-fidelity.md section 9) ----


def _types_case(build: Callable[[popxl.Ir], Any]) -> Callable[[], Any]:
    def run() -> Any:
        ir = popxl.Ir()
        with ir.main_graph:
            return build(ir)

    return run


F32 = np.ones((2, 4), np.float32)
#: (id, exception types the error must be, message pattern, action)
POPXL_ERRORS: list[tuple[str, tuple[type, ...], str, Callable[[], Any]]] = [
    ("broadcast", (popart.popart_exception, ValueError),
     r"np broadcasting failed on 'Op Add', frames \[2, 4\] and \[3\] are not aligned",
     _types_case(lambda ir: popxl.variable(F32) + popxl.variable(np.ones(3, np.float32)))),
    ("dtypes", (popart.popart_exception, TypeError),
     r"np broadcasting failed on Op Add, incompatible types FLOAT and FLOAT16",
     _types_case(lambda ir: ops.add(popxl.variable(F32), popxl.variable(F32.astype(np.float16))))),
    ("matmul", (popart.popart_exception, ValueError), "contracting dimensions unequal",
     _types_case(lambda ir: popxl.variable(F32) @ popxl.variable(F32))),
    ("concat type", (TypeError,), "All inputs to a concat operation must have the same type:",
     _types_case(lambda ir: ops.concat([popxl.variable(F32), popxl.variable(F32 > 0)]))),
    ("concat shape", (popart.popart_exception, ValueError), "does not match input 0",
     _types_case(lambda ir: ops.concat([popxl.variable(F32), popxl.variable(F32.T)]))),
    ("split sizes", (popart.popart_exception, ValueError),
     r"splits \[1, 2\] invalid for dimension of size 4",
     _types_case(lambda ir: ops.split(popxl.variable(F32), [1, 2], axis=1))),
    ("split equal", (ValueError,), "does not equally divide",
     _types_case(lambda ir: ops.split(popxl.variable(F32), 3, axis=1))),
    ("reshape value", (ValueError,), "Invalid shape value in reshape",
     _types_case(lambda ir: popxl.variable(F32).reshape((-2, 4)))),
    ("reshape -1", (ValueError,), "at most one '-1' value",
     _types_case(lambda ir: popxl.variable(F32).reshape((-1, -1)))),
    ("get_tensor", (popart.popart_exception, KeyError),
     r"No Ir::Tensor with TensorId 'nope' in Tensors::get\(\.\.\)",
     _types_case(lambda ir: ir.main_graph.get_tensor("nope"))),
    ("index", (TypeError,), "Only integers, slices",
     _types_case(lambda ir: popxl.variable(F32)[1.5])),
    ("call info", (popart.popart_exception, ValueError),
     r"CallOp input \(@0\) does not match callee input tensor \(@0\)",
     _types_case(lambda ir: ops.call(ir.create_graph(lambda x: x + 1, popxl.variable(F32)),
                                     popxl.variable(F32.T)))),
    ("dtype()", (TypeError,), r"Cannot create popxl\.dtypes\.dtype instances\.", popxl.dtype),
]  # fmt: skip


@pytest.mark.parametrize("case, types, match, action", POPXL_ERRORS,
                         ids=[c[0] for c in POPXL_ERRORS])  # fmt: skip
def test_popxl_exception_types_and_messages(case, types, match, action) -> None:
    with pytest.raises(types[0], match=match) as info:
        action()
    assert isinstance(info.value, types), (case, type(info.value).__mro__)


def test_popart_exception_catches_popxl_setup_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(F32, name="a")
        try:
            a + popxl.variable(np.ones(3, np.float32))
        except popart.popart_exception as err:  # as PopXL programs catch it
            assert "frames [2, 4] and [3]" in str(err)
        else:
            raise AssertionError("no popart_exception")
    assert [t.id for t in ir.main_graph.tensors] == ["a", "t"]  # the refused add left nothing


def test_call_site_info_errors() -> None:
    p = program()
    with p.ir.main_graph:
        info = ops.call_with_info(p.add1, p.w)
        assert info.parent_input(0) is p.w and info.parent_output(-1) is info.outputs[0]
        with pytest.raises(IndexError, match="Invalid parent graph input index: 1"):
            info.parent_input(1)
        with pytest.raises(IndexError, match="Invalid parent graph output index: 3"):
            info.parent_output(3)
        with pytest.raises(ValueError, match="is not an input or output of the called graph"):
            info.graph_to_parent(p.oc)
        with pytest.raises(ValueError, match="is not a parent graph input of the call site"):
            info.parent_to_graph(p.sc)


def test_a_tensor_of_another_ir_or_graph_is_named_as_such() -> None:
    """Issue 15: two main graphs share the name 'main_graph'; the message says 'another Ir'."""
    first, second = popxl.Ir(), popxl.Ir()
    with first.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
    with second.main_graph, pytest.raises(ValueError) as other_ir:
        _ = a + 1
    # PopXL's words first (check_in_graph names ops.add's argument), then which Ir or graph
    assert str(other_ir.value).startswith(
        "The input tensor `lhs` is not in the current Graph main_graph. add: input lhs 'a' "
        "belongs to another Ir"
    )
    assert "make it in this Ir" in str(other_ir.value)
    sub = first.create_empty_graph("sub")  # named 'sub_subgraph(0)', as PopXL names it
    message = r"belongs to graph 'main_graph', not to the current graph 'sub_subgraph\(0\)': pass"
    with sub, pytest.raises(ValueError, match=message):
        _ = a + 1


def test_integer_division_by_zero_gives_zero_without_a_warning() -> None:
    """Issue 15: as popops (C division, Tremula defines x / 0 = 0 and fmod(x, 0) = 0, NumPy's
    integer results), with no warning (the suite turns warnings into errors)."""
    ir = popxl.Ir()
    with ir.main_graph:
        p = popxl.variable(np.array([7, -7, 0, 5], np.int32))
        q = popxl.variable(np.array([0, 0, 0, 2], np.int32))
        quotient = popxl.d2h_stream((4,), popxl.int32)
        remainder = popxl.d2h_stream((4,), popxl.int32)
        ops.host_store(quotient, p / q)
        ops.host_store(remainder, ops.fmod(p, q))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run()
    np.testing.assert_array_equal(out[quotient], [0, 0, 0, 2])
    np.testing.assert_array_equal(out[remainder], [0, 0, 0, 1])


def test_nll_reduction_and_remote_store_mismatch_give_popxl_messages() -> None:
    """Programs match on PopXL's gist: ``Not a valid reduction`` and
    ``Tensor <id> does not match buffer.`` (spec: popxl-fidelity 4 and 9)."""
    ir = popxl.Ir()
    with ir.main_graph:
        probs = popxl.variable(np.full((2, 3), 1 / 3, np.float32), name="probs")
        labels = popxl.constant(np.zeros(2, np.int32), name="labels")
        with pytest.raises(ValueError, match=r"Not a valid reduction: 'avg' \(nll_loss\)"):
            ops.nll_loss(probs, labels, reduction="avg")
        buffer = popxl.remote_buffer((3, 2), popxl.float32)
        with pytest.raises(
            ValueError,
            match=r"Tensor probs does not match buffer. Tensor: popxl.dtypes.float32 \(2, 3\); "
            r"remote buffer 1: popxl.dtypes.float32 \(3, 2\)",
        ):
            ops.remote_store(buffer, 0, probs)


def test_an_error_while_lowering_names_the_op_its_debug_name_and_the_users_line() -> None:
    """poplin refuses a MatMul of bool tensors when the Session lowers the graph (PopXL's
    matmul takes any dtype); the error says which PopXL op it was, its debug name and the
    line that created it."""
    import inspect

    ir = popxl.Ir()
    with ir.main_graph, popxl.name_scope("layer"):
        x = popxl.variable(np.ones((2, 2), dtype=bool), name="x")
        line = inspect.currentframe().f_lineno + 1
        y = ops.matmul(x, x)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype), y)
    assert y.producer.debug_name == "layer/MatMul"
    assert y.producer.created_at == f"{__file__}:{line}"
    with pytest.raises(ValueError) as info:
        popxl.Session(ir, "ipu_model")
    message = str(info.value)
    assert message.startswith(f"lowering op MatMul 'layer/MatMul' (output '{y.id}'; created at ")
    assert f"{__file__}:{line})" in message and "has type bool" in message
