"""Tremula's extensions of the graph profile (FORMAT.md): ``programSteps``, ``variables``
and ``computeSets.flops``, as the engine writes them and as the validator checks them."""

from __future__ import annotations

import copy

import pytest

from tremula import demo
from tremula.profile import check_graph_profile


@pytest.fixture(scope="module")
def demo_graph() -> dict:
    """The demo on 16 tiles: x, y [96, 64] float on 16 tiles (6 rows of 64 per tile), the
    96 partial sums, their copy on tile 0 and the total."""
    return demo.build_and_run(16).engine.get_graph_profile()


def test_engine_writes_the_variable_table(demo_graph: dict) -> None:
    table = demo_graph["variables"]
    assert table["names"] == ["x", "y", "partials", "partials_on_tile0", "total"]
    assert table["bytes"] == [96 * 64 * 4, 96 * 64 * 4, 96 * 4, 96 * 4, 4]
    assert table["tileRuns"][0] == [0, 16, 6 * 64 * 4]  # tiles 0-15, 1,536 B each
    assert table["tileRuns"][3] == [0, 1, 96 * 4]  # all on tile 0
    # x is written by the stream copy (step 0) and last read by "square" (step 1) ...
    assert (table["liveFrom"][0], table["liveTo"][0]) == (0, 1)
    assert table["alwaysLive"] == [0] * 5
    assert check_graph_profile(demo_graph) == []


def test_engine_writes_the_program_steps(demo_graph: dict) -> None:
    steps = demo_graph["memory"]["liveness"]["programSteps"]
    programs = demo_graph["programs"]
    names = [programs[p].get("name") for p in steps["program"]]
    assert names[1:3] == ["square", "partialSums"]
    # step 1 ("square") reads x and writes y: both live, 2 x 24,576 B, the peak
    assert steps["notAlwaysLiveBytes"][1] == 2 * 24576
    assert (
        max(steps["notAlwaysLiveBytes"])
        == (demo_graph["memory"]["liveness"]["notAlwaysLive"]["maxBytes"])
    )


def test_engine_writes_compute_set_flops(demo_graph: dict) -> None:
    # "square" computes x * x + 1 on 96 x 64 elements: 2 FLOPs each; the sums' codelet
    # (Sum) estimates no FLOPs: unknown, not 0
    assert demo_graph["computeSets"]["flops"] == [2 * 96 * 64, None, None]


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda g: g["computeSets"]["flops"].pop(),
            "len(graphProfile.computeSets.flops): 2 != len(computeSets.names) = 3",
        ),
        (
            lambda g: g["computeSets"]["flops"].__setitem__(1, -5),
            "computeSets.flops[1]: -5 < 0",
        ),
        (
            lambda g: g["computeSets"]["flops"].__setitem__(2, 1.5),
            "computeSets.flops[2]: expected an int",
        ),
        (lambda g: g["variables"]["bytes"].pop(), "variables.bytes: 4 entries != len(names) = 5"),
        (
            lambda g: g["variables"]["tileRuns"].__setitem__(0, [0, 17, 1536]),
            "variables.tileRuns[0]: a run goes past tile 15",
        ),
        (
            lambda g: g["variables"]["tileRuns"].__setitem__(4, [0, 1, 8]),
            "variables.tileRuns[4]: runs hold 8 bytes, not 4",
        ),
        (
            lambda g: g["variables"]["liveTo"].__setitem__(1, 99),
            "variables.liveTo[1]: 99 >= the 6 program steps",
        ),
        (
            lambda g: g["variables"]["liveFrom"].__setitem__(2, 5),
            "variables.liveFrom[2]: live range [5, 3] is empty or negative",
        ),
        (
            lambda g: g["memory"]["liveness"]["programSteps"]["program"].__setitem__(0, 99),
            "programSteps.program[0]: 99 is not a valid index into programs",
        ),
        (
            lambda g: g["memory"]["liveness"]["programSteps"]["notAlwaysLiveBytes"].pop(),
            "programSteps.notAlwaysLiveBytes: 5 entries != len(program) = 6",
        ),
    ],
)
def test_validator_checks_the_extensions(demo_graph: dict, edit, problem: str) -> None:
    graph = copy.deepcopy(demo_graph)
    edit(graph)
    problems = check_graph_profile(graph)
    assert any(problem in p for p in problems), problems
