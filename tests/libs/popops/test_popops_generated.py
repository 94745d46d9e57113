"""popops' named element-wise functions are real source generated from the op table
(``tools/gen_popops_elementwise.py``): the checked-in files are what the script writes, and
every op of the table has its function(s), with a signature help() and mypy can read."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from tremula.libs import popops
from tremula.libs.popops import elementwise, ops

TOOL = Path(__file__).resolve().parents[3] / "tools" / "gen_popops_elementwise.py"


def _tool():
    spec = importlib.util.spec_from_file_location("gen_popops_elementwise", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_files_are_up_to_date() -> None:
    stale = _tool().stale()
    assert not stale, f"regenerate with tools/gen_popops_elementwise.py: {stale}"


def test_every_op_of_the_table_has_its_functions_with_real_signatures() -> None:
    for rec in ops.ELEMENTWISE_OPS:
        for alias in (rec.name, *rec.aliases):
            for name in (alias, alias + "_in_place") if rec.in_place else (alias,):
                fn = getattr(popops, name)
                assert fn is getattr(elementwise, name)
                assert fn.__module__.startswith("tremula.libs.popops.elementwise_")
                params = list(inspect.signature(fn).parameters)
                assert params == ["graph", *"abc"[: rec.arity], "prog", "name", "options"]
                assert ", ".join(sorted(rec.costs)) in (fn.__doc__ or "")
    assert "add_in_place" in elementwise.__all__ and "map" in elementwise.__all__
    assert not hasattr(popops, "is_nan_in_place")  # no in-place form where the table has none
