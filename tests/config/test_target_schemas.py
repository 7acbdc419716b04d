"""The keys of the classes Hydra builds are declared (ablate.config.targets, by ``_target_`` in
ablate.run.config.SCHEMAS), so that a command line is
typed before torch is imported: every target the typed groups name is declared, and each declaration
equals what inspect reads from the imported class (its keys, closed, their type hints and the message a
wrong value gets), so a library upgrade that changes one fails here instead of drifting. The declared
rules are the classes' own."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from hydra.utils import get_object

from ablate.config.types import dataclass_hints, declared_rules, describe, signature
from ablate.errors import ConfigError
from ablate.run.config import SCHEMAS, TargetConfig

CONF = Path(__file__).resolve().parents[2] / "conf"
TARGETS = sorted(
    {m for path in CONF.rglob("*.yaml") for m in re.findall(r"_target_:\s*([\w.]+)", path.read_text(encoding="utf-8"))}
)
# the targets the run config types (ablate.run.config): the node of a data or trainer option, each
# callback of a callbacks option (a target nested deeper, trainer.strategy's, is Hydra's to build)
TYPED = sorted(
    {
        m
        for group, indent in (("data", ""), ("trainer", ""), ("callbacks", "  "))
        for path in (CONF / group).glob("*.yaml")
        for m in re.findall(rf"^{indent}_target_:\s*([\w.]+)", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
)


def _canonical(hint: Any) -> Any:
    """A hint as a comparable value: ``X | None`` as ``Optional[X]``, a class by its name (the
    declarations stand in for Lightning's classes by name)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "Literal", tuple((type(a), a) for a in typing.get_args(hint))
    if origin is not None:
        origin = typing.Union if origin is types.UnionType else origin
        return _canonical(origin), tuple(_canonical(a) for a in typing.get_args(hint))
    return hint.__name__ if isinstance(hint, type) else hint


def test_every_target_the_run_config_types_is_declared() -> None:
    assert "lightning.pytorch.Trainer" in TARGETS and "ablate.callbacks.divergence.DivergenceMonitor" in TARGETS
    assert len(TARGETS) >= 15, TARGETS
    assert "lightning.pytorch.callbacks.ModelCheckpoint" in TYPED and "ablate.data.lm_data.TextFiles" in TYPED
    assert set(TYPED) == set(SCHEMAS)


@pytest.mark.parametrize("target", sorted(SCHEMAS))
def test_the_declaration_equals_inspect(target: str) -> None:
    declared = dataclass_hints(SCHEMAS[target])
    inspected, closed = signature(get_object(target))
    assert closed
    assert declared.keys() == inspected.keys()
    for key, hint in inspected.items():
        assert _canonical(declared[key]) == _canonical(hint), (
            f"{target}({key}): declared {declared[key]}, inspect {hint}"
        )
        assert describe(declared[key]) == describe(hint)
    assert declared_rules(SCHEMAS[target]).keys() == declared_rules(target).keys()


def test_a_declared_target_is_not_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(target: str) -> None:
        raise AssertionError(f"{target} imported")

    monkeypatch.setattr("hydra.utils.get_object", refuse)
    for target in SCHEMAS:
        TargetConfig.from_node("node", {"_target_": target})
    with pytest.raises(ConfigError, match=r"trainer.max_step is not a key of trainer \(did you mean trainer.max_steps"):
        TargetConfig.from_node("trainer", {"_target_": "lightning.pytorch.Trainer", "max_step": 1})
    with pytest.raises(ConfigError, match="trainer.accelerator=5 has the wrong type: expected a string or Accelerator"):
        TargetConfig.from_node("trainer", {"_target_": "lightning.pytorch.Trainer", "accelerator": 5})


def test_an_undeclared_target_is_imported_and_inspected() -> None:
    target = "lightning.pytorch.profilers.SimpleProfiler"
    assert target not in SCHEMAS
    with pytest.raises(ConfigError, match="valid keys: dirpath, extended, filename$"):
        TargetConfig.from_node("profiler", {"_target_": target, "foo": 1})


@pytest.mark.parametrize("target", [t for t in TARGETS if isinstance(get_object(t), type)])
def test_the_declared_rules_are_the_classes_own(target: str) -> None:
    cls = get_object(target)
    expected = {**getattr(cls, "CONFIG_RULES", {})}
    expected.update(
        {k: (None, f"one of {', '.join(map(str, v))}") for k, v in getattr(cls, "CONFIG_CHOICES", {}).items()}
    )
    assert {k: valid for k, (_, valid) in declared_rules(target).items()} == {k: v for k, (_, v) in expected.items()}


def test_a_declared_rule_is_the_same_predicate() -> None:
    rules = declared_rules("ablate.callbacks.divergence.DivergenceMonitor")
    assert not rules["max_ratio"][0](-1) and rules["max_ratio"][0](None) and rules["max_ratio"][0](2.5)
    assert not rules["check_every_n_steps"][0](0) and rules["check_every_n_steps"][0](None)
    choices = declared_rules("ablate.data.lm_data.TinyShakespeare")["splits"][0]
    assert choices("blocks") and not choices("foo")
