"""Where the client code lives: the one setting the tests and the client runner read.

Graphcore's code that Tremula is tested against (popxl-addons, two PopXL models of
graphcore-examples, examples-utils) is not part of the repository. It is found in the folder
named by the environment variable ``TREMULA_CLIENTS``, by default ``../shared/clients``
relative to the repository root (where the project's machines lay it). Tests that need it
skip when it is absent, with a message saying how to provide it, except under CI
(``CI=true``), where its absence is a failure.

Used by ``tests/conftest.py`` (loaded by path: the test suite imports nothing from the
repository root) and by ``tools/run_client_suites.py`` (a sibling import).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the environment variable naming the clients folder
VARIABLE = "TREMULA_CLIENTS"
DEFAULT = ROOT.parent / "shared" / "clients"
#: each client by its folder name, with a file whose presence says it is complete
MARKERS = {
    "popxl-addons": "popxl_addons/__init__.py",
    "graphcore-examples": "utils/examples_tests/__init__.py",
    "examples-utils": "examples_utils/__init__.py",
}


def folder() -> Path:
    """The clients folder: ``$TREMULA_CLIENTS`` if set (relative to the working
    directory), else ``../shared/clients`` beside the repository."""
    value = os.environ.get(VARIABLE, "").strip()
    return Path(value).expanduser().resolve() if value else DEFAULT


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``), where missing clients are a failure."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@dataclass(frozen=True)
class Lookup:
    """The clients asked for: their folders, and a message naming those missing (empty
    when all are there)."""

    paths: dict[str, Path]
    missing: tuple[str, ...]

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]

    @property
    def message(self) -> str:
        if not self.missing:
            return ""
        where = folder()
        source = f"${VARIABLE}" if os.environ.get(VARIABLE, "").strip() else "the default"
        names = ", ".join(self.missing)
        return (
            f"client code not found: {names} (looked in {where}, {source}). Set {VARIABLE} "
            f"to the folder holding {names}, as Graphcore published them (unmodified), or "
            f"lay that folder at ../shared/clients beside the repository"
        )


def find(*names: str) -> Lookup:
    """The clients ``names`` (keys of :data:`MARKERS`) in :func:`folder`."""
    unknown = [n for n in names if n not in MARKERS]
    if unknown:
        raise ValueError(f"unknown client {unknown[0]!r}: one of {', '.join(MARKERS)}")
    base = folder()
    paths = {n: base / n for n in names}
    missing = tuple(n for n in names if not (paths[n] / MARKERS[n]).is_file())
    return Lookup(paths, missing)
