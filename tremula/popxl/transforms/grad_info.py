"""What ``autodiff`` returns: :class:`GradGraphInfo`, the grad graph with the forward tensors
its inputs and outputs stand for (:class:`ExpectedConnection`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tremula.popxl.tensor import Tensor

if TYPE_CHECKING:
    from tremula.popxl.graph import Graph
    from tremula.popxl.ops.call import CallSiteInfo


class ExpectedConnectionType(enum.Enum):
    """What a grad-graph input or output stands for: a forward tensor (``Fwd``) or the
    gradient of one (``FwdGrad``)."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"

    def __repr__(self) -> str:
        return f"ExpectedConnectionType.{self.value}"

    @classmethod
    def _from_pb(cls, value: ExpectedConnectionType) -> ExpectedConnectionType:
        """The bindings use this enum too (``popart._internal.ir.ExpectedConnectionType``)."""
        return cls(value)


@dataclass(frozen=True, eq=False)
class ExpectedConnection:
    """A grad-graph input or output: the forward tensor it is, or is the gradient of."""

    fwd_tensor: Tensor
    connection_type: ExpectedConnectionType

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ExpectedConnection)
            and other.fwd_tensor is self.fwd_tensor
            and other.connection_type is self.connection_type
        )

    def __hash__(self) -> int:
        return hash((id(self.fwd_tensor), self.connection_type))

    def __repr__(self) -> str:
        return f"({self.connection_type!r}, {self.fwd_tensor!r})"

    @property
    def _pb_ec(self) -> Any:
        """This connection in PopXL's IR bindings (``popart._internal.ir.ExpectedConnection``:
        the forward tensor's id and the type)."""
        from tremula.popxl._ir import ExpectedConnection as PbExpectedConnection

        return PbExpectedConnection(self.fwd_tensor.id, self.connection_type)

    @classmethod
    def _from_pb(cls, fwd_graph: Any, pb_ec: Any) -> ExpectedConnection:
        """The connection to tensor ``pb_ec.fwdId`` of the forward graph ``fwd_graph`` (a
        binding graph).

        Raises:
            PopartException: the forward graph has no such tensor.
        """
        t = fwd_graph.getTensor(pb_ec.fwdId)._t
        return cls(t, pb_ec.type)


