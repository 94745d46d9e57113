"""A PopART session's weight calls: the session's host
weights written from and read into ``PyWeightsIO`` buffers, sent to and read from the
device, and saved to or reset from ONNX models (``checkpoint.py``). :class:`SessionWeights`
is a base class of the sessions (``session.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tremula import popxl
from tremula.errors import PopartException
from tremula.popart import checkpoint
from tremula.popart.dataflow import PyWeightsIO
from tremula.popart.program import Program
from tremula.popart.weights import read_into, write_from
from tremula.popxl._ir.core.options import SessionOptions


class SessionWeights:
    """``weightsFromHost``, ``weightsToHost``, ``readWeights``, ``writeWeights``,
    ``modelToHost`` and ``resetHostWeights`` of a session."""

    _training: bool
    _options: SessionOptions
    _program: Program
    _weights_written: bool
    replicationFactor: int

    if TYPE_CHECKING:

        def _prepared(self, what: str) -> popxl.Session:
            """The compiled PopXL session (raises before ``prepareDevice``)."""

        def loadEngineAndConnectStreams(self) -> None:
            """Load the engine unless it is loaded."""

    def _variable_weights(self) -> list[Any]:
        """Weights held in variables, and the optimizer state."""
        p = self._program
        return [w for w in p.weights.values() if w.variable is not None] + list(p.states.values())

    def weightsFromHost(self) -> None:
        """Write the session's host weights to the device."""
        session = self._prepared("weightsFromHost")
        self.loadEngineAndConnectStreams()
        data = {
            w.variable: w.host.astype(w.variable.dtype.as_numpy(), copy=False)
            for w in self._variable_weights()
        }
        if data:
            session.write_variables_data(data)
        self._weights_written = True

    def weightsToHost(self) -> None:
        """Read the weights from the device into the session's buffers (what
        ``readWeights`` copies out)."""
        session = self._prepared("weightsToHost")
        weights = self._variable_weights()
        values = session.get_tensors_data([w.variable for w in weights])
        for w in weights:
            v = np.asarray(values[w.variable]).astype(w.dtype, copy=False)
            groups = v.reshape(w.groups, *w.replica_shape)
            w.from_device = groups[w.grouping(self._program.ir).assignment]

    def readWeights(self, weightsIo: PyWeightsIO) -> None:
        """Copy the weights last read by ``weightsToHost`` into the buffers of
        ``weightsIo`` (ids it lacks are skipped; constants are not weights)."""
        R = self.replicationFactor
        for w in self._variable_weights():
            if w.id in weightsIo.weights:
                read_into(w, R, weightsIo.weights[w.id])

    def writeWeights(self, weightsIo: PyWeightsIO) -> None:
        """Set the session's host weights from ``weightsIo`` (``weightsFromHost`` sends them).

        Raises:
            PopartException: constant weights, or an id that is not a weight; a buffer of
                the wrong shape or size (nothing is written then).
        """
        self._check_mutable("writeWeights")
        weights = {w.id: w for w in self._variable_weights()}
        unknown = sorted(k for k in weightsIo.weights if k not in weights)
        if unknown:
            raise PopartException(
                f"writeWeights: {unknown} are not weights of this session (weights: "
                f"{sorted(weights)})"
            )
        R = self.replicationFactor
        new = {k: write_from(weights[k], R, v) for k, v in weightsIo.weights.items()}
        for k, v in new.items():
            weights[k].host = v

    def _check_mutable(self, what: str) -> None:
        if not self._training and self._options.constantWeights:
            raise PopartException(
                f"Cannot call {what} when constantWeights is set. Set `constantWeights` to "
                f"False in the `SessionOption`s when initialising the session to enable this "
                f"behaviour."
                if what == "writeWeights"
                else f"Cannot call {what} when constantWeights is set"
            )

    def modelToHost(self, fn: str) -> None:
        """Write the model with the device's weights (grouped ``[G, ...]``) to ``fn``."""
        checkpoint.model_to_host(self, fn)  # type: ignore[arg-type]

    def resetHostWeights(
        self,
        modelProtoOrFilename: Any,
        ignoreWeightsInModelWithoutCorrespondingHostWeight: bool = False,
    ) -> None:
        """Set the host weights from an ONNX model (``weightsFromHost`` sends them)."""
        self._check_mutable("resetHostWeights")
        checkpoint.reset_host_weights(
            self,  # type: ignore[arg-type]
            modelProtoOrFilename,
            ignoreWeightsInModelWithoutCorrespondingHostWeight,
        )
