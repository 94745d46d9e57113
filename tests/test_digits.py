"""The main job: an MLP trained with PopXL autodiff on the digits reaches 90 % accuracy,
and the training session's profiles validate."""

from __future__ import annotations

import pytest

pytest.importorskip("sklearn")

from tremula.digits import train
from tremula.profile import validate


def test_mlp_trains_to_ninety_percent_and_profiles_validate():
    accuracy, losses, trainer = train(epochs=5, device="ipu_model", log=False)
    assert accuracy >= 0.9
    assert losses[-1] < losses[0] / 3  # the loss falls
    engine = trainer.session.engine
    validate(engine.get_graph_profile(), engine.get_execution_profile())


@pytest.mark.parametrize("device", ["ipu_model", "cpu"])
def test_training_steps_give_the_same_bits_with_and_without_compiled_kernels(monkeypatch, device):
    """The step through the compiled kernels of the fast extra (poplin's products,
    ``exact.py``; the SGD update, ``axpy_kernel.py``) and through NumPy alone: the same
    losses and weights, bit for bit."""
    import numpy as np

    from tremula.digits import build_training, load_digits
    from tremula.libs import jit
    from tremula.libs.poplin import exact
    from tremula.libs.popops.codelets import axpy_kernel

    if not exact.available():
        pytest.skip("needs the fast extra (numba, llvmlite)")
    x, y, _, _ = load_digits()
    bound, updates = [], []
    original, update = exact._bound, axpy_kernel.compiled
    monkeypatch.setattr(exact, "_bound", lambda *args: bound.append(1) or original(*args))

    def counted(*args):
        updates.append(update(*args))
        return updates[-1]

    monkeypatch.setattr(axpy_kernel, "compiled", counted)
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(jit, "_enabled", enabled)
        trainer = build_training(32, 0.05, device)
        with trainer.session as session:
            losses = [
                session.run(
                    {trainer.x: x[i * 32 : (i + 1) * 32], trainer.labels: y[i * 32 : (i + 1) * 32]}
                )[trainer.loss].copy()
                for i in range(6)  # the first runs interpreted, the later ones replayed
            ]
        weights = [session.get_tensor_data(v).copy() for v in trainer.variables]
        results.append((losses, weights))
    # the kernels ran: the SGD update's always, the products' where this host's BLAS sums
    # them in the kernel's order (K-sliced on the IPU Model: exact.sums_in_chains)
    assert updates[0] is not None
    assert bound or (device == "ipu_model" and not exact.sums_in_chains())
    (l1, w1), (l2, w2) = results
    for a, b in zip(l1 + w1, l2 + w2):
        assert np.array_equal(np.asarray(a).view(np.int32), np.asarray(b).view(np.int32))
