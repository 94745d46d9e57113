"""``Graph.verify``'s read/write conflict check passes over read runs outside the written
span (``verify._near``, on their bounds): the address it reports is the one the whole read
list gives."""

from __future__ import annotations

import numpy as np
import pytest

from tremula.poplar import verify
from tremula.poplar.addresses import AddressList
from tremula.poplar.intervals import first_overlap, union_runs


def _fields(rng, count, size):
    """``count`` fields of random runs of addresses in ``[0, size)`` (some empty)."""
    out = []
    for _ in range(count):
        n = int(rng.integers(0, 8))
        starts = rng.integers(0, size, n).astype(np.int64)
        lengths = np.minimum(rng.integers(1, 6, n), size - starts)
        flat = [np.arange(a, a + k) for a, k in zip(starts, lengths)]
        out.append(AddressList.of(np.concatenate(flat) if flat else np.zeros(0, np.int64)))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_the_near_reads_give_the_first_overlap_of_all_reads(seed):
    rng = np.random.default_rng(seed)
    size = 400
    lo = int(rng.integers(0, size - 50))
    writes = [(np.array([lo, lo + 30]), np.array([lo + 10, lo + 45]))]  # a span with a gap
    ws, we, _ = union_runs(writes)
    reads = _fields(rng, int(rng.integers(1, 5)), size)
    runs = [r.runs() for r in reads]
    everything = (
        np.concatenate([s for s, _ in runs]),
        np.concatenate([s + n for s, n in runs]),
    )
    want = first_overlap(everything, (ws, we))
    near = verify._near([r for r in reads if r.size], int(ws[0]), int(we[-1]))
    got = None if near is None else first_overlap(near, (ws, we))
    assert got == want
    if want is not None:  # the brute-force answer: an address both read and written
        written = np.zeros(size, bool)
        written[lo : lo + 10] = written[lo + 30 : lo + 45] = True
        assert written[want]
