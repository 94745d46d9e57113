"""Helpers of the PopART tests: devices, running a Builder's model through an inference
session, and through onnxruntime (the independent reference)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

import popart


def ipu(replicas: int = 1, tiles: int = 4) -> popart.DeviceInfo:
    return popart.DeviceManager().createIpuModelDevice({"numIPUs": replicas, "tilesPerIPU": tiles})


def replicated(R: int, **extra: Any) -> popart.SessionOptions:
    opts = popart.SessionOptions()
    opts.enableReplicatedGraphs = R > 1
    opts.replicatedGraphCount = R
    for k, v in extra.items():
        setattr(opts, k, v)
    return opts


def infer(model: Any, feeds: dict[str, np.ndarray], anchors: list[str], **kw: Any) -> dict:
    """Run an inference session once (bps 1, one replica unless options say more)."""
    art = kw.pop("art", popart.AnchorReturnType("All"))
    bps = kw.pop("bps", 1)
    device = kw.pop("device", None) or ipu(
        kw.get("userOptions", replicated(1)).replicatedGraphCount
    )
    session = popart.InferenceSession(model, popart.DataFlow(bps, {a: art for a in anchors}),
                                      device, **kw)  # fmt: skip
    session.prepareDevice()
    session.weightsFromHost()
    out = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, out))
    return out


def for_onnxruntime(proto: bytes) -> bytes:
    """The model without PopART's ``__`` node attributes (onnxruntime refuses unknown
    attributes of standard ops) and without Graphcore metadata."""
    model = onnx.load_model_from_string(proto)
    for node in model.graph.node:
        keep = [a for a in node.attribute if not a.name.startswith("__")]
        del node.attribute[:]
        node.attribute.extend(keep)
    return model.SerializeToString()


def onnxruntime_outputs(proto: bytes, feeds: dict[str, np.ndarray], outputs: list[str]) -> list:
    import onnxruntime as ort

    model = onnx.load_model_from_string(for_onnxruntime(proto))
    del model.graph.output[:]
    model.graph.output.extend(onnx.ValueInfoProto(name=o) for o in outputs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(outputs, feeds)
