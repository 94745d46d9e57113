"""Lazy package exports (``tremula.lazy``): names listed in a package's ``TYPE_CHECKING``
block load on first use, are the very objects of the modules they come from, and the
packages Tremula makes lazy keep their whole surface; ``import popxl`` loads the IR only."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tremula.lazy import exports

PACKAGES = [
    "tremula.poplar",
    "tremula.libs.gcl",
    "tremula.libs.popnn",
    "tremula.libs.poprand",
    "tremula.popxl",
    "tremula.popxl._ir",
]


def _package(root: Path, name: str, init: str, **modules: str) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(init))
    for module, text in modules.items():
        (folder / f"{module}.py").write_text(textwrap.dedent(text))


LAZY_INIT = """
    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from {name}.heavy import Thing, make as build
        from {name} import heavy
    else:
        from tremula.lazy import attach

        __getattr__, __dir__ = attach(__name__, __file__)
    """


def _fresh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str):
    _package(
        tmp_path,
        name,
        LAZY_INIT.format(name=name),
        heavy="LOADS = []\nclass Thing: pass\ndef make(): return Thing()\n",
        other="VALUE = 7\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_exports_reads_the_type_checking_block(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(LAZY_INIT.format(name="pkg")))
    assert exports(path) == {
        "Thing": ("pkg.heavy", "Thing"),
        "build": ("pkg.heavy", "make"),
        "heavy": ("pkg", "heavy"),
    }


@pytest.mark.parametrize(
    "line, what",
    [
        ("from .heavy import Thing", "absolute"),
        ("import pkg.heavy", "absolute"),
        ("from pkg.heavy import *", "'import \\*' cannot be lazy"),
    ],
)
def test_exports_refuses_what_it_cannot_load_lazily_naming_the_line(
    tmp_path: Path, line: str, what: str
) -> None:
    path = tmp_path / "m.py"
    path.write_text(f"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    {line}\n")
    with pytest.raises(ValueError, match=f"m.py:3: .*{what}"):
        exports(path)


def test_names_load_on_first_use_and_stay(tmp_path: Path, monkeypatch) -> None:
    pkg = _fresh(tmp_path, monkeypatch, "lazypkg_a")
    assert "lazypkg_a.heavy" not in sys.modules  # the import itself loaded nothing
    thing = pkg.Thing
    heavy = sys.modules["lazypkg_a.heavy"]
    assert thing is heavy.Thing and pkg.build is heavy.make and pkg.heavy is heavy
    assert vars(pkg)["Thing"] is thing  # kept: later reads are plain attribute reads
    from lazypkg_a import build  # `from ... import` goes through the same path

    assert build is heavy.make


def test_unlisted_submodules_are_attributes_and_missing_names_are_refused(
    tmp_path: Path, monkeypatch
) -> None:
    pkg = _fresh(tmp_path, monkeypatch, "lazypkg_b")
    assert pkg.other.VALUE == 7 and pkg.other is sys.modules["lazypkg_b.other"]
    with pytest.raises(AttributeError, match="module 'lazypkg_b' has no attribute 'nothing'"):
        pkg.nothing  # noqa: B018
    assert not hasattr(pkg, "__wrapped__")  # dunder probes are refused without a search
    assert {"Thing", "build", "heavy"} <= set(dir(pkg))


@pytest.mark.parametrize("name", PACKAGES)
def test_tremula_lazy_packages_export_the_objects_of_their_modules(name: str) -> None:
    package = importlib.import_module(name)
    table = exports(package.__file__)
    assert table, f"{name} has no lazy exports"
    for export, (module, attr) in table.items():
        source = importlib.import_module(module)
        expected = getattr(source, attr, None)
        if expected is None or module == name:
            expected = importlib.import_module(f"{module}.{attr}")
        assert getattr(package, export) is expected, f"{name}.{export}"
    missing = [n for n in package.__all__ if not hasattr(package, n)]
    assert not missing, f"{name}.__all__ names that do not resolve: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_tremula_lazy_packages_keep_exports_named_like_their_module_when_it_loads_first(
    name: str,
) -> None:
    # importing a submodule binds it on its package: an export named like the module that
    # defines it (``popnn.softmax``) must still be the export, as after an eager import
    package = importlib.import_module(name)
    shadowed = [
        (export, module)
        for export, (module, attr) in exports(package.__file__).items()
        if module.rpartition(".")[2] == attr == export and module != name
    ]
    code = textwrap.dedent(
        f"""
        import importlib
        shadowed = {shadowed!r}
        for _, module in shadowed:
            importlib.import_module(module)
        package = importlib.import_module({name!r})
        for export, module in shadowed:
            value = getattr(importlib.import_module(module), export)
            assert getattr(package, export) is value, export
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


