"""Every module of popxl-addons imports on Tremula: each of its C++ custom ops is served in
Python (a C++ op Tremula does not serve would raise ImportError naming the op; see
tests/popxl/custom_ops/test_custom_op_import.py)."""

from __future__ import annotations

import importlib
from pathlib import Path

import popxl_addons


def _modules() -> list[str]:
    (root,) = popxl_addons.__path__
    names = []
    for path in sorted(Path(root).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        names.append(".".join(("popxl_addons", *parts)).removesuffix(".__init__"))
    return names


def test_every_module_imports() -> None:
    imported = []
    for name in _modules():
        importlib.import_module(name)  # an unserved C++ op would raise ImportError here
        imported.append(name)
    assert len(imported) == 69  # popxl-addons 3.4's modules, layers over every C++ op included
