"""Completeness of PopART's ONNX rules, walking the tables: every Builder method (the opset
tables of ``opsets.py``) has a rule, and every rule (``rules.ONNX_RULES``) is exercised by a test
of this folder, which names its ONNX op type (an ``onnx.helper`` node), calls a Builder
method that writes it, or runs a model file of ``data/`` holding it (against onnxruntime,
``test_popart_onnx_import.py``). A rule added without a test, or a Builder method without a
rule, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tremula.popart.opsets import AI_GRAPHCORE, AI_ONNX
from tremula.popart.rules import ONNX_RULES

HERE = Path(__file__).parent
_GC = "ai.graphcore"


def _sources() -> str:
    return "\n".join(
        p.read_text() for p in sorted(HERE.glob("test_*.py")) if p.name != Path(__file__).name
    )


def _model_file_ops() -> set[str]:
    import onnx

    return {
        n.op_type for p in sorted((HERE / "data").glob("*.onnx")) for n in onnx.load(p).graph.node
    }


def _called_methods(text: str) -> set[str]:
    return set(re.findall(r"\.([a-z0-9_]+)\(", text))


def test_every_builder_method_has_a_rule() -> None:
    missing = sorted(
        f"{'aiGraphcore' if domain == _GC else 'aiOnnx'}.{name} ({op.onnx})"
        for domain, table in (("", AI_ONNX), (_GC, AI_GRAPHCORE))
        for name, defs in table.items()
        for op in defs
        if (op.domain, op.onnx) not in ONNX_RULES
    )
    assert not missing, f"Builder methods whose ONNX op has no rule: {missing}"


def test_every_onnx_rule_has_a_test() -> None:
    text = _sources()
    quoted = set(re.findall(r'"([A-Z][A-Za-z0-9]*)"', text)) | _model_file_ops()
    called = _called_methods(text)
    by_method = {
        domain: {op.onnx for name, defs in table.items() if name in called for op in defs}
        for domain, table in (("", AI_ONNX), (_GC, AI_GRAPHCORE))
    }
    untested = sorted(
        f"{domain or 'ai.onnx'}.{op_type}"
        for domain, op_type in ONNX_RULES
        if op_type not in by_method[domain] and (domain == _GC or op_type not in quoted)
    )
    assert not untested, f"ONNX rules no test of tests/popart names: {untested}"
