"""How a remote-buffer embedding's table is split between replicas (the TOKEN and
ENCODING partition strategies of Graphcore's TensorFlow host embeddings), as host-side
layouts: what each replica's remote buffer holds, and back.

With ``R`` replicas, ``t`` tokens and encoding ``e``:

* ``TOKEN``: global row ``i`` on replica ``i % R`` at slot ``i // R``; ``ceil(t / R)`` slots
  per replica (the last slot of replicas ``>= t % R`` is padding when ``R`` does not divide
  ``t``). Example ``t = 13, R = 4``: replica 0 holds rows 0, 4, 8, 12; replica 1 rows 1, 5,
  9 and a padding slot.
* ``ENCODING``: every replica holds all ``t`` rows, ``c = ceil(e / R)`` columns each:
  replica ``j`` columns ``[j c, (j + 1) c)``, those at or past ``e`` zero padding.

Each replica's buffer has one more row, the *junk* slot, which absorbs the masked writes of
an update (rows another replica owns). With one replica both are the plain table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tremula.errors import EmbeddingError

STRATEGIES = ("TOKEN", "ENCODING")


def check_strategy(strategy: object, where: str) -> str:
    """``strategy`` upper-cased if it is TOKEN or ENCODING; EmbeddingError otherwise."""
    s = strategy.upper() if isinstance(strategy, str) else strategy
    if s not in STRATEGIES:
        raise EmbeddingError(
            f"{where}: unknown partition strategy {strategy!r}; expected one of {STRATEGIES}"
        )
    return s  # type: ignore[return-value]


@dataclass(frozen=True)
class Layout:
    """The partition of a ``[tokens, encoding]`` table between ``replicas``."""

    strategy: str
    tokens: int
    encoding: int
    replicas: int

    @property
    def rows(self) -> int:
        """Table slots per replica (without the junk slot)."""
        R = self.replicas
        return -(-self.tokens // R) if self.strategy == "TOKEN" else self.tokens

    @property
    def width(self) -> int:
        """Elements per slot."""
        R = self.replicas
        return -(-self.encoding // R) if self.strategy == "ENCODING" else self.encoding

    @property
    def junk(self) -> int:
        """The junk slot's index (the last row of each buffer)."""
        return self.rows

    def check(self, name: str) -> None:
        """Refuse a table the strategy cannot split (ENCODING with fewer columns than
        replicas)."""
        if self.strategy == "ENCODING" and self.encoding < self.replicas:
            raise EmbeddingError(
                f"host embedding {name!r}: the ENCODING strategy cannot split an encoding of "
                f"{self.encoding} between {self.replicas} replicas (each needs a column); use "
                f"the TOKEN strategy"
            )

    def shard(self, table: np.ndarray, replica: int) -> np.ndarray:
        """Replica ``replica``'s buffer, ``[rows + 1, width]`` (padding and junk zero)."""
        out = np.zeros((self.rows + 1, self.width), table.dtype)
        R, r = self.replicas, replica
        if self.strategy == "TOKEN":
            part = table[r::R]
            out[: part.shape[0]] = part
        else:
            c = self.width
            part = table[:, r * c : (r + 1) * c]
            out[: self.tokens, : part.shape[1]] = part
        return out

    def unshard(self, shard: np.ndarray, replica: int, table: np.ndarray) -> None:
        """Write replica ``replica``'s part of ``table`` (in place) from its buffer
        ``[rows + 1, width]``."""
        R, r = self.replicas, replica
        if self.strategy == "TOKEN":
            n = len(range(r, self.tokens, R))
            table[r::R] = shard[:n]
        else:
            c = self.width
            cols = table[:, r * c : (r + 1) * c]
            cols[...] = shard[: self.tokens, : cols.shape[1]]
