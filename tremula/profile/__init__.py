"""Poplar-format profiles: read, write, validate, summarise and export them.

This layer knows only plain dicts and JSON files (see ``FORMAT.md`` for the format and
``OVERVIEW.md`` for a tour). It imports nothing from the rest of Tremula but its errors, so
that the engine can use it and tools can use it without the engine.
"""

from __future__ import annotations

from tremula.profile.chrome import to_chrome_trace
from tremula.profile.io import read_profile, write_profile
from tremula.profile.summary import summarise
from tremula.profile.validate import check_execution_profile, check_graph_profile, validate

__all__ = [
    "check_execution_profile",
    "check_graph_profile",
    "read_profile",
    "summarise",
    "to_chrome_trace",
    "validate",
    "write_profile",
]
