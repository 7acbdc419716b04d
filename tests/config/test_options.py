"""Every key of an architecture group applies to the chosen option, or the config is refused
(issue 11): swept over every option of every group, with the keys of every other option.
The valid keys come from the registries, so a new option is covered with no edit here."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from ablate.config.model import model_spec
from ablate.config.options import ConfigError, valid_keys
from ablate.nn.positional import POSITIONAL, PositionalConfig
from helpers.runs import REPO

CONF = REPO / "conf"
GROUPS = ("pos", "norm", "act", "init", "attn")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def check(*overrides: str) -> None:
    model_spec(composed(*overrides), vocab_size=65, max_len=128)


def every_key(group: str) -> dict[str, object]:
    """Every key some option of ``group`` takes, with a value of the right type."""
    keys: dict[str, object] = {}
    for option in options(group):
        node = yaml.safe_load((CONF / group / f"{option}.yaml").read_text())
        for key, default in valid_keys(group, node).items():
            value = default if default not in (None, inspect.Parameter.empty) else 1
            keys.setdefault(key, value)
    keys.update({"alpha_init": 0.5, "std": 0.02, "match_params": False})
    return keys


SELECTORS = ("name", "impl", "placement", "layer")  # keys that choose the option itself
CASES = [
    (group, option, key, value)
    for group in GROUPS
    for option in options(group)
    for key, value in every_key(group).items()
    if key not in SELECTORS
]


@pytest.mark.parametrize(("group", "option", "key", "value"), CASES, ids=[f"{g}={o}+{k}" for g, o, k, _ in CASES])
def test_a_key_applies_to_the_option_or_is_refused_by_name(group: str, option: str, key: str, value: object) -> None:
    node = yaml.safe_load((CONF / group / f"{option}.yaml").read_text())
    valid = valid_keys(group, node)
    prefix = "" if key in node else "+"
    value_text = str(value).lower() if isinstance(value, bool) else str(value)
    override = f"{prefix}{group}.{key}={value_text}"
    extra = ["init=deepnet"] if (group, option) == ("norm", "deepnorm") else []
    extra += ["norm=deepnorm"] if (group, option) == ("init", "deepnet") else []
    if key in valid:
        check(f"{group}={option}", *extra, override)
    else:
        with pytest.raises(ConfigError) as err:
            check(f"{group}={option}", *extra, override)
        assert f"{group}.{key} does not apply to" in str(err.value)
        assert f"its keys are {', '.join(valid)}" in str(err.value)


def test_the_issue_example_is_refused() -> None:
    with pytest.raises(ConfigError, match="pos.fraction does not apply to pos=sinusoidal: its keys are name, base"):
        check("pos=sinusoidal", "+pos.fraction=0.5")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("norm.layer=rmsnorm", "norm.bias=true"), "norm.bias=True does not apply to norm.layer=rmsnorm"),
        (("norm.layer=dyt", "norm.eps=1e-6"), "norm.eps=1e-06 does not apply to norm.layer=dyt"),
        (("+norm.alpha_init=0.5",), "norm.alpha_init does not apply to norm.layer=layernorm"),
        (("act=relu", "+act.match_params=false"), "act.match_params does not apply to act=relu"),
        (("init=xavier", "+init.std=0.01"), "init.std does not apply to init=xavier"),
        (("pos=rope", "pos.fraction=half"), "pos.fraction='half' has the wrong type: expected float"),
        (("act=swiglu", "act.match_params=3"), "act.match_params=3 has the wrong type: expected bool"),
    ],
)
def test_inapplicable_or_mistyped_values_are_refused(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check(*overrides)
    assert message in str(err.value)


def test_layer_options_reach_the_layer() -> None:
    from ablate.nn.transformer import TransformerLM

    spec = model_spec(composed("norm.layer=dyt", "+norm.alpha_init=0.8", "model=tiny"), vocab_size=65, max_len=32)
    alphas = [m.alpha.item() for m in TransformerLM(spec).modules() if hasattr(m, "alpha")]
    assert alphas and all(a == pytest.approx(0.8) for a in alphas)


@pytest.mark.parametrize("option", options("pos"))
def test_pos_yaml_declares_exactly_the_class_options(option: str) -> None:
    """The YAML lists the encoding's options with the class's own defaults (one source of truth:
    the class signature; the YAML repeats it so `pos.base=...` works without a '+')."""
    node = yaml.safe_load((CONF / "pos" / f"{option}.yaml").read_text())
    params = inspect.signature(POSITIONAL[node["name"]]).parameters.values()
    declared = {
        p.name: p.default
        for p in params
        if p.kind is not p.VAR_KEYWORD
        and p.name not in PositionalConfig.DIMENSIONS
        and p.default is not inspect.Parameter.empty
    }
    assert {k: v for k, v in node.items() if k != "name"} == declared


@pytest.mark.integration
def test_a_sweep_with_an_inapplicable_key_fails_before_the_first_job(run_train, tmp_path: Path) -> None:
    """Hydra alone would train the rope jobs and fail the sinusoidal ones later (or, with '++',
    train them ignoring the key): every job's config is checked before any starts."""
    proc = run_train("-m", "model=tiny", "pos=rope,sinusoidal", "++pos.fraction=0.5", check=False)
    assert proc.returncode == 2  # a user error: the message, no traceback (ablate.cli)
    assert "pos=sinusoidal ++pos.fraction=0.5' is invalid, so no job was started" in proc.stderr
    assert "pos.fraction does not apply to pos=sinusoidal" in proc.stderr
    assert not list((tmp_path / "logs").rglob("status.json"))
