"""Completeness from the op table: every op type defined (``OPS``, filled by ``defop``
wherever an op is defined, the host embedding's included) has a lowering rule, a NumPy
reference or a stated reason for none, and a gradient rule or the mark "not
differentiable"; every public op function has a docstring. The checks walk the tables, not
a hand list of families, so an op added without one of them fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import popxl.ops
import tremula.embedding
import tremula.lowering
import tremula.popxl
from tremula.lowering import RULES
from tremula.popxl.ops.base import OPS
from tremula.popxl.transforms.grads import GRADS

#: op types with no NumPy reference, and why: their result is not a function of their inputs
NO_REFERENCE = {
    "Call": "runs a graph",
    "Repeat": "runs a graph",
    "If": "runs a graph",
    "RemoteCodeLoad": "loads code",
    "HostLoad": "reads a host stream",
    "HostStore": "writes a host stream",
    "RemoteLoad": "reads a remote buffer",
    "RemoteLoadInplace": "reads a remote buffer",
    "RemoteStore": "writes a remote buffer",
    "MultiExchange": "host and remote exchanges",
    "HostEmbeddingUpdate": "updates a host table",
    "RandomUniform": "random numbers",
    "RandomNormal": "random numbers",
    "Dropout": "random numbers",
    "ShapedDropout": "random numbers",
    "SplitRandomSeed": "random numbers",
}


def _import_all(package: ModuleType) -> None:
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)


@pytest.fixture(scope="module", autouse=True)
def _every_module_imported() -> None:
    """An op, rule or gradient in a module nobody imports yet still counts."""
    for package in (tremula.popxl, tremula.lowering, tremula.embedding):
        _import_all(package)


def test_the_registry_is_the_whole_op_set() -> None:
    assert len(OPS) > 150  # the walk found the op modules
    assert "HostEmbeddingLookup" in OPS  # and the ops defined above PopXL


def test_every_op_type_has_a_lowering_rule() -> None:
    missing = sorted(set(OPS) - set(RULES))
    assert not missing, f"op types without a lowering rule (tremula/lowering): {missing}"
    stale = sorted(set(RULES) - set(OPS))
    assert not stale, f"lowering rules for op types no one defines: {stale}"


def test_every_op_type_has_a_reference_or_a_reason() -> None:
    missing = sorted(t for t, d in OPS.items() if d.reference is None and t not in NO_REFERENCE)
    assert not missing, f"op types without a NumPy reference: {missing}"
    stale = sorted(t for t in NO_REFERENCE if t not in OPS or OPS[t].reference is not None)
    assert not stale, f"NO_REFERENCE names op types that are gone or have one: {stale}"


def test_every_op_type_has_a_gradient_rule_or_is_not_differentiable() -> None:
    missing = sorted(t for t, d in OPS.items() if d.differentiable and t not in GRADS)
    assert not missing, f"differentiable op types without a gradient rule: {missing}"
    stale = sorted(set(GRADS) - set(OPS))
    assert not stale, f"gradient rules for op types no one defines: {stale}"


def _public_functions() -> list[tuple[str, object]]:
    out = []
    modules = [popxl.ops, popxl.ops.collectives, popxl.ops.var_updates, popxl.ops.rnn]
    modules += [popxl.ops.sparse, popxl.ops.utils]
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                out.append((f"{module.__name__}.{name}", obj))
    return out


def test_every_public_op_function_has_a_docstring() -> None:
    functions = _public_functions()
    assert len(functions) > 150
    missing = [name for name, fn in functions if not inspect.getdoc(fn)]
    assert not missing, f"public op functions without a docstring: {missing}"
