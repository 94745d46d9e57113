"""The ``tremula profile`` command: summarise or validate a report.

Usage::

    tremula profile summary DIR [--steps] [--var-storage] [--top-tiles N]
    tremula profile validate DIR

``DIR`` is a report directory (``graph.json`` and ``execution.json``) or a single profile
JSON file. Exit status: 0 on success, 1 if the profile is invalid or cannot be read, 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from tremula.errors import ProfileError
from tremula.profile.io import read_profile
from tremula.profile.summary import summarise
from tremula.profile.validate import check_execution_profile, check_graph_profile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tremula profile", description="Summarise or validate a Tremula/Poplar profile."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser("summary", help="print a text summary of a report")
    summary.add_argument("path", metavar="DIR", help="report directory or profile JSON file")
    summary.add_argument("--steps", action="store_true", help="list every execution step")
    summary.add_argument(
        "--var-storage", action="store_true", help="add liveness per tile and per program"
    )
    summary.add_argument(
        "--top-tiles", type=int, default=5, metavar="N", help="most-used tiles to break down"
    )
    check = commands.add_parser("validate", help="check a report against the profile format")
    check.add_argument("path", metavar="DIR", help="report directory or profile JSON file")
    return parser


def main(argv: list[str]) -> int:
    """Run ``tremula profile`` with ``argv`` (the arguments after ``profile``).

    Args:
        argv: The command line, e.g. ``["summary", "report/", "--steps"]``.

    Returns:
        The exit status: 0 on success, 1 for an invalid or unreadable profile, 2 for bad
        arguments.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 2
    try:
        graph, execution = read_profile(args.path)
        if args.command == "validate":
            return _validate(graph, execution)
        text = summarise(
            graph,
            execution,
            show_execution_steps=args.steps,
            show_var_storage=args.var_storage,
            top_tiles=args.top_tiles,
        )
    except ProfileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


def _validate(graph: dict, execution: dict | None) -> int:
    """Print ``ok: N steps, M programs``, or every problem and their count."""
    problems = check_graph_profile(graph)
    if execution is not None:
        problems += check_execution_profile(execution, graph)
    if problems:
        for problem in problems:
            print(problem)
        print(f"{len(problems)} problem(s)")
        return 1
    steps = (execution or {}).get("simulation", {}).get("steps", [])
    print(f"ok: {len(steps)} steps, {len(graph['programs'])} programs")
    return 0
