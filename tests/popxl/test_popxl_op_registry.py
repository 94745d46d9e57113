"""Completeness from the op table: every op type defined (``OPS``, filled by ``defop``
wherever an op is defined, the host embedding's included) has a lowering rule, a NumPy
reference or a stated reason for none, and a gradient rule or the mark "not
differentiable"; every public op function has a docstring. The checks walk the tables, not
a hand list of families, so an op added without one of them fails here. Registration keeps
each fact in one place: a gradient rule or lowering rule for an undefined op type, a second
one, or a rule contradicting the definition is refused (the tests for the ops' tests are in
``test_popxl_op_tests.py``)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import numpy as np
import pytest

import popxl
import popxl.ops
import tremula.embedding
import tremula.lowering
import tremula.popxl
from popxl import ops
from tremula.lowering import LOWERING_RULES
from tremula.lowering.driver import rule
from tremula.popxl.ops.base import INPLACE, OPS, defop
from tremula.popxl.transforms.grads import GRADS, grad, not_differentiable

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
    missing = sorted(set(OPS) - set(LOWERING_RULES))
    assert not missing, f"op types without a lowering rule (tremula/lowering): {missing}"
    stale = sorted(set(LOWERING_RULES) - set(OPS))
    assert not stale, f"lowering rules for op types no one defines: {stale}"


def test_a_lowering_rule_is_refused_for_an_undefined_or_ruled_op_type(scratch_op: str) -> None:
    before = dict(LOWERING_RULES)
    with pytest.raises(ValueError, match="lowering rule for op type 'NoSuchOp', which no defop"):
        rule("NoSuchOp")(LOWERING_RULES["Add"])
    with pytest.raises(ValueError, match="op type 'Sub' already has a lowering rule"):
        rule("Sub")(LOWERING_RULES["Add"])
    with pytest.raises(ValueError, match="op type 'Sub' already has a lowering rule"):
        rule(scratch_op, "Sub")(LOWERING_RULES["Add"])
    assert before == LOWERING_RULES  # nothing registered, not even the defined type


def test_every_op_type_has_a_reference_or_a_reason() -> None:
    missing = sorted(t for t, d in OPS.items() if d.reference is None and t not in NO_REFERENCE)
    assert not missing, f"op types without a NumPy reference: {missing}"
    stale = sorted(t for t in NO_REFERENCE if t not in OPS or OPS[t].reference is not None)
    assert not stale, f"NO_REFERENCE names op types that are gone or have one: {stale}"


def test_every_op_type_has_a_gradient_rule_or_is_not_differentiable() -> None:
    missing = sorted(t for t, d in OPS.items() if d.differentiable and d.grad is None)
    assert not missing, f"differentiable op types without a gradient rule: {missing}"
    # GRADS, the name rules and tests used for the table, is a view of the definitions
    assert dict(GRADS) == {t: d.grad for t, d in OPS.items()}


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


def test_every_op_naming_graphs_says_how_it_uses_them() -> None:
    """``OpDefinition.graphs`` is what autodiff, the lowering and the IR bindings read: each op
    made with graphs (a call, a loop, a branch, a code load) has it, and no other op."""
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(3, np.float32))
        g = ir.create_graph(lambda a: a + 1.0, x)
        cond = popxl.constant(np.array(True))
        ops.call(g, x)
        ops.repeat(g, 2, x)
        ops.conditional(cond, g, g, [x], [x])
        ops.remote_code_load(g, "executable")
    made = [op for graph in ir.graphs for op in graph.ops]
    uses = {op.type: op.definition.graphs for op in made}
    assert uses["Call"] == "call" and uses["Repeat"] == "loop" and uses["If"] == "branch"
    assert uses["RemoteCodeLoad"] == "code_load"
    for op in made:
        assert bool(op.called_graphs) == bool(op.definition.graphs), op
        assert op.definition.runs_graphs == (
            op.definition.graphs != "code_load" and bool(op.called_graphs)
        )
    named = {t for t, d in OPS.items() if d.graphs}
    assert named == {op.type for op in made if op.called_graphs}, (
        "an op naming graphs is untested here"
    )


def test_every_inplace_form_is_linked_to_its_out_of_place_op() -> None:
    forms = {t: d for t, d in OPS.items() if d.inplace_of}
    assert len(forms) > 25
    for t, d in forms.items():
        base = OPS[d.inplace_of]
        assert INPLACE[base.type] == t and d.outplace == base.type
        assert (d.modifies or d.view) and not base.modifies and not base.view, t
        assert d.grad is base.grad and d.differentiable == base.differentiable, t  # shared
        assert LOWERING_RULES[t] is LOWERING_RULES[base.type] or t in SEPARATE_LOWERING, t
    # PopART's names: every ``...Inplace`` type is a linked form (a missing link fails here)
    unlinked = sorted(t for t in OPS if t.endswith("Inplace") and t not in forms)
    assert not unlinked, f"in-place op types without OpDefinition.inplace_of: {unlinked}"


#: in-place forms lowered by a rule of their own, and why
SEPARATE_LOWERING = {
    "ReshapeInplace": "a view, no copy",
    "TransposeInplace": "a view, no copy",
    "SliceInplace": "a view, no copy",
    "DetachInplace": "the input itself",
}


def test_inplace_forms_and_their_links_are_checked_when_defined() -> None:
    before = dict(OPS), dict(INPLACE)
    with pytest.raises(ValueError, match="NoSuchOpInplace: its out-of-place op 'NoSuchOp' is not"):
        defop("NoSuchOpInplace", lambda s, a: list(s), inplace_of="NoSuchOp", modifies=(0,))
    with pytest.raises(ValueError, match="Add already has an in-place form, AddInplace"):
        defop("AddInPlace2", lambda s, a: [s[0]], inplace_of="Add", modifies=(0,))
    with pytest.raises(ValueError, match="MatMulCopy: an in-place form modifies an input or is a"):
        defop("MatMulCopy", lambda s, a: list(s), inplace_of="MatMul")
    assert before == (OPS, INPLACE)  # nothing registered


@pytest.fixture
def scratch_op() -> object:
    """A differentiable op type with no rule yet, and its in-place form's name; removed
    after the test."""
    defop("RegistryScratch", lambda s, a: [s[0]], lambda x, a: [x[0]])
    yield "RegistryScratch"
    OPS.pop("RegistryScratchInplace", None)
    INPLACE.pop("RegistryScratch", None)
    OPS.pop("RegistryScratch")


def _rule(c: object, op: object, g: object, need: object) -> list:
    return [None]


def test_a_gradient_rule_is_attached_to_its_definition(scratch_op: str) -> None:
    assert OPS[scratch_op].differentiable and OPS[scratch_op].grad is None
    assert scratch_op not in GRADS
    grad(scratch_op)(_rule)
    assert OPS[scratch_op].grad is _rule and GRADS[scratch_op] is _rule
    form = defop(scratch_op + "Inplace", lambda s, a: [s[0]], modifies=(0,), inplace_of=scratch_op)
    assert form.grad is _rule  # an in-place form reads its out-of-place op's rule
    with pytest.raises(ValueError, match="'RegistryScratchInplace' is the in-place form of"):
        grad(scratch_op + "Inplace")(_rule)


def test_registration_refuses_a_contradiction_or_a_second_statement(scratch_op: str) -> None:
    cases = {
        "Add": "op type 'Add' already has a gradient rule, tremula.popxl.transforms.grads",
        "Floor": r"op type 'Floor' is already not differentiable .* cannot be given a gradient",
        "ArgMax": "op type 'ArgMax' is already not differentiable",  # defop's flag
        "NoSuchOp": "gradient rule for op type 'NoSuchOp', which no defop defines",
    }
    for op_type, message in cases.items():
        with pytest.raises(ValueError, match=message):
            grad(op_type)(_rule)
    with pytest.raises(ValueError, match=r"'ArgMax' is already not differentiable .* the mark"):
        not_differentiable("ArgMax")
    with pytest.raises(ValueError, match="'Add' already has a gradient rule"):
        not_differentiable("Add")
    # a refused registration attaches nothing, not even to the types before the bad one
    with pytest.raises(ValueError, match="'NoSuchOp', which no defop"):
        grad(scratch_op, "NoSuchOp")(_rule)
    with pytest.raises(ValueError, match="'RegistryScratch' is named twice"):
        not_differentiable(scratch_op, scratch_op)
    assert OPS[scratch_op].differentiable and OPS[scratch_op].grad is None
    with pytest.raises(ValueError, match="RegistryScratchInplace: differentiable=False contra"):
        defop(scratch_op + "Inplace", lambda s, a: [s[0]], None, (0,), False, inplace_of=scratch_op)
    assert scratch_op + "Inplace" not in OPS
    not_differentiable(scratch_op)
    assert not OPS[scratch_op].differentiable and GRADS[scratch_op] is None
    with pytest.raises(ValueError, match="'RegistryScratch' is already not differentiable"):
        grad(scratch_op)(_rule)
