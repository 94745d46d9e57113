"""Tile-mapping helpers of poputil: linear mappings with a grain."""

from __future__ import annotations

import numpy as np

from tremula.errors import GraphError
from tremula.poplar.graph import Graph
from tremula.poplar.tensor import Tensor


def linear_tiles(
    num_elements: int, num_tiles: int, min_elements_per_tile: int = 0, grain_size: int = 1
) -> np.ndarray:
    """The tile of each element under poputil's linear mapping.

    Elements are cut into grains of ``grain_size``; every tile but the last used ones gets
    ``ceil(grains / num_tiles)`` grains (at least ``ceil(min_elements_per_tile / grain)``),
    in order from tile 0. Returns an ``int64`` array of ``num_elements`` tiles.
    """
    if grain_size < 1 or min_elements_per_tile < 0:
        raise GraphError(
            f"linear mapping: grain_size ({grain_size}) must be >= 1 and "
            f"min_elements_per_tile ({min_elements_per_tile}) >= 0"
        )
    grains = -(-num_elements // grain_size)
    per_tile = max(-(-grains // num_tiles), -(-min_elements_per_tile // grain_size), 1)
    # element i on tile (i // grain_size) // per_tile = i // (grain_size * per_tile)
    block = grain_size * per_tile
    used = -(-num_elements // block)
    return np.repeat(np.arange(used, dtype=np.int64), block)[:num_elements]


def calc_linear_tile_mapping(
    graph: Graph,
    shape_or_tensor: Tensor | tuple[int, ...],
    min_elements_per_tile: int = 0,
    grain_size: int = 1,
) -> list[list[tuple[int, int]]]:
    """Poplar-style mapping (per tile, a list of ``(begin, end)``) of a linear mapping."""
    n = (
        shape_or_tensor.num_elements
        if isinstance(shape_or_tensor, Tensor)
        else int(np.prod(shape_or_tensor))
    )
    tiles = linear_tiles(n, graph.num_tiles, min_elements_per_tile, grain_size)
    out: list[list[tuple[int, int]]] = [[] for _ in range(graph.num_tiles)]
    if n:
        counts = np.bincount(tiles, minlength=graph.num_tiles)
        ends = np.cumsum(counts)
        for tile in np.flatnonzero(counts).tolist():
            out[tile].append((int(ends[tile] - counts[tile]), int(ends[tile])))
    return out


def map_tensor_linearly(
    graph: Graph, t: Tensor, min_elements_per_tile: int = 0, grain_size: int = 1
) -> None:
    """Spread ``t`` evenly over the graph's tiles in its flattened order (poputil)."""
    tiles = linear_tiles(t.num_elements, graph.num_tiles, min_elements_per_tile, grain_size)
    graph.set_tile_mapping(t, tiles.reshape(t.shape))
