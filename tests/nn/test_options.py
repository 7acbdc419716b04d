"""Each option of each axis has a typed config (ablate.nn.options): a frozen dataclass of its keys
with its own defaults, read from the source of the option's module without importing it, and
equal to what inspect reads from the imported option (so the two readings cannot drift); build()
makes its part of a model and validate() asks the option whether it can serve the whole spec. A new
option brings its keys with its class and nothing else."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pickle
import sys
import textwrap
import typing

import pytest

from ablate.config.types import signature
from ablate.nn.axes import AXES, INIT, PLACEMENT, POS
from ablate.nn.options import option_configs
from ablate.nn.positional import POSITIONAL, Rotary
from helpers.tiny_models import tiny_spec

OPTIONS = [(axis, name) for axis in AXES for name in axis.options()]


def _inspected(axis, name: str) -> dict[str, tuple[object, object]]:
    """``key -> (type, default)`` of the imported option, by inspect."""
    module, _, registry = axis.registry.partition(":")
    option = getattr(importlib.import_module(f"ablate.nn.{module}"), registry)[name]
    signed = getattr(option, axis.constructor) if axis.constructor else option
    hints = signature(signed)[0]  # each annotation resolved on its own (a TYPE_CHECKING name: Any)
    return {
        p.name: (hints.get(p.name, typing.Any), p.default)
        for p in inspect.signature(signed).parameters.values()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in (*axis.dimensions, "self")
    }


def test_every_axis_has_options_and_its_default_among_them() -> None:
    for axis in AXES:
        assert axis.default in axis.options(), axis.name
    assert POS.options() == list(POSITIONAL)  # the registry's order


@pytest.mark.parametrize(("axis", "name"), OPTIONS, ids=[f"{a.key}={n}" for a, n in OPTIONS])
def test_every_option_has_a_frozen_typed_config_of_its_own_keys(axis, name) -> None:
    cls = axis.config_class(name)
    assert cls is axis.config_class(name)  # made once
    fields = {f.name: (f.type, f.default) for f in dataclasses.fields(cls)}
    assert fields == _inspected(axis, name)  # read from the source: what the imported option takes
    config = cls()  # every option has defaults for its keys
    assert config.options() == cls.defaults() and config.name == name
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
    assert "Su et al. 2021" in (pos.__doc__ or "")  # the option's docstring: its paper


def test_validate_asks_the_option() -> None:
    tiny_spec(pos="rope").option("pos").validate(tiny_spec(pos="rope"))
    odd = tiny_spec(pos="rope")  # head_dim 8 * 0.25 = 2: fine; 8 * 0.125 = 1: odd
    with pytest.raises(ValueError, match="positive even integer"):
        POS.config_class("rope")(fraction=0.125).validate(odd)
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        PLACEMENT.config_class("deepnorm")().validate(tiny_spec(norm="deepnorm", init="gpt2"))
    with pytest.raises(ValueError, match="norm=deepnorm init=deepnet"):
        INIT.config_class("deepnet")().validate(tiny_spec(init="deepnet"))


def test_a_new_option_brings_its_keys_with_its_class(tmp_path, monkeypatch) -> None:
    """What the reader takes from a module's source: a registry literal (with dict.fromkeys), a class's
    constructor through its bases, a factory's parameters, annotations and literal defaults."""
    (tmp_path / "toy_options.py").write_text(
        textwrap.dedent('''
            class Base:
                def __init__(self, d_model: int, factor: float = 2.0, **_: object) -> None:
                    """Scales."""
            class Scaled(Base):
                """Scales by a factor (a toy)."""
            def shifted(d_model: int, shift: int = 1, on: bool | None = None) -> None:
                """Shifts."""
            NAMES = {"a": 1, "b": 2}
            TOYS = {"scaled": Scaled, **dict.fromkeys(NAMES, shifted)}
        ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    configs = option_configs("toy", "toy_options:TOYS", None, ("d_model",))
    assert list(configs) == ["scaled", "a", "b"]
    assert (
        configs["scaled"]().options() == {"factor": 2.0} and configs["scaled"].__doc__ == "Scales by a factor (a toy)."
    )
    assert {f.name: f.type for f in dataclasses.fields(configs["b"])} == {"shift": int, "on": bool | None}
    sys.modules.pop("toy_options", None)
