"""Every option of every architecture group composes with every other one: an all-pairs set of
configurations, each built from the real Hydra configs and trained a few steps."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.nn import axes
from ablate.nn.transformer import TransformerLM
from ablate.run.config import RunConfig

CONF = Path(__file__).resolve().parents[2] / "conf"
# each axis by its override: a group's first axis by the group (norm=post), a second by its key (norm.layer=rmsnorm)
AXES: dict[str, list] = {axis.label: sorted(axis.options()) for axis in axes.AXES}
AXES["norm.layer"].remove("dyt")  # its alpha is no norm: covered alone (tests/nn/test_registry_suites.py)
AXES["attn.n_kv_heads"] = [1, 2, 4]


def allowed(cfg: dict[str, object]) -> bool:
    """DeepNorm and its init only go together (checked by the config, see test_config)."""
    if "norm" in cfg and "init" in cfg:
        return (cfg["norm"] == "deepnorm") == (cfg["init"] == "deepnet")
    return True


def all_pairs(axes: dict[str, list]) -> list[dict[str, object]]:
    """A greedy covering array: every allowed pair of values of two axes appears in some row."""
    names = list(axes)
    uncovered = {
        ((a, va), (b, vb))
        for a, b in itertools.combinations(names, 2)
        for va in axes[a]
        for vb in axes[b]
        if allowed({a: va, b: vb})
    }
    rows = []
    while uncovered:
        (a, va), (b, vb) = min(uncovered, key=repr)
        row = {a: va, b: vb}
        for name in names:  # fill the other axes with the value covering most new pairs
            if name in row:
                continue

            def gain(v, row=row, name=name, uncovered=uncovered):  # bound now: used in this iteration only
                trial = {**row, name: v}
                return (
                    -1
                    if not allowed(trial)
                    else sum(
                        ((n, trial[n]), (name, v)) in uncovered or ((name, v), (n, trial[n])) in uncovered for n in row
                    )
                )

            row[name] = max(axes[name], key=gain)
        uncovered -= {((x, row[x]), (y, row[y])) for x, y in itertools.combinations(names, 2)}
        rows.append(row)
    return rows


ROWS = all_pairs(AXES)


def test_covering_array_covers_every_pair():
    assert len(ROWS) < 80
    for a, b in itertools.combinations(AXES, 2):
        for va in AXES[a]:
            for vb in AXES[b]:
                if allowed({a: va, b: vb}):
                    assert any(r[a] == va and r[b] == vb for r in ROWS), (a, va, b, vb)


@pytest.fixture(scope="module")
def hydra_init():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


@pytest.mark.parametrize("row", ROWS, ids=lambda r: ",".join(f"{k}={v}" for k, v in r.items()))
def test_option_pair_trains(hydra_init, row):
    overrides = [f"{k}={v}" for k, v in row.items()] + ["model=tiny", "model.d_model=32", "model.n_heads=4"]
    cfg = compose(config_name="train", overrides=overrides)
    spec = RunConfig.from_hydra(cfg).model_spec(vocab_size=17, max_len=12)
    torch.manual_seed(0)
    model = TransformerLM(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.randint(0, 17, (4, 12))
    y = torch.roll(x, -1, dims=1)
    losses = []
    for _ in range(8):
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0], f"8 steps on one batch did not lower the loss: {losses}"
