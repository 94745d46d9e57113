"""The ``tremula profile`` command: summarise, validate, view or export a report.

Usage::

    tremula profile summary DIR [--steps] [--var-storage] [--top-tiles N] [--host-time [N]]
    tremula profile validate DIR
    tremula profile report DIR [-o FILE.html] [--compare DIR2]
    tremula profile trace DIR -o trace.json

``DIR`` is a report directory (``graph.json`` and ``execution.json``) or a single profile
JSON file. ``report`` writes one self-contained HTML page (``DIR/report.html`` by default);
``trace`` writes Chrome Trace Event JSON that Perfetto UI and ``chrome://tracing`` open.
Exit status: 0 on success, 1 if the profile is invalid or cannot be read (``report`` still
writes a page when part of it can be read, and prints a warning for the rest), 2 for bad
arguments, 3 from ``validate`` for a valid graph profile without its execution profile
(``summary`` and ``validate`` both warn about that: the run's profile was lost or never made).
"""

from __future__ import annotations

import argparse
import json
import sys

from tremula.errors import ProfileError
from tremula.profile.chrome import to_chrome_trace
from tremula.profile.hosttime import read_host_time
from tremula.profile.io import read_profile, write_atomic
from tremula.profile.summary import summarise
from tremula.profile.validate import check_execution_profile, check_graph_profile


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tremula profile",
        description="Summarise, validate, view or export a Tremula/Poplar profile.",
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
    summary.add_argument(
        "--host-time",
        type=int,
        nargs="?",
        const=20,
        default=None,
        metavar="N",
        help="add the N steps (default 20, 0: all) that took the most host CPU time, from "
        "DIR/host_time.json (engine option autoReport.outputHostTime)",
    )
    check = commands.add_parser("validate", help="check a report against the profile format")
    check.add_argument("path", metavar="DIR", help="report directory or profile JSON file")
    report = commands.add_parser("report", help="write a self-contained HTML report page")
    report.add_argument("path", metavar="DIR", help="report directory or profile JSON file")
    report.add_argument(
        "-o", "--output", metavar="FILE.html", help="the page (default: DIR/report.html)"
    )
    report.add_argument(
        "--compare", metavar="DIR2", help="a second report to compare with (shown as B)"
    )
    trace = commands.add_parser("trace", help="write a Chrome / Perfetto trace (JSON)")
    trace.add_argument("path", metavar="DIR", help="report directory or profile JSON file")
    trace.add_argument("-o", "--output", metavar="FILE.json", required=True, help="the trace")
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
        if args.command == "report":
            return _report(args.path, args.output, args.compare)
        graph, execution = read_profile(args.path)
        if execution is None and args.command in ("validate", "summary"):
            print(f"warning: {no_execution_profile(args.path)}", file=sys.stderr)
        if args.command == "validate":
            return _validate(graph, execution)
        if args.command == "trace":
            return _trace(graph, execution, args.path, args.output)
        host = None if args.host_time is None else read_host_time(args.path)
        text = summarise(
            graph,
            execution,
            show_execution_steps=args.steps,
            show_var_storage=args.var_storage,
            top_tiles=args.top_tiles,
            host_time=host,
            top_steps=args.host_time or 0,
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
    if execution is None:
        print(f"graph profile ok: {len(graph['programs'])} programs; no execution profile")
        return 3
    steps = execution.get("simulation", {}).get("steps", [])
    print(f"ok: {len(steps)} steps, {len(graph['programs'])} programs")
    return 0


def no_execution_profile(path: str) -> str:
    """What a graph profile without its execution profile means (``summary`` and
    ``validate`` print it as a warning)."""
    from pathlib import Path

    where = (
        f"{path} has graph.json but no execution.json"
        if Path(path).is_dir()
        else f"{path} holds a graph profile without an execution profile"
    )
    return (
        f"{where}: no execution profile, so no steps or cycles. autoReport writes "
        f"execution.json when the program's engine closes or its process exits (also on "
        f"SIGINT, SIGTERM and SIGHUP); it is missing when the program never ran the engine, "
        f"when autoReport.outputExecutionProfile is off, or when the process was killed "
        f"(SIGKILL, os._exit) or ended by a signal whose handler the program replaced"
    )


def _report(path: str, output: str | None, compare: str | None) -> int:
    """Write the HTML page; print where, its size, and each warning it shows."""
    from tremula.profile.report import write_html

    page = write_html(path, output, compare)
    for warning in page.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {page.path} ({page.size / 1e6:.2f} MB); open it in a browser")
    return 0


def _trace(graph: dict, execution: dict | None, path: str, output: str) -> int:
    """Write the Chrome trace of the execution profile."""
    if execution is None:
        raise ProfileError(f"{path}: no execution profile (execution.json): no steps to trace")
    trace = to_chrome_trace(graph, execution)
    write_atomic(output, json.dumps(trace, separators=(",", ":")) + "\n")
    events = sum(1 for e in trace["traceEvents"] if e["ph"] != "M")
    print(f"wrote {output} ({events} events); open it in Perfetto UI or chrome://tracing")
    return 0
