"""The meta-info encoding read by an independent decoder written from the spec text
(sections 2.6 to 2.10), with every invariant the device program relies on; and the
propagation schedule (4.3) reaching every sub-group exactly once per Z partition."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tremula.libs.popsparse import COOMatrix, PlanningError, dynamic


@dataclass
class SubGroup:
    bucket: int
    word: int  # absolute position of the header
    x: int
    y: int
    nz_offset: int  # first nz value of the sub-group in the bucket (values)
    rows: list = field(default_factory=list)  # (x offset in tile, [y offsets in tile])


def read_overflow_info(words, px):
    n = 3 + (px + 1) // 2
    triplet = [int(w) for w in words[:3]]
    distances = {2 * i + bit for i, w in enumerate(words[3:n]) for bit in (0, 1) if w >> bit & 1}
    return n, triplet, distances


def spec_decode(plan, meta, nz, block: bool, grad_w: bool):
    """Read the buckets as spec 2.7/2.8/2.10 describe them; check the word-level invariants;
    return the sub-groups and the dense matrix they encode."""
    px, py, pz = plan.partition.xyz
    X, Y, _ = plan.params.shape
    bx, by = plan.block_dimensions
    area = bx * by
    tf = {"half": 2, "float": 4}[plan.input_type]
    fwd, grad_a = plan.fwd_meta_info_elems_per_bucket, plan.grad_a_meta_info_elems_per_bucket
    n_oi, triplet, distances = read_overflow_info(meta, px)
    assert meta.dtype == np.uint16 and meta.size == n_oi + px * py * pz * (fwd + grad_a)
    assert nz.size == px * py * pz * plan.nz_elems_per_bucket
    xs, ys = plan.starts("x"), plan.starts("y")
    dense = np.zeros((X, Y), dtype=nz.dtype)
    seen = np.zeros((X, Y), dtype=int)
    groups = []
    for b in range(px * py * pz):
        base = n_oi + b * (fwd + grad_a)
        w = [int(v) for v in meta[base : base + fwd]]
        pos, nz_off = 0, 0
        while w[pos] != 0:
            sid, x, y = w[pos : pos + 3]
            assert sid == x * py + y + 1 and x < px and y < py
            sg = SubGroup(b, base + pos, x, y, nz_off)
            if block:
                values, size, nrows, ngw = w[pos + 3 : pos + 7]
                nrows += 1
                count = values // area
                assert values % area == 0
                gw_at, first = pos + 7, 7 + 4 * ngw
                assert grad_w or ngw == 0
            else:
                count, size, num_z, nrows, first, nw = w[pos + 3 : pos + 9]
                nrows += 1
                assert num_z == plan.z_tile
                ngw = w[pos + 9 + 5 * nw] if grad_w else 0
                gw_at = pos + 10 + 5 * nw
                assert first == 9 + 5 * nw + ((1 + 4 * ngw) if grad_w else 0)
            # rows
            p, row_at, nz_index = pos + first, [], []
            for _ in range(nrows):
                n = w[p + 1] + (1 if block else 0)
                offsets = w[p + 2 : p + 2 + n]
                row_at.append(p)
                nz_index.append(sum(len(r[1]) for r in sg.rows))
                if block:
                    assert w[p] % bx == 0 and all(o % by == 0 for o in offsets)
                    sg.rows.append((w[p], offsets))
                else:
                    unit = tf * num_z
                    assert all(o % unit == 0 for o in offsets)
                    sg.rows.append((w[p], [o // unit for o in offsets]))
                assert offsets == sorted(offsets) and len(set(offsets)) == n  # increasing
                p += 2 + n
            assert p == pos + size, "offsetToNextSubGroup ends the rows"
            assert sum(len(r[1]) for r in sg.rows) == count
            if not block:
                _check_workers(w, pos, nw, sg, row_at, nz_index, plan)
            if grad_w:
                _check_grad_w(w, gw_at, ngw, sg, row_at, nz_index, area if block else 1)
            # the nz values of the rows, in order
            k = 0
            for r, (xo, cols) in enumerate(sg.rows):
                for c in cols:
                    value = nz[b * plan.nz_elems_per_bucket + nz_off + k * area :][:area]
                    r0, c0 = xs[x] + xo, ys[y] + c
                    dense[r0 : r0 + bx, c0 : c0 + by] = value.reshape(bx, by)
                    seen[r0 : r0 + bx, c0 : c0 + by] += 1
                    k += 1
                del r
            nz_off += count * area
            groups.append(sg)
            pos += size
        assert all(v == 0 for v in w[pos:]), "terminator then zero padding"
        assert nz_off <= plan.nz_elems_per_bucket
        pad = nz[b * plan.nz_elems_per_bucket + nz_off : (b + 1) * plan.nz_elems_per_bucket]
        assert not pad.any(), "nz padding is zero"
    assert seen.max(initial=0) <= 1, "every element in one bucket at most"
    _check_overflow_info(plan, groups, triplet, distances)
    return groups, dense, seen.astype(bool)


def _check_workers(w, pos, nw, sg, row_at, nz_index, plan):
    """Worker entries (2.7): their rows x Z pieces tile the sub-group exactly."""
    assert 1 <= nw <= 6
    z_tile, zg = plan.z_tile, plan.z_grain
    cover = np.zeros((len(sg.rows), z_tile), dtype=int)
    for k in range(nw):
        e = pos + 9 + 5 * k
        sparse, num_z, off_z, nrows_m1, mi_off = w[e : e + 5]
        row = row_at.index(e + mi_off)  # metaInfoOffset points at a row entry
        assert sparse == nz_index[row]
        assert num_z % zg == 0 and off_z % zg == 0 and num_z > 0
        cover[row : row + nrows_m1 + 1, off_z : off_z + num_z] += 1
    assert (cover == 1).all()


def _check_grad_w(w, at, ngw, sg, row_at, nz_index, scale):
    """GradW entries (2.7 item 3): consecutive nz ranges covering the sub-group."""
    assert 1 <= ngw <= 6
    total = sum(len(r[1]) for r in sg.rows)
    start = 0
    for v in range(ngw):
        e = at + 4 * v
        sparse, to_row, into, num = w[e : e + 4]
        assert sparse == start * scale and num > 0
        row = row_at.index(e + to_row)
        assert nz_index[row] + into == start and into < len(sg.rows[row][1])
        start += num
    assert start == total


def _check_overflow_info(plan, groups, triplet, distances):
    """2.6: the farthest (dx, dy), lexicographic, of a sub-group from its bucket's tile."""
    px, py, pz = plan.partition.xyz
    far, seen = (0, 0), set()
    for g in groups:
        xb, yb = g.bucket // (py * pz), g.bucket // pz % py
        d = ((g.x - xb) % px, (g.y - yb) % py)
        far = max(far, d)
        seen.add(d[0])
    x_end = far[0] + 1
    assert triplet == [x_end, far[1] + 1 if x_end == 1 else py, pz]
    assert distances == seen


