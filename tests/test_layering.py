"""A lower layer never imports a higher one (shared/DESIGN.md, "Layers").

Order, bottom to top. ``profile`` sits below ``engine``: it is the profile *format* (reader,
validator, summary) over plain dicts, and the engine writes in that format.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "tremula"
LAYERS = [
    "alias",
    "lazy",
    "errors",
    "progress",
    "data",
    "target",
    "popdist",
    "poplar",
    "profile",
    "engine",
    "libs",
    "popxl",
    "lowering",
    "popart",
    "embedding",
    "demo",
    "digits",
    "cli",
]
RANK = {name: i for i, name in enumerate(LAYERS)}
#: (importing module, imported layer): documented exceptions
ALLOWED = {
    ("tremula.poplar", "engine"),  # lazy `poplar.Engine` facade, resolved on first use
    ("tremula.popxl.session", "lowering"),  # DESIGN: only session.py reaches into lowering
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tremula" or len(parts) < 2:
        return None
    return parts[1].removesuffix(".py")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names if node.module == "tremula"]
    return out


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_upward_imports(path: Path) -> None:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    module = ".".join(rel.parts).removesuffix(".__init__")
    own = _layer(module) or "cli"  # the root package may re-export anything
    assert own in RANK, f"{module}: layer {own!r} missing from LAYERS in this test"
    for imported in _imports(path):
        layer = _layer(imported)
        if layer is None or layer not in RANK:
            continue
        if (module, layer) in ALLOWED:
            continue
        assert RANK[layer] <= RANK[own], (
            f"{module} (layer {own!r}) imports {imported} (higher layer {layer!r})"
        )


def test_popxl_imports_nothing_from_popart() -> None:
    """PopXL (its IR bindings included) owns what PopART's names need below it."""
    for path in sorted((ROOT / "popxl").rglob("*.py")):
        for imported in _imports(path):
            assert not imported.startswith("tremula.popart"), f"{path} imports {imported}"


def test_every_layer_listed() -> None:
    found = {
        p.name.removesuffix(".py")
        for p in ROOT.iterdir()
        if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py")
    }
    found.discard("__init__")
    assert found <= set(RANK), f"layers not in LAYERS: {sorted(found - set(RANK))}"


#: what tremula.popart may use from below it (DESIGN: PopART sits above PopXL and uses only
#: its public API; the grouping maths is GCL's; devices are Poplar's; a distributed
#: session's layout is PopDist's, through its public API)
POPART_USES = ("tremula.errors", "tremula.poplar", "tremula.libs.gcl", "tremula.popart")
POPART_POPDIST = "tremula.popdist"
#: PopART's C++ core types (enums, groupings, VariableSettings, SessionOptions, its logger)
#: live with the IR bindings that own them; PopART reads them from there
POPART_CORE = "tremula.popxl._ir.core."
POPXL_PUBLIC = (
    "tremula.popxl",
    "tremula.popxl.dtypes",
    "tremula.popxl.ops",
    "tremula.popxl.ops.collectives",
    "tremula.popxl.ops.var_updates",
    "tremula.popxl.transforms",
)


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "popart").rglob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_popart_uses_public_popxl(path: Path) -> None:
    if "_internal" in path.parts:  # PopXL's IR bindings (popart._internal.ir) reach below
        return
    for imported in _imports(path):
        if imported == "tremula" or not imported.startswith("tremula."):
            continue
        if imported.startswith("tremula.popxl"):
            public = imported in POPXL_PUBLIC or imported.startswith(POPART_CORE)
            assert public, f"{path.name} imports {imported} (not public PopXL)"
        elif imported.startswith("tremula.popdist"):
            assert imported == POPART_POPDIST, f"{path.name} imports {imported} (not PopDist's API)"
        else:
            assert imported.startswith(POPART_USES), f"{path.name} imports {imported}"
