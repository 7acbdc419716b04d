"""The table of architecture axes (ablate.nn.axes.AXES) agrees with the configs and the spec: each
config file of a group selects its option with the table's key, every option it names is
registered, every registered option of a group that has one file per option has its file, and
spec_axes(spec) holds exactly the table's fields."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES, spec_axes
from ablate.nn.spec import ModelSpec

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("axis", AXES, ids=[a.key for a in AXES])
def test_every_config_file_selects_a_registered_option_by_the_tables_key(axis) -> None:
    files = sorted((CONF / axis.group).glob("*.yaml"))
    assert files, f"conf/{axis.group}/ is empty"
    for path in files:
        node = yaml.safe_load(path.read_text())
        assert axis.selector in node, f"{path} has no {axis.key}"
        assert node[axis.selector] in axis.options(), f"{path}: {axis.key}={node[axis.selector]} is not registered"


@pytest.mark.parametrize(
    "axis", [a for a in AXES if a is next(b for b in AXES if b.group == a.group)], ids=lambda a: a.group
)
def test_every_option_of_a_group_has_its_config_file(axis) -> None:
    if axis.group == "norm":  # conf/norm/ is one file per placement; the layer is chosen by norm.layer
        names = {yaml.safe_load(p.read_text())["placement"] for p in (CONF / "norm").glob("*.yaml")}
    else:
        names = {yaml.safe_load(p.read_text())[axis.selector] for p in (CONF / axis.group).glob("*.yaml")}
    assert set(axis.options()) <= names, f"registered without a conf/{axis.group}/ file: {set(axis.options()) - names}"


def test_the_spec_holds_every_axis() -> None:
    spec = ModelSpec(vocab_size=8, n_layers=1, d_model=8, n_heads=2, d_ff=16, max_len=8)
    assert list(spec_axes(spec)) == [a.spec_field for a in AXES]
    assert {a.spec_field for a in AXES} <= {f.name for f in fields(ModelSpec)}
    assert ARCHITECTURE_GROUPS == ("pos", "norm", "act", "init", "attn")
