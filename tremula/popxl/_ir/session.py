"""``session._pb_session``: PopART's session bindings over a Tremula ``popxl.Session``
(writing and reading weights by tensor id, as popxl-addons' ``write_variables_pb`` does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tremula.errors import PopartException
from tremula.popxl._ir.handles import view_of
from tremula.popxl._ir.unsupported import unsupported_attr
from tremula.popxl.tensor import Variable

if TYPE_CHECKING:
    from tremula.popxl.session import Session as XlSession


def _weights(io: Any) -> Mapping[str, np.ndarray]:
    """The ``{tensor id: array}`` of a ``popart.PyWeightsIO`` (or a plain mapping)."""
    weights = getattr(io, "weights", io)
    if not isinstance(weights, Mapping):
        raise TypeError(f"expected a popart.PyWeightsIO, got {type(io).__name__}")
    return weights


class Session:
    """A popxl Session as PopART's session bindings show it (``session._pb_session``)."""

    def __init__(self, session: XlSession) -> None:
        self._s = session

    def _variable(self, tensor_id: str) -> Variable:
        t = self._s.ir.main_graph._tensors.get(tensor_id)
        if not isinstance(t, Variable):
            raise PopartException(f"No weight tensor with id {tensor_id!r} in the session's Ir")
        return t

    def writeWeights(self, weightsIo: Any) -> None:
        """Set the host copies of the variables named in ``weightsIo`` (sent to the device
        by ``weightsFromHost``)."""
        values = {self._variable(k): v for k, v in _weights(weightsIo).items()}
        checked = {v: self._s._checked_value(v, data) for v, data in values.items()}
        if self._s.is_attached and self._s._host_stale:
            self._s.weights_to_host()  # keep the device values of the other weights
        for v, arr in checked.items():
            v.store_host(arr)

    def weightsFromHost(self) -> None:
        self._s.weights_from_host()

    def weightsToHost(self) -> None:
        self._s.weights_to_host()

    def setEngineIsLoaded(self, isLoaded: bool) -> None:
        """``False`` detaches the session and forgets the loaded program (the next
        ``with session:`` loads it again and writes the weights from the host copies), as
        programs that hand the device to another session do; ``True`` is refused (the
        program is loaded by attaching)."""
        if isLoaded:
            raise PopartException(
                "setEngineIsLoaded(True): Tremula loads the program when the session "
                "attaches (`with session:`)"
            )
        self._s._unload()

    def readWeights(self, weightsIo: Any) -> None:
        """Copy the host copies of the named variables into ``weightsIo``'s arrays."""
        for tensor_id, out in _weights(weightsIo).items():
            value = self._s.get_tensor_data(self._variable(tensor_id))
            if out.size != value.size:
                raise PopartException(
                    f"readWeights: the buffer for {tensor_id!r} holds {out.size} elements, "
                    f"the weight {value.size}"
                )
            out.reshape(-1)[...] = value.reshape(-1)

    def checkInplacingAmbiguity(self) -> None:
        """Check the session's Ir for inplacing ambiguity (``popxl.Session`` does when
        made, where the Ir's options enable it).

        Raises:
            PopartException: "Inplacing ambiguity detected. ..." (``tremula.popxl.ambiguity``).
        """
        from tremula.popxl.ambiguity import check_inplacing_ambiguity

        check_inplacing_ambiguity(self._s.ir)

    def __getattr__(self, name: str) -> Any:
        return unsupported_attr(self, name)


def session_handle(session: XlSession) -> Session:
    return view_of(session, Session)
