"""The table of architecture axes (ablate.nn.axes.AXES) is what Hydra composes, the spec holds and
the docs show: every option of a group's first axis is a config of the group (ablate://, no YAML),
the default of every group is its row's, the spec holds exactly the table's axes, and the docs'
table of axes is the one the table makes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES, group_axes, markdown_table, spec_axes
from ablate.nn.spec import ModelSpec
from hydra_plugins.ablate_sweepers.architecture import ArchitectureGroups

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("group", ARCHITECTURE_GROUPS)
def test_every_option_is_a_config_of_its_group(group) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train")
        first, *others = group_axes(group)
        assert cfg[group][first.selector] == first.default
        assert all(cfg[group][axis.selector] == axis.default for axis in others)
        source = ArchitectureGroups("ablate", "ablate://axes")  # what conf/train.yaml's search path adds
        assert source.list(group, None) == sorted(first.options()) and source.is_group(group)
        for option in first.options():
            node = compose("train", [f"{group}={option}"])[group]
            defaults = first.config_class(option).defaults()
            assert {k: node[k] for k in defaults} == defaults  # its keys, with the option's defaults


def test_the_spec_holds_every_axis() -> None:
    spec = ModelSpec(vocab_size=8, n_layers=1, d_model=8, n_heads=2, d_ff=16, max_len=8)
    assert spec_axes(spec) == {a.name: a.default for a in AXES}
    assert list(spec.as_dict()["options"]) == [a.name for a in AXES]
    assert ARCHITECTURE_GROUPS[:5] == ("pos", "norm", "act", "init", "attn")  # the README's groups, first


def test_the_docs_table_of_axes_is_made_from_the_table() -> None:
    assert markdown_table() in (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
