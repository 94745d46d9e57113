"""Program nodes check their operands when built: each bad one raises ProgramError naming it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tremula import poplar
from tremula.errors import ProgramError
from tremula.poplar import program as prog
from tremula.target import ipu2


@pytest.fixture
def g():
    return poplar.Graph(ipu2(tiles_per_ipu=4))


@pytest.fixture
def t(g):
    """Named tensors of one graph, plus a stream pair, a remote buffer and a host function."""
    v = {
        "a": g.add_variable(poplar.FLOAT, (2, 3), "a"),
        "a2": g.add_variable(poplar.FLOAT, (2, 3), "a2"),
        "h": g.add_variable(poplar.HALF, (2, 3), "h"),
        "c": g.add_variable(poplar.FLOAT, 7, "c"),
        "i2": g.add_variable(poplar.INT, 2, "i2"),
        "u1": g.add_variable(poplar.UNSIGNED_INT, 1, "u1"),
        "f1": g.add_variable(poplar.FLOAT, 1, "f1"),
        "p": g.add_variable(poplar.BOOL, (), "p"),
    }
    v["in"] = g.add_host_to_device_fifo("in", poplar.FLOAT, 6)
    v["out"] = g.add_device_to_host_fifo("out", poplar.FLOAT, 6)
    v["rb"] = g.add_remote_buffer("rb", poplar.FLOAT, 3, repeats=4)
    v["cb"] = g.add_host_function("cb", [(poplar.FLOAT, 6)], [(poplar.INT, 2)])
    return v


def test_good_copies(g, t):
    prog.Copy(t["a"], t["a2"])
    prog.Copy(t["a"].T, t["a2"].T)
    prog.Copy(t["in"], t["a"])
    prog.Copy(t["a"], t["out"])
    prog.Copy(t["rb"], t["a"][0], offset=3)
    prog.Copy(t["a"][1], t["rb"], offset=0)
    prog.Copy(t["rb"], t["a"], offset=t["i2"])  # two rows, one per offset element
    fn = g.add_function(prog.Sequence(), "f")
    prog.Copy(g.add_function_buffer(fn), fn)


BAD_COPIES = [
    (("a", "h"), "Copy: source type float != destination type half"),
    (("a", "c"), "Copy: source shape (2, 3) != destination shape (7,)"),
    (("out", "a"), "Copy: stream 'out' is device_to_host, used as host_to_device"),
    (("a", "in"), "Copy: stream 'in' is host_to_device, used as device_to_host"),
    (("in", "c"), "Copy: stream 'in' carries 6 elements, tensor has 7 (shape (7,))"),
    (("h", "out"), "Copy: stream 'out' has type float, tensor has half"),
    (("rb", "a"), "remote buffer 'rb' rows have 3 elements; 1 row(s) need 3, tensor has 6"),
    (("rb", "h"), "Copy: remote buffer 'rb' has type float, tensor has half"),
    (("in", "out"), "Copy: cannot copy from DataStream to DataStream"),
]


@pytest.mark.parametrize(("operands", "message"), BAD_COPIES)
def test_bad_copies(t, operands, message):
    src, dst = (t[k] for k in operands)
    with pytest.raises(ProgramError, match=re.escape(message)):
        prog.Copy(src, dst)


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (4, "Copy: offset 4 out of range for remote buffer 'rb' with 4 repeats"),
        (-1, "Copy: offset -1 out of range for remote buffer 'rb' with 4 repeats"),
        ("f1", "Copy: remote buffer offset must be an integer tensor, got float"),
        ("i2", "'rb' rows have 3 elements; 2 row(s) need 6, tensor has 3"),
    ],
)
def test_bad_remote_buffer_offsets(t, offset, message):
    with pytest.raises(ProgramError, match=re.escape(message)):
        prog.Copy(t["rb"], t["a"][0], offset=t.get(offset, offset))


def test_remote_buffer_numpy_integer_offset(t):
    assert prog.Copy(t["rb"], t["a"][0], offset=np.int64(2)).offset == 2


def test_function_buffer_must_hold_the_function(g):
    f1, f2 = g.add_function(prog.Sequence(), "f1"), g.add_function(prog.Sequence(), "f2")
    with pytest.raises(
        ProgramError,
        match=r"function buffer holds Function\(0, 'f1'\), not "
        r"Function\(1, 'f2'\)",
    ):
        prog.Copy(g.add_function_buffer(f1), f2)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: prog.If(p, prog.Sequence()),
        lambda p: prog.RepeatWhileTrue(prog.Sequence(), p, prog.Sequence()),
        lambda p: prog.RepeatWhileFalse(prog.Sequence(), p, prog.Sequence()),
    ],
)
def test_predicates_have_one_element(t, make):
    for good in ("p", "f1", "u1"):
        make(t[good])
    with pytest.raises(
        ProgramError, match=re.escape("predicate must have one element, got shape (2, 3)")
    ):
        make(t["a"])
    with pytest.raises(ProgramError, match="predicate must be a Tensor, got int"):
        make(1)


def test_switch(t):
    s = prog.Switch(t["u1"], [(1, prog.Sequence(name="one"))]).add(-2, prog.Sequence())
    assert [v for v, _ in s.cases] == [1, -2] and len(s.children()) == 3
    with pytest.raises(ProgramError, match=re.escape("Switch: duplicate case values in [1, 1]")):
        prog.Switch(t["u1"], [(1, prog.Sequence()), (1, prog.Sequence())])
    with pytest.raises(ProgramError, match=re.escape("duplicate case values in [1, -2, 2, 1]")):
        s.add(2, prog.Sequence()).add(1, prog.Sequence())
    with pytest.raises(ProgramError, match="Switch: control must be an integer tensor, got float"):
        prog.Switch(t["f1"], [(1, prog.Sequence())])
    with pytest.raises(
        ProgramError, match=re.escape("Switch: the predicate must have one element, got shape (2,)")
    ):
        prog.Switch(t["i2"])
    with pytest.raises(ProgramError, match="Switch case 3: expected a program, got str"):
        prog.Switch(t["u1"], [(3, "x")])


def test_call(g, t):
    prog.Call(t["cb"], [t["a"]], [t["i2"]])
    prog.Call(t["cb"], [t["c"][:6]], [t["i2"]])  # sizes count, not shapes
    prog.Call(g.add_function(prog.Sequence()))
    bad = [
        (([t["h"]], [t["i2"]]), "input 0 declared float[6], got half[6]"),
        (([t["c"]], [t["i2"]]), "input 0 declared float[6], got float[7]"),
        (([t["a"]], [t["a"]]), "output 0 declared int[2], got float[6]"),
        (([t["a"]], []), "1 output(s) declared, 0 given"),
        (([], [t["i2"]]), "1 input(s) declared, 0 given"),
        ((["a"], [t["i2"]]), "input 0 is not a Tensor"),
    ]
    for (inputs, outputs), message in bad:
        with pytest.raises(ProgramError, match=re.escape(f"Call host function 'cb': {message}")):
            prog.Call(t["cb"], inputs, outputs)
    with pytest.raises(ProgramError, match="a graph function takes no tensor arguments"):
        prog.Call(g.add_function(prog.Sequence()), [t["a"]])
    with pytest.raises(ProgramError, match="expected a Function or HostFunction, got str"):
        prog.Call("cb")


def test_repeat_sequence_and_other_nodes(g):
    body = prog.Sequence()
    assert prog.Repeat(0, body).count == 0
    for count in (-1, 2.5):
        with pytest.raises(
            ProgramError,
            match=re.escape(f"Repeat: count must be a non-negative integer, got {count}"),
        ):
            prog.Repeat(count, body)
    with pytest.raises(ProgramError, match="Repeat body: expected a program, got str"):
        prog.Repeat(2, "body")
    seq = prog.Sequence(name="main")
    assert seq.add(body) is seq and seq.children() == (body,)
    with pytest.raises(
        ProgramError, match=re.escape("Sequence.add ('main'): expected a program, got int")
    ):
        seq.add(3)
    with pytest.raises(ProgramError, match="Sequence 'top': expected a program, got ComputeSet"):
        prog.Sequence([body, g.add_compute_set("cs")], name="top")
    with pytest.raises(ProgramError, match="Execute: expected a ComputeSet, got str"):
        prog.Execute("cs")
    with pytest.raises(ProgramError, match="Sync: sync type 'foo' unknown"):
        prog.Sync("foo")
    assert prog.Sync(prog.SyncType.GLOBAL).sync_type == "external"
    with pytest.raises(ProgramError, match="PrintTensor: expected a Tensor"):
        prog.PrintTensor("title")


def test_walk_visits_parents_before_children_in_order(g, t):
    cs = g.add_compute_set("cs")
    leaf = {name: prog.Execute(cs, name=name) for name in "abcdefgh"}
    tree = prog.Sequence(
        [
            leaf["a"],
            prog.Repeat(2, prog.Sequence([leaf["b"], leaf["c"]], name="rep_body"), name="rep"),
            prog.If(t["p"], leaf["d"], leaf["e"], name="if"),
            prog.RepeatWhileTrue(leaf["f"], t["p"], leaf["g"], name="while"),
            prog.Switch(t["u1"], [(0, leaf["h"])], name="switch"),
            prog.Call(g.add_function(prog.Sequence([leaf["a"]])), name="call"),  # not entered
        ],
        name="main",
    )
    names = [p.name for p in prog.walk(tree)]
    assert names == [
        "main",
        "a",
        "rep",
        "rep_body",
        "b",
        "c",
        "if",
        "d",
        "e",
        "while",
        "f",
        "g",
        "switch",
        "h",
        "",
        "call",
    ]