class GradGraphInfo:
    """A grad graph and how to connect it.

    Invariants: ``expected_inputs`` lists, for each input of ``graph`` in order, the forward
    tensor it stands for; it starts with the ``FwdGrad`` entries of the gradients provided
    (in the order given to ``autodiff``), followed by the ``Fwd`` tensors the backward pass
    reads. ``expected_outputs`` lists, for each output of ``graph``, the forward tensor whose
    gradient it is (all ``FwdGrad``, in ``grads_required`` order).
    """

    def __init__(
        self,
        graph: Graph,
        forward_graph: Graph,
        expected_inputs: tuple[ExpectedConnection, ...],
        expected_outputs: tuple[ExpectedConnection, ...],
    ) -> None:
        self._graph = graph
        self._forward_graph = forward_graph
        self._expected_inputs = tuple(expected_inputs)
        self._expected_outputs = tuple(expected_outputs)

    @property
    def graph(self) -> Graph:
        """The grad graph."""
        return self._graph

    @property
    def forward_graph(self) -> Graph:
        """The graph that was differentiated."""
        return self._forward_graph

    @property
    def expected_inputs(self) -> tuple[ExpectedConnection, ...]:
        return self._expected_inputs

    @property
    def expected_outputs(self) -> tuple[ExpectedConnection, ...]:
        return self._expected_outputs

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """The forward tensors the grad graph's inputs stand for (or are gradients of)."""
        return tuple(c.fwd_tensor for c in self._expected_inputs)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """The forward tensors whose gradients the grad graph's outputs are."""
        return tuple(c.fwd_tensor for c in self._expected_outputs)

    def _check_site(self, info: CallSiteInfo, graph: Graph, what: str) -> None:
        """PopXL's check (``TypeError``, its words first)."""
        if info.called_graph is not graph:
            raise TypeError(
                f"The called graph does not match the graph that was auto-differentiated. "
                f"GradGraphInfo.{what}: the call site calls {info.called_graph.name!r}, "
                f"expected a call of {graph.name!r}"
            )

    def inputs_dict(self, fwd_call_info: CallSiteInfo) -> dict[Tensor, Tensor]:
        """Grad-graph inputs that expect forward tensors -> the parent tensors of the
        forward call site ``fwd_call_info`` (pass as ``inputs_dict`` to ``ops.call``; the
        gradients provided are passed positionally)."""
        self._check_site(fwd_call_info, self._forward_graph, "inputs_dict")
        return {
            self._graph.inputs[i]: fwd_call_info.graph_to_parent(c.fwd_tensor)
            for i, c in enumerate(self._expected_inputs)
            if c.connection_type is ExpectedConnectionType.Fwd
        }

    def fwd_graph_ins_to_grad_parent_outs(
        self, grad_call_info: CallSiteInfo
    ) -> dict[Tensor, Tensor]:
        """Forward-graph inputs -> the parent tensors holding their gradients at the grad
        graph's call site ``grad_call_info``."""
        self._check_site(grad_call_info, self._graph, "fwd_graph_ins_to_grad_parent_outs")
        fwd_inputs = set(map(id, self._forward_graph.inputs))
        return {
            c.fwd_tensor: grad_call_info.parent_output(i)
            for i, c in enumerate(self._expected_outputs)
            if id(c.fwd_tensor) in fwd_inputs
        }

    def fwd_parent_ins_to_grad_parent_outs(
        self, fwd_call_info: CallSiteInfo, grad_call_info: CallSiteInfo
    ) -> dict[Tensor, Tensor]:
        """Parent tensors fed to the forward call -> the parent tensors holding their
        gradients at the grad call."""
        self._check_site(fwd_call_info, self._forward_graph, "fwd_parent_ins_to_grad_parent_outs")
        return {
            fwd_call_info.graph_to_parent(t): g
            for t, g in self.fwd_graph_ins_to_grad_parent_outs(grad_call_info).items()
        }

    @property
    def _pb_bwd_info(self) -> Any:
        """This info in PopXL's IR bindings (``popart._internal.ir.BwdGraphInfo``)."""
        from tremula.popxl._ir import BwdGraphInfo

        return BwdGraphInfo(
            self._graph._pb_graph.id,
            [c._pb_ec for c in self._expected_inputs],
            [c._pb_ec for c in self._expected_outputs],
        )

    @classmethod
    def _from_pb(cls, pb_ir: Any, fwd_graph: Any, bwd_info: Any) -> GradGraphInfo:
        """The info of gradient graph ``bwd_info.bwdGraphId`` of ``fwd_graph``, its inputs
        and outputs standing for ``bwd_info``'s expected connections (binding objects, as
        popxl-addons builds them).

        Raises:
            PopartException: no such graph, or a connection to a tensor the forward graph
                does not have.
        """
        graph = pb_ir.getGraph(bwd_info.bwdGraphId)._g
        ins = tuple(ExpectedConnection._from_pb(fwd_graph, c) for c in bwd_info.expectedInputs)
        outs = tuple(ExpectedConnection._from_pb(fwd_graph, c) for c in bwd_info.expectedOutputs)
        return cls(graph, fwd_graph._g, ins, outs)

    def __repr__(self) -> str:
        ins = ", ".join(map(repr, self._expected_inputs))
        outs = ", ".join(map(repr, self._expected_outputs))
        return (
            f"GradGraphInfo[graph={self._graph.id} expected_inputs=[{ins}] "
            f"expected_outputs=[{outs}]]"
        )
