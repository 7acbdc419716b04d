"""``tune=lr``'s nested selection (issue 50 item 5): each verdict seed's rate is chosen by a stage-1
grid of its own, on that seed + ``hydra.sweeper.selection_offset``, so that the selection's noise is
in the seeds' spread the verdict's interval estimates; and the simulation that shows the false
better/worse rate on identical variants (``benchmarks/lr_selection/simulate.py``).

The sweeper runs here with a fake launcher that writes each job's ``status.json`` and overrides,
so the jobs it launches, the record it writes and the verdict table ``summarize.py`` makes of them
are the real code's, in seconds."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from helpers.runs import REPO

# stage 1 at two rates: seed 1001's grid prefers 0.001, seed 1002's 0.01 (the same for both arms)
SELECTION = {("0.001", "1001"): 2.0, ("0.01", "1001"): 2.1, ("0.001", "1002"): 2.1, ("0.01", "1002"): 2.0}


def sweeper_class():
    """``TunedLRSweeper`` whose base is Hydra's current ``BasicSweeper``: Hydra's plugin scan (a
    test before this one may run it) executes ``basic_sweeper`` again in place, and a class made
    on the old ``BasicSweeper`` then fails its ``super()`` call."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    import ablate.sweepers.tuned_lr as module

    if BasicSweeper not in module.TunedLRSweeper.__mro__:
        module = importlib.reload(module)
    return module.TunedLRSweeper


