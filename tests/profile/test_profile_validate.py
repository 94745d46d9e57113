"""The validator on whole profiles: the golden pair is clean, errors are listed, it is fast."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tremula.errors import ProfileError
from tremula.profile import check_execution_profile, check_graph_profile, validate


def test_golden_profile_is_valid(graph: dict, execution: dict) -> None:
    assert check_graph_profile(graph) == []
    assert check_execution_profile(execution, graph) == []
    assert check_execution_profile(execution) == []
    validate(graph, execution)
    validate(graph)


def test_mode_none_needs_nothing_else(graph: dict) -> None:
    assert check_execution_profile({"profilerMode": "NONE"}, graph) == []


def test_graph_dependent_checks_need_the_graph(execution: dict) -> None:
    execution["simulation"]["steps"][1]["activeTiles"] = 5
    execution["simulation"]["steps"][1]["computeSet"] = 7
    assert check_execution_profile(execution) == []


def test_not_a_profile_at_all() -> None:
    assert check_graph_profile([]) == ["graphProfile: expected an object, got [] (list)"]
    assert check_execution_profile("x") == ["executionProfile: expected an object, got 'x' (str)"]


def test_malformed_sections_do_not_hide_other_problems(graph: dict) -> None:
    graph["target"] = "ipu"
    graph["computeSets"]["names"] = "double"
    graph["memory"]["byTile"]["total"][0] = 1
    problems = check_graph_profile(graph)
    assert "graphProfile.target: expected an object, got 'ipu' (str)" in problems
    assert "graphProfile.computeSets.names: expected a list, got 'double' (str)" in problems
    assert any(p.startswith("graphProfile.memory.byTile.total[0]: 1 != ") for p in problems)


def test_ragged_and_nested_arrays(graph: dict) -> None:
    graph["exchanges"]["cyclesByTile"] = [[40, 40, 40, [40]]]
    graph["hostExchanges"]["bytesSentByTile"] = [[0, 0, 0, 2**70]]
    problems = check_graph_profile(graph)
    assert "graphProfile.exchanges.cyclesByTile[0][3]: expected an int, got [40] (list)" in problems
    expected = "graphProfile.hostExchanges.bytesSentByTile[0][3]: expected an int, got "
    assert any(p.startswith(expected) for p in problems), problems


def test_validate_lists_the_first_twenty_problems(graph: dict) -> None:
    for name in ("constant", "controlCode", "stack", "variable", "vertexCode"):
        del graph["memory"]["byCategory"][name]
    for program in graph["programs"]:
        del program["type"]
    assert len(check_graph_profile(graph)) == 11
    with pytest.raises(ProfileError) as caught:
        validate(graph)
    assert str(caught.value).startswith("11 problem(s) in the profile:\n")
    graph["controlPrograms"] = list(range(10, 40))
    with pytest.raises(ProfileError) as caught:
        validate(graph)
    lines = str(caught.value).splitlines()
    assert lines[0] == "41 problem(s) in the profile:"
    assert len(lines) == 22
    assert lines[-1] == "  ... and 21 more"


@given(tile=st.integers(0, 3), delta=st.integers(-48, 48).filter(bool))
def test_any_category_imbalance_is_caught(fx: Any, tile: int, delta: int) -> None:
    graph = fx.golden_graph()
    graph["memory"]["byCategory"]["controlCode"]["total"][tile] += delta
    problems = check_graph_profile(graph)
    assert len(problems) == 2
    assert problems[0].startswith(f"graphProfile.memory.byCategory.controlCode.total[{tile}]: ")
    assert problems[1].startswith(f"graphProfile.memory.byCategory.*.total[{tile}]: ")


def test_full_size_profile_validates(fx: Any) -> None:
    graph, execution = fx.scaled_profile(368, 1700)  # 1472 tiles, 10,200 steps
    assert graph["target"]["numTiles"] == 1472
    validate(graph, execution)
    execution["simulation"]["steps"][9999]["cycles"] += 1
    assert check_execution_profile(execution, graph) == [
        "executionProfile.simulation.steps[9999].cycles: 41 != cyclesTo - cyclesFrom = 40"
    ]
