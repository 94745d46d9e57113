"""Check profiles against FORMAT.md: every field, every shape, every invariant.

The ``check_*`` functions return human-readable problems, one line each, naming the field
path and the expected and actual values, for example::

    graphProfile.memory.byTile.total[3]: 812 != interleaved + nonInterleaved + overflowed = 800

Per-tile arrays are checked with NumPy, so a 1472-tile profile with ten thousand steps is
checked in a fraction of a second. A path ending in ``.*`` names a sum over a table's entries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tremula.errors import ProfileError
from tremula.profile._checker import Checker
from tremula.profile._dims import Dims, dims_of
from tremula.profile._execution_checks import check_execution
from tremula.profile._graph_checks import check_graph
from tremula.profile.schema import GRAPH_ID

#: How many problems :func:`validate` lists in its error message.
MAX_LISTED_PROBLEMS = 20


def check_graph_profile(g: Mapping[str, Any]) -> list[str]:
    """List the problems of a graph profile.

    Args:
        g: The graph profile (the unwrapped ``graphProfile`` object).

    Returns:
        One message per problem, ``<path>: <problem>``; empty if the profile is valid.
    """
    checker = Checker()
    check_graph(checker, g)
    return checker.problems


def check_execution_profile(
    e: Mapping[str, Any], graph: Mapping[str, Any] | None = None
) -> list[str]:
    """List the problems of an execution profile, using its graph profile if given.

    Without ``graph`` only self-contained checks are made; with it, program, compute-set and
    exchange indices, per-tile lengths and ``activeTiles <= numTiles`` are checked as well,
    and the two must carry the same ``graphId`` (or neither).
    The graph profile itself is not checked here (see :func:`check_graph_profile`).

    Args:
        e: The execution profile (the unwrapped ``executionProfile`` object).
        graph: The graph profile of the same run, or None.

    Returns:
        One message per problem; empty if none was found.
    """
    checker = Checker()
    check_execution(checker, e, dims_of(graph) if graph is not None else Dims())
    if graph is not None and graph.get(GRAPH_ID) != e.get(GRAPH_ID):
        checker.add(
            f"executionProfile.{GRAPH_ID}",
            f"{e.get(GRAPH_ID)!r} != graphProfile.{GRAPH_ID} {graph.get(GRAPH_ID)!r}: the "
            f"profiles are of different programs",
        )
    return checker.problems


def validate(graph: Mapping[str, Any], execution: Mapping[str, Any] | None = None) -> None:
    """Check a graph profile and, if given, its execution profile.

    Args:
        graph: The graph profile.
        execution: The execution profile of a run of that graph, or None.

    Raises:
        ProfileError: If any problem is found; the message gives the number of problems and
            lists the first :data:`MAX_LISTED_PROBLEMS`.
    """
    problems = check_graph_profile(graph)
    if execution is not None:
        problems += check_execution_profile(execution, graph)
    if problems:
        raise ProfileError(format_problems(problems))


def format_problems(problems: list[str], limit: int = MAX_LISTED_PROBLEMS) -> str:
    """``N problem(s) in the profile:`` then the first ``limit`` problems, one per line."""
    lines = [f"{len(problems)} problem(s) in the profile:"]
    lines += [f"  {problem}" for problem in problems[:limit]]
    if len(problems) > limit:
        lines.append(f"  ... and {len(problems) - limit} more")
    return "\n".join(lines)
