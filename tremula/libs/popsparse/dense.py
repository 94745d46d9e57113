"""The dense fallback (plan constraint ``useDense``): Fwd/GradA run as poplin
dense matmuls and the nz tensor holds the whole weight matrix, transposed, ``[Y][X]``;
there is no meta-info. The planner never picks it unless constrained; its cost
is poplin's planner estimate of each planned pass.

Reading back reports the blocks with a non-zero value: explicit zeros of the pattern are
not kept by a dense matrix.
"""

from __future__ import annotations

import numpy as np

from tremula.libs import poplin
from tremula.libs.popsparse import plan as plan_mod
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import FullyConnectedParams
from tremula.target import Target


def dense_plan(
    target: Target, input_type: str, fc: FullyConnectedParams, opts: Options
) -> plan_mod.Plan:
    """A plan with ``use_dense``: one bucket holding the ``X x Y`` weights."""
    from tremula.libs.popsparse.planner import candidate_methods, partials_type

    method = candidate_methods(fc, input_type, opts)[0]
    partials = partials_type(input_type, method.is_block, opts)
    x, y, z = fc.shape
    shapes = [("fwd", x, y, z)]
    if opts.do_grad_a_pass:
        shapes.append(("grad_a", y, x, z))
    if opts.do_grad_w_pass:
        shapes.append(("grad_w", x, z, y))
    cycles, temp = {"fwd": 0, "grad_a": 0, "grad_w": 0}, 0
    for name, m, k, n in shapes:
        p = poplin.plan_matmul(
            poplin.MatMulParams(
                1, m, k, n, input_type, partials, input_type, opts.available_memory_proportion
            ),
            target,
        )
        cycles[name], temp = p.cycles, max(temp, p.temp_bytes)
    bound = int(opts.available_memory_proportion * target.memory_bytes_per_tile)
    return plan_mod.Plan(
        params=fc,
        input_type=input_type,
        partials_type=partials,
        options=opts,
        tiles_per_ipu=target.tiles_per_ipu,
        method=method,
        partition=plan_mod.Partition(1, 1, 1, 1),
        exchange_plan=plan_mod.ExchangePlan(
            plan_mod.FWD_MAPPING, plan_mod.FWD_MAPPING, plan_mod.FWD_MAPPING, False
        ),
        nz_elems_per_bucket=x * y,
        fwd_meta_info_elems_per_bucket=0,
        grad_a_meta_info_elems_per_bucket=0,
        use_dense=True,
        cost=plan_mod.Cost(
            sum(cycles.values()), temp, cycles["fwd"], cycles["grad_a"], cycles["grad_w"]
        ),
        memory_bound=bound,
        fits=temp <= bound,
    )


def encode(
    plan: plan_mod.Plan, rows: np.ndarray, cols: np.ndarray, blocks: np.ndarray, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Meta-info (empty) and the dense ``[Y][X]`` weights."""
    x, y, _ = plan.params.shape
    bx, by = plan.block_dimensions
    w = np.zeros((x, y), dtype=dtype)
    ii = rows[:, None, None] + np.arange(bx)[None, :, None]
    jj = cols[:, None, None] + np.arange(by)[None, None, :]
    w[ii, jj] = blocks.reshape(-1, bx, by)
    return np.zeros(0, dtype=np.uint16), np.ascontiguousarray(w.T).reshape(-1)


def decode(plan: plan_mod.Plan, nz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Grain blocks with a non-zero value, sorted row-major."""
    x, y, _ = plan.params.shape
    bx, by = plan.block_dimensions
    w = nz.reshape(y, x).T
    tiles = w.reshape(x // bx, bx, y // by, by).transpose(0, 2, 1, 3)
    r, c = np.nonzero(np.any(tiles != 0, axis=(2, 3)))
    return r * bx, c * by, tiles[r, c].reshape(r.size, bx * by)
