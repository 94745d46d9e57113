"""CommGroup, VariableSettings and ReplicaGrouping against spec/popart.md section 2 (the tables
written out independently here) and the chapter's tables 6.1 to 6.4."""

from __future__ import annotations

import pytest

import popart
from popart import CommGroup, CommGroupType, VariableRetrievalMode, VariableSettings
from popart._internal.ir import ReplicaGrouping  # only there, as in PopART (spec 1.1, 2.4)

OPG, ARED, ALLR = (
    VariableRetrievalMode.OnePerGroup,
    VariableRetrievalMode.AllReduceReplicas,
    VariableRetrievalMode.AllReplicas,
)
REPLICAS = (1, 2, 4, 8, 16)


def _ref_groups(kind: CommGroupType, R: int, k: int) -> list[list[int]]:
    """The groups of spec 2.3, written out: Consecutive blocks, Orthogonal strides."""
    if kind == CommGroupType.All:
        return [list(range(R))]
    if kind == CommGroupType.Ungrouped or k == 1:
        return [[r] for r in range(R)]
    G = R // k
    if kind == CommGroupType.Consecutive:
        return [[g * k + i for i in range(k)] for g in range(G)]
    return [[g + i * G for i in range(k)] for g in range(G)]


def _cases():
    for R in REPLICAS:
        for k in [d for d in range(1, R + 1) if R % d == 0]:
            yield CommGroupType.Consecutive, R, k
            yield CommGroupType.Orthogonal, R, k
        yield CommGroupType.All, R, 0
        yield CommGroupType.Ungrouped, R, 0


@pytest.mark.parametrize(("kind", "R", "k"), list(_cases()))
def test_spec_table(kind: CommGroupType, R: int, k: int) -> None:
    cg = CommGroup(kind, k)
    groups = _ref_groups(kind, R, k)
    G = len(groups)
    for mode in (OPG, ARED, ALLR):
        vs = VariableSettings(cg, mode)
        assert vs.getGroupCount(R) == vs.groupCount(R) == G
        want = R if mode == ALLR else G
        assert vs.numReplicasReturningVariable(R) == want
        assert vs.groups(R) == groups
        real = {CommGroupType.All: R, CommGroupType.Ungrouped: 1}.get(kind, k)
        assert vs.getRealGroupSize(R) == real
        stride = R // k if kind == CommGroupType.Orthogonal else 1
        assert vs.getStride(R) == stride
        assert vs.getStride() == 0  # the CommGroup form stores no stride
        assert [vs.getGroupRepresentative(g) for g in range(G)] == [grp[0] for grp in groups]
        rg = vs.getReplicaGrouping(R)
        assert (rg.getNumReplicas(), rg.getGroupSize()) == (R, len(groups[0]))
        assert [rg.getReplicasAt(g) for g in range(rg.getNumGroups())] == groups
        assert vs.shapeOnHost([2, 3], R) == ([2, 3] if G == 1 else [G, 2, 3])
        assert vs.shapeOnReplica(vs.shapeOnHost([2, 3], R), R, "w") == [2, 3]


def test_chapter_tables_16_replicas() -> None:
    R = 16
    assert VariableSettings(CommGroup(CommGroupType.All, 0)).groups(R) == [list(range(16))]
    assert VariableSettings(CommGroup(CommGroupType.Consecutive, 4)).groups(R) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]
    assert VariableSettings(CommGroup(CommGroupType.Orthogonal, 4)).groups(R) == [
        [0, 4, 8, 12],
        [1, 5, 9, 13],
        [2, 6, 10, 14],
        [3, 7, 11, 15],
    ]
    assert VariableSettings(CommGroup(CommGroupType.Ungrouped, 0)).groups(R) == [
        [r] for r in range(16)
    ]


