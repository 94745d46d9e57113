"""A lower layer never imports a higher one (docs/ARCHITECTURE.md, "Layers", lists the
same order; a test checks that it does).

Order, bottom to top. ``profile`` sits below ``engine``: it is the profile *format* (reader,
validator, summary) over plain dicts, and the engine writes in that format; ``popdist`` sits
below ``poplar``: the engine's replica runtimes use its communicators. The root alias
packages (``popxl/``, ``popart/``, ``popdist/``) count as the layer they alias.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "tremula"
LAYERS = [
    "_compat",  # names of newer Pythons for 3.10 (standard library only)
    "alias",
    "lazy",
    "errors",
    "numerics",
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


#: the root alias packages: ``import popxl`` is ``tremula.popxl``, so it is that layer
ALIASES = {"popxl": "popxl", "popart": "popart", "popdist": "popdist"}
#: alias modules of their own, and their layer: ``popdist.popart`` joins PopDist and PopART
ALIAS_MODULES = {"popdist.popart": "popart"}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] in ALIASES:
        prefix = ".".join(parts[:2])
        return ALIAS_MODULES.get(prefix, ALIASES[parts[0]])
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
ALIAS_FILES = sorted(p for name in ALIASES for p in (REPO / name).rglob("*.py"))


@pytest.mark.parametrize("path", FILES + ALIAS_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_upward_imports(path: Path) -> None:
    rel = path.relative_to(REPO).with_suffix("")
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


def test_architecture_document_lists_the_layers_in_this_order() -> None:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("```", 2)[1]
    named = []
    entries = [line for line in block.splitlines() if line[:2] == "  " and line[2:3] != " "]
    for line in entries:  # "  name/   what it is", "  demo.py, digits.py   what they are"
        for word in line.strip().split("  ")[0].replace(",", " ").split():
            name = word.strip().removesuffix("/").removesuffix(".py")
            if name in RANK and name not in named:
                named.append(name)
    assert named == LAYERS, f"docs/ARCHITECTURE.md lists {named}, the test {LAYERS}"


def test_alias_packages_import_only_their_layer_and_below() -> None:
    """``popxl/`` re-exports ``tremula.popxl`` and nothing above it (checked per file by
    test_no_upward_imports); here: the alias packages exist and are all checked."""
    assert {p.parts[len(REPO.parts)] for p in ALIAS_FILES} == set(ALIASES)


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
POPART_USES = (
    "tremula.errors",
    "tremula.numerics",
    "tremula.poplar",
    "tremula.libs.gcl",
    "tremula.popart",
)
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
