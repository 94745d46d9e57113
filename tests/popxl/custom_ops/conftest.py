"""Fixtures of the served custom-op tests: popxl-addons' public wrappers, as users import
them, with their C++ binding modules served by Tremula's modules; the profile check.

Until the import hook serves bindings by the operator identifier their C++ declares, the
``addons`` fixture puts each served module in ``sys.modules`` under the binding's name (the
hook's job), so that the wrapper's ``from . import <x>_binding`` finds it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

ADDONS = Path(__file__).resolve().parents[3].parent / "shared" / "clients" / "popxl-addons"

#: popxl-addons' binding module -> the Tremula module serving it
BINDINGS = {
    "popxl_addons.ops.rotary_pos_embed.rotary_pos_embed_binding": "rotary_pos_embed",
    "popxl_addons.ops.group_quantize_decompress.group_quantize_decompress_binding": (
        "group_quantize_decompress"
    ),
    "popxl_addons.ops.linear_layout.linear_layout_impl": "linear_layout",
    "popxl_addons.ops.static_sparse_ops.dense_sparse_matmul_impl": "static_sparse_ops",
    "popxl_addons.ops.fp8_mse_scale.fp8_mse_scale_impl": "fp8_mse_scale",
}


@pytest.fixture
def addons() -> Iterator[Callable[[str], ModuleType]]:
    """``addons("rotary_pos_embed")`` imports ``popxl_addons.ops.rotary_pos_embed``; what
    it put in ``sys.modules`` is taken out again after the test (other tests check how
    popxl-addons imports without it)."""
    if not (ADDONS / "popxl_addons" / "__init__.py").exists():
        pytest.skip(f"popxl-addons not found at {ADDONS} (the clients beside the repository)")
    if str(ADDONS) not in sys.path:
        sys.path.insert(0, str(ADDONS))
    before = set(sys.modules)

    def load(name: str) -> ModuleType:
        for binding, served in BINDINGS.items():
            if binding.startswith(f"popxl_addons.ops.{name}.") and binding not in sys.modules:
                module = importlib.import_module(f"tremula.popxl.custom_ops.{served}")
                sys.modules[binding] = module
        return importlib.import_module(f"popxl_addons.ops.{name}")

    yield load
    for added in set(sys.modules) - before:
        if added.startswith("popxl_addons.ops."):
            del sys.modules[added]


@pytest.fixture
def check_profile() -> Callable[[Any, str], None]:
    """``check_profile(session, "RotaryPosEmbed")``: the profiles validate, and compute
    sets named after the op hold vertices with cycle estimates."""
    from tremula.profile import validate

    def check(session: Any, op_name: str) -> None:
        graph = session.engine.get_graph_profile()
        execution = session.engine.get_execution_profile()
        validate(graph, execution)
        names = graph["computeSets"]["names"]
        cycles = graph["computeSets"]["cycleEstimates"]["cyclesByTile"]
        mine = [k for k, n in enumerate(names) if op_name in n]
        assert mine, f"no compute set named after {op_name}: {names}"
        assert max(int(np.max(cycles[k])) for k in mine) > 0

    return check