#: modules that `import popxl` must not load: the engine, the lowering, the graph layer's
#: graphs and programs, PopLibs (GCL's collectives included), the profile format
BACKEND = (
    "tremula.engine",
    "tremula.lowering",
    "tremula.poplar.graph",
    "tremula.poplar.program",
    "tremula.libs.popops",
    "tremula.libs.gcl.collectives",
    "tremula.profile",
    "tremula.popxl.session",
    "mpi4py",
)


def test_import_popxl_loads_the_ir_only_and_the_rest_on_first_use() -> None:
    code = textwrap.dedent(
        f"""
        import sys, numpy as np, popxl
        loaded = sorted(m for m in sys.modules if m.startswith({BACKEND!r}))
        assert not loaded, loaded
        from popxl import ops
        ir = popxl.Ir()
        with ir.main_graph:
            a = popxl.variable(np.arange(4, dtype=np.float32))
            s = popxl.d2h_stream((4,), popxl.float32)
            ops.host_store(s, ops.add(a, a))
        import tremula.popxl.session as session_module
        assert popxl.Session is session_module.Session and popxl.session is session_module
        with popxl.Session(ir, "ipu_model") as session:
            assert session.run()[s].tolist() == [0.0, 2.0, 4.0, 6.0]
        assert callable(popxl.transforms.autodiff)
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("first", ["attribute", "import"])
def test_op_modules_named_like_their_function_keep_the_function_when_ops_loads_late(
    first: str,
) -> None:
    # `popxl.ops` loads on first use, after the popxl alias was installed: its modules are
    # registered under popxl.ops.* when the alias finder first serves popxl.ops
    start = "popxl.ops.add" if first == "attribute" else "import popxl.ops"
    code = textwrap.dedent(
        f"""
        import types, popxl
        {start}
        from popxl.ops.call import CallSiteInfo
        import popxl.ops.conv
        assert CallSiteInfo is popxl.ops.CallSiteInfo
        for name in ("call", "conv"):
            assert not isinstance(getattr(popxl.ops, name), types.ModuleType), name
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


#: modules that creating and running a session of the README MLP must not load: the custom
#: ops' lowering rules (loaded when a program first uses a custom op), ``numpy.ma`` (which
#: ``np.unique`` imports on its first call; the compile takes ``distinct`` instead), PopNN's
#: recurrent layers and normalisations, and PopRand's generators (the MLP draws no numbers)
NOT_FOR_THE_MLP = (
    "tremula.lowering.custom_ops",
    "tremula.popxl.custom_ops.",
    "numpy.ma.",
    "tremula.libs.popnn.gru.",
    "tremula.libs.popnn.lstm.",
    "tremula.libs.popnn.normalisation.",
    "tremula.libs.poprand.generate.",
    "tremula.libs.poprand.codelets.",
)


def test_a_session_loads_no_custom_op_lowering_and_no_numpy_ma() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        from tremula.digits import build_training, load_digits
        trainer = build_training(32, 0.05, "ipu_model")
        x = np.linspace(0, 1, 32 * 64, dtype=np.float32).reshape(32, 64)
        labels = (np.arange(32) % 10).astype(np.int32)
        with trainer.session as session:
            loss = float(session.run({{trainer.x: x, trainer.labels: labels}})[trainer.loss])
        assert np.isfinite(loss) and 0 < loss < 10, loss
        loaded = sorted(m for m in sys.modules if (m + ".").startswith({NOT_FOR_THE_MLP!r}))
        assert not loaded, loaded
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_custom_op_loads_its_lowering_rule_on_first_use() -> None:
    # a fresh process: the rules of tremula/popxl/custom_ops register when the driver first
    # meets a type with no rule, and the op then lowers and runs (LinearLayout copies)
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        import popxl, popxl.ops as ops
        import tremula.lowering
        from tremula.popxl.custom_ops import linear_layout
        from tremula.popxl.ops.base import create_op
        assert "tremula.lowering.custom_ops" not in sys.modules
        assert linear_layout.OP not in tremula.lowering.LOWERING_RULES
        x = np.arange(300, dtype=np.float32).reshape(3, 100)
        ir = popxl.Ir()
        with ir.main_graph:
            (y,) = create_op(linear_layout.OP, [popxl.variable(x)], {"bs": 7})
            d = popxl.d2h_stream(y.shape, y.dtype)
            ops.host_store(d, y)
        with popxl.Session(ir, "ipu_model") as session:
            np.testing.assert_array_equal(session.run()[d], x)
        assert "tremula.lowering.custom_ops" in sys.modules
        assert linear_layout.OP in tremula.lowering.LOWERING_RULES
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
