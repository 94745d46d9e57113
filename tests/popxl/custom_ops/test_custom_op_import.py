"""C++ custom ops are identified by the PopART operator identifiers their C++ declares,
wherever the cppimport module lives (``tremula/popxl/_ir/native.py``): a served op is
served from any folder, under any module name; an unserved one raises ImportError naming
its identifiers and its file, without compiling anything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tremula.popxl._ir.cpp_source import OperatorId, module_files, operator_ids
from tremula.popxl.custom_ops import SERVED

ADDONS = Path(__file__).resolve().parents[3].parent / "shared" / "clients" / "popxl-addons"
OPS = ADDONS / "popxl_addons" / "ops"
ROOT = Path(__file__).resolve().parents[3]

FAKE_CPP = """\
// cppimport
#include <popart/op.hpp>
#include "ids.hpp"
namespace popart {
class MyOp : public Op {
  static OperatorIdentifier defaultOperatorId() {
    return OperatorIdentifier{MY_DOMAIN, "MyMadeUpOp", 3, {1, 1}, 1};
  }
};
} // namespace popart
/*
<%
cfg['sources'] = ['more.cpp']
setup_pybind11(cfg)
%>
*/
"""
FAKE_HPP = '#define MY_DOMAIN "my.model.ops"\n'
FAKE_MORE = (
    '// const popart::OperatorIdentifier Old = OperatorIdentifier{"x", "Commented", 1};\n'
    'const popart::OperatorIdentifier G = OperatorIdentifier(MY_DOMAIN, "MyMadeUpOpGrad", 3);\n'
)
WRAPPER = """\
import cppimport.import_hook
from . import fake_binding
"""


def _model(root: Path, name: str = "mymodel") -> Path:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fake_binding.cpp").write_text(FAKE_CPP)
    (pkg / "ids.hpp").write_text(FAKE_HPP)
    (pkg / "more.cpp").write_text(FAKE_MORE)
    (pkg / "wrapper.py").write_text(WRAPPER)
    return pkg


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cwd), str(ROOT)]))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_identifiers_are_read_from_the_source_its_headers_and_its_listed_sources(
    tmp_path: Path,
) -> None:
    pkg = _model(tmp_path)
    src = str(pkg / "fake_binding.cpp")
    assert [Path(p).name for p in module_files(src)] == ["fake_binding.cpp", "ids.hpp", "more.cpp"]
    assert operator_ids(src) == [
        OperatorId("my.model.ops", "MyMadeUpOp", 3),
        OperatorId("my.model.ops", "MyMadeUpOpGrad", 3),
    ]


def test_popart_constants_identify_a_module_that_declares_none(tmp_path: Path) -> None:
    src = tmp_path / "m.cpp"
    src.write_text(
        "// cppimport\nverifyOp<X>(op, {Onnx::CustomOperators::Foo, "
        "Onnx::Operators::Gather_11});\nconst OperatorIdentifier id{Domain::ai_graphcore,"
    )
    assert operator_ids(str(src)) == [
        OperatorId("ai.graphcore", "Foo", 1),
        OperatorId("ai.onnx", "Gather", 11),
    ]
    src.write_text('// cppimport\nOperatorIdentifier{Onnx::Domain::ai_graphcore, "Bar", 2};')
    assert operator_ids(str(src)) == [OperatorId("ai.graphcore", "Bar", 2)]


@pytest.mark.skipif(not OPS.exists(), reason=f"popxl-addons not found at {ADDONS}")
def test_every_served_identifier_is_declared_by_a_popxl_addons_op_and_its_module_imports() -> None:
    declared: dict[OperatorId, str] = {}
    for src in sorted(OPS.glob("*/*.cpp")):
        for i in operator_ids(str(src)):
            declared[i] = src.name
    import importlib

    for ident, module in SERVED.items():
        assert OperatorId(*ident) in declared, ident
        importlib.import_module(module)


def test_an_unserved_op_is_refused_naming_its_identifiers_and_file_without_compiling(
    tmp_path: Path,
) -> None:
    pkg = _model(tmp_path)
    # with cppimport's hook imported first, as real wrappers do; cppimport must not run
    code = """
        import popxl, cppimport
        real = cppimport.imp
        def no_build(fullname, *a, **k):
            if fullname.endswith("fake_binding"):
                raise SystemExit("cppimport was asked to build " + fullname)
            return real(fullname, *a, **k)
        cppimport.imp = no_build
        try:
            import mymodel.wrapper
        except ImportError as err:
            print("REFUSED", err.name, "|", err)
        """
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "REFUSED mymodel.fake_binding |" in out.stdout
    for part in ("my.model.ops::MyMadeUpOp:3", "my.model.ops::MyMadeUpOpGrad:3", "not served"):
        assert part in out.stdout
    assert str(pkg / "fake_binding.cpp") in out.stdout
    assert sorted(p.name for p in pkg.iterdir() if p.name != "__pycache__") == [
        "__init__.py", "fake_binding.cpp", "ids.hpp", "more.cpp", "wrapper.py",
    ]  # fmt: skip


def test_refused_before_popxl_is_imported_too_and_at_top_level(tmp_path: Path) -> None:
    """cppimport's hook imported before PopXL, and a top-level module (found on sys.path)."""
    shutil.copy(_model(tmp_path) / "fake_binding.cpp", tmp_path / "top_binding.cpp")
    shutil.copy(tmp_path / "mymodel" / "ids.hpp", tmp_path / "ids.hpp")
    shutil.copy(tmp_path / "mymodel" / "more.cpp", tmp_path / "more.cpp")
    code = """
        import cppimport.import_hook
        import popxl
        for name in ("top_binding", "mymodel.fake_binding"):
            try:
                __import__(name)
            except ImportError as err:
                print("REFUSED", name, "MyMadeUpOp:3" in str(err))
        """
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "REFUSED top_binding True" in out.stdout
    assert "REFUSED mymodel.fake_binding True" in out.stdout


def test_a_cpp_module_declaring_no_op_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lib_only.cpp").write_text("// cppimport\nint f() { return 1; }\n")
    out = _run(
        "import popxl\ntry:\n import lib_only\nexcept ImportError as e:\n print('NO-OP', e)",
        tmp_path,
    )
    assert "NO-OP lib_only is a C++ module" in out.stdout, out.stderr
    assert "declares no PopART custom op" in out.stdout


@pytest.mark.skipif(not OPS.exists(), reason=f"popxl-addons not found at {ADDONS}")
def test_a_models_own_copy_of_a_served_op_is_served(tmp_path: Path) -> None:
    """The tensor-parallel all-reduce's C++ copied into a model's folder under another
    name is served by its identifier, as popxl-addons' own copy."""
    pkg = tmp_path / "othermodel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    src = OPS / "replicated_all_reduce_TP" / "replicated_all_reduce_TP_binding.cpp"
    shutil.copy(src, pkg / "my_tp_binding.cpp")
    code = """
        import cppimport.import_hook
        import popxl
        from othermodel import my_tp_binding
        from tremula.popxl._ir import custom_collectives
        assert my_tp_binding.ReplicatedAllReduceTPOp is custom_collectives.ReplicatedAllReduceTPOp
        print("SERVED", my_tp_binding.__name__)
        """
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "SERVED othermodel.my_tp_binding" in out.stdout
