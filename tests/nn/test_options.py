"""Each option of each axis has a typed config (ablate.nn.options): a frozen dataclass of its keys
with their defaults, declared without torch, and the option's class takes exactly those keys, with
no defaults of its own (inspect of the imported option, so the two cannot drift); build() makes
its part of a model and validate() is the option's check of the whole spec. The options are read
from the table of axes: a new option is its class, its declaration and its test."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle

import pytest

from ablate.nn.axes import ACT, AXES, INIT, PLACEMENT, POS
from ablate.nn.ffn import ACTIVATIONS, GATES
from ablate.nn.options import GATED_ACTS, PLAIN_ACTS
from ablate.nn.positional import Rotary
from helpers.tiny_models import tiny_spec

OPTIONS = [(axis, name) for axis in AXES for name in axis.options()]


def _keys_taken(axis, name: str) -> dict[str, tuple[object, object]]:
    """``key -> (type, default)`` of the imported option's parameters besides its axis' dimensions."""
    config = axis.config_class(name)
    option = config().option
    signed = getattr(option, config.constructor) if config.constructor else option
    module = vars(importlib.import_module(option.__module__))
    return {
        p.name: (eval(p.annotation, module) if isinstance(p.annotation, str) else p.annotation, p.default)
        for p in inspect.signature(signed).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in (*axis.dimensions, "self")
    }


def test_every_axis_has_options_and_its_default_among_them() -> None:
    for axis in AXES:
        assert axis.options() and axis.default in axis.options(), axis.name
    assert ACT.options() == [*PLAIN_ACTS, *GATED_ACTS]
    assert (list(ACTIVATIONS), list(GATES)) == (list(PLAIN_ACTS), list(GATED_ACTS))  # each FFN's activation


@pytest.mark.parametrize(("axis", "name"), OPTIONS, ids=[f"{a.key}={n}" for a, n in OPTIONS])
def test_every_option_has_a_frozen_typed_config_of_its_own_keys(axis, name) -> None:
    cls = axis.config_class(name)
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    taken = _keys_taken(axis, name)
    assert {k: t for k, (t, _) in taken.items()} == fields  # the class takes the config's keys, of its types
    assert all(default is inspect.Parameter.empty for _, default in taken.values())  # defaults once: the config's
    config = cls()  # every option has defaults for its keys
    assert config.options() == cls.defaults() and (config.axis, config.name) == (axis.name, name)
    if config.options():
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(config, next(iter(config.options())), None)
    with pytest.raises(TypeError):
        cls(not_a_key=1)
    assert pickle.loads(pickle.dumps(config)) == config  # a job's ranks receive it pickled


def test_the_spec_chooses_the_config_and_the_config_builds_the_part() -> None:
    spec = tiny_spec(pos="rope", pos_options={"fraction": 0.5, "base": 500.0}, init="gpt2", init_std=0.05)
    pos = spec.option("pos")
    assert (type(pos).__name__, pos.options()) == ("pos[rope]", {"base": 500.0, "fraction": 0.5})
    built = pos.build(d_model=32, n_heads=4, head_dim=8, max_len=16)
    assert isinstance(built, Rotary) and built.rot_dim == 4 and built.base == 500.0
    assert spec.option("init").build().std == 0.05
    assert tiny_spec(init="xavier", init_std=0.05).option("init").options() == {}  # xavier takes no std
    assert "Su et al. 2021" in (pos.__doc__ or "")  # the declared keys' docstring: its paper


def test_validate_is_the_options_check_of_the_spec() -> None:
    tiny_spec(pos="rope").option("pos").validate(tiny_spec(pos="rope"))
    odd = tiny_spec(pos="rope")  # head_dim 8 * 0.25 = 2: fine; 8 * 0.125 = 1: odd
    with pytest.raises(ValueError, match="positive even integer"):
        POS.config_class("rope")(fraction=0.125).validate(odd)
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        PLACEMENT.config_class("deepnorm")().validate(tiny_spec(norm="deepnorm", init="gpt2"))
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        INIT.config_class("deepnet")().validate(tiny_spec(init="deepnet"))
