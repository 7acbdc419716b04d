"""Every key of an architecture group applies to the chosen option, or the config is refused
(issue 11): swept over every option of every group, with the keys of every other option. The valid
keys come from the options' own signatures (ablate.nn.axes.AXES), so a new option is covered with
no edit here. Hydra refuses a key the option's node does not have (ablate.cli.unknown_key words
it); one appended with '+', or a second axis' key the chosen option does not take, is refused by
ablate.nn.axes.typed_options."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from ablate.cli.unknown_key import composition_error_message
from ablate.errors import ConfigError
from ablate.nn.axes import ARCHITECTURE_GROUPS, NORM_LAYER, group_axes, group_node
from ablate.run.config import RunConfig
from helpers.runs import REPO

CONF = REPO / "conf"


def composed(*overrides: str):
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="train", overrides=list(overrides))
    except HydraException as err:  # what ablate.cli prints for it
        raise ConfigError(composition_error_message(err, CONF)) from None


def check(*overrides: str):
    return RunConfig.from_hydra(composed(*overrides)).model_spec(vocab_size=65, max_len=128)


def every_key(group: str) -> dict[str, object]:
    """Every key some option of ``group`` takes, with a value of its type."""
    keys: dict[str, object] = {}
    for axis in group_axes(group):
        for name in axis.options():
            keys.update({k: 1 if v is None else v for k, v in axis.config_class(name).defaults().items()})
    return keys | {"alpha_init": 0.5, "std": 0.03, "match_params": False}


CASES = [
    (group, option, key, value)
    for group in ARCHITECTURE_GROUPS
    for option in group_axes(group)[0].options()
    for key, value in every_key(group).items()
]


@pytest.mark.parametrize(("group", "option", "key", "value"), CASES, ids=[f"{g}={o}+{k}" for g, o, k, _ in CASES])
def test_a_key_applies_to_the_option_or_is_refused_by_name(group: str, option: str, key: str, value: object) -> None:
    first, *others = group_axes(group)
    taken = {*first.config_class(option).defaults(), *(k for a in others for k in a.config_class(a.default).defaults())}
    in_node = key in {f for f in group_node(group, option).__dataclass_fields__}
    value_text = str(value).lower() if isinstance(value, bool) else str(value)
    override = f"{'' if in_node else '+'}{group}.{key}={value_text}"
    extra = ["init=deepnet"] if (group, option) == ("norm", "deepnorm") else []
    extra += ["norm=deepnorm"] if (group, option) == ("init", "deepnet") else []
    if key in taken:
        assert check(f"{group}={option}", *extra, override)
    else:
        with pytest.raises(ConfigError) as err:
            check(f"{group}={option}", *extra, override)
        assert f"{group}.{key}" in str(err.value) and "does not apply to" in str(err.value)


def test_the_issue_example_is_refused() -> None:
    with pytest.raises(ConfigError, match="pos.fraction does not apply to pos=sinusoidal: its keys are name, base"):
        check("pos=sinusoidal", "+pos.fraction=0.5")
    with pytest.raises(ConfigError, match="pos.fraction is not a key of pos; valid keys: base, name"):
        check("pos=sinusoidal", "pos.fraction=0.5")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("norm.layer=rmsnorm", "norm.bias=true"), "norm.bias=True does not apply to norm.layer=rmsnorm"),
        (("norm.layer=dyt", "norm.eps=1e-6"), "norm.eps=1e-06 does not apply to norm.layer=dyt"),
        (("norm.alpha_init=0.5",), "norm.alpha_init=0.5 does not apply to norm.layer=layernorm"),
        (("act=relu", "act.match_params=false"), "'act.match_params' is a key of act=bilinear, act=geglu"),
        (("init=xavier", "+init.std=0.01"), "init.std does not apply to init=xavier"),
        (("pos=rope", "pos.fraction=half"), "pos.fraction='half' has the wrong type: expected null or a number"),
        (
            ("act=swiglu", "act.match_params=maybe"),
            "act.match_params='maybe' has the wrong type: expected null or true",
        ),
        (
            ("norm.layer=batchnorm",),
            "unknown norm.layer='batchnorm'; valid options: " + ", ".join(NORM_LAYER.options()),
        ),
    ],
)
def test_inapplicable_or_mistyped_values_are_refused(overrides: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check(*overrides)
    assert message in str(err.value)


def test_an_options_keys_need_no_plus_and_reach_the_layer() -> None:
    from ablate.nn.transformer import TransformerLM

    for plus in ("", "+"):  # '+' on a key the node has (null) still works
        cfg = RunConfig.from_hydra(composed("norm.layer=dyt", f"{plus}norm.alpha_init=0.8", "model=tiny"))
        alphas = [
            m.alpha_init  # each site's alpha starts at alpha_init / RMS(its input): the scale contract
            for m in TransformerLM(cfg.model_spec(vocab_size=65, max_len=32)).modules()
            if hasattr(m, "alpha_init")
        ]
        assert alphas and all(a == pytest.approx(0.8) for a in alphas)


@pytest.mark.integration
def test_a_sweep_with_an_inapplicable_key_fails_before_the_first_job(run_train, tmp_path: Path) -> None:
    """Hydra alone would train the rope jobs and fail the sinusoidal ones later (or, with '++',
    train them ignoring the key): every job's config is checked before any starts."""
    proc = run_train("-m", "model=tiny", "pos=rope,sinusoidal", "++pos.fraction=0.5", check=False)
    assert proc.returncode == 2  # a user error: the message, no traceback (ablate.cli)
    assert "pos=sinusoidal ++pos.fraction=0.5' is invalid, so no job was started" in proc.stderr
    assert "pos.fraction does not apply to pos=sinusoidal" in proc.stderr
    assert not list((tmp_path / "logs").rglob("status.json"))
