"""The MIG slice model against NVIDIA's shipped geometries (data/mig/config-default.yaml)."""
from __future__ import annotations

import pytest

from scheduler_hook import mig

# What config-default.yaml lists for each model (its comments and device filters); the
# catalog must find exactly these, so a filter bug cannot hide a geometry from the check.
EXPECTED = {
    "A100-40GB": {"all-disabled", "all-enabled", "all-1g.5gb", "all-1g.5gb.me", "all-2g.10gb",
                  "all-3g.20gb", "all-4g.20gb", "all-7g.40gb", "all-1g.10gb", "all-balanced"},
    "A100-80GB": {"all-disabled", "all-enabled", "all-1g.10gb", "all-1g.10gb.me",
                  "all-1g.20gb", "all-2g.20gb", "all-3g.40gb", "all-4g.40gb", "all-7g.80gb",
                  "all-balanced"},
}
EXPECTED["H100-80GB"] = EXPECTED["A100-80GB"]


def test_the_committed_copy_is_the_one_read():
    assert mig.CONFIG_PATH.is_file() and mig.CONFIG_PATH.parent.name == "mig"
    assert (mig.CONFIG_PATH.parent / "LICENSE").is_file()


@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_every_listed_geometry_is_valid(model):
    configs = mig.configs_for(model)
    assert set(configs) == EXPECTED[model]
    for name, cfg in configs.items():
        assert mig.place(cfg.as_dict, model) is not None, name


def test_device_filter_picks_the_model_specific_entry():
    # all-1g.10gb is 7 per GPU on 80 GB parts and 4 (double-memory 1g) on A100-40GB
    assert mig.configs_for("A100-40GB")["all-1g.10gb"].as_dict == {"1g.10gb": 4}
    assert mig.configs_for("H100-80GB")["all-1g.10gb"].as_dict == {"1g.10gb": 7}
    assert mig.configs_for("A100-40GB")["all-balanced"].as_dict == \
        {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert mig.configs_for("A100-80GB")["all-balanced"].as_dict == \
        {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


@pytest.mark.parametrize("geometry", [
    {"4g.20gb": 2},                              # 4g may only start at slice 0
    {"3g.20gb": 2, "1g.5gb": 1},                 # all 8 memory slices taken by the two 3g
    {"1g.5gb": 8},                               # 7 compute slices
    {"1g.10gb": 5},                              # double-memory 1g: starts 0, 2, 4, 6 only
    {"7g.40gb": 1, "1g.5gb": 1},
    {"1g.5gb+me": 2},                            # one media-extension instance per GPU
])
def test_known_invalid_geometries_are_rejected_on_a100_40gb(geometry):
    assert not mig.is_valid(geometry, "A100-40GB")


@pytest.mark.parametrize("geometry,stranded", [
    ({"4g.20gb": 1, "3g.20gb": 1}, 0),
    ({"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, 0),
    ({"3g.20gb": 2}, 1),                          # valid, but one compute slice stranded
    ({"2g.10gb": 3, "1g.5gb": 1}, 0),
    ({"1g.10gb": 4}, 3),
])
def test_valid_geometries_and_their_stranded_compute(geometry, stranded):
    placed = mig.place(geometry, "A100-40GB")
    assert placed is not None
    assert len(placed) == sum(geometry.values())
    assert mig.stranded_compute(geometry, "A100-40GB") == stranded


def test_placement_respects_start_positions_and_memory_runs():
    placed = mig.place({"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, "A100-40GB")
    assert placed == [("4g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)]


def test_profiles_are_per_model():
    assert mig.profile("1g.10gb", "A100-40GB").memory == 2  # double-memory 1g on 40 GB
    assert mig.profile("1g.10gb", "H100-80GB").memory == 1
    with pytest.raises(mig.MigError, match="does not exist on A100-40GB"):
        mig.profile("3g.40gb", "A100-40GB")
    with pytest.raises(mig.MigError, match="expected"):
        mig.profile("three-g", "A100-40GB")


@pytest.mark.parametrize("product,memory,model", [
    ("NVIDIA-A100-SXM4-40GB", 40960, "A100-40GB"),
    ("A100-SXM4-40GB-MIG-1g.5gb", 4864, "A100-40GB"),
    ("NVIDIA-A100-SXM4-80GB", 81920, "A100-80GB"),
    ("NVIDIA-A100-PCIE-80GB-MIG-3g.40gb", 40192, "A100-80GB"),
    ("NVIDIA-H100-80GB-HBM3", 81559, "H100-80GB"),
    ("NVIDIA-H100-PCIe", 81559, "H100-80GB"),
])
def test_model_of_product_labels(product, memory, model):
    assert mig.model_of(product, memory).name == model


def test_unknown_products_have_no_model():
    assert mig.model_of("Tesla-V100-SXM2-16GB", 16384) is None
    assert mig.model_of("NVIDIA-A100", 0) is None  # no size in the name, no memory label


def test_maximal_geometries_are_valid_and_include_the_full_named_ones():
    geos = mig.maximal_geometries("A100-40GB")
    assert all(mig.is_valid(g, "A100-40GB") for g in geos)
    assert {"1g.5gb": 7} in geos and {"3g.20gb": 1, "4g.20gb": 1} in geos
    assert {"3g.20gb": 2} in geos  # maximal although it strands a slice
    assert {"2g.10gb": 3} not in geos  # a 1g.5gb still fits beside three 2g
