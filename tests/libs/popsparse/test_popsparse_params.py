"""Parameters (spec 1.1/1.2) and options (1.6): values, defaults, validation errors."""

from __future__ import annotations

import pytest

from tremula import poplar
from tremula.libs.popsparse import PopsparseError, dynamic

SP = dynamic.SparsityParams
FC = dynamic.FullyConnectedParams
MM = dynamic.MatMulParams
Type, Structure = dynamic.SparsityType, dynamic.SparsityStructure


def test_sparsity_params_type_follows_the_block():
    assert SP().type is Type.Element and SP().block_dimensions == (1, 1)
    assert SP(Type.Element, Structure.Unstructured, (4, 4)).type is Type.Block
    assert SP(Type.Block, Structure.Unstructured, [1, 1]).type is Type.Element
    assert SP(block_dimensions=(16, 16)).block_area == 256
    assert SP(block_dimensions=(8, 8)) == SP(Type.Block, Structure.Unstructured, (8, 8))
    assert len({SP(), SP(block_dimensions=(1, 1)), SP(block_dimensions=(16, 16))}) == 2


@pytest.mark.parametrize(
    "dims, match",
    [
        ((4, 8), "only square blocks"),
        ((3, 3), "1 \\(element-wise sparsity\\), 4, 8 or 16"),
        ((2, 2), "no vertex exists for 2x2"),
        ((12, 12), "no vertex exists for 12x12"),
        ((32, 32), "no vertex exists for 32x32"),
        ((0, 0), "positive integer"),
        ((4,), r"expected \(rows, columns\)"),
    ],
)
def test_sparsity_params_errors(dims, match):
    with pytest.raises(PopsparseError, match=match):
        SP(Type.Block, Structure.Unstructured, dims)


def test_fully_connected_params():
    p = FC.create_with_nz_ratio(SP(block_dimensions=(4, 4)), 0.1, 8, 1, 64, 32)
    assert (p.batch_size, p.num_groups, p.input_channels, p.output_channels) == (8, 1, 64, 32)
    assert p.shape == (32, 64, 8)
    assert p.get_nz_ratio() == 0.1 and p.get_num_non_zero_values() == 205  # ceil(204.8)
    q = FC.create_with_num_non_zero_values(SP(), 1000, 8, 1, 4096, 4096)
    assert q.get_num_non_zero_values() == 1000  # no float noise
    assert q.nz_ratio == 1000 / 4096**2
    assert FC.create_with_num_non_zero_values(SP(), 0, 4, 1, 8, 8).get_num_non_zero_values() == 0
    r = FC.create_with_nz_ratio(SP(block_dimensions=(4, 4)), 0.1, 8, 1, 64, 32)
    assert p == r and hash(p) == hash(r) and not p < r
    assert p < FC.create_with_nz_ratio(SP(block_dimensions=(4, 4)), 0.2, 8, 1, 64, 32)


@pytest.mark.parametrize(
    "make, match",
    [
        (
            lambda: FC.create_with_nz_ratio(SP(), 1.5, 4, 1, 8, 8),
            r"nz_ratio = 1.5; expected .* \[0, 1\]",
        ),
        (lambda: FC.create_with_nz_ratio(SP(), -0.1, 4, 1, 8, 8), "nz_ratio"),
        (lambda: FC.create_with_nz_ratio(SP(), 0.1, 4, 2, 8, 8), "num_groups = 2; grouped"),
        (lambda: FC.create_with_nz_ratio(SP(), 0.1, 0, 1, 8, 8), "batch_size = 0"),
        (
            lambda: FC.create_with_nz_ratio(SP(block_dimensions=(4, 4)), 0.1, 4, 1, 10, 8),
            "input_channels = 10 is not a multiple of the block columns",
        ),
        (
            lambda: FC.create_with_nz_ratio(SP(block_dimensions=(4, 4)), 0.1, 4, 1, 8, 6),
            "output_channels = 6 is not a multiple of the block rows",
        ),
        (
            lambda: FC.create_with_num_non_zero_values(SP(), 65, 4, 1, 8, 8),
            "num_non_zero_values = 65; expected between 0 and .* 64",
        ),
        (lambda: MM.create_with_nz_ratio(SP(), 0.1, 3, 8, 8, 8), "num_groups = 3"),
    ],
)
def test_params_errors(make, match):
    with pytest.raises(PopsparseError, match=match):
        make()


