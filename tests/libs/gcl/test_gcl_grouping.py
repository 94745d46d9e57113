"""Replica groupings: the spec's tables, validation, transpose and CommGroup conversions, and
properties over random groupings (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tremula.libs.gcl import CommGroup, CommGroupType, GroupingError, ReplicaGrouping

RG = ReplicaGrouping


# ---- the spec's tables ----

SPEC_R8 = {
    (1, 8): [0, 0, 0, 0, 0, 0, 0, 0],
    (1, 2): [0, 0, 1, 1, 2, 2, 3, 3],
    (1, 4): [0, 0, 0, 0, 1, 1, 1, 1],
    (2, 2): [0, 1, 0, 1, 2, 3, 2, 3],
    (2, 4): [0, 1, 0, 1, 0, 1, 0, 1],
    (4, 2): [0, 1, 2, 3, 0, 1, 2, 3],
    (1, 1): [0, 1, 2, 3, 4, 5, 6, 7],
}


@pytest.mark.parametrize("stride,size", list(SPEC_R8))
def test_spec_assignment_table(stride, size):
    rg = RG(8, stride, size)
    assert rg.assignment == SPEC_R8[stride, size]
    assert rg.is_const and rg.const_rg is rg
    assert (rg.stride, rg.group_size, rg.num_groups) == (stride, size, 8 // size)
    assert rg.to_device_map is None and rg.to_host_map is None


def test_defaults_normalisation_and_repr():
    assert RG(8, 2).group_size == 4
    assert RG(8).group_size == 8
    assert RG(8, 4, 1).stride == 1  # a group size of 1 normalises the stride
    want = "ReplicaGrouping(num_replicas=8, stride=2, group_size=4, num_groups=2)"
    assert repr(RG(8, 2, 4)) == want
    nc = RG.from_assignment([0, 0, 1, 1, 0, 0, 1, 1])
    assert repr(nc) == "ReplicaGrouping(assignment=[0, 0, 1, 1, 0, 0, 1, 1])"
    assert RG.all(4) == RG(4, 1, 4) and RG.ungrouped(4) == RG(4, 1, 1)
    assert RG(8, 2, 4) != RG(8, 1, 4) and hash(RG(8, 2, 4)) == hash(RG(8, 2, 4))
    assert RG(4) != "RG"


def test_spec_non_constant_example():
    rg = RG.from_assignment([0, 0, 1, 1, 0, 0, 1, 1])
    assert not rg.is_const
    assert rg.const_rg.assignment == [0, 0, 1, 1, 2, 2, 3, 3]
    assert rg.const_rg == RG(8, 1, 2)
    assert rg.to_device_map == [0, 1, 0, 1]
    assert rg.to_host_map == [0, 1]
    assert (rg.group_size, rg.num_groups) == (4, 2)
    assert rg.groups() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    with pytest.raises(NotImplementedError, match="not a constant grouping"):
        _ = rg.stride


@pytest.mark.parametrize(
    "args,want", [((1, 1), (1, 16)), ((1, 4), (4, 4)), ((2, 8), (1, 2)), ((8, 2), (1, 8))]
)
def test_spec_transpose_r16(args, want):
    t = RG(16, *args).transpose()
    assert t == RG(16, *want) and t.is_const and t.stride == want[0]


def test_spec_transpose_r8_non_constant_round_trip():
    t = RG(8, 2, 2).transpose()
    assert t.assignment == [0, 0, 1, 1, 0, 0, 1, 1] and not t.is_const
    back = t.transpose()
    assert back.is_const and back.assignment == [0, 1, 0, 1, 2, 3, 2, 3]


def test_queries():
    rg = RG(8, 2, 2)
    assert rg.groups() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert [rg.group_of(r) for r in range(8)] == SPEC_R8[2, 2]
    assert [rg.index_in_group(r) for r in range(8)] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert rg.replica_at(2, 1) == 6 and rg.replicas_of(3) == [5, 7]
    assert rg.shifted(1).tolist() == [2, 3, 0, 1, 6, 7, 4, 5]
    assert rg.shifted(-1).tolist() == rg.shifted(1).tolist()
    for call, match in [
        (lambda: rg.group_of(8), "replica 8 out of range for 8"),
        (lambda: rg.replicas_of(4), "group 4 out of range for 4"),
        (lambda: rg.replica_at(0, 2), "index 2 out of range"),
    ]:
        with pytest.raises(GroupingError, match=match):
            call()


@pytest.mark.parametrize(
    "args,match",
    [
        ((0,), "num_replicas must be >= 1, got 0"),
        ((8, 0), "stride 0 must satisfy 0 < stride <= num_replicas"),
        ((8, 9), "stride 9 must satisfy"),
        ((8, 3), "stride 3 does not divide num_replicas 8"),
        ((8, 1, 0), "group_size 0 must satisfy 0 < group_size"),
        ((8, 1, 9), "group_size 9 must satisfy"),
        ((8, 2, 8), r"stride x group_size = 16 must divide 8"),
        ((8, 1, 3), r"stride x group_size = 3 must divide 8"),
        ((8, 1.5), "stride must be an integer, got 1.5"),
    ],
)
def test_constructor_errors(args, match):
    with pytest.raises(GroupingError, match=match) as err:
        RG(*args)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "assignment,num,match",
    [
        ([], None, "non-empty list of integer"),
        ([0.0, 1.0], None, "non-empty list of integer"),
        ([1, 0], None, "order of first appearance"),
        ([0, 2, 1, 1, 2, 0], None, "order of first appearance"),
        ([0, 2, 2, 0], None, "0..G-1"),
        ([0, 0, 1], None, r"equal sizes, got \{0: 2, 1: 1\}"),
        ([0, 1], 4, "2 entries; expected one per replica \\(4\\)"),
    ],
)
def test_from_assignment_errors(assignment, num, match):
    with pytest.raises(GroupingError, match=match):
        RG.from_assignment(assignment, num)


# ---- CommGroup ----


@pytest.mark.parametrize(
    "rg,cg",
    [
        (RG(8, 1, 1), CommGroup(CommGroupType.NONE, 0)),
        (RG(8, 1, 8), CommGroup(CommGroupType.ALL, 0)),
        (RG(8, 4, 2), CommGroup(CommGroupType.ORTHOGONAL, 2)),
        (RG(8, 2, 4), CommGroup(CommGroupType.ORTHOGONAL, 4)),
        (RG(8, 1, 2), CommGroup(CommGroupType.CONSECUTIVE, 2)),
        (RG(1), CommGroup(CommGroupType.NONE, 0)),
    ],
)
def test_comm_group_table(rg, cg):
    assert rg.to_comm_group() == cg
    assert cg.to_grouping(rg.num_replicas) == rg
    assert RG.from_comm_group(cg, rg.num_replicas) == rg


def test_comm_group_reverse_rules_and_popart_tables():
    R = 16
    assert CommGroup(CommGroupType.ALL, 3).to_grouping(R) == RG(R, 1, R)
    assert CommGroup(CommGroupType.NONE, 5).to_grouping(R) == RG(R, 1, 1)
    assert CommGroupType.UNGROUPED is CommGroupType.NONE
    cons = CommGroup(CommGroupType.CONSECUTIVE, 4).to_grouping(R)
    assert cons.groups() == [list(range(4 * g, 4 * g + 4)) for g in range(4)]
    orth = CommGroup(CommGroupType.ORTHOGONAL, 4).to_grouping(R)
    assert orth.groups() == [[g, g + 4, g + 8, g + 12] for g in range(4)]
    assert CommGroup(CommGroupType.UNGROUPED).to_grouping(R).groups() == [[r] for r in range(R)]
    assert CommGroup().to_grouping(R).groups() == [list(range(R))]
    assert CommGroup(2, 4).type is CommGroupType.ORTHOGONAL


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: CommGroup(CommGroupType.CONSECUTIVE, 3).to_grouping(4), "CONSECUTIVE, 3.*4"),
        (lambda: CommGroup(CommGroupType.ORTHOGONAL, 0).to_grouping(4), "ORTHOGONAL, 0"),
        (lambda: CommGroup(CommGroupType.ALL, -1), "must be >= 0, got -1"),
        (lambda: CommGroup(7, 1), "type 7 unknown"),
        (lambda: RG(8, 2, 2).to_comm_group(), "has no CommGroup"),
        (lambda: RG.from_assignment([0, 0, 1, 1, 0, 0, 1, 1]).to_comm_group(), "no CommGroup"),
    ],
)
def test_comm_group_errors(call, match):
    with pytest.raises(GroupingError, match=match):
        call()


# ---- properties ----


def _greedy(R: int, stride: int, size: int) -> list[int]:
    """The spec's assignment algorithm, literally."""
    stride = 1 if size == 1 else stride
    assign = [-1] * R
    for g in range(R // size):
        r0 = assign.index(-1)
        for i in range(size):
            assign[r0 + i * stride] = g
    return assign


@st.composite
def constant_groupings(draw) -> tuple[int, int, int]:
    R = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    stride = draw(st.sampled_from([s for s in range(1, R + 1) if R % s == 0]))
    size = draw(st.sampled_from([k for k in range(1, R // stride + 1) if R % (stride * k) == 0]))
    return R, stride, size


@st.composite
def assignments(draw) -> list[int]:
    """Any partition into equal groups, numbered by first appearance."""
    size, groups = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    perm = np.array(draw(st.permutations(range(size * groups))))
    raw = np.empty(size * groups, dtype=np.int64)
    raw[perm] = np.repeat(np.arange(groups), size)
    _, first = np.unique(raw, return_index=True)
    relabel = np.empty(groups, dtype=np.int64)
    relabel[np.argsort(first)] = np.arange(groups)
    return relabel[raw].tolist()


def _check_partition(rg: ReplicaGrouping) -> None:
    members = np.array(rg.groups())
    assert members.shape == (rg.num_groups, rg.group_size)
    assert sorted(members.ravel().tolist()) == list(range(rg.num_replicas))
    assert np.all(np.diff(members, axis=1) > 0)
    for g, row in enumerate(members.tolist()):
        for i, r in enumerate(row):
            assert rg.group_of(r) == g and rg.index_in_group(r) == i and rg.replica_at(g, i) == r


@given(constant_groupings())
def test_constant_grouping_properties(args):
    R, stride, size = args
    rg = RG(R, stride, size)
    assert rg.assignment == _greedy(R, stride, size)
    _check_partition(rg)
    m = rg.group_matrix
    if size > 1:
        assert np.all(np.diff(m, axis=1) == stride)
    assert RG.from_assignment(rg.assignment) == rg
    assert RG.from_assignment(rg.assignment).is_const
    t = rg.transpose()
    _check_partition(t)
    assert t.transpose() == rg  # an involution on constant groupings
    assert t.assignment == rg.indices_in_group.tolist()
    if stride == 1 or stride * size == R:  # the spec's constant fast path
        assert t == RG(R, 1 if stride > 1 else size, rg.num_groups) and t.is_const


@given(assignments())
def test_arbitrary_assignment_properties(assignment):
    rg = RG.from_assignment(assignment)
    assert rg.assignment == assignment
    _check_partition(rg)
    const = rg.const_rg
    assert const.is_const and const.num_replicas == rg.num_replicas
    user = rg.assignment_array[const.group_matrix]
    assert np.all(user == user[:, :1])  # const_rg refines rg
    t = rg.transpose()
    _check_partition(t)
    assert t.transpose().transpose() == t
    if rg.is_const:
        assert rg.to_device_map is None and rg.to_host_map is None
        assert rg.transpose().transpose() == rg
        return
    device, host = np.array(rg.to_device_map), np.array(rg.to_host_map)
    assert device.tolist() == user[:, 0].tolist()
    assert device[host].tolist() == list(range(rg.num_groups))
    assert all(np.flatnonzero(device == j)[0] == h for j, h in enumerate(host.tolist()))