def check_grad_a(plan, meta, groups):
    """Non-shared GradA meta-info (2.7): per forward sub-group, in the same order, the
    transposed sub-group whose pairs address the forward nz positions."""
    px, py, pz = plan.partition.xyz
    tf = {"half": 2, "float": 4}[plan.input_type]
    fwd, grad_a = plan.fwd_meta_info_elems_per_bucket, plan.grad_a_meta_info_elems_per_bucket
    n_oi = 3 + (px + 1) // 2
    by_bucket = {}
    for g in groups:
        by_bucket.setdefault(g.bucket, []).append(g)
    for b in range(px * py * pz):
        base = n_oi + b * (fwd + grad_a) + fwd
        w = [int(v) for v in meta[base : base + grad_a]]
        pos = 0
        for g in by_bucket.get(b, []):
            sid, x, y, count, size, num_z, nrows_m1, first, nw = w[pos : pos + 9]
            assert (sid, x, y, num_z) == (g.x * py + g.y + 1, g.x, g.y, plan.z_tile)
            entries = [(xo, c) for xo, cols in g.rows for c in cols]  # forward order
            assert count == len(entries) and first == 9 + 5 * nw
            for k in range(nw):
                assert w[pos + 9 + 5 * k] == 0  # sparseOffset is 0 in GradA meta-info
            p, got = pos + first, []
            for _ in range(nrows_m1 + 1):
                col, n = w[p], w[p + 1]
                for i in range(n):
                    nz_pos, y_off = w[p + 2 + 2 * i], w[p + 3 + 2 * i]
                    assert nz_pos % tf == 0 and y_off % (tf * num_z) == 0
                    assert entries[nz_pos // tf] == (y_off // (tf * num_z), col)
                    got.append(nz_pos // tf)
                p += 2 + 2 * n
            assert sorted(got) == list(range(count)) and p == pos + size
            pos += size
        assert all(v == 0 for v in w[pos:])


def check_propagation_covers(plan, groups, overflow):
    """Every sub-group reaches each tile (x, y, z) of its partition exactly once: in the
    distribution phase (its own Z group) or in one propagation compute step (4.3)."""
    px, py, pz = plan.partition.xyz
    steps = dynamic.propagation_steps(plan.partition.xyz, overflow)
    offsets = [s.offset for s in steps if s.compute]
    assert len(offsets) == len(set(offsets)) and (0, 0, 0) not in offsets
    assert all(o[:2] != (0, 0) for o in offsets)
    assert len([s for s in steps if s.compute]) <= px * py * pz - pz
    for g in groups:
        xb, yb, zb = g.bucket // (py * pz), g.bucket // pz % py, g.bucket % pz
        for z in range(pz):
            want = ((g.x - xb) % px, (g.y - yb) % py, (z - zb) % pz)
            hits = int(want[:2] == (0, 0)) + offsets.count(want)
            assert hits == 1, (g, z, want)


CASES = st.fixed_dictionaries(
    {
        "block": st.sampled_from([1, 4, 8, 16]),
        "type": st.sampled_from(["half", "float"]),
        "xb": st.integers(1, 32),
        "yb": st.integers(1, 32),
        "density": st.floats(0.02, 0.6),
        "grad_w": st.booleans(),
        "grad_a": st.booleans(),
        "shared": st.booleans(),
        "force": st.booleans(),
        "speed": st.booleans(),
        "skew": st.booleans(),
        "partition": st.one_of(
            st.none(),
            st.tuples(st.integers(1, 4), st.integers(1, 4), st.sampled_from([1, 2, 4])).filter(
                lambda p: p[0] * p[1] * p[2] <= 24
            ),
        ),
        "seed": st.integers(0, 2**31),
    }
)


def _case(h, c):
    b = c["block"]
    X, Y = c["xb"] * max(b, 4), c["yb"] * max(b, 4)
    Z = 16 if c["partition"] is None else 16 * c["partition"][2]
    rng = np.random.default_rng(c["seed"])
    rect = (0, max(1, X // b // 4), 0, Y // b) if c["skew"] else None
    m = h.random_coo(rng, X, Y, b, c["density"], rect=rect)
    ratio = max(m.num_blocks, 1) * b * b / (X * Y)
    opts = {
        "doGradWPass": c["grad_w"],
        "doGradAPass": c["grad_a"],
        "sharedBuckets": c["shared"],
        "partitioner.forceBucketSpills": c["force"],
        "partitioner.optimiseForSpeed": c["speed"],
        "metaInfoBucketOversizeProportion": 0.5,
    }
    if c["partition"] is not None:
        px, py, pz = c["partition"]
        px, py = min(px, X // b), min(py, Y // b)
        if (px - 1) * -(-(X // b) // px) >= X // b or (py - 1) * -(-(Y // b) // py) >= Y // b:
            px = py = 1
        opts["planConstraints"] = {"partition": {"x": px, "y": py, "z": pz}}
    return m, h.layer(b, ratio, Z, Y, X), opts


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASES)
def test_spec_decoder_reads_the_pattern_back(h, c):
    m, params, opts = _case(h, c)
    try:
        part = dynamic.Partitioner(params, c["type"], h.T24, opts)
    except PlanningError:  # a constrained partition whose buckets exceed uint16 offsets
        assume(False)
    plan = part.plan
    impl = part.create_sparsity_data_impl(m)
    groups, dense, seen = spec_decode(
        plan, impl.meta_info, impl.nz_values, block=c["block"] > 1, grad_w=c["grad_w"]
    )
    want = m.to_dense().astype(part.dtype)
    assert np.array_equal(dense, want)
    mask = np.zeros(want.shape, dtype=bool)
    b = c["block"]
    for r, col in zip(m.row_indices, m.column_indices):
        mask[r : r + b, col : col + b] = True
    assert np.array_equal(seen, mask), "exactly the pattern's elements are encoded"
    if plan.has_grad_a_meta_info:
        check_grad_a(plan, impl.meta_info, groups)
    overflow = part.overflow_info(impl)
    check_propagation_covers(plan, groups, overflow)


def test_uniform_pattern_needs_no_propagation(h, rng):
    params = h.layer(1, 0.1, 8, 256, 256)
    part = dynamic.Partitioner(params, "float", h.T24, {"doGradWPass": True})
    m = h.random_coo(rng, 256, 256, 1, 0.05)  # half the planned density: nothing spills
    impl = part.create_sparsity_data_impl(m)
    groups, _, _ = spec_decode(part.plan, impl.meta_info, impl.nz_values, False, True)
    px, py, pz = part.plan.partition.xyz
    assert part.overflow_info(impl)[:3].tolist() == [1, 1, pz]
    assert dynamic.propagation_steps(part.plan.partition.xyz, part.overflow_info(impl)) == []
    assert len(groups) == px * py * pz  # one sub-group per bucket, its own
    for g in groups:
        rows = [len(cols) for _, cols in g.rows]
        assert rows == sorted(rows, reverse=True), "rows by decreasing length (2.3)"


@pytest.mark.parametrize("block", [1, 4])
def test_rows_in_one_block_row_propagate(h, rng, block):
    """All non-zeros in one row (block): every X partition but one is empty, the buckets of
    the full one overflow into the others, and propagation brings them back."""
    X = Y = 128
    params = h.layer(block, 1 / (X // block), 8, Y, X)
    opts = {"planConstraints": {"partition": {"x": 4, "y": 2, "z": 2}}}
    part = dynamic.Partitioner(params, "float", h.T24, opts)
    m = h.random_coo(rng, X, Y, block, 1.0, rect=(0, 1, 0, Y // block))
    impl = part.create_sparsity_data_impl(m)
    groups, dense, _ = spec_decode(part.plan, impl.meta_info, impl.nz_values, block > 1, False)
    assert np.array_equal(dense, m.to_dense())
    overflow = part.overflow_info(impl)
    assert overflow[0] > 1, "spilled to other X partitions"
    check_propagation_covers(part.plan, groups, overflow)
    assert all(g.x == 0 for g in groups)


@pytest.mark.parametrize("heavy_rows", [1, 2])
def test_worker_entries_when_one_row_dominates(h, heavy_rows):
    """More than 12 rows, one or two of them holding most non-zeros: the contiguous row
    split leaves some workers without rows, and they get no entry."""
    X, Y = 32, 256
    rows = [r for r in range(heavy_rows) for _ in range(Y)] + list(range(heavy_rows, 20))
    cols = [c for _ in range(heavy_rows) for c in range(Y)] + [3] * (20 - heavy_rows)
    m = COOMatrix(np.arange(1, len(rows) + 1, dtype=np.float32), rows, cols, (1, 1), X, Y)
    params = h.layer(1, len(rows) / (X * Y), 8, Y, X)
    opts = {"doGradWPass": True, "planConstraints": {"partition": {"x": 1, "y": 1, "z": 1}}}
    part = dynamic.Partitioner(params, "float", h.T24, opts)
    impl = part.create_sparsity_data_impl(m)
    _, dense, _ = spec_decode(part.plan, impl.meta_info, impl.nz_values, False, True)
    assert np.array_equal(dense, m.to_dense())
    base = part.plan.num_overflow_info_elems
    assert 1 < impl.meta_info[base + 8] < 6  # numWorkers: the empty ranges are dropped
