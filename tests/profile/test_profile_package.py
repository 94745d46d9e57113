"""The package's surface and its layering: it depends on nothing else in Tremula but errors."""

from __future__ import annotations

import ast
import subprocess
import sys

import tremula.profile


def test_public_names() -> None:
    assert sorted(tremula.profile.__all__) == [
        "check_execution_profile",
        "check_graph_profile",
        "read_profile",
        "summarise",
        "to_chrome_trace",
        "validate",
        "write_profile",
    ]


def test_imports_only_the_standard_library_numpy_and_errors() -> None:
    code = (
        "import sys, tremula.profile, tremula.profile.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('tremula')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = ast.literal_eval(out)
    assert all(
        m == "tremula" or m.startswith(("tremula.profile", "tremula.errors")) for m in loaded
    )
