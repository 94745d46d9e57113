"""``popart._internal.ir.patterns``: PopART's ``Patterns`` and ``PatternsLevel``.

PopART's patterns rewrite its IR before lowering: the pre-alias patterns turn the gradient
ops its autodiff makes (``SoftmaxGradOp``, ``MulArg0GradOp``, ...) into ops it can lower,
and the inplace pattern swaps ops for in-place variants. Tremula's gradient rules emit
ordinary, lowerable PopXL ops and its lowering aliases views itself, so applying patterns
(``Ir.applyPreAliasPatterns`` / ``applyInplacePattern``) finds nothing to rewrite: the
settings are kept and reported (``isPatternEnabled``) as PopART reports them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any


class PatternsLevel(enum.Enum):
    """Which patterns a ``Patterns`` enables."""

    NoPatterns = 0
    Minimal = 1
    Default = 2
    All = 3


#: PopART's pre-alias patterns: name -> (mandatory, enabled by default)
PRE_ALIAS_PATTERNS: dict[str, tuple[bool, bool]] = {
    "InitAccumulate": (False, True),
    "PreUniRepl": (True, True),
    "PostNRepl": (False, True),
    "SoftMaxGradDirect": (False, True),
    "NlllWithSoftMaxGradDirect": (False, True),
    "SplitGather": (False, False),
    "OpToIdentity": (False, True),
    "SubtractArg1GradOp": (True, True),
    "MulArgGradOp": (True, True),
    "ReciprocalGradOp": (True, True),
    "DivArg0GradOp": (True, True),
    "DivArg1GradOp": (True, True),
    "PowArg0GradOp": (True, True),
    "PowArg1GradOp": (True, True),
    "SinGradOp": (True, True),
    "CosGradOp": (True, True),
    "TanToSinOverCos": (True, True),
    "SqrtGradOp": (True, True),
    "ExpGradOp": (True, True),
    "LogGradOp": (True, True),
    "NegativeOneScale": (False, True),
    "MatMulOp": (True, True),
    "MatMulLhsGradOp": (True, True),
    "MatMulRhsGradOp": (True, True),
    "SumToAdd": (False, True),
    "SplitGradOpToConcat": (False, True),
    "GatherToIdentity": (False, True),
    "UpsampleToResize": (True, True),
    "ConvFlipWeightsGradOp": (True, True),
    "ConvTranspose": (True, True),
    "AllReduceToIdentity": (True, True),
    "DecomposeBinaryConstScalar": (False, True),
    "RandomNormalLikeOpPattern": (True, True),
    "RandomUniformLikeOpPattern": (True, True),
    "ZerosLikeOpPattern": (True, True),
    "ViewSimplifyPattern": (False, True),
    "TiedGatherPattern": (False, True),
    "TiedGatherAccumulatePattern": (False, True),
    "LambSerialisedWeight": (False, False),
}


def _level_enables(level: PatternsLevel, mandatory: bool, default: bool) -> bool:
    return {
        PatternsLevel.NoPatterns: False,
        PatternsLevel.Minimal: mandatory,
        PatternsLevel.Default: default,
        PatternsLevel.All: True,
    }[level]


class Patterns:
    """A set of enabled patterns: ``Patterns(PatternsLevel.Default)`` or
    ``Patterns([names])`` (those names only).

    Raises:
        ValueError: an unknown pattern name.
    """

    def __init__(self, level: PatternsLevel | Iterable[str] = PatternsLevel.Default) -> None:
        if isinstance(level, PatternsLevel):
            self._enabled = {
                n for n, (m, d) in PRE_ALIAS_PATTERNS.items() if _level_enables(level, m, d)
            }
            self._inplace = level in (PatternsLevel.Default, PatternsLevel.All)
        else:
            names = list(level)
            for n in names:
                _check(n)
            self._inplace = "InPlace" in names
            self._enabled = {n for n in names if n != "InPlace"}
        self._runtime_asserts = True

    def isPatternEnabled(self, name: str) -> bool:
        if name == "InPlace":
            return self._inplace
        _check(name)
        return name in self._enabled

    def enablePattern(self, name: str, enabled: bool) -> Patterns:
        if name == "InPlace":
            return self.enableInPlace(enabled)
        _check(name)
        (self._enabled.add if enabled else self._enabled.discard)(name)
        return self

    def isInPlaceEnabled(self) -> bool:
        return self._inplace

    def enableInPlace(self, enabled: bool) -> Patterns:
        self._inplace = bool(enabled)
        return self

    def enableRuntimeAsserts(self, enabled: bool) -> Patterns:
        self._runtime_asserts = bool(enabled)
        return self

    def getRuntimeAssertsOn(self) -> bool:
        return self._runtime_asserts

    def enabledPatterns(self) -> list[str]:
        """The enabled pre-alias patterns, sorted (a Tremula helper)."""
        return sorted(self._enabled)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Patterns) and (self._enabled, self._inplace) == (
            other._enabled,
            other._inplace,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Patterns({self.enabledPatterns()}, InPlace={self._inplace})"


def _check(name: str) -> None:
    if name != "InPlace" and name not in PRE_ALIAS_PATTERNS:
        raise ValueError(
            f"Patterns: unknown pattern {name!r} (PopART's pre-alias patterns and 'InPlace')"
        )
