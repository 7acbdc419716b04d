"""The table of architecture axes (ablate.nn.axes.AXES) is what Hydra composes, the spec holds and
the docs show: every option of a group's first axis is a config of the group (Hydra's ConfigStore, no YAML),
the default of every group is its row's, the spec holds exactly the table's axes, and the docs'
table of axes is the one the table makes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore

from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES, group_axes, markdown_table, spec_axes
from ablate.nn.spec import ModelSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("group", ARCHITECTURE_GROUPS)
def test_every_option_is_a_config_of_its_group(group) -> None:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train")
        first, *others = group_axes(group)
        assert cfg[group][first.selector] == first.default
        assert all(cfg[group][axis.selector] == axis.default for axis in others)
        assert not (REPO / "conf" / group).exists()  # no YAML: the registry's options are the group's
        stored = ConfigStore.instance().list(group)  # ablate.config.store (structured://)
        assert stored == sorted(f"{option}.yaml" for option in first.options())
        for option in first.options():
            node = compose("train", [f"{group}={option}"])[group]
            defaults = first.config_class(option).defaults()
            assert {k: node[k] for k in defaults} == defaults  # its keys, with the option's defaults


def test_the_spec_holds_every_axis() -> None:
    spec = ModelSpec(vocab_size=8, n_layers=1, d_model=8, n_heads=2, d_ff=16, max_len=8)
    assert spec_axes(spec) == {a.name: a.default for a in AXES}
    assert list(spec.as_dict()["options"]) == [a.name for a in AXES]
    assert ARCHITECTURE_GROUPS[:5] == ("pos", "norm", "act", "init", "attn")  # the README's groups, first


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def test_the_docs_table_of_axes_is_made_from_the_table() -> None:
    """docs/architecture.md's table is :func:`markdown_table`'s, every row its axis' row, except that
    it may lag behind the registries: it lists the options it lists, in the registry's order, the
    default first, and none that is gone. A new option is no edit of the docs (``markdown_table()``
    prints them all); a row of an axis that is not in the table (or a key, a registry, a default that
    changed) fails."""
    made = {_cells(row)[0]: _cells(row) for row in markdown_table().splitlines()[2:]}
    header = markdown_table().splitlines()[0]
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines()
    assert header in text, "docs/architecture.md has no table of axes"
    rows = [_cells(line) for line in text[text.index(header) + 2 :]]
    rows = rows[: next((n for n, cells in enumerate(rows) if cells == [""]), len(rows))]
    assert rows
    for axis, config, options, registry in rows:
        assert axis in made, f"docs/architecture.md's table of axes has a row `{axis}`: no axis of AXES"
        _, made_config, made_options, made_registry = made[axis]
        assert (config, registry) == (made_config, made_registry), axis
        listed, known = re.findall(r"`(\w+)`", options), re.findall(r"`(\w+)`", made_options)
        assert listed[:1] == known[:1], f"`{axis}`: the default ({known[0]}) first"
        assert _in_order(listed, known), f"`{axis}`: {listed} not among {known}, in order"


def _in_order(listed: list[str], known: list[str]) -> bool:
    """``listed`` is ``known`` with some left out (a subsequence)."""
    remaining = iter(known)
    return all(option in remaining for option in listed)


def test_the_docs_table_may_lag_a_new_option_but_names_none_that_is_gone() -> None:
    known = ["gelu", "relu", "relu6", "silu"]  # relu6 registered since the docs were written
    assert _in_order(["gelu", "relu", "silu"], known)
    assert not _in_order(["gelu", "tanh"], known) and not _in_order(["gelu", "silu", "relu"], known)
