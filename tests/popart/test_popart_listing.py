"""The seed's listing 6.1 (``examples/popart/listing_6_1_replica_grouping.py``, verbatim)
runs and prints what PopART prints; its buffers are what the chapter describes."""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from tremula_tests_popart_helpers import ipu, replicated

import popart

LISTING = (
    Path(__file__).resolve().parents[2] / "examples" / "popart" / "listing_6_1_replica_grouping.py"
)


def test_listing_6_1(capsys: pytest.CaptureFixture[str]) -> None:
    env = runpy.run_path(str(LISTING), run_name="__main__")
    assert capsys.readouterr().out == "float32\n"
    io = env["weightsIo"]
    a, b = env["a"], env["b"]
    assert io.weights[a].shape == (2, 3, 5) and io.weights[b].shape == (4, 3, 5)
    assert env["num_groups"] == 2
    # the listing's model in a session: numpy.ndarray(shape) buffers are float64, so
    # readWeights refuses them by byte size (spec 2.7); float32 buffers of the shape work
    builder = env["builder"]
    out = builder.aiOnnx.add([a, b])
    session = popart.InferenceSession(builder.getModelProto(), popart.DataFlow(1, [out]),
                                      ipu(4), userOptions=replicated(4))  # fmt: skip
    session.prepareDevice()
    session.weightsFromHost()
    session.weightsToHost()
    with pytest.raises(popart.popart_runtime_error, match=r"sizes \(in bytes\) of src \(120\)"):
        session.readWeights(io)
    good = {a: np.ones((2, 3, 5), np.float32), b: np.ones((4, 3, 5), np.float32)}
    session.readWeights(popart.PyWeightsIO(good))
    assert not good[a].any() and not good[b].any()  # the zero initialiser
