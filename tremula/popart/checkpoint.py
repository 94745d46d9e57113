"""ONNX checkpoints: ``modelToHost`` writes the session's
model with the device's weights, a grouped weight as ``[G, *replica_shape]`` (each group's
value read from its representative replica) and the optimizer state as extra initialisers;
``resetHostWeights`` reads such a model back into the session's host weights, reading the
group axis when the model carries ``__replicationFactor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import PopartException
from tremula.popart import onnxutil

if TYPE_CHECKING:
    from tremula.popart.session import _Session
    from tremula.popart.weights import Weight


def model_to_host(session: _Session, fn: str) -> None:
    """Write ``fn``: the session's model with the weights on the device; the session's host
    weights become those values too."""
    session.weightsToHost()
    R = session.replicationFactor
    weights = {w.id: w for w in session._variable_weights()}
    model = type(session._model)()
    model.CopyFrom(session._model)
    inits = model.graph.initializer
    done = set()
    for i, t in enumerate(inits):
        w = weights.get(t.name)
        if w is not None:
            data = w.by_group(R).astype(onnxutil.onnx_to_numpy_type(t.data_type), copy=False)
            inits[i].CopyFrom(onnxutil.from_array(data, t.name))
            done.add(t.name)
    for name, w in weights.items():
        if name not in done:  # optimizer state: extra initialisers
            inits.append(onnxutil.from_array(w.by_group(R), name))
    with open(fn, "wb") as f:
        f.write(model.SerializeToString())
    for w in weights.values():
        w.host = w.by_group(R).copy()


def _expected(w: Weight, rf: int) -> tuple[tuple[int, ...], np.dtype]:
    if rf > 0 and w.settings.getGroupCount(rf) != 1:
        return (w.settings.getGroupCount(rf), *w.replica_shape), w.dtype
    return tuple(w.replica_shape), w.dtype


def reset_host_weights(session: _Session, model: Any, ignore_missing: bool) -> None:
    """Set the session's host weights from the initialisers of ``model``.

    Raises:
        PopartException: an initialiser that is not a weight of the session (unless
            ``ignore_missing``), or one whose type or shape does not match (then nothing is
            changed).
    """
    proto = onnxutil.load_model(model, "resetHostWeights")
    rf = int(onnxutil.metadata(proto).get("__replicationFactor", 0))
    weights = {w.id: w for w in session._variable_weights()}
    weights.update({t: w for t, w in session._program.weights.items() if t not in weights})
    new = {}
    for t in proto.graph.initializer:
        w = weights.get(t.name)
        if w is None:
            if ignore_missing:
                continue
            raise PopartException(f"resetWeights, no tensor '{t.name}' in tensors")
        data = onnxutil.to_array(t)
        shape, dtype = _expected(w, rf)
        if data.shape != shape or data.dtype != dtype or data.size != w.host.size:
            raise PopartException(
                f"Trying to reset weights using tensor with non matching tensor info. Tensor "
                f"ID: {t.name}"
            )
        new[t.name] = data.reshape(w.host.shape).copy()
    for name, data in new.items():
        weights[name].host = data