def test_orthogonal_is_group_size_after_2022() -> None:
    # R=8, Orthogonal 2: groups of 2 replicas 4 apart (not 2 groups)
    vs = VariableSettings(CommGroup(CommGroupType.Orthogonal, 2))
    assert vs.getGroupCount(8) == 4
    assert vs.groups(8) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_chapter_buffers_and_listing_shapes() -> None:
    cons2 = CommGroup(CommGroupType.Consecutive, 2)
    assert VariableSettings(cons2, OPG).shapeOnHost([2, 3, 4], 4) == [2, 2, 3, 4]
    assert [VariableSettings(cons2, m).numReplicasReturningVariable(4) for m in (OPG, ALLR)] == [
        2,
        4,
    ]
    assert VariableSettings(CommGroup(CommGroupType.Consecutive, 1)).getGroupCount(4) == 4


def test_stride_form() -> None:
    vs = VariableSettings(2, 2, OPG)
    assert not vs.isUsingCommGroup()
    assert vs.getGroupRepresentative(2) == 4
    assert vs.groups(8) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    counts = [VariableSettings(4, 2, m).numReplicasReturningVariable(8) for m in (OPG, ARED, ALLR)]
    assert counts == [4, 4, 8]
    v = VariableSettings(4, 2, OPG)
    assert (v.getGroupCount(8), v.getStride(8), v.getRealGroupSize(8)) == (4, 4, 2)
    assert VariableSettings(3, 1, OPG).getStride() == 1  # group size 1 forces stride 1
    with pytest.raises(
        popart.popart_exception, match="not initialised using a `popart::CommGroup`"
    ):
        vs.getSharedVariableDomain()
    with pytest.raises(popart.popart_exception, match="should have at least one dimension"):
        vs.shapeOnReplica([], 8, "s")


def test_constructors_and_equality() -> None:
    default = VariableSettings()
    assert default.getSharedVariableDomain() == CommGroup(CommGroupType.All, 0)
    assert default.getRetrievalMode() == OPG
    assert VariableSettings(ALLR).getSharedVariableDomain() == CommGroup()
    assert VariableSettings(CommGroup(CommGroupType.Orthogonal, 2)).getRetrievalMode() == OPG
    assert VariableSettings(CommGroup(CommGroupType.All, 0)) == VariableSettings()
    assert VariableSettings(2, 2, OPG) != VariableSettings(CommGroup(CommGroupType.Consecutive, 2))
    assert VariableSettings(sharedVariableDomain_=CommGroup(), retrievalMode_=ALLR) == (
        VariableSettings(ALLR)
    )
    assert CommGroup(CommGroupType.All, 0) != CommGroup(CommGroupType.All, 1)
    # All with size 1 counts as Ungrouped, but its real group size is R
    all1 = VariableSettings(CommGroup(CommGroupType.All, 1))
    assert (all1.getGroupCount(4), all1.getRealGroupSize(4)) == (4, 4)


def test_errors() -> None:
    with pytest.raises(popart.popart_internal_exception, match=r"^VariableSettings had 1 errors!$"):
        VariableSettings(CommGroup(CommGroupType.Consecutive, 0))
    with pytest.raises(popart.popart_exception, match="The stride in a `popart::VariableSettings`"):
        VariableSettings(0, 2, OPG)
    with pytest.raises(popart.popart_exception, match="The group size in a"):
        VariableSettings(1, 0, OPG)
    vs = VariableSettings(CommGroup(CommGroupType.Consecutive, 2))
    message = (
        'Return mismatch with possibly appended outer dimension (3) of Tensor: "w". should '
        "match numGroups: 2"
    )
    with pytest.raises(popart.popart_internal_exception) as info:
        vs.shapeOnReplica([3, 5], 4, "w")
    assert info.value.args[0] == message
    assert isinstance(info.value, popart.popart_exception)
    with pytest.raises(popart.popart_exception, match=r"group size 3 .* does not divide .* 4"):
        VariableSettings(CommGroup(CommGroupType.Consecutive, 3)).groups(4)


