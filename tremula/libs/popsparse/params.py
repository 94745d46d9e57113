"""Parameters of PopSparse's dynamic sparse operations (``SparsityParams.hpp``,
``FullyConnectedParams.hpp``, ``MatMulParams.hpp``).

* :class:`SparsityParams`: sparsity type (element or block), structure (unstructured) and
  block dimensions;
* :class:`FullyConnectedParams`: a sparse fully-connected layer ``Y[X][Z] = W[X][Y] S[Y][Z]``
  with ``X`` = output channels, ``Y`` = input channels, ``Z`` = batch;
* :class:`MatMulParams`: ``[G][m][k] (sparse) x [G][k][n]``, which maps onto a
  fully-connected layer with batch ``n``, input channels ``k`` and output channels ``m``.

All are frozen values: hashable, usable as planning-cache keys.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from tremula.libs.popsparse.errors import PopsparseError


class SparsityType(enum.Enum):
    """Granularity of the non-zero values: single elements, or square blocks."""

    Element = "Element"
    Block = "Block"


class SparsityStructure(enum.Enum):
    """What the planner may assume about the pattern: nothing."""

    Unstructured = "Unstructured"


def _positive_int(value: object, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PopsparseError(f"{where}: {what} = {value!r}; expected a positive integer")
    return int(value)


def exact_ceil(x: float) -> int:
    """``ceil(x)`` that ignores floating-point noise of a few ulps: a ratio stored as
    ``n / total`` and multiplied back by ``total`` gives ``n``, not ``n + 1``."""
    nearest = round(x)
    if abs(x - nearest) <= 1e-9 * max(1.0, abs(x)):
        return int(nearest)
    return math.ceil(x)


@dataclass(frozen=True, init=False)
class SparsityParams:
    """Sparsity type, structure and block dimensions ``(rows, columns)``.

    As in PopLibs the ``type`` argument is not trusted: the type is ``Element`` when the
    block area is 1 and ``Block`` otherwise.

    Block dimensions are 1x1 (element-wise), 4x4, 8x8 or 16x16: the blocks the device
    vertices handle (PopLibs itself also takes larger multiples of 4, split into those;
    Tremula refuses them, as its issue asks). Float 16x16 blocks run as
    8x8 inside the vertices.

    Raises:
        PopsparseError: non-square blocks, or an edge other than 1, 4, 8 or 16.
    """

    type: SparsityType
    structure: SparsityStructure
    block_dimensions: tuple[int, int]

    def __init__(
        self,
        type: SparsityType = SparsityType.Element,  # PopLibs' name
        structure: SparsityStructure = SparsityStructure.Unstructured,
        block_dimensions: tuple[int, int] | list[int] = (1, 1),
    ) -> None:
        where = "SparsityParams"
        if not isinstance(type, SparsityType):
            raise PopsparseError(f"{where}: type = {type!r}; expected a SparsityType")
        if not isinstance(structure, SparsityStructure):
            raise PopsparseError(
                f"{where}: structure = {structure!r}; expected a SparsityStructure"
            )
        dims = tuple(block_dimensions)
        if len(dims) != 2:
            raise PopsparseError(
                f"{where}: block_dimensions = {block_dimensions!r}; expected (rows, columns)"
            )
        rows, cols = (_positive_int(d, "block_dimensions", where) for d in dims)
        if rows != cols:
            raise PopsparseError(
                f"{where}: block_dimensions = ({rows}, {cols}); only square blocks are "
                f"supported (1x1, 4x4, 8x8 or 16x16)"
            )
        if rows not in (1, 4, 8, 16):
            raise PopsparseError(
                f"{where}: block_dimensions = ({rows}, {cols}); a block edge must be 1 "
                f"(element-wise sparsity), 4, 8 or 16 (block sparsity: no vertex exists "
                f"for {rows}x{cols} blocks)"
            )
        kind = SparsityType.Element if rows * cols == 1 else SparsityType.Block
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "structure", structure)
        object.__setattr__(self, "block_dimensions", (rows, cols))

    @property
    def block_area(self) -> int:
        return self.block_dimensions[0] * self.block_dimensions[1]

    def __str__(self) -> str:
        r, c = self.block_dimensions
        return f"{{{self.type.name},{self.structure.name},{{{r},{c}}}}}"


def _check_ratio(nz_ratio: object, where: str) -> float:
    if isinstance(nz_ratio, bool) or not isinstance(nz_ratio, (int, float)):
        raise PopsparseError(f"{where}: nz_ratio = {nz_ratio!r}; expected a number in [0, 1]")
    ratio = float(nz_ratio)
    if not 0.0 <= ratio <= 1.0:
        raise PopsparseError(f"{where}: nz_ratio = {nz_ratio!r}; expected a number in [0, 1]")
    return ratio


@dataclass(frozen=True)
class FullyConnectedParams:
    """A sparse fully-connected layer (``FullyConnectedParams``). Build it with
    :meth:`create_with_nz_ratio` or :meth:`create_with_num_non_zero_values`.

    Equality, ordering and hashing use the sparsity params, the ratio, the batch size and
    the channels; the number of groups is not compared (as in PopLibs; it must be 1).

    Invariants: ``num_groups == 1`` (grouped layers are not supported), the channels are
    multiples of the block dimensions (rows of ``W`` are output channels).
    """

    sparsity_params: SparsityParams
    nz_ratio: float
    batch_size: int
    input_channels_per_group: int
    output_channels_per_group: int
    num_groups: int = field(default=1, compare=False)

    def __post_init__(self) -> None:
        where = "FullyConnectedParams"
        if not isinstance(self.sparsity_params, SparsityParams):
            raise PopsparseError(
                f"{where}: sparsity_params = {self.sparsity_params!r}; expected SparsityParams"
            )
        _check_ratio(self.nz_ratio, where)
        _positive_int(self.batch_size, "batch_size", where)
        _positive_int(self.num_groups, "num_groups", where)
        if self.num_groups != 1:
            raise PopsparseError(
                f"{where}: num_groups = {self.num_groups}; grouped sparse fully-connected "
                f"layers are not supported, only num_groups = 1"
            )
        bx, by = self.sparsity_params.block_dimensions
        for name, value, block, what in (
            ("input_channels", self.input_channels_per_group, by, "columns"),
            ("output_channels", self.output_channels_per_group, bx, "rows"),
        ):
            _positive_int(value, name, where)
            if value % block:
                raise PopsparseError(
                    f"{where}: {name} = {value} is not a multiple of the block {what} "
                    f"({block}) of {self.sparsity_params}"
                )

    @classmethod
    def create_with_nz_ratio(
        cls,
        sparsity_params: SparsityParams,
        nz_ratio: float,
        batch_size: int,
        num_groups: int,
        input_channels: int,
        output_channels: int,
    ) -> FullyConnectedParams:
        """Params for a density ``nz_ratio`` in [0, 1] (a fraction of the elements)."""
        ratio = _check_ratio(nz_ratio, "FullyConnectedParams.create_with_nz_ratio")
        return cls(sparsity_params, ratio, batch_size, input_channels, output_channels, num_groups)

    @classmethod
    def create_with_num_non_zero_values(
        cls,
        sparsity_params: SparsityParams,
        num_non_zero_values: int,
        batch_size: int,
        num_groups: int,
        input_channels: int,
        output_channels: int,
    ) -> FullyConnectedParams:
        """Params for at most ``num_non_zero_values`` non-zero *elements* (not blocks).

        Raises:
            PopsparseError: more non-zero values than ``groups * in * out``.
        """
        where = "FullyConnectedParams.create_with_num_non_zero_values"
        total = num_groups * input_channels * output_channels
        if isinstance(num_non_zero_values, bool) or not isinstance(num_non_zero_values, int):
            raise PopsparseError(f"{where}: num_non_zero_values = {num_non_zero_values!r}")
        if not 0 <= num_non_zero_values <= total:
            raise PopsparseError(
                f"{where}: num_non_zero_values = {num_non_zero_values}; expected between 0 and "
                f"groups x input x output channels = {total}"
            )
        ratio = num_non_zero_values / total if total else 0.0
        return cls(sparsity_params, ratio, batch_size, input_channels, output_channels, num_groups)

    @property
    def input_channels(self) -> int:
        return self.input_channels_per_group * self.num_groups

    @property
    def output_channels(self) -> int:
        return self.output_channels_per_group * self.num_groups

    def get_nz_ratio(self) -> float:
        return self.nz_ratio

    def get_num_non_zero_values(self) -> int:
        """``ceil(ratio * groups * in * out)``: elements, not blocks."""
        return exact_ceil(
            self.nz_ratio
            * self.num_groups
            * self.input_channels_per_group
            * self.output_channels_per_group
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(X, Y, Z)``: output channels, input channels, batch (PopSparse's notation)."""
        return self.output_channels_per_group, self.input_channels_per_group, self.batch_size

    def __lt__(self, other: FullyConnectedParams) -> bool:
        return self._key() < other._key()

    def _key(self) -> tuple:
        sp = self.sparsity_params
        return (
            sp.type.value,
            sp.structure.value,
            sp.block_dimensions,
            self.nz_ratio,
            self.batch_size,
            self.input_channels_per_group,
            self.output_channels_per_group,
        )

    def __str__(self) -> str:
        return (
            f"FullyConnectedParams{{sparsity {self.sparsity_params}, nzRatio {self.nz_ratio:g}, "
            f"batch {self.batch_size}, groups {self.num_groups}, in {self.input_channels}, "
            f"out {self.output_channels}}}"
        )


