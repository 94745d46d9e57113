"""Options of the dynamic sparse fully-connected layer and matmul, with PopLibs' names and
defaults.

Values may be given as strings, as Poplar's ``OptionFlags`` carry them (``"true"``,
``"0.3"``, ``"half"``, a JSON string for ``planConstraints``), or as Python values
(``True``, ``0.3``, ``poplar.HALF``, a dict). An unknown option or a bad value raises
:class:`PopsparseError` naming it and what is allowed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tremula.libs.popsparse.errors import PopsparseError

PARTIALS_TYPES = ("float", "half")

#: Option name -> (field of :class:`Options`, kind).
OPTION_FIELDS = {
    "availableMemoryProportion": ("available_memory_proportion", "proportion"),
    "metaInfoBucketOversizeProportion": ("meta_info_bucket_oversize_proportion", "non-negative"),
    "doGradAPass": ("do_grad_a_pass", "bool"),
    "doGradWPass": ("do_grad_w_pass", "bool"),
    "partialsType": ("partials_type", "type"),
    "sharedBuckets": ("shared_buckets", "bool"),
    "enableStructuredRearrangements": ("enable_structured_rearrangements", "bool"),
    "partitioner.optimiseForSpeed": ("optimise_for_speed", "bool"),
    "partitioner.forceBucketSpills": ("force_bucket_spills", "bool"),
    "partitioner.useActualWorkerSplitCosts": ("use_actual_worker_split_costs", "bool"),
    "planConstraints": ("plan_constraints", "constraints"),
}


@dataclass(frozen=True)
class PlanConstraints:
    """Parsed ``planConstraints``: pinned partition counts (``None`` = free), the GradW
    exchange mode and the dense fallback (``None`` = the planner's choice)."""

    partition_x: int | None = None
    partition_y: int | None = None
    partition_z: int | None = None
    grad_w_exchange_buckets: bool | None = None
    use_dense: bool | None = None

    @property
    def partition(self) -> tuple[int | None, int | None, int | None]:
        return self.partition_x, self.partition_y, self.partition_z


@dataclass(frozen=True)
class Options:
    """Parsed options (defaults are PopLibs'). ``do_grad_a_pass`` is forced true and
    ``do_grad_w_pass`` false for a matmul (PopLibs' ``MatMulUtils.cpp``)."""

    available_memory_proportion: float = 0.6
    meta_info_bucket_oversize_proportion: float = 0.3
    do_grad_a_pass: bool = False
    do_grad_w_pass: bool = False
    partials_type: str = "float"
    shared_buckets: bool = True
    enable_structured_rearrangements: bool = True
    optimise_for_speed: bool = True
    force_bucket_spills: bool = False
    use_actual_worker_split_costs: bool = False
    plan_constraints: PlanConstraints = PlanConstraints()


def parse_options(
    options: Mapping[str, Any] | Options | None, where: str = "popsparse", matmul: bool = False
) -> Options:
    """Check and parse ``options`` (a mapping of PopLibs option names, or parsed
    :class:`Options`).

    Raises:
        PopsparseError: an unknown option or a bad value, naming it and what is allowed.
    """
    if isinstance(options, Options):
        parsed = options
    elif options is None:
        parsed = Options()
    elif isinstance(options, Mapping):
        unknown = sorted(str(k) for k in options if k not in OPTION_FIELDS)
        if unknown:
            raise PopsparseError(
                f"{where}: unknown option(s) {unknown}; known: {sorted(OPTION_FIELDS)}"
            )
        values = {
            OPTION_FIELDS[name][0]: _parse_value(name, value, where)
            for name, value in options.items()
        }
        parsed = Options(**values)
    else:
        raise PopsparseError(
            f"{where}: options must be a dict of option names, got {type(options).__name__}"
        )
    if matmul:
        parsed = dataclasses.replace(parsed, do_grad_a_pass=True, do_grad_w_pass=False)
    return parsed


def _parse_value(name: str, value: Any, where: str) -> Any:
    kind = OPTION_FIELDS[name][1]
    if kind == "bool":
        return parse_bool(value, f"{where}: option {name}")
    if kind in ("proportion", "non-negative"):
        return _parse_proportion(name, value, kind, where)
    if kind == "type":
        text = str(getattr(value, "name", value)).lower()
        if text not in PARTIALS_TYPES:
            raise PopsparseError(
                f"{where}: partialsType = {value!r}; expected one of {list(PARTIALS_TYPES)}"
            )
        return text
    return parse_plan_constraints(value, where)


def parse_bool(value: Any, what: str) -> bool:
    """A bool from ``True``/``False`` or the strings ``"true"``/``"false"`` (any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise PopsparseError(f"{what} = {value!r}; expected true or false")


def _parse_proportion(name: str, value: Any, kind: str, where: str) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        number = float("nan")
    ok = 0.0 < number <= 1.0 if kind == "proportion" else 0.0 <= number < float("inf")
    if not ok:
        expected = "a number in (0, 1]" if kind == "proportion" else "a number >= 0"
        raise PopsparseError(f"{where}: {name} = {value!r}; expected {expected}")
    return number


_CONSTRAINT_KEYS = {"partition": ("x", "y", "z"), "exchange": ("gradWExchangeBuckets",)}


def parse_plan_constraints(value: Any, where: str = "popsparse") -> PlanConstraints:
    """Parse ``planConstraints``: a JSON string or a dict such as
    ``{"partition": {"x": 6, "y": 4, "z": 1}, "exchange": {"gradWExchangeBuckets": true},
    "useDense": false}``. Numbers may be strings (as in a Poplar
    property tree)."""
    what = f"{where}: planConstraints"
    if isinstance(value, PlanConstraints):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as err:
            raise PopsparseError(f"{what} is not valid JSON ({err}): {value!r}") from None
    if not isinstance(value, Mapping):
        raise PopsparseError(f"{what} = {value!r}; expected a JSON object")
    unknown = sorted(set(value) - {*_CONSTRAINT_KEYS, "useDense"})
    if unknown:
        raise PopsparseError(
            f"{what}: unknown key(s) {unknown}; known: partition, exchange, useDense"
        )
    out: dict[str, Any] = {}
    for group, keys in _CONSTRAINT_KEYS.items():
        sub = value.get(group, {})
        if not isinstance(sub, Mapping):
            raise PopsparseError(f"{what}.{group} = {sub!r}; expected a JSON object")
        bad = sorted(set(sub) - set(keys))
        if bad:
            raise PopsparseError(f"{what}.{group}: unknown key(s) {bad}; known: {list(keys)}")
        for key in keys:
            if key in sub:
                if group == "partition":
                    out[f"partition_{key}"] = _constraint_int(sub[key], f"{what}.partition.{key}")
                else:
                    out["grad_w_exchange_buckets"] = parse_bool(sub[key], f"{what}.exchange.{key}")
    if "useDense" in value:
        out["use_dense"] = parse_bool(value["useDense"], f"{what}.useDense")
    return PlanConstraints(**out)


def _constraint_int(value: Any, what: str) -> int:
    try:
        number = int(value) if not isinstance(value, bool) else 0
        if isinstance(value, float) and number != value:
            number = 0
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise PopsparseError(f"{what} = {value!r}; expected a positive integer")
    return number
