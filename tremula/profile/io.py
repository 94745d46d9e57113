"""Reading and writing profiles as JSON files.

A report directory holds ``graph.json`` and ``execution.json`` (each profile unwrapped). A
single file holds either ``{"graphProfile": ..., "executionProfile": ...}`` or a bare graph
profile. Files are written with sorted keys and a two-space indent plus a final newline, so
that equal profiles are equal bytes and reading then writing a file reproduces it exactly.

Every file is written by :func:`write_atomic` (a temporary file in the same folder, renamed
over the old one), so a reader, or a process killed mid-write, sees the old file or the new
one, never a partial one. A graph profile carries ``graphId`` (a hash of the rest of it) and the
execution profiles of the same program carry the same value, so :func:`read_profile` refuses
a pair from two different programs.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tremula.errors import ProfileError
from tremula.profile._json import dumps_indented
from tremula.profile.schema import GRAPH_ID

GRAPH_FILE = "graph.json"
EXECUTION_FILE = "execution.json"
COMBINED_FILE = "profile.json"

Profile = dict[str, Any]


def dumps(profile: Mapping[str, Any]) -> str:
    """Serialise a profile the way the files are written (NumPy values become plain ones).

    Raises:
        ProfileError: If the profile holds a value JSON cannot represent (NaN, an object...).
    """
    try:
        text = dumps_indented(profile, _plain)
    except (TypeError, ValueError) as exc:
        raise ProfileError(f"profile cannot be written as JSON: {exc}") from exc
    return text + "\n"


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: NumPy scalars and arrays become Python numbers and lists."""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def graph_id(graph: Mapping[str, Any]) -> str:
    """The ``graphId`` of a graph profile: 16 hex digits of the SHA-256 of its JSON (its own
    ``graphId`` left out), so equal programs have equal ids and different ones differ."""
    return identify(graph)[0]


def identify(graph: Mapping[str, Any]) -> tuple[str, str]:
    """The ``graphId`` of a graph profile and the profile's file text with that id, from one
    serialisation (a large graph profile takes seconds to serialise).

    Returns:
        ``(graph_id(graph), dumps({**graph, "graphId": graph_id(graph)}))``.

    Raises:
        ProfileError: As :func:`dumps`.
    """
    rest = {k: v for k, v in graph.items() if k != GRAPH_ID}
    text = dumps(rest)
    gid = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    return gid, _with_top_level_string(text, sorted(rest), GRAPH_ID, gid)


def _with_top_level_string(text: str, keys: list[str], key: str, value: str) -> str:
    """``text`` (what :func:`dumps` wrote for a dict with sorted ``keys``, ``key`` not among
    them) with ``key: value`` added where sorted keys put it. Each top-level entry of that
    layout starts a line with exactly two spaces and a quote; deeper ones are indented more
    and strings hold no raw newline, so the entry that follows ``key`` is found by its line
    start."""
    entry = "\n  " + json.dumps(key) + ": " + json.dumps(value)
    if not keys:
        return "{" + entry + "\n}\n"
    after = next((k for k in keys if k > key), None)
    if after is None:  # last: before the closing "\n}\n"
        return text[:-3] + "," + entry + text[-3:]
    at = text.index("\n  " + json.dumps(after) + ": ")
    return text[:at] + entry + "," + text[at:]


def check_pair(graph: Mapping[str, Any], execution: Mapping[str, Any] | None, where: str) -> None:
    """Refuse an execution profile that was not recorded for ``graph``.

    Both must carry the same ``graphId``; profiles without one (older files, other tools)
    pass only if neither has it.

    Raises:
        ProfileError: Naming ``where`` and both ids.
    """
    if execution is None:
        return
    ids = (graph.get(GRAPH_ID), execution.get(GRAPH_ID))
    if ids[0] != ids[1]:
        raise ProfileError(
            f"{where}: the execution profile (graphId {ids[1]!r}) is not of the program the "
            f"graph profile describes (graphId {ids[0]!r}): the files come from different "
            f"programs or runs; write them again together"
        )