def fake_sweep(tmp_path: Path, **settings):
    """A TunedLRSweeper over act=relu,gelu x optim.lr=0.001,0.01 x seeds 1,2 whose launcher writes
    each job as train.py would (overrides, config, status.json) with a loss from ``SELECTION``
    (stage 1) or the seed (stage 2); returns the sweeper, its command, its units and the launched jobs."""
    from ablate.sweepers.lr_selection import LR_KEY
    from ablate.sweepers.tuning_report import Variant

    TunedLRSweeper = sweeper_class()
    _Command = sys.modules[TunedLRSweeper.__module__]._Command
    sweeper = TunedLRSweeper(seeds=[1, 2], extend_edges=0, **settings)
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}, "overrides": {"hydra": []}}})
    launched: list[list[str]] = []

    def launch(batch: list[list[str]]) -> list[JobReturn]:
        returns = []
        for overrides in batch:
            launched.append(overrides)
            items = dict(o.split("=", 1) for o in overrides)
            seed = items["seed"]
            value = SELECTION.get((items[LR_KEY], seed), 2.0 + 0.01 * int(seed) + 0.001 * (items["act"] == "relu"))
            job = tmp_path / "-".join(overrides).replace("=", "_")
            (job / ".hydra").mkdir(parents=True)
            (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
            (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": int(seed)}))
            (job / "status.json").write_text(json.dumps({"status": "completed", "metrics": {"val/loss": value}}))
            cfg = OmegaConf.create({"hydra": {"runtime": {"output_dir": str(job)}}})
            returns.append(JobReturn(overrides=overrides, cfg=None, hydra_cfg=cfg, status=JobStatus.COMPLETED))
        return returns

    sweeper._launch = launch  # type: ignore[method-assign]
    seeds = ["1", "2"]
    cmd = _Command(
        None, LR_KEY, "seed", seeds, "val/loss", False, "test/loss", tmp_path, sweeper._selection_seeds(seeds, "seed")
    )
    variants = [Variant([f"act={a}"], f"act={a}", ["0.001", "0.01"]) for a in ("gelu", "relu")]
    units = sweeper._units(cmd, variants)
    return sweeper, cmd, units, launched


def test_nested_selection_chooses_each_verdict_seeds_rate_on_its_own_grid(tmp_path, capsys):
    """Stage 1 runs each arm's grid once per verdict seed, on seed + 1000 (never a verdict seed);
    stage 2 trains verdict seed s at the rate seed s's grid chose; lr_tuning.json records one
    selection per arm and seed; and the verdict table has one row per arm (the rate is each seed's,
    not an axis) with the rates and the cost of a one-step miss."""
    from ablate.analysis.commands import summarize as summarize_command
    from ablate.sweepers.tuning_report import stage2_table

    sweeper, cmd, units, launched = fake_sweep(tmp_path)
    assert sweeper.selection == "nested"  # the default
    _, stopped = sweeper._stage1(cmd, units)
    assert not stopped
    stage1 = {(o[0], o[1], o[2]) for o in launched}
    assert stage1 == {
        (f"act={a}", f"optim.lr={lr}", f"seed={s}")
        for a in ("gelu", "relu")
        for lr in ("0.001", "0.01")
        for s in ("1001", "1002")
    }
    del launched[:]
    sweeper._stage2(cmd, units)
    assert sorted(launched) == sorted(
        [f"act={a}", f"optim.lr={lr}", f"seed={s}"]
        for a in ("gelu", "relu")
        for lr, s in (("0.001", "1"), ("0.01", "2"))
    )
    assert "act=relu  0.001,0.01  2.0110  2.0210" in stage2_table(units, "val/loss", "optim.lr", "seed", cmd.seeds)

    sweeper._write(cmd, units, stage2_done=True)
    tuning = json.loads((tmp_path / "lr_tuning.json").read_text())
    assert tuning["selection"] == "nested" and tuning["selection_seeds"] == [1001, 1002]
    records = {(r["variant"], r["verdict_seed"]): r for r in tuning["variants"]}
    assert records[("act=relu", 1)]["selection_seed"] == 1001 and records[("act=relu", 1)]["chosen_lr"] == 0.001
    assert records[("act=relu", 2)]["chosen_lr"] == 0.01 and [s["seed"] for s in records[("act=relu", 2)]["seeds"]] == [
        2
    ]
    assert records[("act=relu", 1)]["neighbours"] == [None, pytest.approx(0.1)]  # no rate below the grid's lowest

    capsys.readouterr()
    summarize_command.main(
        [str(tmp_path), "--metric", "val/loss", "--baseline", "act=gelu", "--out", str(tmp_path / "o")]
    )
    out = capsys.readouterr().out
    assert "| act | tuned LR |" in out  # no lr column: each seed has its own
    assert "| relu | 0.001,0.01 (bottom edge; top edge; Δ a step down / up: +0.1 / +0.1) |" in out
    assert "each trained at the rate its own selection grid chose" in out


def test_a_selection_offset_that_lands_on_a_verdict_seed_is_refused(tmp_path):
    """seed s + selection_offset must not be a verdict seed: the rate would be chosen on a run a verdict rests on."""
    from hydra.errors import HydraException

    TunedLRSweeper = sweeper_class()
    sweeper = TunedLRSweeper(selection_offset=1)
    sweeper.config = OmegaConf.create({"hydra": {"overrides": {"hydra": []}}})
    with pytest.raises(HydraException, match=r"selection_offset=1 makes seed=1's selection seed 2, one of the verdict"):
        sweeper._selection_seeds(["1", "2"], "seed")
    with pytest.raises(HydraException, match="give integer seeds, or hydra.sweeper.selection=shared"):
        sweeper._selection_seeds(["a"], "seed")


def test_a_command_adding_verdict_seeds_keeps_the_earlier_seeds_selections(tmp_path):
    """Nested: one record per variant and verdict seed. A second command with seeds 3,4 in the same
    sweep directory keeps seeds 1 and 2's selections (their jobs stay in the verdict) and replaces
    only its own seeds'; a shared selection of the variant replaces all of them."""
    from ablate.sweepers.lr_selection import save_selection

    path = tmp_path / "lr_tuning.json"

    def record(seed: int | None, lr: float) -> dict:
        r = {"variant": "act=relu", "overrides": ["act=relu"], "chosen_lr": lr, "selection_seed": 1000 + (seed or 0)}
        return r if seed is None else {**r, "verdict_seed": seed}

    def chosen() -> dict:
        return {r.get("verdict_seed"): r["chosen_lr"] for r in json.loads(path.read_text())["variants"]}

    save_selection(path, {"variants": [record(1, 1e-3), record(2, 2e-3)]})
    save_selection(path, {"variants": [record(2, 4e-3), record(3, 8e-3)]})
    assert chosen() == {1: 1e-3, 2: 4e-3, 3: 8e-3}
    assert json.loads(path.read_text())["selection_seeds"] == [1001, 1002, 1003]
    save_selection(path, {"variants": [record(None, 1e-2)]})
    assert chosen() == {None: 1e-2}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"selection": "once"}, "hydra.sweeper.selection='once': give nested (each verdict seed's rate chosen"),
        ({"selection_offset": 0}, "hydra.sweeper.selection_offset=0: give the number added to a verdict seed"),
    ],
)
def test_a_bad_selection_setting_is_refused_by_name(monkeypatch, capsys, settings, message):
    """Exit 2 naming the key and what is valid, as every refused sweeper setting."""
    TunedLRSweeper = sweeper_class()

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        TunedLRSweeper(**settings)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_shared_selection_keeps_one_rate_per_arm(tmp_path):
    """selection=shared (the rule before issue 50): one grid per arm on selection_seed 0, every verdict seed at its rate."""
    sweeper, cmd, units, launched = fake_sweep(tmp_path, selection="shared")
    sweeper._stage1(cmd, units)
    assert {o[2] for o in launched} == {"seed=0"} and len(units) == 2


# --------------------------------------------------------------------------- the simulation


def load_simulation():
    spec = importlib.util.spec_from_file_location(
        "lr_selection_simulate", REPO / "benchmarks" / "lr_selection" / "simulate.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_simulation_shows_nested_selection_at_5_percent_and_shared_far_above():
    """Identical arms, 10 verdict seeds, a one-step miss costing one noise SD, 2000 sweeps (the first
    100 through the package's whole verdict path): the nested procedure's false better/worse rate is
    within 2.5 Monte-Carlo SEs of 5%, the shared one's far above it (about 19%)."""
    sim = load_simulation()
    rng = np.random.default_rng(0)
    sweeps = 2000
    se = math.sqrt(0.05 * 0.95 / sweeps)
    nested = sim.false_rate("nested", 1.0, 10, sweeps, rng, checked=100)
    shared = sim.false_rate("shared", 1.0, 10, sweeps, rng, checked=100)
    assert nested <= 0.05 + 2.5 * se, nested
    assert shared >= 0.05 + 10 * se, shared
