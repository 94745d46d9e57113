"""The planner of the dynamic sparse fully-connected layer (PopLibs'
``FullyConnectedPlan.cpp``): a pure function from the target, the data type, the parameters
and the options to a :class:`Plan`.

Search: every candidate method x exchange plan x partition
``(Px, Py, Pz)`` with ``Px Py Pz <= tilesPerIPU``, no empty partition of X or Y, ``Pz``
dividing the Z grains, the uint16 ranges of the meta-info respected and the plan
constraints honoured, is costed at once with NumPy (:mod:`cost`). The cheapest candidate
(cycles, then temporary bytes, then fewer tiles, then ``Px``, ``Py``, ``Pz``, method and
exchange plan in order) whose temporary memory fits ``availableMemoryProportion`` of a
tile's memory wins; if none fits, the bound is doubled until it reaches twice the tile
memory, and then dropped.

Plans are cached in a :class:`PlanningCache` keyed on (target, type, params, options).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from tremula import poplar
from tremula.errors import GraphError
from tremula.libs.popsparse import cost as cost_mod
from tremula.libs.popsparse.cost import Method, Problem
from tremula.libs.popsparse.errors import PlanningError
from tremula.libs.popsparse.layout import valid_partition_counts
from tremula.libs.popsparse.options import Options, parse_options
from tremula.libs.popsparse.params import FullyConnectedParams, MatMulParams
from tremula.libs.popsparse.plan import (
    FWD_MAPPING,
    GRAD_W_INPUTS_MAPPING,
    Cost,
    ExchangePlan,
    Partition,
    Plan,
    PlanningCache,
)
from tremula.target import Target

log = logging.getLogger(__name__)


# ---- entry points ----


def get_plan(
    target: Target,
    input_type: Any,
    params: FullyConnectedParams | MatMulParams,
    options: Mapping[str, Any] | Options | None = None,
    cache: PlanningCache | None = None,
) -> Plan:
    """The plan for ``params`` with ``input_type`` (half or float) on ``target``.

    A :class:`MatMulParams` plans as its fully-connected layer with ``doGradAPass`` true and
    ``doGradWPass`` false (PopLibs' ``MatMulUtils.cpp``).

    Raises:
        PopsparseError: bad options. PlanningError: an input type other than half or float,
            a batch that is not a multiple of the vector width for element-wise sparsity,
            plan constraints no valid partition meets.
    """
    fc, opts = resolve(params, options)
    type_name = _type_name(input_type)
    key = (target, type_name, fc, opts)
    cached = cache.lookup(key) if cache is not None else None
    if cached is not None:
        return cached
    plan = _plan(target, type_name, fc, opts)
    if cache is not None:
        cache.store(key, plan)
    return plan


def resolve(
    params: FullyConnectedParams | MatMulParams, options: Mapping[str, Any] | Options | None
) -> tuple[FullyConnectedParams, Options]:
    """Fully-connected params and parsed options (matmul: GradA on, GradW off)."""
    if isinstance(params, MatMulParams):
        return params.to_fully_connected_params(), parse_options(
            options, "popsparse matmul", matmul=True
        )
    if not isinstance(params, FullyConnectedParams):
        raise PlanningError(f"params = {params!r}; expected FullyConnectedParams or MatMulParams")
    return params, parse_options(options, "popsparse fully-connected")


def _type_name(input_type: Any) -> str:
    try:
        t = poplar.as_type(input_type)
    except GraphError:
        t = None
    if t is None or t.name not in ("half", "float"):
        raise PlanningError(f"input type {input_type!r} is not supported; expected half or float")
    return t.name


def partials_type(input_type: str, method_is_block: bool, options: Options) -> str:
    """``partialsType``, forced to float for element-wise sparsity and when smaller than the
    data type (PopLibs' ``partialsType`` option)."""
    if not method_is_block:
        return "float"
    if options.partials_type == "half" and input_type == "float":
        log.info("popsparse: partialsType half is smaller than the float data type; using float")
        return "float"
    return options.partials_type


def grain_block(block: tuple[int, int], input_type: str) -> tuple[int, int]:
    """The block the vertices work on: for square blocks the largest of
    {4, 8, 16} (half) or {4, 8} (float) dividing the edge; 1x1 stays."""
    if block == (1, 1):
        return block
    sizes = (16, 8, 4) if input_type == "half" else (8, 4)
    edge = next(s for s in sizes if block[0] % s == 0)
    return edge, edge


def candidate_methods(fc: FullyConnectedParams, input_type: str, options: Options) -> list[Method]:
    """The on-tile methods to try (PopLibs' candidate methods)."""
    bx, by = grain_block(fc.sparsity_params.block_dimensions, input_type)
    if (bx, by) == (1, 1):
        vw = 4 if input_type == "half" else 2
        grad_a = "Transpose" if options.shared_buckets else "GradA"
        return [Method((1, 1, 1, vw), "Forward", grad_a, "GradW")]
    methods = [Method((1, bx, by, 1), "ForwardAMPBlock", "TransposeAMPBlock", "GradWBlock")]
    zg = 16 if input_type == "half" else 8
    if fc.batch_size % zg == 0 and bx % 4 == 0 and by % 4 == 0:
        methods.append(
            Method((1, bx, by, zg), "ForwardAMPBlock", "TransposeAMPBlock", "GradWAMPBlock")
        )
    return methods


def exchange_options(options: Options) -> list[bool]:
    """GradW exchange modes to try: both, unless there is no GradW pass or it is constrained."""
    fixed = options.plan_constraints.grad_w_exchange_buckets
    if fixed is not None:
        return [fixed]
    return [False, True] if options.do_grad_w_pass else [False]


def _check_batch(fc: FullyConnectedParams, input_type: str) -> None:
    if fc.sparsity_params.block_area == 1:
        vw = 4 if input_type == "half" else 2
        if fc.batch_size % vw:
            raise PlanningError(
                f"Padding of input to meet grouping not yet handled. Please make sure the batch "
                f"size is a multiple of 2 if using fp32, and 4 for fp16 (batch size "
                f"{fc.batch_size}, {input_type}, element-wise sparsity)"
            )


def _plan(target: Target, input_type: str, fc: FullyConnectedParams, opts: Options) -> Plan:
    _check_batch(fc, input_type)
    if opts.plan_constraints.use_dense:
        from tremula.libs.popsparse.dense import dense_plan

        return dense_plan(target, input_type, fc, opts)
    tables, errors = [], []
    for mi, method in enumerate(candidate_methods(fc, input_type, opts)):
        problem = _problem(target, input_type, fc, opts, method)
        try:
            px, py, pz = _partitions(problem, method)
        except PlanningError as err:  # constraints another method may meet
            errors.append(err)
            continue
        for ei, exchange in enumerate(exchange_options(opts)):
            t = cost_mod.candidate_table(problem, method, exchange, px, py, pz)
            if not t["valid"].any():
                i = int(np.argmin(t["cycles"]))
                failed = [
                    name
                    for name, ok in cost_mod.range_checks(problem, method, t).items()
                    if not ok[i]
                ]
                errors.append(
                    PlanningError(
                        f"no valid partition for {fc} ({input_type}) on {target.tiles_per_ipu} "
                        f"tiles (plan constraints {opts.plan_constraints}): the meta-info words "
                        f"cannot hold the values; e.g. partition ({t['px'][i]}, {t['py'][i]}, "
                        f"{t['pz'][i]}) fails {failed}"
                    )
                )
            t["method"] = np.full(px.size, mi)
            t["exchange"] = np.full(px.size, ei)
            tables.append(t)
    if not tables:
        raise errors[0]
    table = {k: np.concatenate([t[k] for t in tables]) for k in tables[0]}
    table = {k: a[table["valid"]] for k, a in table.items()}
    if table["px"].size == 0:
        raise errors[0]
    index, bound = _choose(
        table,
        opts.available_memory_proportion * target.memory_bytes_per_tile,
        2 * target.memory_bytes_per_tile,
    )
    row = {k: int(a[index]) for k, a in table.items()}
    method = candidate_methods(fc, input_type, opts)[row["method"]]
    exchange = exchange_options(opts)[row["exchange"]]
    return _make_plan(target, input_type, fc, opts, method, exchange, row, bound)


def _problem(
    target: Target, input_type: str, fc: FullyConnectedParams, opts: Options, method: Method
) -> Problem:
    ps = poplar.as_type(partials_type(input_type, method.is_block, opts)).size
    return Problem(fc, poplar.as_type(input_type).size, ps, opts, target)


def _partitions(problem: Problem, method: Method) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ``(Px, Py, Pz)`` with no empty partition, ``Pz`` dividing the Z grains, at most
    ``tilesPerIPU`` PNs, and the constrained counts."""
    x, y, z = problem.dims
    _, gx, gy, gz = method.grouping
    limit = problem.target.tiles_per_ipu
    zgrains = -(-z // gz)
    counts = [
        valid_partition_counts(x // gx, limit),
        valid_partition_counts(y // gy, limit),
        np.array([p for p in range(1, min(zgrains, limit) + 1) if zgrains % p == 0]),
    ]
    grains = (x // gx, y // gy, zgrains)
    for d, fixed in enumerate(problem.options.plan_constraints.partition):
        if fixed is not None:
            counts[d] = counts[d][counts[d] == fixed]
            if counts[d].size == 0:
                why = "must divide" if d == 2 else "must leave no partition empty among"
                raise PlanningError(
                    f"planConstraints partition.{'xyz'[d]} = {fixed} is not valid: it {why} "
                    f"the {grains[d]} {'XYZ'[d]} grains (grouping {method.grouping[1:]}), and "
                    f"be at most tilesPerIPU = {limit}"
                )
    px, py = np.meshgrid(counts[0], counts[1], indexing="ij")
    keep = px * py <= limit
    px, py = px[keep], py[keep]
    keep = (px * py)[:, None] * counts[2][None, :] <= limit
    rows, cols = np.nonzero(keep)
    if rows.size == 0:
        raise PlanningError(
            f"planConstraints partition {problem.options.plan_constraints.partition} and the "
            f"valid counts of the other dims need more than the {limit} tiles of an IPU"
        )
    return px[rows], py[rows], counts[2][cols]


def _choose(table: dict[str, np.ndarray], bound: float, cap: float) -> tuple[int, int | None]:
    """Index of the winner and the memory bound it met (``None``: no bound)."""
    keys = (
        table["exchange"],
        table["method"],
        table["pz"],
        table["py"],
        table["px"],
        table["px"] * table["py"] * table["pz"],
        table["temp"],
        table["cycles"],
    )
    order = np.lexsort(keys)
    while True:
        fits = table["temp"][order] <= bound
        if fits.any():
            return int(order[np.argmax(fits)]), int(bound)
        if bound >= cap:
            log.warning("popsparse: no plan fits twice the tile memory; planning without bound")
            return int(order[0]), None
        bound = min(2 * bound, cap)


def _make_plan(
    target: Target,
    input_type: str,
    fc: FullyConnectedParams,
    opts: Options,
    method: Method,
    exchange: bool,
    row: dict[str, int],
    bound: int | None,
) -> Plan:
    fwd = FWD_MAPPING
    grad_w = fwd if exchange else GRAD_W_INPUTS_MAPPING
    return Plan(
        params=fc,
        input_type=input_type,
        partials_type=partials_type(input_type, method.is_block, opts),
        options=opts,
        tiles_per_ipu=target.tiles_per_ipu,
        method=method,
        partition=Partition(1, row["px"], row["py"], row["pz"]),
        exchange_plan=ExchangePlan(fwd, fwd, grad_w, exchange),
        nz_elems_per_bucket=row["nz"],
        fwd_meta_info_elems_per_bucket=row["fwd_mi"],
        grad_a_meta_info_elems_per_bucket=row["grad_a_mi"],
        use_dense=False,
        cost=Cost(
            row["cycles"],
            row["temp"],
            row["fwd_cycles"],
            row["grad_a_cycles"],
            row["grad_w_cycles"],
        ),
        memory_bound=bound,
        fits=bound is not None,
    )


def estimate_cost(
    target: Target,
    input_type: Any,
    params: FullyConnectedParams | MatMulParams,
    options: Mapping[str, Any] | Options | None,
    partition: tuple[int, int, int],
    method_index: int = 0,
    grad_w_exchange_buckets: bool = False,
) -> Cost | None:
    """The cost of one candidate, with the planner's code; ``None`` if it is not a valid
    candidate (an empty partition, ``Pz`` not dividing the Z grains, too many tiles, a
    uint16 range exceeded). ``method_index`` indexes :func:`candidate_methods`."""
    fc, opts = resolve(params, options)
    type_name = _type_name(input_type)
    method = candidate_methods(fc, type_name, opts)[method_index]
    problem = _problem(target, type_name, fc, opts, method)
    x, y, z = fc.shape
    _, gx, gy, gz = method.grouping
    px, py, pz = partition
    ok = (
        px * py * pz <= target.tiles_per_ipu
        and px in valid_partition_counts(x // gx, px)
        and py in valid_partition_counts(y // gy, py)
        and (-(-z // gz)) % pz == 0
    )
    if not ok:
        return None
    t = cost_mod.candidate_table(
        problem, method, grad_w_exchange_buckets, *(np.array([p]) for p in partition)
    )
    if not t["valid"][0]:
        return None
    return Cost(
        int(t["cycles"][0]),
        int(t["temp"][0]),
        int(t["fwd_cycles"][0]),
        int(t["grad_a_cycles"][0]),
        int(t["grad_w_cycles"][0]),
    )
