"""Lazy package exports (PEP 562): a package's names are imported on first use.

A package lists what it exports as ordinary imports in an ``if TYPE_CHECKING:`` block, which
type checkers read as they read any import; at run time the ``else`` branch attaches a
module ``__getattr__`` that imports each name the first time it is asked for (and keeps it,
so later look-ups are plain attribute reads)::

    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from tremula.poplar.graph import Graph
    else:
        from tremula.lazy import attach

        __getattr__, __dir__ = attach(__name__, __file__)

The block is the one list of the exports: :func:`attach` reads it from the package's
source. Submodules not named there are attributes too (``package.sub`` imports
``package.sub``), as they would be after an eager import of the package. Importing a
package therefore costs only its ``__init__``; ``import popxl`` does not load the engine,
the graph layer or PopLibs until a program uses them (a PopRun job pays its imports once
per instance).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["attach", "exports"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def exports(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """The names the ``if TYPE_CHECKING:`` block of the module at ``path`` imports:
    name -> (module, attribute), from ``from module import attribute [as name]``.

    Raises:
        ValueError: the block holds something other than absolute ``from ... import``
            statements of named attributes (names where they come from).
    """
    with open(path, encoding="utf-8") as source:  # not pathlib: `import popxl` runs this
        tree = ast.parse(source.read(), filename=os.fspath(path))
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom) or stmt.level or stmt.module is None:
                raise ValueError(
                    f"{path}:{stmt.lineno}: lazy exports must be absolute "
                    f"'from module import name' statements"
                )
            for alias in stmt.names:
                if alias.name == "*":
                    raise ValueError(f"{path}:{stmt.lineno}: 'import *' cannot be lazy")
                out[alias.asname or alias.name] = (stmt.module, alias.name)
    return out


def _resolve(package: str, module: str, attribute: str) -> Any:
    if module != package:
        source = importlib.import_module(module)
        try:
            return getattr(source, attribute)
        except AttributeError:
            pass  # a submodule not loaded yet: import it below
    return importlib.import_module(f"{module}.{attribute}")


def attach(
    package: str, path: str | os.PathLike[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of package ``package`` (its ``__name__``), whose
    source is ``path`` (its ``__file__``): see the module docstring.

    The ``TYPE_CHECKING`` block is read on the first look-up, not at import.
    """
    table: dict[str, tuple[str, str]] = {}
    loaded = False

    def names() -> dict[str, tuple[str, str]]:
        nonlocal loaded
        if not loaded:
            table.update(exports(path))
            loaded = True
        return table

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # dunder probes (copy, pickle, pytest) are not exports
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        where = names().get(name)
        if where is not None:
            value = _resolve(package, *where)
        elif importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names()))

    return __getattr__, __dir__
