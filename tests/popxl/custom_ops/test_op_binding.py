"""The one way the served custom ops connect an op (``_op_binding.connect``), through the
bindings of both kinds (``createOpInGraph`` classes and ``ParameterizedOp`` bindings):
output ids as the wrapper made them (in a subgraph, under a name scope), and the refusals,
which leave the graph as it was."""

from __future__ import annotations

import numpy as np
import pytest

import tremula.popxl as popxl
from tremula.errors import PopartException
from tremula.popxl.custom_ops import grad_reduce_square_add, linear_layout, rotary_pos_embed


def _linear(pb, x, outputs):
    return linear_layout.LinearLayoutOp.create_op_in_graph(
        pb, {0: x.id}, outputs, linear_layout.LinearLayoutParams(2), None
    )


def test_output_ids_in_a_subgraph_under_a_name_scope_are_the_wrappers() -> None:
    ir = popxl.Ir()
    sg = ir.create_empty_graph("sub")
    with sg, popxl.name_scope("blk"):
        x = popxl.graph_input((4,), popxl.float32, "x")
        t = popxl.graph_input((3,), popxl.float32, "t")
        s = popxl.graph_input((), popxl.float32, "s")
        want = sg._create_tensor_id("relaid")
        op = _linear(sg._pb_graph, x, {0: want})
        want2 = sg._create_tensor_id("norm")
        op2 = grad_reduce_square_add.GradReduceSquareAddOp.createOpInGraph(
            sg._pb_graph, {0: t.id, 1: s.id}, {0: want2}
        )
    assert want == f"{sg.name}/blk/relaid" and op.outTensor(0).id == want
    assert want2 == f"{sg.name}/blk/norm" and op2.outTensor(0).id == want2
    assert op.opType() == "LinearLayout" and op2.opType() == "GradReduceSquareAdd"


def test_without_an_output_id_the_op_names_its_output() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.zeros(4, np.float32), name="x")
        op = _linear(g._pb_graph, x, {})
    assert op.outTensor(0).id in g._pb_graph._g._tensors
    assert op.outTensor(0).id != x.id


def test_refusals_name_the_binding_and_leave_the_graph_as_it_was() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        x = popxl.variable(np.zeros((1, 2, 1, 4), np.float32), name="x")
        sin = popxl.constant(np.zeros((1, 2, 2), np.float32), name="sin")
        t = popxl.variable(np.zeros(3, np.float32), name="t")
        s = popxl.constant(np.float32(2), name="s")
        n_tensors = len(g._pb_graph._g._tensors)
        rope = rotary_pos_embed.RotaryPosEmbedOp.createOpInGraph
        with pytest.raises(
            PopartException, match=r"RotaryPosEmbedOp: inputs at indices \[0, 1, 2\]"
        ):
            rope(g._pb_graph, {0: x.id, 1: sin.id, 3: sin.id}, {}, 4, None)
        with pytest.raises(PopartException, match=r"LinearLayoutOp: outputs at indices 0 \.\. k-1"):
            _linear(g._pb_graph, t, {1: "y"})
        with pytest.raises(PopartException, match=r"output id 't' is already a tensor"):
            _linear(g._pb_graph, t, {0: t.id})
        grsa = grad_reduce_square_add.GradReduceSquareAddOp.createOpInGraph
        with pytest.raises(
            PopartException, match=r"GradReduceSquareAddOp: inputs at indices \[0, 1\]"
        ):
            grsa(g._pb_graph, {0: t.id}, {})
        with pytest.raises(PopartException, match="GradReduceSquareAddOp: graph must be a graph"):
            grsa(g, {0: t.id, 1: s.id}, {})
    assert not g.ops
    assert len(g._pb_graph._g._tensors) == n_tensors
