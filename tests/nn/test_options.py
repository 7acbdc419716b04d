"""Each option of each axis has a typed config (ablate.nn.options): a frozen dataclass of its keys
with its own defaults, read from the option's class; build() makes its part of a model and
validate() asks the option whether it can serve the whole spec. A new option brings its keys
with its class and nothing else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import yaml

from ablate.config.options import valid_keys
from ablate.nn import positional
from ablate.nn.axes import AXES, INIT, PLACEMENT, POS
from ablate.nn.positional import PositionalEncoding, Rotary
from ablate.nn.stack import StackConfig
from helpers.tiny_models import tiny_lm, tiny_spec

CONF = Path(__file__).resolve().parents[2] / "conf"
OPTIONS = [(axis, name) for axis in AXES for name in axis.options()]


@pytest.mark.parametrize(("axis", "name"), OPTIONS, ids=[f"{a.key}={n}" for a, n in OPTIONS])
def test_every_option_has_a_frozen_typed_config_of_its_own_keys(axis, name) -> None:
    cls = axis.config_class(name)
    assert cls is axis.config_class(name)  # made once
    config = cls()  # every option has defaults for its keys
    assert config.options() == cls.defaults()
    if config.options():
        key = next(iter(config.options()))
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, key, None)
    with pytest.raises(TypeError):
        cls(not_a_key=1)
    if axis.group in ("pos", "act", "init"):  # one YAML per option, holding exactly its keys
        path = next(
            p for p in (CONF / axis.group).glob("*.yaml") if yaml.safe_load(p.read_text())[axis.selector] == name
        )
        yaml_keys = set(yaml.safe_load(path.read_text())) - {axis.selector}
        assert set(cls.defaults()) == yaml_keys, path


def test_the_spec_chooses_the_config_and_the_config_builds_the_part() -> None:
    spec = tiny_spec(pos="rope", pos_options={"fraction": 0.5, "base": 500.0}, init="gpt2", init_std=0.05)
    pos = POS.config(spec)
    assert (type(pos).__name__, pos.options()) == ("PositionalConfig[rope]", {"base": 500.0, "fraction": 0.5})
    built = pos.build(d_model=32, n_heads=4, max_len=16)
    assert isinstance(built, Rotary) and built.rot_dim == 4 and built.base == 500.0
    assert INIT.config(spec).build().std == 0.05  # type: ignore[attr-defined]
    assert INIT.config(tiny_spec(init="xavier", init_std=0.05)).options() == {}  # xavier takes no std


def test_validate_asks_the_option() -> None:
    POS.config(tiny_spec(pos="rope")).validate(tiny_spec(pos="rope"))
    odd = tiny_spec(pos="rope")  # head_dim 8 * 0.25 = 2: fine; 8 * 0.125 = 1: odd
    with pytest.raises(ValueError, match="positive even integer"):
        POS.config_class("rope")(fraction=0.125).validate(odd)
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        PLACEMENT.config_class("deepnorm")().validate(dataclasses.replace(odd, norm="deepnorm"))
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        INIT.config_class("deepnet")().validate(dataclasses.replace(odd, init="deepnet"))


class Scaled(PositionalEncoding):
    """A toy scheme for the test: the embeddings times a constant."""

    def __init__(self, factor: float = 2.0, **_: object) -> None:
        super().__init__()
        self.factor = factor

    def embed(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.factor * x


def test_a_new_option_brings_its_keys_with_its_class(monkeypatch) -> None:
    monkeypatch.setitem(positional.POSITIONAL, "scaled", Scaled)
    assert valid_keys("pos", {"name": "scaled"}) == {"name": None, "factor": 2.0}
    model = tiny_lm(pos="scaled", pos_options={"factor": 3.0})
    assert isinstance(model.pos, Scaled) and model.pos.factor == 3.0
    assert model.config == StackConfig.decoder_only(2)
