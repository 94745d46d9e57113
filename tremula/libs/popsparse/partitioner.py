"""The host partitioner (``popsparse::dynamic::Partitioner``, ``SparsePartitionerImpl.cpp``):
sparsity pattern -> flat meta-info and nz tensors laid out as the device buckets, and back.

Pipeline: validate the matrix against the layer and convert it to canonical CSR;
split user blocks into the plan's grain blocks; place the blocks into buckets
(:mod:`bucketing`); encode (:mod:`encoding`). Reading back (:mod:`decoding`) walks the
meta-info alone, so it also reads GradW results, which have the nz layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tremula import poplar
from tremula.libs.popsparse import bucketing, decoding, dense, encoding
from tremula.libs.popsparse.errors import BucketOverflowError, SparseFormatError
from tremula.libs.popsparse.formats import COOMatrix, CSCMatrix, CSRMatrix
from tremula.libs.popsparse.options import Options
from tremula.libs.popsparse.params import FullyConnectedParams, MatMulParams
from tremula.libs.popsparse.plan import Plan, PlanningCache
from tremula.libs.popsparse.planner import get_plan
from tremula.target import Target

Matrix = COOMatrix | CSRMatrix | CSCMatrix


@dataclass(frozen=True, eq=False)
class SparsityDataImpl:
    """Host buffers ready to copy into a ``SparseTensor``: ``meta_info`` (uint16) and
    ``nz_values`` (the data type), laid out as the device tensors (see ``OVERVIEW.md``). Compare the
    arrays, not the objects."""

    meta_info: np.ndarray
    nz_values: np.ndarray


class Partitioner:
    """Encodes sparsity patterns for one layer, and decodes buckets back into matrices.

    Args:
        params: the layer (or matmul) the pattern belongs to.
        data_type: ``half`` or ``float`` (a poplar type, its name or a NumPy dtype).
        target: the target the layer is planned for.
        options: the **same** options as given to the device functions.
        cache: a :class:`PlanningCache` shared with them.
        name: a debug name used in error messages.
    """

    def __init__(
        self,
        params: FullyConnectedParams | MatMulParams,
        data_type: Any,
        target: Target,
        options: Mapping[str, Any] | Options | None = None,
        cache: PlanningCache | None = None,
        name: str = "",
    ) -> None:
        self.plan: Plan = get_plan(target, data_type, params, options, cache)
        self.params = self.plan.params
        self.name = name or "Partitioner"
        self.dtype = poplar.as_type(self.plan.input_type).numpy

    # ---- pattern -> buckets ----
    def create_sparsity_data_impl(self, matrix: Matrix) -> SparsityDataImpl:
        """Encode ``matrix`` (COO, CSR or CSC, with the layer's block dimensions) into
        meta-info and nz buckets. Values are cast to the data type.

        Raises:
            SparseFormatError: another block size, indices outside the ``X x Y`` weights.
            BucketOverflowError: more blocks than the buckets hold, or a pattern too skewed
                for them ("Overflow in buckets").
            MetaInfoError: a meta-info value that does not fit 16 bits.
        """
        rows, cols, blocks = self._grain_blocks(matrix)
        plan = self.plan
        if plan.use_dense:
            return SparsityDataImpl(*dense.encode(plan, rows, cols, blocks, self.dtype))
        area = blocks.shape[1]
        capacity = plan.num_buckets * (plan.nz_elems_per_bucket // area)
        if rows.size > capacity:
            raise BucketOverflowError(
                f"Overflow in buckets: {self.name}: the pattern has {rows.size * area} non-zero "
                f"values ({rows.size} blocks of {area}) but the buckets hold at most "
                f"{capacity * area} ({plan.num_buckets} buckets x {plan.nz_elems_per_bucket}); "
                f"the layer was planned for {self.params.get_num_non_zero_values()} non-zero "
                f"values with oversize {plan.options.meta_info_bucket_oversize_proportion}"
            )
        bx, by = plan.block_dimensions
        assignment = bucketing.assign(plan, rows // bx, cols // by)
        groups = encoding.order_groups(plan, assignment)
        meta_info = encoding.encode_meta_info(plan, groups)
        nz = encoding.encode_nz(plan, groups, blocks, self.dtype)
        return SparsityDataImpl(meta_info, nz)

    def _grain_blocks(self, matrix: Matrix) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validate ``matrix`` against the layer; its blocks split into the plan's grain,
        sorted row-major: (element rows, element columns, values ``[n, area]``)."""
        if not isinstance(matrix, (COOMatrix, CSRMatrix, CSCMatrix)):
            raise SparseFormatError(
                f"{self.name}: expected a COOMatrix, CSRMatrix or CSCMatrix, got "
                f"{type(matrix).__name__}"
            )
        user = self.params.sparsity_params.block_dimensions
        if matrix.block_dimensions != user:
            raise SparseFormatError(
                f"Block dimensions of matrix do not match ones with which partitioner was "
                f"created: {matrix.block_dimensions} vs {user}"
            )
        x, y, _ = self.params.shape
        for what, got, want in (("rows", matrix.num_rows, x), ("columns", matrix.num_columns, y)):
            if got is not None and got != want:
                raise SparseFormatError(
                    f"{self.name}: the {matrix.FORMAT} matrix has {got} {what}; the layer's "
                    f"weights have {want} (X = output channels, Y = input channels)"
                )
        if isinstance(matrix, CSRMatrix):  # canonical, and checked against Y
            csr = CSRMatrix(
                matrix.nz_values, matrix.offsets, matrix.column_indices, user, x, y
            ).canonicalize()
        else:
            csr = matrix.to_csr(x, y)
        grain = self.plan.block_dimensions
        if grain != user:
            csr = csr.change_block_size(grain)
        rows, cols, vals = csr.block_arrays()
        return rows, cols, vals.reshape(rows.size, grain[0] * grain[1])

    # ---- buckets -> pattern ----
    def sparsity_data_impl_to_coo_matrix(self, impl: SparsityDataImpl) -> COOMatrix:
        """The matrix the buckets hold, as COO sorted row-major, with the user's block
        dimensions and the values of ``impl.nz_values`` (which may be a GradW result
        laid out like the nz values).

        Raises:
            MetaInfoError: meta-info that is corrupt or not of this plan.
        """
        rows, cols, vals = decoding.decode(self.plan, impl.meta_info, impl.nz_values)
        bx, by = self.plan.block_dimensions
        x, y, _ = self.params.shape
        coo = COOMatrix(vals.reshape(-1), rows, cols, (bx, by), x, y)
        user = self.params.sparsity_params.block_dimensions
        return coo.change_block_size(user) if user != (bx, by) else coo

    def sparsity_data_impl_to_csr_matrix(self, impl: SparsityDataImpl) -> CSRMatrix:
        return self.sparsity_data_impl_to_coo_matrix(impl).to_csr()

    def sparsity_data_impl_to_csc_matrix(self, impl: SparsityDataImpl) -> CSCMatrix:
        return self.sparsity_data_impl_to_coo_matrix(impl).to_csc()

    def grad_w_to_coo_matrix(self, meta_info: np.ndarray, grad_w: np.ndarray) -> COOMatrix:
        """A sparse GradW result (laid out like ``nz_values``) as COO at the
        pattern's positions."""
        return self.sparsity_data_impl_to_coo_matrix(SparsityDataImpl(meta_info, grad_w))

    def overflow_info(self, impl: SparsityDataImpl) -> np.ndarray:
        """``[xEnd, yEnd, zEnd, X-distance bitset...]``: the head of the meta-info."""
        return np.asarray(impl.meta_info[: self.plan.num_overflow_info_elems])

    def nz_slot_coordinates(self, meta_info: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Element ``(row, column)`` of every slot of ``nz_values`` (-1 for padding): where
        each value (or GradW entry) of the buckets sits in the weights."""
        return decoding.slot_coordinates(self.plan, meta_info)
