"""Host seeds for PopXL's random ops (``popxl.random_seed``): a 64-bit seed travels to the
device as two uint32 words, ``[hi, lo]``, in a uint32 tensor of shape ``(2,)``."""

from __future__ import annotations

import numpy as np

MAX_UINT64 = 2**64 - 1
_MAX_UINT32 = 2**32 - 1


def uint64_to_two_uint32(n: int) -> list[int]:
    """``[hi, lo]``: the high and low 32-bit words of the 64-bit unsigned ``n``.

    Raises:
        ValueError: ``n`` outside ``[0, 2**64 - 1]``.
    """
    if not 0 <= int(n) <= MAX_UINT64:
        raise ValueError(f"uint64_to_two_uint32: {n!r} is not in [0, {MAX_UINT64}]")
    n = int(n)
    return [n >> 32, n & _MAX_UINT32]


def two_uint32_to_uint64(a: int, b: int) -> int:
    """The 64-bit unsigned number whose high word is ``a`` and low word is ``b``.

    Raises:
        ValueError: ``a`` or ``b`` outside ``[0, 2**32 - 1]``.
    """
    for name, v in (("a", a), ("b", b)):
        if not 0 <= int(v) <= _MAX_UINT32:
            raise ValueError(f"two_uint32_to_uint64: {name} = {v!r} is not in [0, {_MAX_UINT32}]")
    return (int(a) << 32) | int(b)


def create_seeds(
    seed: int | None = None,
    offset: int = 0,
    batches_per_step: int = 1,
    gradient_accumulation_factor: int = 1,
    replicas: int = 1,
) -> np.ndarray:
    """Seeds for an h2d seed stream, one per batch, gradient-accumulation step and replica.

    The 64-bit seeds are drawn uniformly from ``[0, 2**64 - 1]`` by
    ``numpy.random.default_rng(seed + offset)`` and each is split into ``[hi, lo]`` uint32
    words (:func:`uint64_to_two_uint32`).

    Args:
        seed: The seed of the sequence (None: a random one).
        offset: Added to ``seed``: a different sequence from the same seed.
        batches_per_step: The number of batches per ``session.run``.
        gradient_accumulation_factor: The number of accumulation steps per batch.
        replicas: The number of replicas.

    Returns:
        A uint32 array of shape ``[batches_per_step, gradient_accumulation_factor,
        replicas, 2]`` with the axes of size 1 dropped (``(2,)`` for one seed).

    Raises:
        ValueError: a count that is not a positive integer.
    """
    counts = [batches_per_step, gradient_accumulation_factor, replicas]
    if any(isinstance(c, bool) or int(c) != c or c < 1 for c in counts):
        raise ValueError(f"create_seeds: counts {counts} must be positive integers")
    rng = np.random.default_rng(None if seed is None else int(seed) + int(offset))
    words = rng.integers(0, MAX_UINT64, size=counts, dtype=np.uint64, endpoint=True)
    pairs = np.stack([words >> np.uint64(32), words & np.uint64(_MAX_UINT32)], axis=-1)
    return np.squeeze(pairs.astype(np.uint32))


__all__ = ["MAX_UINT64", "create_seeds", "two_uint32_to_uint64", "uint64_to_two_uint32"]
