"""A ReLU layer's fused maps as compiled loops (``codelets/relu_kernel.py``): ``relu(x + b)``
with a broadcast bias and ``g * float(x > c)`` give the bits of the NumPy path (NaN payloads,
signalling NaNs, infinities, signed zeros and subnormals included) on the replayed runs that
take the loop, a run where two NaNs meet in the sum through the NumPy path, and without
numba; maps of other forms, half operands and operands that overlap the output keep the
NumPy path."""

from __future__ import annotations

import numpy as np
import pytest

from tremula import poplar
from tremula.libs import jit
from tremula.libs.popops import elementwise as ew
from tremula.libs.popops.codelets import relu_kernel
from tremula.libs.popops.expr import Cast, Gt, Mul, Relu, _1, _2, _3
from tremula.libs.popops.expr_eval import infer

F32 = np.float32
needs_numba = pytest.mark.skipif(not jit.available(), reason="needs the fast extra (numba)")

NANS = [0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC54321, 0x7F800001, 0xFF800002]
OTHERS = [0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x80000001, 0x3F800000, 0xBF800000]
SPECIAL = np.array([*NANS, *OTHERS], np.uint32).view(F32)
N = SPECIAL.size  # 14: the rows and columns of the special grid


def _data(seed: int) -> dict[str, np.ndarray]:
    """x (N + 3, N + 5): every pair of special values as (x, bias) in the first N rows and
    columns, random numbers elsewhere; the bias row; a gradient; the threshold."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N + 3, N + 5)).astype(F32)
    bias = rng.standard_normal(N + 5).astype(F32)
    x[:N, :N] = SPECIAL[:, None]
    bias[:N] = SPECIAL
    if seed % 2:  # no NaN bias: no two NaNs meet in the sum, the loop's bits stand
        bias[:N] = np.where(np.isnan(SPECIAL), F32(1.5), SPECIAL)
    g = rng.standard_normal(x.shape).astype(F32)
    g[:N, :N] = SPECIAL[None, :]
    return {"x": x, "bias": bias, "g": g, "c": np.array([SPECIAL[seed % N]], F32)}


def _engine() -> poplar.Engine:
    """relu(x + bias) with the bias broadcast over rows; g * float(x > c) for a threshold
    tensor c and for the constant 0."""
    device = poplar.IPUModel(tiles_per_ipu=4).create_device()
    g = poplar.Graph(device.target)
    prog = poplar.Sequence()
    shapes = {"x": (N + 3, N + 5), "bias": (N + 5,), "g": (N + 3, N + 5), "c": (1,)}
    t = {}
    for name, shape in shapes.items():
        t[name] = g.add_variable(poplar.FLOAT, shape, name)
        poplar.map_tensor_linearly(g, t[name])
        g.create_host_write(name, t[name])
    bias = t["bias"].reshape((1, N + 5)).broadcast(N + 3, 0)
    outs = {
        "fwd": ew.map(g, Relu(_1 + _2), [t["x"], bias], prog),
        "grad": ew.map(g, Mul(_1, Cast(Gt(_2, _3), poplar.FLOAT)), [t["g"], t["x"], t["c"]], prog),
        "grad0": ew.map(g, Mul(Cast(Gt(_1, 0.0), poplar.FLOAT), _2), [t["x"], t["g"]], prog),
    }
    for name, out in outs.items():
        g.create_host_read(name, out)
    engine = poplar.Engine(g, prog)
    engine.load(device)
    return engine


def _want(d: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with np.errstate(all="ignore"):
        return {
            "fwd": np.maximum(np.add(d["x"], d["bias"]), F32(0)),
            "grad": np.multiply(d["g"], np.greater(d["x"], d["c"][0]).astype(F32)),
            "grad0": np.multiply(np.greater(d["x"], F32(0)).astype(F32), d["g"]),
        }


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The forms of the compiled runs made (``relu_kernel.compiled`` not None), and
    "numpy" each time one left its run to the NumPy path."""
    made: list[str] = []
    original = relu_kernel.compiled

    def recording(t, inputs, out, numpy_run):  # type: ignore[no-untyped-def]
        def left() -> None:
            made.append("numpy")
            numpy_run()

        run = original(t, inputs, out, left)
        if run is not None:
            made.append(relu_kernel._form(t)[0])  # type: ignore[index]
        return run

    monkeypatch.setattr(relu_kernel, "compiled", recording)
    return made


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_relu_maps_give_the_numpy_path_s_bits_on_every_run(monkeypatch, compiled):
    if compiled and not jit.available():
        pytest.skip("needs the fast extra (numba)")
    previous = jit.set_enabled(compiled)
    try:
        made = _runs(monkeypatch)
        engine = _engine()
        for run in range(6):  # the first two take the NumPy path, then the loops (the sum's
            # on odd runs: even ones have NaN pairs, which leave the sum to the NumPy path)
            d = _data(run)
            for name in ("x", "bias", "g", "c"):
                engine.write_tensor(name, d[name])
            engine.run()
            for name, want in _want(d).items():
                got = engine.read_tensor(name)
                assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), name
        # made on the second run; the sum's runs 2 and 4 (NaN pairs) left to NumPy
        want = ["relu_add", "mask_mul", "mask_mul", "numpy", "numpy"]
        assert made == (want if compiled else [])
    finally:
        jit.set_enabled(previous)


def _typed(expr, n):  # type: ignore[no-untyped-def]
    return infer(expr, (poplar.FLOAT,) * n)


def _nothing() -> None:
    raise AssertionError("the NumPy path is not run here")


@needs_numba
def test_other_forms_and_overlapping_operands_keep_the_numpy_path():
    mem = np.arange(64, dtype=F32).reshape(4, 16)
    out = np.empty((4, 8), F32)
    relu_add = _typed(Relu(_1 + _2), 2)
    both = [mem[:, :8], mem[:, 8:]]
    assert relu_kernel.compiled(relu_add, both, out, _nothing) is not None
    assert relu_kernel.compiled(relu_add, both, mem[:, :8], _nothing) is None  # in place
    assert relu_kernel.compiled(relu_add, both, mem[:, 4:12], _nothing) is None  # overlapping
    assert relu_kernel.compiled(relu_add, [mem[:, ::-2], mem[:, 8:]], out, _nothing) is None
    assert not relu_kernel.offered(_typed(Relu(_1 - _2), 2))
    assert not relu_kernel.offered(_typed(Mul(_1, Cast(Gt(_2, _3), poplar.FLOAT)) + 1, 3))
    assert not relu_kernel.offered(infer(Relu(_1 + _2), (poplar.HALF,) * 2))
    mask = _typed(Mul(_1, Cast(Gt(_2, _3), poplar.FLOAT)), 3)
    c = np.zeros((4, 8), F32)
    assert relu_kernel.compiled(mask, [*both, c], out, _nothing) is None  # c per element
    assert relu_kernel.compiled(mask, [*both, c[:1, :1]], out, _nothing) is not None
    assert relu_kernel.compiled(mask, [*both, c[:1, :1]], mem[:, :8], _nothing) is not None
    assert relu_kernel.compiled(mask, [*both, c[:1, :1]], mem[:, 4:12], _nothing) is None
