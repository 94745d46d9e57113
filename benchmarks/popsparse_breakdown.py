"""The distribution compute step of a block Fwd pass, term by term (``--paper`` prints it
for every block point; issue 28's closing note).

In the distribution every PN of an (x, y) group runs one AMP block vertex over the ``Pz``
buckets of its group, processing the sub-groups of id ``x Py + y + 1``; the step lasts as
long as its slowest tile. The terms are the ones the device charges
(``tremula.libs.popsparse.run_cost`` with PopLibs' estimator, ``popsparse.md`` 3.6, and
the zeroing of the partials), here split for the group that sets the step:

* ``launch``: the compute set's start (the target's ``compute_set_launch_cycles``);
* ``walk``: the supervisor's walk over the group's buckets (``40``, then per bucket with a
  matching sub-group ``46 (its position + 1) + 56``, per other sub-group 33);
* ``supervisor``: per block ``area / (float ? 2 : 4) + 3 + 12 weightLoads`` (loading the
  block's weights into the AMP), per block row of a sub-group 4;
* ``workers``: ``W x`` per block ``weightLoads (innerOverhead + ceil(Zt / W) cyclesPerZ)``,
  less 3 per block after the first of its row within a sub-group (``retainX``);
* ``zeroing``: the tile's float partials, ``[Xt][Zt]``.

Every block row is counted in each sub-group (bucket) that holds part of it: the
partitioner cuts a group's row stream into ``Pz`` pieces, so a row may span two buckets.
"""

from __future__ import annotations

import numpy as np

from tremula.libs.popsparse import estimators as est
from tremula.libs.popsparse import kernels, run_cost
from tremula.libs.popsparse.plan import Plan
from tremula.target import Target

TERMS = ("launch", "walk", "supervisor", "workers", "zeroing")


SIZES = {"half": 2, "float": 4}


def distribution_terms(target: Target, plan: Plan, meta_info: np.ndarray) -> dict[str, int]:
    """The terms of the slowest tile's distribution vertex (see the module docstring) for
    the block plan ``plan`` and the meta-info ``meta_info`` (the partitioner's flat array);
    plus ``blocks``, ``rows`` (block rows summed over its sub-groups), ``sub_groups``,
    ``group`` (x Py + y) and ``total``."""
    sizes = (SIZES[plan.input_type], SIZES[plan.partials_type])
    px, py, pz = plan.partition.xyz
    edge = plan.block_dimensions[0]
    if edge == 1:
        raise ValueError("distribution_terms: block plans only")
    words = plan.fwd_meta_info_elems_per_bucket
    mi = np.asarray(meta_info[plan.num_overflow_info_elems :], dtype=np.int64)
    groups = px * py
    fields = mi.reshape(groups, pz * words)
    fmt = kernels.BucketFormat((edge, edge), words, plan.nz_elems_per_bucket, sizes[0], plan.z_tile)
    kind = run_cost.VertexKind("block", sizes, plan.z_tile, edge)
    sid = np.arange(groups) + 1
    own = run_cost.vertex_cycles(target, kind, fields, fmt, np.arange(groups), sid)
    sg = kernels.sub_groups(mi.reshape(groups * pz, words), fmt)
    group = sg["bucket"] // pz
    match = sg["sid"] == group + 1
    blocks = np.bincount(group[match], sg["values"][match] // (edge * edge), groups)
    rows = np.bincount(group[match], sg["rows"][match], groups)
    count = np.bincount(group[match], minlength=groups)
    xt = plan.sizes("x")[np.arange(groups) // py]
    zeroing = est.zero_cycles(target, xt * plan.z_tile * sizes[1])
    launch = target.compute_set_launch_cycles
    total = own + zeroing + launch
    g = int(np.argmax(total))
    b, r = int(blocks[g]), int(rows[g])
    loads = est.amp_weight_loads(target, edge, *sizes)
    sup = b * (edge * edge // (2 if sizes[0] == 4 else 4) + 3 + 12 * loads) + r * est.AMP_ROW_CYCLES
    mine = match & (group == g)
    per_sub_group = est.block_fwd_sub_group(
        target, edge, sizes, plan.z_tile, sg["values"][mine] // (edge * edge), sg["rows"][mine]
    )
    work = int(np.sum(per_sub_group))
    return {
        "launch": launch,
        "walk": int(own[g]) - work,
        "supervisor": sup,
        "workers": work - sup,
        "zeroing": int(zeroing[g]),
        "total": int(total[g]),
        "blocks": b,
        "rows": r,
        "sub_groups": int(count[g]),
        "group": g,
    }


def describe(target: Target, plan: Plan, meta_info: np.ndarray) -> str:
    """One line: the terms and what they add up to; "" for an element-wise plan."""
    if plan.block_dimensions[0] == 1:
        return ""
    terms = distribution_terms(target, plan, meta_info)
    parts = ", ".join(f"{k} {terms[k]:,}" for k in TERMS)
    return (
        f"slowest distribution tile (group {terms['group']}: {terms['blocks']} blocks in "
        f"{terms['rows']} block rows of {terms['sub_groups']} sub-groups): {parts} = "
        f"{terms['total']:,} cycles"
    )
