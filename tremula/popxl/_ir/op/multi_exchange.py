"""The exchange binding classes written out (``op.exchange`` lists them with the generated
ones): the family's base, and ``MultiExchangeOp`` (``popxl.transforms.merge_exchange``) with
PopART's methods mapping its exchanges to its inputs and outputs."""

from __future__ import annotations

from tremula.errors import PopartException
from tremula.popxl._ir.op.base import Op


class ExchangeBaseOp(Op):
    """A host or remote exchange."""


class MultiExchangeOp(ExchangeBaseOp):
    """PopART's ``MultiExchangeOp``: several host / remote exchanges as one op, their inputs
    and outputs in order (``attrs["descriptors"]``: one ``ExchangeDescriptor`` each)."""

    def getNumExchanges(self) -> int:
        """How many exchanges the op does."""
        return len(self.attrs["descriptors"])

    def _span(self, index: int, field: str) -> list[int]:
        descriptors = self.attrs["descriptors"]
        if not 0 <= index < len(descriptors):
            raise PopartException(
                f"MultiExchangeOp {self.id}: no exchange {index} ({len(descriptors)} exchanges)"
            )
        start = sum(getattr(d, field) for d in descriptors[:index])
        return list(range(start, start + getattr(descriptors[index], field)))

    def _within(self, index: int, field: str, what: str) -> None:
        """Refuse an edit at ``index`` outside the exchanges' inputs / outputs: the
        descriptors fix how many there are (a new exchange comes from merge_exchange)."""
        count = sum(getattr(d, field) for d in self.attrs["descriptors"])
        if not 0 <= int(index) < count:
            raise PopartException(
                f"MultiExchangeOp {self.id}: {what} index {index} is not one of its "
                f"exchanges' {count} {what}s (an exchange is added to it by "
                f"popxl.transforms.merge_exchange, not by connecting tensors)"
            )

    def connectInTensor(self, index: int, tensor_id: str, vgraph_id: int | None = None) -> None:
        """Connect ``tensor_id`` at input ``index`` of one of the exchanges."""
        self._within(index, "num_inputs", "input")
        super().connectInTensor(index, tensor_id, vgraph_id)

    def connectOutTensor(self, index: int, tensor_id: str) -> None:
        """Make ``tensor_id`` output ``index`` of one of the exchanges."""
        self._within(index, "num_outputs", "output")
        super().connectOutTensor(index, tensor_id)

    def createAndConnectOutTensor(self, index: int, tensor_id: str) -> None:
        """Create ``tensor_id`` as output ``index`` of one of the exchanges."""
        self._within(index, "num_outputs", "output")
        super().createAndConnectOutTensor(index, tensor_id)

    def descriptorIndexToInIndices(self, index: int) -> list[int]:
        """The input indices of exchange ``index``."""
        return self._span(index, "num_inputs")

    def descriptorIndexToOutIndices(self, index: int) -> list[int]:
        """The output indices of exchange ``index``."""
        return self._span(index, "num_outputs")


for _cls in (ExchangeBaseOp, MultiExchangeOp):
    _cls.__module__ = "popart._internal.ir.op.exchange"
