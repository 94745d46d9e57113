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