def test_replica_grouping() -> None:
    rg = ReplicaGrouping(8, 2, 4)
    assert str(rg) == "ReplicaGrouping(numReplicas=8, stride=2, groupSize=4)"
    assert (rg.getNumGroups(), rg.getGroupAt(3), rg.getIndexInGroupAt(3)) == (2, 1, 1)
    assert rg.getReplicaAt(1, 2) == 5
    assert rg.getReplicasAt(0) == [0, 2, 4, 6]
    assert ReplicaGrouping(8) == ReplicaGrouping(8, 1, 8)
    assert ReplicaGrouping(8, 1, 2).getTranspose() == ReplicaGrouping(8, 2, 4)
    assert ReplicaGrouping(8, 4, 2).getTranspose() == ReplicaGrouping(8, 1, 4)
    for args, text in [
        ((0,), "The number of replicas in a `popart::ReplicaGrouping` must be a positive"),
        ((8, 0, 2), "The stride in a `popart::ReplicaGrouping` must be a positive"),
        ((8, 1, 0), "The group size in a `popart::ReplicaGrouping` must be a positive"),
        ((8, 3, 2), "must be divisible by the product of the stride and the group size"),
    ]:
        with pytest.raises(popart.popart_exception, match=text.replace("(", r"\(")):
            ReplicaGrouping(*args)
    with pytest.raises(popart.popart_exception, match="requested replica index is outside"):
        rg.getGroupAt(8)
    with pytest.raises(popart.popart_exception, match="requested group index is outside"):
        rg.getReplicasAt(2)
    with pytest.raises(popart.popart_exception, match="cannot be represented"):
        ReplicaGrouping(16, 2, 4).getTranspose()


@pytest.mark.parametrize(
    ("cg", "rg"),
    [
        (CommGroup(CommGroupType.All, 0), ReplicaGrouping(4, 1, 4)),
        (CommGroup(CommGroupType.Consecutive, 2), ReplicaGrouping(4, 1, 2)),
        (CommGroup(CommGroupType.Orthogonal, 2), ReplicaGrouping(4, 2, 2)),
        (CommGroup(CommGroupType.Ungrouped, 0), ReplicaGrouping(4, 1, 1)),
    ],
)
def test_comm_group_round_trip(cg: CommGroup, rg: ReplicaGrouping) -> None:
    assert cg.toReplicaGrouping(4) == rg
    assert CommGroup(rg) == cg


def test_comm_group_attributes() -> None:
    cg = CommGroup(type=CommGroupType.Consecutive, replicaGroupSize=2)
    assert (cg.type, cg.replicaGroupSize) == (CommGroupType.Consecutive, 2)
    cg.replicaGroupSize = 4
    cg.type = CommGroupType.Orthogonal
    assert cg.toReplicaGrouping(8) == ReplicaGrouping(8, 2, 4)
    with pytest.raises(
        popart.popart_exception, match="cannot be converted to a `popart::CommGroup`"
    ):
        CommGroup(ReplicaGrouping(8, 2, 2))
    # one CommGroupType for PopART, PopXL's collectives and GCL
    import popxl.ops

    assert popxl.ops.collectives.CommGroupType.Orthogonal is CommGroupType.ORTHOGONAL
    assert isinstance(cg, popxl.ops.collectives.CommGroup)


def test_popart_names_in_internal_ir() -> None:
    """``popart._internal.ir`` holds PopART's grouping classes (PopART's bindings define
    them there; ``popart`` re-exports them) next to PopXL's IR bindings; ``ReplicaGrouping``
    is only there."""
    import popart._internal.ir as _ir

    for name in ("CommGroup", "CommGroupType", "DataType", "VariableRetrievalMode",
                 "VariableSettings"):  # fmt: skip
        assert getattr(_ir, name) is getattr(popart, name)
    assert not hasattr(popart, "ReplicaGrouping")
    assert _ir.ReplicaGrouping(8, 2, 4).getReplicasAt(1) == [1, 3, 5, 7]
    assert _ir.Graph is not None  # still PopXL's bindings
