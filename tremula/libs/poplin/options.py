"""Matmul options, with PopLibs' names, and the checks of operand types.

Option values may be given as strings (PopLibs' ``OptionFlags``) or as Python values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tremula import poplar
from tremula.errors import GraphError


class MatMulError(GraphError):
    """A poplin call got operands or options it cannot honour."""


#: Input types poplin multiplies, and the output / partials types each allows.
INPUT_TYPES = {"half": ("half", "float"), "float": ("half", "float"), "int": ("int",)}
PARTIALS_TYPES = ("float", "half")
FULLY_CONNECTED_PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU")
#: Passes PopLibs plans jointly (the three passes of a training layer at once); its conv
#: planner forces ``swapOperands = true`` for a joint plan (``FC_TRAINING_FWD`` and the
#: other training passes), so these matmuls take the columns of ``b``
#: as the AMP's output positions.
JOINT_PASSES = ("TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU")
KNOWN_OPTIONS = ("availableMemoryProportion", "partialsType", "fullyConnectedPass")


@dataclass(frozen=True)
class MatMulOptions:
    """Parsed options: ``availableMemoryProportion`` (share of a tile's memory the plan's
    temporaries may use, in (0, 1]), ``partialsType`` (``float`` or ``half``),
    ``fullyConnectedPass`` (one of :data:`FULLY_CONNECTED_PASSES`)."""

    available_memory_proportion: float = 0.6
    partials_type: str = "float"
    fully_connected_pass: str = "NONE"

    @property
    def joint(self) -> bool:
        """Whether PopLibs plans this pass jointly (:data:`JOINT_PASSES`): operands swapped."""
        return self.fully_connected_pass in JOINT_PASSES


def parse_options(options: Mapping[str, Any] | None, where: str) -> MatMulOptions:
    """Check and parse ``options``. Of ``fullyConnectedPass`` only what it does to the
    plan is modelled: a training pass is planned with the operands swapped.

    Raises:
        MatMulError: an unknown option or a bad value, naming it and what is allowed.
    """
    if options is None:
        return MatMulOptions()
    if not isinstance(options, Mapping):
        raise MatMulError(f"{where}: options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise MatMulError(f"{where}: unknown option(s) {unknown}; known: {list(KNOWN_OPTIONS)}")
    amp = options.get("availableMemoryProportion", 0.6)
    try:
        amp = float(amp)
    except (TypeError, ValueError):
        amp = float("nan")
    if not 0.0 < amp <= 1.0:
        raise MatMulError(
            f"{where}: availableMemoryProportion = {options['availableMemoryProportion']!r}; "
            f"expected a number in (0, 1]"
        )
    partials = options.get("partialsType", "float")
    partials = str(partials).lower()
    if partials not in PARTIALS_TYPES:
        raise MatMulError(
            f"{where}: partialsType = {options['partialsType']!r}; expected one of "
            f"{list(PARTIALS_TYPES)}"
        )
    fc = str(options.get("fullyConnectedPass", "NONE")).upper()
    if fc not in FULLY_CONNECTED_PASSES:
        raise MatMulError(
            f"{where}: fullyConnectedPass = {options['fullyConnectedPass']!r}; expected one "
            f"of {list(FULLY_CONNECTED_PASSES)}"
        )
    return MatMulOptions(amp, partials, fc)


def check_input_type(dtype: Any, where: str, what: str) -> poplar.Type:
    """The poplar type of an operand, if poplin multiplies it."""
    try:
        t = poplar.as_type(dtype) if not isinstance(dtype, poplar.Type) else dtype
    except GraphError:
        t = None
    if t is None or t.name not in INPUT_TYPES:
        raise MatMulError(
            f"{where}: {what} has type {dtype}; poplin multiplies {list(INPUT_TYPES)}"
        )
    return t


def output_type(in_type: poplar.Type, dtype: Any, where: str) -> poplar.Type:
    """The result type: ``dtype`` when given (and allowed for ``in_type``), else ``in_type``."""
    if dtype is None:
        return in_type
    try:
        out = poplar.as_type(dtype)
    except GraphError:
        out = None
    if out is None or out.name not in INPUT_TYPES[in_type.name]:
        raise MatMulError(
            f"{where}: output type {dtype} not supported for {in_type} inputs; expected one "
            f"of {list(INPUT_TYPES[in_type.name])}"
        )
    return out


def partials_type(in_type: poplar.Type, opts: MatMulOptions) -> poplar.Type:
    """Partials are ``partialsType`` for half inputs, float for float inputs (the AMP
    accumulates float inputs in float) and the input type for ints."""
    if in_type.name != "half":
        return in_type
    return poplar.as_type(opts.partials_type)