def test_matmul_params_map_onto_a_layer():
    m = MM.create_with_nz_ratio(SP(block_dimensions=(8, 8)), 0.25, 1, 64, 32, 16)
    fc = m.to_fully_connected_params()
    assert (fc.output_channels, fc.input_channels, fc.batch_size) == (64, 32, 16)
    n = MM.create_with_num_non_zero_values(SP(), 100, 1, 16, 16, 4)
    assert n.get_num_non_zero_values() == 100


def test_option_defaults_and_values():
    o = dynamic.parse_options(None)
    assert o == dynamic.Options()
    assert (o.available_memory_proportion, o.meta_info_bucket_oversize_proportion) == (0.6, 0.3)
    assert not o.do_grad_a_pass and not o.do_grad_w_pass and o.partials_type == "float"
    assert o.shared_buckets and o.optimise_for_speed and not o.force_bucket_spills
    assert o.plan_constraints == dynamic.PlanConstraints()
    o = dynamic.parse_options(
        {
            "availableMemoryProportion": "0.25",
            "metaInfoBucketOversizeProportion": 0,
            "doGradAPass": "true",
            "doGradWPass": True,
            "partialsType": poplar.HALF,
            "sharedBuckets": "False",
            "partitioner.forceBucketSpills": "true",
            "partitioner.optimiseForSpeed": False,
            "partitioner.useActualWorkerSplitCosts": "true",
            "enableStructuredRearrangements": "false",
            "planConstraints": '{"partition": {"x": 6, "y": "4", "z": 1},'
            ' "exchange": {"gradWExchangeBuckets": true}, "useDense": false}',
        }
    )
    assert o.available_memory_proportion == 0.25 and o.meta_info_bucket_oversize_proportion == 0
    assert o.do_grad_a_pass and o.do_grad_w_pass and o.partials_type == "half"
    assert not o.shared_buckets and o.force_bucket_spills and not o.optimise_for_speed
    assert o.use_actual_worker_split_costs and not o.enable_structured_rearrangements
    c = o.plan_constraints
    assert c.partition == (6, 4, 1) and c.grad_w_exchange_buckets and c.use_dense is False
    assert dynamic.parse_options(
        {"planConstraints": {"partition": {"y": 2}}}
    ).plan_constraints.partition == (None, 2, None)
    mm = dynamic.parse_options({"doGradWPass": True}, matmul=True)
    assert mm.do_grad_a_pass and not mm.do_grad_w_pass


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"availableMemoryProportin": 0.5}, r"unknown option\(s\) \['availableMemoryProportin'\]"),
        ({"availableMemoryProportion": 0}, r"availableMemoryProportion = 0; expected .* \(0, 1\]"),
        ({"availableMemoryProportion": "lots"}, "availableMemoryProportion = 'lots'"),
        ({"metaInfoBucketOversizeProportion": -1}, "expected a number >= 0"),
        ({"doGradAPass": "yes"}, "doGradAPass = 'yes'; expected true or false"),
        (
            {"partialsType": "double"},
            r"partialsType = 'double'; expected one of \['float', 'half'\]",
        ),
        ({"planConstraints": "{not json"}, "planConstraints is not valid JSON"),
        ({"planConstraints": {"partition": {"w": 2}}}, r"planConstraints.partition: unknown key"),
        ({"planConstraints": {"partitions": {}}}, r"unknown key\(s\) \['partitions'\]"),
        ({"planConstraints": {"partition": {"x": 0}}}, "partition.x = 0; expected a positive"),
        ({"planConstraints": {"useDense": 3}}, "useDense = 3; expected true or false"),
    ],
)
def test_option_errors(opts, match):
    with pytest.raises(PopsparseError, match=match):
        dynamic.parse_options(opts)
