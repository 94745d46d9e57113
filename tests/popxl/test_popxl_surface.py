"""PopXL's public surface, name by name (spec/popxl.md section 1, spec/popxl-fidelity.md
sections 1-8): every module, class, function and value listed below must exist with that
kind, and every function or class given with parameters must take them in that order with
those defaults (extra trailing parameters with defaults, and keyword-only ones, are
Tremula extensions and allowed). So the surface cannot drift again.

Each line of ``popxl_surface.txt`` is ``<kind> <dotted name>[(<parameters>)]``;
parameters are written as in a call: ``name`` for a parameter without default (any
default Tremula gives it is allowed), ``name=<literal>`` for one with that default,
``*name`` / ``**name`` for variadic ones.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import popxl

SURFACE = (Path(__file__).parent / "popxl_surface.txt").read_text()

#: Paths the table writes differently because a name is a function in PopXL's namespace
#: but the module is needed: ``<x>_module`` is ``sys.modules[<x>]``.
_MODULE_SUFFIX = "_module"


def _entries() -> list[tuple[str, str, ast.Call | None]]:
    out = []
    for line in SURFACE.strip().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        kind, spec = line.split(" ", 1)
        call = ast.parse(spec, mode="eval").body
        out.append((kind, spec.split("(")[0], call if isinstance(call, ast.Call) else None))
    return out


ENTRIES = _entries()


def _resolve(path: str) -> Any:
    """The object named ``path``, found as a program finds it: attribute by attribute from
    ``popxl``, importing a submodule where there is no such attribute (``popxl.testing``);
    ``x_module`` names the module ``x`` where the attribute ``x`` is a function."""
    parts = path.split(".")
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        if part.endswith(_MODULE_SUFFIX) or not hasattr(obj, part):
            names = [p.removesuffix(_MODULE_SUFFIX) for p in parts[: i + 1]]
            obj = importlib.import_module(".".join(names))
        else:
            obj = getattr(obj, part)
    return obj


def _wanted(call: ast.Call) -> list[tuple[str, inspect._ParameterKind | None, Any]]:
    """(name, kind or None for positional-or-keyword, default or ``inspect._empty``)."""
    out: list[tuple[str, Any, Any]] = []
    for a in call.args:
        if isinstance(a, ast.Starred):
            out.append((a.value.id, inspect.Parameter.VAR_POSITIONAL, inspect._empty))
        else:
            out.append((a.id, None, inspect._empty))
    for k in call.keywords:
        if k.arg is None:
            out.append((k.value.id, inspect.Parameter.VAR_KEYWORD, inspect._empty))
        else:
            out.append((k.arg, None, eval(compile(ast.Expression(k.value), "<surface>", "eval"))))
    return out


def _check_signature(obj: Any, call: ast.Call, path: str) -> None:
    sig = inspect.signature(obj)
    have = list(sig.parameters.values())
    want = _wanted(call)
    assert len(have) >= len(want), f"{path}{sig}: fewer parameters than PopXL's {len(want)}"
    for (name, kind, default), p in zip(want, have):
        assert p.name == name, f"{path}{sig}: parameter {p.name!r} where PopXL has {name!r}"
        if kind is not None:
            assert p.kind == kind, f"{path}{sig}: {name} must be {kind}"
        if default is not inspect._empty:
            assert p.default == default, (
                f"{path}{sig}: {name} defaults to {p.default!r}, not {default!r}"
            )
    for p in have[len(want) :]:
        assert p.default is not inspect._empty or p.kind in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ), f"{path}{sig}: the extra parameter {p.name!r} has no default"


_KINDS = {
    "module": lambda o: isinstance(o, ModuleType),
    "class": lambda o: isinstance(o, type),
    "function": lambda o: callable(o) and not isinstance(o, (type, ModuleType)),
    "value": lambda o: not isinstance(o, ModuleType),
}


@pytest.mark.parametrize("kind, path, call", ENTRIES, ids=[e[1] for e in ENTRIES])
def test_popxl_name(kind: str, path: str, call: ast.Call | None) -> None:
    import popxl.testing  # noqa: F401  (PopXL programs import it themselves)

    try:
        obj = _resolve(path)
    except (ImportError, AttributeError):
        raise AssertionError(f"{path} is missing") from None
    assert _KINDS[kind](obj), f"{path} is {type(obj).__name__}, PopXL has a {kind}"
    if call is not None:
        _check_signature(obj, call, path)


def test_the_81_shadowed_op_names_are_functions_and_modules() -> None:
    from popxl import ops

    for name in ops._SHADOWED:
        assert callable(getattr(ops, name)) and not isinstance(getattr(ops, name), ModuleType)
        assert isinstance(importlib.import_module(f"popxl.ops.{name}"), ModuleType)
    assert len(ops._SHADOWED) == 81


def test_enums_have_popxls_members() -> None:
    assert [m.name for m in popxl.TensorStorage] == ["OnChip", "OffChip"]
    assert {m.name for m in popxl.ReplicatedTensorSharding} == {"On", "Off"}
    assert [m.name for m in popxl.ExecutionContext] == [
        "Normal", "AccumulateOuterFragment", "WeightsFromHostFragment", "WeightsToHostFragment",
        "OptimizerFromHostFragment", "Subgraph"]  # fmt: skip
    assert all(issubclass(e, enum.Enum) for e in (popxl.TileSet, popxl.ExecutionContext))


def test_every_elementwise_record_has_its_functions() -> None:
    """The op machinery: each public record of ``ops/elementwise.py`` has a real function
    (and an in-place ``_`` one where the record has an in-place form) that creates an op of
    the record's type, with a docstring and a signature inspect can read."""
    import numpy as np

    from popxl import ops
    from tremula.popxl.ops.elementwise import TABLE

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        b = popxl.variable(np.ones(2, np.bool_))
        for e in (e for e in TABLE if e.public):
            forms = [(e.name, e.op)] + ([(e.name + "_", e.op + "Inplace")] if e.inplace else [])
            for name, op_type in forms:
                fn = getattr(ops, name)
                assert inspect.isfunction(inspect.unwrap(fn)) and fn.__doc__, name
                assert len(inspect.signature(fn).parameters) == e.arity, name
                arg = b if e.name.startswith("logical") else x
                out = fn(*[arg] * e.arity)
                assert out.producer.type == op_type, name
