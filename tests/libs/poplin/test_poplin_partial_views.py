"""The block-product codelets keep no views of one run's fields for the next: a field that
is gathered afresh each run must be read afresh (a cache keyed by ``id()`` of the views
once served a later run the views of an earlier run's buffers whenever CPython recycled
the address, so that results depended on allocation history, e.g. on the script's path)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from tremula.libs.poplin.codelets import MacPartial


class _Batch:
    """The part of ``poplar.Batch`` the block products use: one vertex of shape
    ``1x2x3x2``, each run viewing fields made for that run (as gathered fields are)."""

    n = 1

    def __init__(self) -> None:
        self.vertex_type = SimpleNamespace(params={"SHAPE": "1x2x3x2"})
        self.fields: dict[str, np.ndarray] = {}
        self._cache: dict[Any, Any] = {}

    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def state(self, name: str) -> np.ndarray:
        return np.ones(1, np.uint32)

    def view(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        return self.fields[name].reshape(1, *shape)


def test_fresh_fields_every_run_give_fresh_products() -> None:
    rng = np.random.default_rng(0)
    f32 = np.float32
    runs = [
        (rng.standard_normal((2, 3)).astype(f32), rng.standard_normal((3, 2)).astype(f32))
        for _ in range(50)
    ]
    fields = [{"a": a.copy(), "b": b.copy(), "c": np.zeros(4, np.float32)} for a, b in runs]
    v = _Batch()
    for f in fields:  # nothing allocated between runs: addresses recycle
        v.fields = f
        MacPartial.compute(v)  # type: ignore[arg-type]
    for run, ((a, b), f) in enumerate(zip(runs, fields)):
        np.testing.assert_allclose(f["c"].reshape(2, 2), a @ b, rtol=1e-6, err_msg=f"run {run}")
