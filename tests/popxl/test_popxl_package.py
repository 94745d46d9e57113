"""PopXL's package layout (spec/popxl-fidelity.md section 2): ``import popxl`` makes its
modules attributes, names that are both a module and a function stay functions, and the
helper modules (``popxl.utils``, ``popxl.ops.utils``, ``popxl.random_seed``,
``popxl.testing``, ``popxl.tensorlocation``, ``popxl.typing_``) behave as PopXL's."""

from __future__ import annotations

import importlib
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest

import popxl
import popxl.ops as ops
from popxl import utils
from popxl.context import get_current_context

MODULES = [
    "context", "dtypes", "graph", "module", "ir", "random_seed", "replica_grouping", "streams",
    "tensor", "tensorlocation", "session", "transforms", "ops", "utils", "fp8_utils", "errors",
    "typing_",
]  # fmt: skip


def test_import_popxl_loads_its_modules_as_attributes_in_a_fresh_interpreter() -> None:
    code = (
        "import sys, types, popxl\n"
        f"bad = [m for m in {MODULES!r} if not isinstance(getattr(popxl, m, None), "
        "types.ModuleType)]\n"
        "assert not bad, bad\n"
        "assert callable(popxl.remote_buffer) and callable(popxl.transforms.autodiff)\n"
        "assert 'popxl.testing' not in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_popsparse_and_scipy_load_with_the_first_sparse_layer_only() -> None:
    """A dense program (import, build, compile, run) never loads PopSparse or SciPy; the
    sparse ops module still offers its layer, which loads them on first use."""
    code = (
        "import sys, numpy as np, popxl\n"
        "from popxl import ops\n"
        "ir = popxl.Ir()\n"
        "with ir.main_graph:\n"
        "    a = popxl.variable(np.arange(4, dtype=np.float32).reshape(2, 2))\n"
        "    s = popxl.d2h_stream((2, 2), popxl.float32)\n"
        "    ops.host_store(s, ops.matmul(a, a))\n"
        "with popxl.Session(ir, 'ipu_model') as session:\n"
        "    got = session.run()[s]\n"
        "assert got.tolist() == [[2.0, 3.0], [6.0, 11.0]], got\n"
        "lazy = [m for m in ('scipy', 'tremula.libs.popsparse') if m in sys.modules]\n"
        "assert not lazy, lazy\n"
        "from tremula.libs.popsparse import dynamic\n"
        "p = dynamic.FullyConnectedParams.create_with_nz_ratio(\n"
        "    dynamic.SparsityParams(), 0.5, 2, 1, 8, 8)\n"
        "ops.sparse.partitioner(p, {}, device='ipu_model')\n"
        "assert 'tremula.libs.popsparse.dynamic' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_popxl_is_tremula_popxl_and_submodules_are_shared() -> None:
    import tremula.popxl
    import tremula.popxl.tensor

    assert popxl is tremula.popxl
    assert importlib.import_module("popxl.tensor") is tremula.popxl.tensor
    assert popxl.tensor.Variable is popxl.Variable


SHARED = [("call", "CallSiteInfo"), ("conv", "PadType"), ("gather", "gather"),
          ("roi_align", "roi_align")]  # fmt: skip


@pytest.mark.parametrize("name, attr", SHARED)
def test_importing_a_module_named_like_its_function_keeps_the_function(name, attr) -> None:
    module = importlib.import_module(f"popxl.ops.{name}")
    assert isinstance(module, ModuleType) and hasattr(module, attr)
    assert callable(getattr(ops, name)) and not isinstance(getattr(ops, name), ModuleType)
    exec(f"from popxl.ops.{name} import {attr}", {})  # the statement itself
    assert not isinstance(getattr(ops, name), ModuleType)


def test_every_popxl_op_module_is_importable_and_module_only_names_are_modules() -> None:
    for name, module in ops.POPXL_MODULES.items():
        assert importlib.import_module(f"popxl.ops.{name}") is module
    for name in ("pool", "batch_norm", "roialign", "argminmax", "lamb",
                 "negative_log_likelihood", "random_seed", "utils", "collectives",
                 "var_updates"):  # fmt: skip
        assert isinstance(getattr(ops, name), ModuleType), name
    from popxl.ops.call import CallSiteInfo
    from popxl.ops.negative_log_likelihood import REDUCTION_TYPE, nll_loss

    assert CallSiteInfo is ops.CallSiteInfo and nll_loss is ops.nll_loss
    assert REDUCTION_TYPE.__args__ == ("mean", "sum", "none")


# ---- popxl.utils ----


def test_to_numpy_downcasts_64_bit_host_data_unless_told_not_to() -> None:
    assert utils.to_numpy([1, 2]).dtype == np.int32
    assert utils.to_numpy(1.5).dtype == np.float32
    assert utils.to_numpy(np.arange(3, dtype=np.uint64)).dtype == np.uint32
    assert utils.to_numpy([1, 2], downcast=False).dtype == np.int64
    assert utils.to_numpy([1, 2], popxl.float16).dtype == np.float16
    x = np.ones(3, np.float32)
    assert utils.to_numpy(x) is not x and utils.to_numpy(x, copy=False) is x


def test_to_numpy_float8_options_and_memmaps(tmp_path) -> None:
    codes = utils.to_numpy([1.0, 2.0], popxl.float8_143, log2_scale=1)
    np.testing.assert_array_equal(codes, popxl.fp8_utils.host_pow2scale_cast_to_fp8([2.0, 4.0]))
    with pytest.raises(RuntimeError, match="float8 dtypes only"):
        utils.to_numpy([1.0], popxl.float32, log2_scale=1)
    with pytest.raises(TypeError, match="Type int64 is not supported for float8"):
        utils.to_numpy(np.array([1]), popxl.float8_152)
    mm = np.memmap(tmp_path / "m.bin", np.float32, "w+", shape=(4,))
    assert utils.to_numpy(mm) is mm
    mm64 = np.memmap(tmp_path / "d.bin", np.float64, "w+", shape=(4,))
    with pytest.raises(ValueError, match="When passing a memory-mapped NumPy array"):
        utils.to_numpy(mm64)  # a downcast would copy it
    assert utils.to_numpy(mm64, downcast=False) is mm64


def test_to_numpy_takes_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    got = utils.to_numpy(torch.arange(4, dtype=torch.float64))
    np.testing.assert_array_equal(got, np.arange(4, dtype=np.float32))
    assert got.dtype == np.float32


def test_table_to_string_aligns_columns_under_an_underlined_header() -> None:
    text = utils.table_to_string([["name", "bytes"], ["w", 12], ["bias", 4]])
    assert text.splitlines() == ["name | bytes", "------------", "w    | 12", "bias | 4"]
    assert utils.table_to_string([["a", "b"], [1, 2]], delimiter=",", header=False) == "a,b\n1,2"


def test_host_tensor_types_and_aliases() -> None:
    from popxl.tensor import HostScalarTensor, HostTensor, TensorLike, host_tensor_types

    assert isinstance(np.zeros(2), host_tensor_types) and isinstance([1, 2], host_tensor_types)
    assert HostTensor and HostScalarTensor and TensorLike
    assert popxl.TensorByRef.__metadata__ == ("TensorByRef",)
    assert popxl.typing_.NewAliasAnnotation("X", int).__metadata__ == ("X",)


# ---- popxl.random_seed, popxl.testing ----


def test_random_seed_words() -> None:
    from popxl.random_seed import MAX_UINT64, two_uint32_to_uint64, uint64_to_two_uint32

    n = 0x0123456789ABCDEF
    assert uint64_to_two_uint32(n) == [0x01234567, 0x89ABCDEF]
    assert two_uint32_to_uint64(0x01234567, 0x89ABCDEF) == n
    assert uint64_to_two_uint32(MAX_UINT64) == [2**32 - 1, 2**32 - 1]
    with pytest.raises(ValueError, match="not in"):
        uint64_to_two_uint32(-1)
    with pytest.raises(ValueError, match="not in"):
        two_uint32_to_uint64(2**32, 0)
    assert popxl.create_seeds(5, batches_per_step=2, gradient_accumulation_factor=3).shape == (
        2, 3, 2)  # fmt: skip


def test_testing_dtypes() -> None:
    import popxl.testing as testing

    assert len(testing.get_all_dtypes()) == 16 and popxl.half in testing.get_all_dtypes()
    ints = [popxl.int8, popxl.int16, popxl.int32, popxl.int64]
    assert testing.get_all_int_dtypes() == [*ints, popxl.uint8, popxl.uint16, popxl.uint32,
                                            popxl.uint64]  # fmt: skip
    assert testing.get_all_int_dtypes(include_signed=False)[0] is popxl.uint8
    assert testing.get_all_int_dtypes(include_unsigned=False)[-1] is popxl.int64


# ---- popxl.tensorlocation ----


def test_tensor_location_types() -> None:
    loc = popxl.TensorLocation()
    assert loc.storage is popxl.TensorStorage.OnChip
    assert loc.replicated_tensor_sharding is popxl.ReplicatedTensorSharding.Off
    off = popxl.TensorLocation(popxl.TensorStorage.OffChip, popxl.ReplicatedTensorSharding.On)
    assert off.storage.value == "OffChip" and off != loc
    with pytest.raises(AttributeError):
        loc.storage = popxl.TensorStorage.OffChip  # type: ignore[misc]
    assert [t.name for t in popxl.TileSet] == ["Compute", "IO", "Undefined", "N"]
    assert popxl.ExecutionContext.WeightsFromHostFragment.name == "WeightsFromHostFragment"


# ---- popxl.ops.utils and the context internals custom ops use ----


def test_check_in_graph_and_ipu_checks() -> None:
    from popxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones(2, np.float32), name="a")
        sub = ir.create_empty_graph("sub")
        with sub:
            b = popxl.graph_input((2,), popxl.float32, "b")
        check_in_graph(ir.main_graph, a=a)
        with pytest.raises(TypeError, match=r"The input `x` is not a Tensor. Type: .*int"):
            check_in_graph(ir.main_graph, x=3)
        with pytest.raises(ValueError, match="The input tensor `b` is not in the current Graph"):
            check_in_graph(ir.main_graph, a=a, b=b)
        with pytest.raises(Exception, match="keyword arguments"):
            check_in_graph(ir.main_graph, a)
        check_tensor_ipu_and_tile_set(a=a, c=a + 1)  # a's IPU is undefined: not compared
        with popxl.ipu(1):
            one = a * 2
        with pytest.raises(ValueError, match="located on different IPUs: 0 != 1"):
            check_tensor_ipu_and_tile_set(c=a + 1, d=one)
        with popxl.io_tiles():
            io = a - 1
        with pytest.raises(ValueError, match="located on different tile sets: compute != io"):
            check_tensor_ipu_and_tile_set(c=a + 1, d=io)


def test_context_internals_custom_ops_use() -> None:
    from popxl.context import _execution_context

    ctx = get_current_context()
    assert ctx.ipu_id == 0 and ctx.io_tile_set is False and ctx.in_sequence is None
    ir = popxl.Ir()
    seen = []
    with ir.main_graph:
        ir.main_graph.register_op_created_hook(seen.append)
        with popxl.ipu(2), popxl.io_tiles(), popxl.in_sequence(), popxl.name_scope("s"):
            assert (ctx.ipu_id, ctx.io_tile_set, ctx.in_sequence) == (2, True, True)
            s = ctx._get_op_settings("MyOp")
            assert (s.name, s.ipu, s.tile_set, s.scope) == ("MyOp", 2, popxl.TileSet.IO, "s")
            assert ir.main_graph._create_tensor_id("out") == "s/out"
        t = popxl.variable(np.zeros(2, np.float32), name="out")
        assert ir.main_graph._create_tensor_id("out") == "out__t0"
        with _execution_context(popxl.ExecutionContext.WeightsToHostFragment):
            assert ctx.execution_context is popxl.ExecutionContext.WeightsToHostFragment
            u = t + 1
        assert ctx.execution_context is popxl.ExecutionContext.Normal
        with _execution_context(popxl.ExecutionContext.AccumulateOuterFragment):
            t - 1
    assert seen[0] is u.producer
    with pytest.raises(NotImplementedError, match="AccumulateOuterFragment"):
        popxl.Session(ir, "cpu")


def test_remote_buffer_id_is_read_only_and_dot_checkpoint_writes_the_ir(tmp_path) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        buf = popxl.remote_buffer((2,), popxl.float32, 2)
        y = popxl.variable(np.ones(2, np.float32), name="w") + 1
    assert buf.remote_buffer_id == 1
    with pytest.raises(AttributeError):
        buf.remote_buffer_id = 3  # type: ignore[misc]
    path = ir.dot_checkpoint("fwd", str(tmp_path / "dots"))
    text = (tmp_path / "dots" / "fwd.dot").read_text()
    assert path.endswith("fwd.dot") and text.startswith('digraph "fwd" {')
    assert f'"0:w" -> "op{y.producer.id}"' in text and 'label="Add"' in text
