"""One layout for every library (``tremula/libs/OVERVIEW.md``): its codelets live in
``codelets.py`` (or a ``codelets/`` package), their cycle estimators in ``estimators.py``, and
a codelet's ``cycles`` reads the vertex's sizes and calls an estimator, directly or through
its class's methods and the library's codelet helpers (no formula of its own in any of them:
no number but 0 and 1)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import tremula.libs
from tremula import poplar

LIBS_DIR = Path(tremula.libs.__file__).parent
LIBS = sorted(p.name for p in LIBS_DIR.iterdir() if (p / "__init__.py").exists())


def _import_all() -> None:
    for info in pkgutil.walk_packages(tremula.libs.__path__, "tremula.libs."):
        importlib.import_module(info.name)


def _codelets() -> list[type[poplar.Codelet]]:
    _import_all()
    out, stack = [], list(poplar.Codelet.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__module__.startswith("tremula.libs."):
            out.append(cls)
    return sorted(set(out), key=lambda c: (c.__module__, c.__qualname__))


def _numbers(code: types.CodeType) -> Iterator[object]:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _numbers(c)
        elif isinstance(c, int | float) and not isinstance(c, bool):
            yield c


@pytest.mark.parametrize("lib", LIBS)
def test_every_library_has_codelets_and_estimators(lib: str) -> None:
    for part in ("codelets", "estimators"):
        here = LIBS_DIR / lib
        assert (here / f"{part}.py").exists() or (here / part / "__init__.py").exists(), (
            f"tremula/libs/{lib} has no {part}.py (or {part}/ package)"
        )


def test_codelets_are_defined_in_codelets_modules() -> None:
    found = _codelets()
    assert len(found) > 40
    for cls in found:
        assert re.fullmatch(r"tremula\.libs\.\w+\.codelets(\.\w+)?", cls.__module__), (
            f"{cls.__qualname__} is defined in {cls.__module__}, not in its library's codelets"
        )


def _codelet_functions(cls: type, fn: types.FunctionType) -> list[types.FunctionType]:
    """``fn`` and the functions of the library's codelets it calls, by name (methods of
    ``cls``, functions of its modules), transitively."""
    prefix = cls.__module__.rsplit(".codelets", 1)[0] + ".codelets"
    seen: list[types.FunctionType] = []
    stack = [fn]
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.append(f)
        for name in _names(f.__code__):
            for obj in (f.__globals__.get(name), getattr(cls, name, None)):
                obj = getattr(obj, "__func__", obj)
                if isinstance(obj, types.FunctionType) and obj.__module__.startswith(prefix):
                    stack.append(obj)
    return seen


def _names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _names(c)


def test_cycles_call_an_estimator() -> None:
    """Directly, or through a method of the codelet or a helper of the library's codelets
    (which then have no constants of their own either)."""
    for cls in _codelets():
        attr = cls.__dict__.get("cycles")
        if attr is None:
            continue
        fn = attr.__func__ if isinstance(attr, staticmethod | classmethod) else attr
        lib = cls.__module__.split(".")[2]
        estimators = importlib.import_module(f"tremula.libs.{lib}.estimators")
        if fn.__module__ == estimators.__name__:
            continue
        where = f"{cls.__qualname__}.cycles ({cls.__module__})"
        reached = _codelet_functions(cls, fn)
        called = [f.__globals__.get(name) for f in reached for name in _names(f.__code__)]
        assert any(obj is estimators for obj in called) or any(
            getattr(obj, "__module__", None) == estimators.__name__ for obj in called
        ), f"{where} calls nothing of {estimators.__name__}"
        for f in reached:
            numbers = [n for n in _numbers(f.__code__) if n not in (0, 1)]
            assert not numbers, (
                f"{where} ({f.__qualname__}) has its own constants {numbers}: move them to "
                f"estimators"
            )