def write_profile(
    directory: str | Path,
    graph: Mapping[str, Any] | None,
    execution: Mapping[str, Any] | None,
    *,
    graph_text: str | None = None,
) -> None:
    """Write ``graph.json`` and ``execution.json`` into ``directory``, creating it if needed.

    Args:
        directory: The report directory.
        graph: The graph profile, or None to write the execution profile only.
        execution: The execution profile, or None to write the graph profile only.
        graph_text: ``dumps(graph)`` when the caller has it already (:func:`identify`
            returns it), so that the graph profile is not serialised again.

    Raises:
        ProfileError: If a profile is not JSON-serialisable or a file cannot be written.
    """
    directory = Path(directory)
    texts = []
    if graph is not None:
        texts.append((directory / GRAPH_FILE, dumps(graph) if graph_text is None else graph_text))
    if execution is not None:
        texts.append((directory / EXECUTION_FILE, dumps(execution)))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProfileError(f"cannot write the profile to {directory}: {exc}") from exc
    for path, text in texts:
        write_atomic(path, text)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a file so that it holds its old content or all of ``data``, never a part.

    The data go to a temporary file in the same folder (created with the mode an ordinary
    new file gets), which is flushed to disk and then renamed over ``path``: a rename within
    a folder is atomic, so a reader or a process killed mid-write never sees a partial or
    empty file. The folder must exist. Every profile and report file Tremula writes goes
    through here.

    Args:
        path: The file to write (replaced if it exists).
        data: Text (written as UTF-8) or bytes.

    Raises:
        ProfileError: If the file cannot be written; ``path`` is then as it was and no
            temporary file is left behind.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ProfileError(f"cannot write {path}: {exc}") from exc


def read_profile(path: str | Path) -> tuple[Profile, Profile | None]:
    """Read a profile from a report directory or a single JSON file.

    A directory must hold ``graph.json`` (and may hold ``execution.json``), or else
    ``profile.json``. A file may hold ``{"graphProfile": ..., "executionProfile": ...}``
    (the execution profile may be absent) or a bare graph profile.

    Args:
        path: The directory or file.

    Returns:
        ``(graph, execution)``; ``execution`` is None when the source has none.

    Raises:
        ProfileError: If the path, or a file it needs, is missing, unreadable, not JSON, or
            not shaped like a profile, or if the execution profile is not of the graph
            profile's program (:func:`check_pair`). The message names the path.
    """
    path = Path(path)
    graph, execution = _read_directory(path) if path.is_dir() else _split(_load(path), path)
    check_pair(graph, execution, str(path))
    return graph, execution


def _read_directory(directory: Path) -> tuple[Profile, Profile | None]:
    graph_path = directory / GRAPH_FILE
    if not graph_path.exists() and (directory / COMBINED_FILE).exists():
        return _split(_load(directory / COMBINED_FILE), directory / COMBINED_FILE)
    graph = _object(_load(graph_path), graph_path, "graph profile")
    execution_path = directory / EXECUTION_FILE
    if not execution_path.exists():
        return graph, None
    return graph, _object(_load(execution_path), execution_path, "execution profile")


def _load(path: Path) -> Any:
    """Parse a JSON file; any failure becomes a ProfileError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ProfileError(f"{path}: no such profile file or directory") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: cannot read the profile: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON: {exc}") from exc


def _object(value: Any, path: Path, what: str) -> Profile:
    if not isinstance(value, dict):
        raise ProfileError(f"{path}: a {what} is a JSON object, got {type(value).__name__}")
    return value


def _split(data: Any, path: Path) -> tuple[Profile, Profile | None]:
    """Split a single file's content into (graph, execution)."""
    data = _object(data, path, "profile")
    if "graphProfile" in data:
        graph = _object(data["graphProfile"], path, "graphProfile")
        execution = data.get("executionProfile")
        return graph, None if execution is None else _object(execution, path, "executionProfile")
    if "target" in data:
        return data, None
    raise ProfileError(
        f"{path}: neither {{'graphProfile': ..., 'executionProfile': ...}} "
        "nor a graph profile (no 'graphProfile' or 'target' key)"
    )
