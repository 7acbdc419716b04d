"""Which groups a benchmark run measures (``benchmark.only``), and the compile group's loops (issue 39
item 5: the compiled Lightning loop, what ``train.py model.compile=true`` runs, beside the eager one)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks.suite import selected_groups
from helpers.runs import REPO


def bench(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("benchmark", overrides=list(overrides)).benchmark


def test_only_names_the_groups_a_disabled_one_included() -> None:
    assert "compile" not in selected_groups(bench())  # off by default: each compiled variant compiles
    assert list(selected_groups(bench("benchmark.only=[compile]"))) == ["compile"]
    assert list(selected_groups(bench("benchmark.only=[loop,compile]"))) == ["loop", "compile"]
    assert "compile" in selected_groups(bench("benchmark.compile=true"))
    with pytest.raises(ValueError, match=r"no group \['compiled'\]; the groups: \['loop'"):
        selected_groups(bench("benchmark.only=[compiled]"))


def test_the_compile_group_runs_both_loops_compiled_and_eager() -> None:
    variants = OmegaConf.to_container(bench().groups.compile.variants)
    assert isinstance(variants, dict)
    loops = {
        name: (
            spec["loop"] if isinstance(spec, dict) else "hand",
            "model.compile=true" in (spec["overrides"] if isinstance(spec, dict) else spec),
        )
        for name, spec in variants.items()
    }
    assert loops == {
        "eager": ("hand", False),
        "compiled": ("hand", True),
        "lightning_eager": ("lightning", False),
        "lightning_compiled": ("lightning", True),
    }
    ratios = bench().groups.compile.ratios
    assert ratios.lightning_compiled_vs_eager == "lightning_compiled / lightning_eager"
    assert ratios.lightning_vs_hand_compiled == "lightning_compiled / compiled"
