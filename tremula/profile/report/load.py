"""Reading a report directory for the viewer, keeping whatever can be read.

:func:`tremula.profile.io.read_profile` stops at the first unreadable file; the viewer must
show what it can. :func:`load_report` reads ``graph.json`` and ``execution.json`` (or one
profile file) separately, validates what it read, and returns the profiles it could parse
with a list of warnings, each naming the file and what is wrong. Only when nothing at all
can be read does it raise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tremula.errors import ProfileError
from tremula.profile.io import COMBINED_FILE, EXECUTION_FILE, GRAPH_FILE
from tremula.profile.validate import check_execution_profile, check_graph_profile

#: The first bytes of an SQLite database: Poplar SDK 2.x ``profile.pop`` files are one.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Poplar SDK 2.x report files Tremula cannot read, and what they are.
_OTHER_FORMATS = {
    "profile.pop": "a Poplar SDK 2.x profile (libpva's binary format)",
    "debug.cbor": "Poplar SDK 2.x debug information (CBOR)",
}
#: The format version this viewer reads; a profile may name its own in ``formatVersion``.
FORMAT_MAJOR = 1
#: How many validation problems a warning lists before counting the rest.
MAX_PROBLEMS_SHOWN = 8


@dataclass
class LoadedReport:
    """What could be read of a report.

    Attributes:
        source: The directory or file read, as given.
        graph: The graph profile, or None if it is missing or unreadable.
        execution: The execution profile, or None.
        warnings: One line per problem, each naming the file it concerns.
    """

    source: str
    graph: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def load_report(path: str | Path, validate: bool = True) -> LoadedReport:
    """Read a report directory (or a profile JSON file) as far as it can be read.

    Args:
        path: A directory holding ``graph.json`` and ``execution.json`` (or ``profile.json``),
            or one JSON file.
        validate: Check the profiles against the format and report problems as warnings.

    Returns:
        The profiles read, and warnings for every missing, unreadable, invalid or
        other-version file.

    Raises:
        ProfileError: If neither profile can be read; the message names every file tried.
    """
    path = Path(path)
    report = LoadedReport(str(path))
    if path.is_dir():
        _read_directory(path, report)
    elif path.exists():
        _read_combined(path, report)
    else:
        raise ProfileError(f"{path}: no such report directory or profile file")
    if report.graph is None and report.execution is None:
        raise ProfileError("nothing to show:\n  " + "\n  ".join(report.warnings))
    if validate:
        _validate(report)
    return report


def _read_directory(directory: Path, report: LoadedReport) -> None:
    for name, what in _OTHER_FORMATS.items():
        if (directory / name).exists():
            report.warnings.append(
                f"{directory / name}: {what}; Tremula reads the Poplar 1.x JSON profiles "
                f"({GRAPH_FILE}, {EXECUTION_FILE}), so this file is ignored"
            )
    graph_path = directory / GRAPH_FILE
    if not graph_path.exists() and (directory / COMBINED_FILE).exists():
        _read_combined(directory / COMBINED_FILE, report)
        return
    report.graph = _read_part(graph_path, "graph profile", report)
    execution_path = directory / EXECUTION_FILE
    if execution_path.exists():
        report.execution = _read_part(execution_path, "execution profile", report)
    elif report.graph is not None:
        report.warnings.append(
            f"{execution_path}: missing; the execution views are empty (a compile-only report)"
        )


def _read_combined(path: Path, report: LoadedReport) -> None:
    data = _parse(path, report)
    if data is None:
        return
    if not isinstance(data, dict):
        report.warnings.append(f"{path}: a profile is a JSON object, got {type(data).__name__}")
    elif "graphProfile" in data or "executionProfile" in data:
        for key, attr in (("graphProfile", "graph"), ("executionProfile", "execution")):
            part = data.get(key)
            if isinstance(part, dict):
                _check_version(part, f"{path} ({key})", report)
                setattr(report, attr, part)
            elif part is not None:
                report.warnings.append(f"{path}: {key} is not a JSON object")
    elif "target" in data:
        _check_version(data, str(path), report)
        report.graph = data
    elif "simulation" in data or "profilerMode" in data:
        _check_version(data, str(path), report)
        report.execution = data
    else:
        report.warnings.append(
            f"{path}: neither {{'graphProfile': ..., 'executionProfile': ...}}, a graph "
            "profile ('target') nor an execution profile ('profilerMode')"
        )


def _read_part(path: Path, what: str, report: LoadedReport) -> dict[str, Any] | None:
    data = _parse(path, report)
    if data is None:
        return None
    if not isinstance(data, dict):
        report.warnings.append(f"{path}: a {what} is a JSON object, got {type(data).__name__}")
        return None
    _check_version(data, str(path), report)
    return data


def _parse(path: Path, report: LoadedReport) -> Any:
    """The JSON content of ``path``, or None with a warning saying why not."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        report.warnings.append(f"{path}: missing")
        return None
    except OSError as exc:
        report.warnings.append(f"{path}: cannot be read: {exc.strerror or exc}")
        return None
    if raw.startswith(_SQLITE_MAGIC):
        report.warnings.append(
            f"{path}: an SQLite database (a Poplar SDK 2.x profile.pop?), not a Poplar 1.x "
            "JSON profile"
        )
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        report.warnings.append(f"{path}: not UTF-8 text (byte {exc.start}): not a JSON profile")
    except json.JSONDecodeError as exc:
        # the parser failed at the end of the text, or in a string that never closes
        truncated = exc.pos >= len(raw.rstrip()) - 1 or exc.msg.startswith("Unterminated")
        what = "truncated JSON (the file ends early)" if truncated else "invalid JSON"
        report.warnings.append(f"{path}: {what}: {exc.msg} at line {exc.lineno} column {exc.colno}")
    return None


def _check_version(profile: dict[str, Any], where: str, report: LoadedReport) -> None:
    """Warn when the profile names a format version other than 1.x."""
    for key in ("formatVersion", "version"):
        if key not in profile:
            continue
        version = str(profile[key])
        major = version.split(".", 1)[0].strip().lstrip("v")
        if major != str(FORMAT_MAJOR):
            report.warnings.append(
                f"{where}: format version {version!r}, but this viewer reads version "
                f"{FORMAT_MAJOR}.x (Poplar 1.x JSON, tremula/profile/FORMAT.md); showing "
                "what can be read"
            )
        return


def _validate(report: LoadedReport) -> None:
    """Add the validator's problems (the first few of each file, and their count)."""
    source = Path(report.source)
    checks = []
    if report.graph is not None:
        checks.append((GRAPH_FILE, check_graph_profile(report.graph)))
    if report.execution is not None:
        checks.append((EXECUTION_FILE, check_execution_profile(report.execution, report.graph)))
    for name, problems in checks:
        if not problems:
            continue
        where = source / name if source.is_dir() else source
        shown = "; ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        tail = f" (and {more} more)" if more > 0 else ""
        report.warnings.append(
            f"{where}: fails validation with {len(problems)} problem(s): {shown}{tail}"
        )
