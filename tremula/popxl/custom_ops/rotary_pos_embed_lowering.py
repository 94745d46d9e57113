"""Lowering of ``RotaryPosEmbed`` / ``RotaryPosEmbedGrad`` (``rotary_pos_embed.py``), as
the C++ opx grows them: the first ``r`` features of ``x`` viewed as ``[..., r / 2, 2]``,
two ``popops::map`` calls (the real and the imaginary parts; the tables broadcast through
singleton dimensions), the parts interleaved again, the unrotated features concatenated,
and one ``Copy`` into a clone of ``x`` ("copy back to original layout"). Cycles and
memory are popops' element-wise estimates and the copy's exchange; the compute sets carry
the op's debug name (``RotaryPosEmbed`` under its name scope).

Registered by ``tremula/lowering/custom_ops.py`` (this module only uses Poplar and popops:
it sits in the PopXL layer beside its op).
"""

from __future__ import annotations

from typing import Any

from tremula import poplar
from tremula.popxl.custom_ops.rotary_pos_embed import FWD, GRAD, rotated_features


def rotate(
    graph: poplar.Graph,
    x: poplar.Tensor,
    sin: poplar.Tensor,
    cos: poplar.Tensor,
    rotary_dim: int,
    backward: bool,
    prog: poplar.Sequence,
    name: str,
) -> poplar.Tensor:
    """The rotated ``x`` (a new tensor mapped like ``x``): forward or backward angles."""
    from tremula.libs import popops
    from tremula.libs.popops import expr as pe

    b, s, h, hh = x.shape
    r = rotated_features(hh, rotary_dim)
    part = x.slice(0, r, 3) if r < hh else x
    pairs = part.reshape((b, s, h, r // 2, 2))
    re, im = pairs.slice(0, 1, 4), pairs.slice(1, 2, 4)
    # [1 or batch, seq, r/2] -> [1 or batch, seq, 1, r/2, 1] (the opx's expand({2, 3}))
    sin5, cos5 = sin.expand([2, 3]), cos.expand([2, 3])
    if backward:
        e_re = (pe._1 * pe._4) + (pe._2 * pe._3)
        e_im = (pe._2 * pe._4) - (pe._1 * pe._3)
    else:
        e_re = (pe._1 * pe._4) - (pe._2 * pe._3)
        e_im = (pe._2 * pe._4) + (pe._1 * pe._3)
    args = [re, im, sin5, cos5]
    y_re = popops.map(graph, e_re, args, prog, name=f"{name}/real")
    y_im = popops.map(graph, e_im, args, prog, name=f"{name}/imag")
    y = poplar.concat([y_re, y_im], 4).reshape((b, s, h, r))
    if r < hh:
        y = poplar.concat([y, x.slice(r, hh, 3)], 3)
    result = graph.clone(x, f"{name}/out")
    prog.add(poplar.Copy(y, result, name=f"{name}/copy"))
    return result


def _lower(lw: Any, op: Any, env: Any, prog: poplar.Sequence) -> None:
    x, sin, cos = (env[t] for t in op.inputs)
    env[op.outputs[0]] = rotate(
        lw.graph, x, sin, cos, op.attrs["rotary_dim"], op.type == GRAD, prog, op.debug_name
    )


#: op type -> lowering rule (``tremula/lowering/custom_ops.py`` registers them)
LOWERING_RULES = {FWD: _lower, GRAD: _lower}
