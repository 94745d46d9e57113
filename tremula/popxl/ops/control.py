"""Conditional execution: ``conditional``, ``conditional_with_info`` and
:class:`ConditionalSiteInfo`.

The ``If`` op's inputs are the condition, then the parent tensors of the then-branch's
inputs, then those of the else-branch's inputs; its outputs are the branch outputs (both
branches produce outputs of the same specs: the lowering checks the else-branch's). Inputs
are passed by value, as for ``call``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tremula.popxl.context import get_current_graph
from tremula.popxl.graph import Graph
from tremula.popxl.ops.base import OpNode, create_op, defop
from tremula.popxl.ops.call import CallSiteInfo, _connect
from tremula.popxl.ops.shape import check_tensor
from tremula.popxl.tensor import Tensor, TensorSpec


def _if_spec(specs: Sequence[TensorSpec], a: dict[str, Any]) -> list[TensorSpec]:
    return [t.spec for t in a["graphs"][0].outputs]


defop("If", _if_spec, graphs="branch", out="conditional_out")  # ops.conditional makes it


class ConditionalSiteInfo(CallSiteInfo):
    """A conditional site (PopXL's): parent input 0 is the condition, parent inputs
    ``1 ..`` feed the then-branch's inputs and the ones after them the else-branch's; the
    outputs are shared. Index methods take ``then_branch`` (default True) to pick the
    branch; an index outside the branch's raises ``IndexError``."""

    def __init__(self, op: OpNode) -> None:
        super().__init__(op)
        self._n_then = len(op.attrs["graphs"][0].inputs)

    @property
    def called_graph(self) -> tuple[Graph, Graph]:  # type: ignore[override]
        then_g, else_g = self._op.attrs["graphs"]
        return then_g, else_g

    def _branch(self, then_branch: bool) -> tuple[Graph, int]:
        """The branch graph and the parent index of its input 0."""
        then_g, else_g = self.called_graph
        return (then_g, 1) if then_branch else (else_g, 1 + self._n_then)

    def is_parent_index_in_then_branch(self, index: int) -> bool:
        """Whether parent input ``index`` feeds the then-branch (index 0, the condition,
        feeds neither).

        Raises:
            IndexError: ``index`` is not an input index of the site.
        """
        if not 0 <= index < len(self._op.inputs):
            raise IndexError(
                f"Invalid parent graph input index {index}: the conditional has "
                f"{len(self._op.inputs)} inputs"
            )
        return 1 <= index <= self._n_then

    def graph_to_parent_input_index(self, index: int, then_branch: bool = True) -> int:  # type: ignore[override]
        """The parent input feeding input ``index`` of the then- (or else-) branch."""
        graph, first = self._branch(then_branch)
        if not 0 <= index < len(graph.inputs):
            raise IndexError(f"Invalid graph input index {index} of {graph.name!r}")
        return first + index

    def parent_to_graph_input_index(self, index: int, then_branch: bool = True) -> int:  # type: ignore[override]
        """The input of the then- (or else-) branch fed by parent input ``index``."""
        graph, first = self._branch(then_branch)
        if not first <= index < first + len(graph.inputs):
            raise IndexError(
                f"Invalid parent graph input index {index} for {graph.name!r} (the "
                f"{'then' if then_branch else 'else'} branch)"
            )
        return index - first

    def graph_to_parent_output_index(self, index: int, then_branch: bool = True) -> int:  # type: ignore[override]
        graph, _ = self._branch(then_branch)
        if not 0 <= index < len(graph.outputs):
            raise IndexError(f"Invalid graph output index {index} of {graph.name!r}")
        return index

    def parent_to_graph_output_index(self, index: int, then_branch: bool = True) -> int:  # type: ignore[override]
        if not 0 <= index < len(self._op.outputs):
            raise IndexError(f"Invalid parent graph output index {index}")
        return index

    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor of a branch input or output."""
        then_g, else_g = self.called_graph
        for offset, g in ((1, then_g), (1 + self._n_then, else_g)):
            for i, t in enumerate(g.inputs):
                if t is graph_tensor:
                    return self._op.inputs[offset + i]
            for i, t in enumerate(g.outputs):
                if t is graph_tensor:
                    return self._op.outputs[i]
        raise ValueError(
            f"{graph_tensor!r} is not an input or output of the called graph "
            f"{then_g.name!r} or {else_g.name!r}"
        )

    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The branch input fed by ``parent_tensor`` (its first occurrence)."""
        then_g, else_g = self.called_graph
        for i, t in enumerate(self._op.inputs[1:], start=1):
            if t is parent_tensor:
                if i <= self._n_then:
                    return then_g.inputs[i - 1]
                return else_g.inputs[i - 1 - self._n_then]
        raise ValueError(f"{parent_tensor!r} is not a parent graph input of the call site")

    def set_parent_input_modified(
        self, parent_tensor: Tensor, infer_modified_regions: bool = False
    ) -> None:
        """Not available for conditionals, as in PopXL.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "set_parent_input_modified is not implemented for the conditional op"
        )


def conditional_with_info(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
    check_inputs: bool = True,
) -> ConditionalSiteInfo:
    """Run ``then_branch`` if the one-element ``cond`` is non-zero (true), else
    ``else_branch``; returns the site. Each branch's inputs are given as for ``call`` (by
    position and/or by dict) and checked on their own; one graph may serve both branches.
    The outputs take the then-branch's specs and are named ``<then>_or_<else>``; the
    else-branch's must match them when a Session compiles the Ir. ``check_inputs`` as for
    ``call_with_info``.

    Raises:
        TypeError: ``cond`` is not a Tensor, a branch is not a Graph.
        ValueError: ``cond`` has several elements; the branches have different numbers of
            outputs; bad inputs (as ``call``).
        NotImplementedError: a branch takes an input by reference (``TensorByRef``).
    """
    check_tensor(cond, "conditional", "cond")
    if cond.nelms != 1:
        raise ValueError(f"conditional: cond {cond.id!r} must have one element, got {cond.shape}")
    for what, g in (("then_branch", then_branch), ("else_branch", else_branch)):
        if not isinstance(g, Graph):
            raise TypeError(f"conditional: {what} must be a Graph, got {type(g).__name__}")
        if g._by_ref_inputs:
            raise NotImplementedError(
                f"TensorByRef is not implemented for the conditional op ({what} "
                f"{g.name!r} takes an input by reference)"
            )
    outs_t, outs_e = then_branch.outputs, else_branch.outputs
    if len(outs_t) != len(outs_e):
        raise ValueError(
            f"`then_branch` graph and `else_branch` graph must have the same number of "
            f"outputs: {len(outs_t)} != {len(outs_e)} ({then_branch.name!r}, "
            f"{else_branch.name!r})"
        )
    t_in = _connect(
        then_branch, list(then_inputs or []), then_inputs_dict, "conditional", check_inputs
    )
    e_in = _connect(
        else_branch, list(else_inputs or []), else_inputs_dict, "conditional", check_inputs
    )
    names = [f"{a.name}_or_{b.name}" for a, b in zip(outs_t, outs_e)]
    create_op("If", [cond, *t_in, *e_in], {"graphs": (then_branch, else_branch)}, names)
    return ConditionalSiteInfo(get_current_graph().ops[-1])


def conditional(
    cond: Tensor,
    then_branch: Graph,
    else_branch: Graph,
    then_inputs: Iterable[Any] | None = None,
    else_inputs: Iterable[Any] | None = None,
    then_inputs_dict: Mapping[Tensor, Any] | None = None,
    else_inputs_dict: Mapping[Tensor, Any] | None = None,
) -> tuple[Tensor, ...]:
    """Run one of two graphs depending on ``cond``; returns the outputs (a tuple). See
    :func:`conditional_with_info`."""
    return conditional_with_info(
        cond, then_branch, else_branch, then_inputs, else_inputs, then_inputs_dict, else_inputs_dict
    ).outputs


__all__ = ["ConditionalSiteInfo", "conditional", "conditional_with_info"]
