"""The classes Hydra builds are read from their source (ablate.source), so that a command line is
typed before torch is imported: for every ``_target_`` a config file names, the keys, their type
hints and the declared rules read by ast equal what inspect reads from the imported class (so the
two readings cannot drift). A hint may be ``Any`` (not checked) only where it names a class that
has no Python source (torch's C types). The options' ``check_options`` are read the same way."""

from __future__ import annotations

import re
import sys
import typing
from pathlib import Path

import pytest
from hydra.utils import get_object

from ablate.config.types import declared_rules, signature
from ablate.source import Unresolved, resolve, source_signature

CONF = Path(__file__).resolve().parents[2] / "conf"
TARGETS = sorted(
    {m for path in CONF.rglob("*.yaml") for m in re.findall(r"_target_:\s*([\w.]+)", path.read_text(encoding="utf-8"))}
)


def _classes(hint: object) -> list[type]:
    """The classes a hint names, its arguments' included."""
    found = [hint] if isinstance(hint, type) else []
    return found + [c for arg in typing.get_args(hint) for c in _classes(arg)]


def _without_source(cls: type) -> bool:
    """A class of a package with no Python source for it (a C extension's); never a builtin's."""
    if cls.__module__.split(".")[0] in sys.stdlib_module_names:
        return False
    try:
        resolve(f"{cls.__module__}.{cls.__qualname__}")
    except Unresolved:
        return True
    return False


def _same(read: object, inspected: object) -> bool:
    """Equal hints; a class read from source is a stand-in of the same module and name."""
    if isinstance(read, type) and isinstance(inspected, type):
        if read is inspected:
            return True
        return (read.__qualname__, read.__module__) == (inspected.__qualname__, inspected.__module__) or (
            read.__qualname__ == inspected.__qualname__ and _without_source(inspected) is False
        )
    read_args, inspected_args = typing.get_args(read), typing.get_args(inspected)
    if typing.get_origin(read) is not None or typing.get_origin(inspected) is not None:
        return (
            typing.get_origin(read) == typing.get_origin(inspected)
            and len(read_args) == len(inspected_args)
            and all(_same(a, b) for a, b in zip(read_args, inspected_args))
        )
    return read == inspected


def test_every_target_of_the_config_files_is_read() -> None:
    assert "lightning.pytorch.Trainer" in TARGETS and "ablate.callbacks.divergence.DivergenceMonitor" in TARGETS
    assert len(TARGETS) >= 15, TARGETS


# the groups the command line types (ablate.run.config): read from source, never imported; Hydra's own
# (conf/hydra: sweepers, launchers) may be imported where the source does not show them
TYPED = sorted(
    {
        m
        for path in CONF.rglob("*.yaml")
        if "hydra" not in path.relative_to(CONF).parts
        for m in re.findall(r"_target_:\s*([\w.]+)", path.read_text(encoding="utf-8"))
    }
)


@pytest.mark.parametrize("target", TYPED)
def test_the_typed_groups_targets_are_read_from_source(target: str) -> None:
    source_signature(target)  # raises Unresolved where it would import the target


@pytest.mark.parametrize("target", TARGETS)
def test_the_source_reading_equals_inspect(target: str) -> None:
    read, read_closed = signature(target)
    inspected, inspected_closed = signature(get_object(target))
    assert read_closed == inspected_closed
    assert list(read) == list(inspected)
    for key, hint in inspected.items():
        if read[key] is typing.Any and hint is not typing.Any:
            assert any(_without_source(c) for c in _classes(hint)), f"{target}({key}): {hint} read as Any"
        else:
            assert _same(read[key], hint), f"{target}({key}): read {read[key]}, inspect {hint}"


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