@dataclass(frozen=True)
class MatMulParams:
    """A dynamic sparse matmul ``[G][m][k] (sparse) x [G][k][n] = [G][m][n]``
    (``dynamic::MatMulParams``). Build it with :meth:`create_with_nz_ratio` or
    :meth:`create_with_num_non_zero_values`; it plans as the fully-connected layer
    :meth:`to_fully_connected_params` (batch ``n``, input ``k``, output ``m``)."""

    sparsity_params: SparsityParams
    nz_ratio: float
    m: int
    k: int
    n: int
    num_groups: int = field(default=1, compare=False)

    def __post_init__(self) -> None:
        self.to_fully_connected_params()  # validates

    @classmethod
    def create_with_nz_ratio(
        cls,
        sparsity_params: SparsityParams,
        nz_ratio: float,
        num_groups: int,
        m: int,
        k: int,
        n: int,
    ) -> MatMulParams:
        ratio = _check_ratio(nz_ratio, "MatMulParams.create_with_nz_ratio")
        return cls(sparsity_params, ratio, m, k, n, num_groups)

    @classmethod
    def create_with_num_non_zero_values(
        cls,
        sparsity_params: SparsityParams,
        num_non_zero_values: int,
        num_groups: int,
        m: int,
        k: int,
        n: int,
    ) -> MatMulParams:
        fc = FullyConnectedParams.create_with_num_non_zero_values(
            sparsity_params, num_non_zero_values, n, num_groups, k, m
        )
        return cls(sparsity_params, fc.nz_ratio, m, k, n, num_groups)

    def to_fully_connected_params(self) -> FullyConnectedParams:
        return FullyConnectedParams(
            self.sparsity_params, self.nz_ratio, self.n, self.k, self.m, self.num_groups
        )

    def get_num_non_zero_values(self) -> int:
        return self.to_fully_connected_params().get_num_non_zero_values()
