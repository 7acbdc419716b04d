"""Each variant at its own tuned learning rate, in one command (``tune=lr``).

    python train.py -m experiment=shazeer2020_glu_cpu act=relu,gelu,swiglu tune=lr

A Hydra sweeper (:class:`TunedLRSweeper`, Hydra's ``BasicSweeper`` with two stages) that runs two
launcher batches:

1. **Stage 1, the grid**: every variant (each combination of the sweep's other values) at each
   learning rate of a log-spaced grid, with one seed: the *selection seed*
   ``hydra.sweeper.selection_seed`` (default 0), which must not be one of the verdict seeds (a
   collision is refused), so that the rate is chosen on a run that no verdict rests on. The grid is the
   sweep's own ``optim.lr=a,b,c`` when it gives one, else ``hydra.sweeper.num_lrs`` values
   (default 5) a factor ``hydra.sweeper.lr_factor`` (default 2) apart, centred on the variant's
   configured ``optim.lr``. ``hydra.sweeper.halving.rungs=[0.25,0.5]`` runs it by successive
   halving instead (:mod:`ablate.sweepers.halving`; default off: the full grid).
2. **Stage 2, the seeds**: every variant at its best learning rate -- the best final ``metric``
   (``optimized_metric``, default ``val/loss``: lowest; BLEU-like metrics: highest) recorded in
   the job's ``status.json``; a diverged or crashed job ranks last -- with every seed. The seeds
   are the sweep's own ``seed=1,2,3`` when it gives them (command line, or an experiment's
   ``hydra.sweeper.params``), else ``hydra.sweeper.seeds`` (default ``[1, 2, 3]``). Stage 2 trains
   every one of them fresh: the selection job is not reused, so no verdict seed is the run that
   won the selection (which would bias it by the selection's winner's curse); summaries and
   figures (:func:`ablate.analysis.runs.at_tuned_rates`) leave the selection seed's jobs out.
   ``hydra.sweeper.seeds=auto`` (with ``hydra.sweeper.baseline=<axis=value>`` and
   ``hydra.sweeper.margin=<δ>``) adds the seeds in batches instead, up to each of
   ``hydra.sweeper.looks`` (default 3, 5, 7, 10 seeds), and stops a comparison once the
   group-sequential verdict (:mod:`ablate.analysis.sequential`, alpha spent over the looks,
   Bonferroni over the variants) is ``better``, ``worse`` or ``equivalent``.

Both stages go through ``self.launcher.launch``: any launcher works (basic, joblib, submitit), and
the jobs are ordinary jobs of the sweep directory named by their overrides (``optim.lr=...``,
``seed=...``), so re-running the same command skips the finished jobs of both stages
(:func:`ablate.run.train.previous_outcome`) and ``scripts/summarize.py`` shows the learning rate of each
variant as an axis. The selection goes to ``<sweep dir>/lr_tuning.json`` and is printed as a table.
A chosen learning rate at the edge of the grid is flagged, with the override that extends the
grid; a variant whose every learning rate diverged or crashed is reported and gets no stage 2 (the
sweep goes on: the sweep-end report, :mod:`ablate.sweepers.sweep_report`, owns crashes and exit codes).

The grid, the selection rule, reading a job's outcome and the ``lr_tuning.json`` record are in
:mod:`ablate.sweepers.lr_selection`; this module holds the sweeper.

Hydra only instantiates sweepers from the ``hydra_plugins`` namespace: ``_target_`` in
``conf/hydra/sweeper/tuned_lr.yaml`` is the subclass in ``hydra_plugins/ablate_sweepers/tuned_lr.py``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from omegaconf import OmegaConf

from ablate.callbacks.stop_file import STOP_FILE, stop_requested
from ablate.compat import BasicSweeper, sweeper_params_overrides
from ablate.sweepers import halving as sh
from ablate.sweepers.lr_selection import (
    LR_KEY,
    LRResult,
    Selection,
    format_lr,
    job_dir_of,
    log_grid,
    read_outcome,
    save_selection,
    select_lr,
    validation_as_test_warning,
)
from ablate.sweepers.validating import ValidatingSweeperMixin

log = logging.getLogger(__name__)

SEED_KEY = "seed"
RESULT_FILE = "lr_tuning.json"


# --------------------------------------------------------------------------- the sweeper


def _dedupe(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _number(text: str) -> Any:
    """A seed or value for JSON: ``"3"`` -> 3, anything else as it is."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return text


def _cell(value: float | None, status: str) -> str:
    return f"{value:.4f}" if value is not None else status


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def auto_settings(
    seeds: Any, baseline: str | None, margin: float | None, looks: Sequence[int], spending: str
) -> tuple[str, float, list[int], str] | None:
    """``hydra.sweeper.seeds=auto``'s settings, checked: (baseline, margin, looks, spending), or
    None when the seeds are a list."""
    if not (isinstance(seeds, str) and seeds.strip().lower() == "auto"):
        return None
    from ablate.analysis.sequential import look_levels

    if not baseline or margin is None or not float(margin) > 0:
        raise ValueError(
            "hydra.sweeper.seeds=auto adds seeds until each variant is decided against a "
            "baseline: give hydra.sweeper.baseline=AXIS=VALUE and hydra.sweeper.margin=DELTA "
            "(the smallest difference of interest, > 0)"
        )
    try:
        look_levels(list(looks), kind=spending)
    except ValueError as err:
        raise ValueError(f"hydra.sweeper.looks / spending: {err}") from None
    return str(baseline), float(margin), [int(n) for n in looks], spending


@dataclass
class _Variant:
    overrides: list[str]
    label: str
    grid: list[str]  # learning rates as their overrides spell them, ascending
    results: list[LRResult] = field(default_factory=list)  # stage 1: one per learning rate
    selection: Selection = field(default_factory=lambda: Selection(None))  # stage 1's choice
    seeds: list[dict[str, Any]] = field(default_factory=list)  # stage 2: one record per seed
    decision: Any = None  # seeds=auto: the sequential verdict against the baseline
    rung_steps: tuple[int, ...] = ()  # halving: the steps each rate may be cut at, then trainer.max_steps
    tracks: list[sh.RateTrack] = field(default_factory=list)  # halving: each rate through the rungs

    @property
    def chosen_text(self) -> str:
        """The chosen learning rate as its override spells it (stage 2 launches only chosen variants)."""
        assert self.selection.chosen is not None, f"{self.label}: no learning rate was chosen"
        return self.selection.chosen.text


class TunedLRSweeper(ValidatingSweeperMixin, BasicSweeper):
    """Stage 1: each variant over a learning-rate grid (one seed); stage 2: each variant at its
    best learning rate with every seed. See the module docstring."""

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        num_lrs: int = 5,
        lr_factor: float = 2.0,
        seeds: Sequence[Any] | str = (1, 2, 3),
        metric: str | None = None,
        selection_seed: Any = 0,
        baseline: str | None = None,
        margin: float | None = None,
        looks: Sequence[int] = (3, 5, 7, 10),
        spending: str = "kim-demets",
        halving: Any = None,
        verdict_metric: str | None = None,
        margin_basis: str | None = None,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.rungs = sh.check_rungs((halving or {}).get("rungs"))  # () : the full grid (ablate.sweepers.halving)
        if not (isinstance(num_lrs, int) and num_lrs >= 1):
            raise ValueError(f"hydra.sweeper.num_lrs={num_lrs!r}: give a number of learning rates >= 1")
        if not (isinstance(lr_factor, (int, float)) and lr_factor > 1):
            raise ValueError(
                f"hydra.sweeper.lr_factor={lr_factor!r}: give the ratio of neighbouring learning rates, > 1"
            )
        auto = auto_settings(seeds, baseline, margin, looks, spending)
        self.auto = auto is not None
        # the comparison to declare before stage 2 (ablate.analysis.plan); seeds=auto decides it
        self.baseline: str | None = baseline
        self.margin: float | None = None if margin is None else float(margin)
        self.looks, self.spending = [int(n) for n in looks], spending
        if auto is not None:
            self.baseline, self.margin, self.looks, self.spending = auto
            seeds = list(range(1, self.looks[-1] + 1))
        if seeds is None or isinstance(seeds, (str, int)) or not list(seeds):
            raise ValueError(f"hydra.sweeper.seeds={seeds!r}: give a list of seeds, e.g. [1,2,3]")
        self.num_lrs, self.lr_factor = num_lrs, float(lr_factor)
        self.default_seeds = _dedupe(str(s) for s in seeds)
        self.metric = metric
        if selection_seed is None or isinstance(selection_seed, bool) or not str(selection_seed).strip():
            raise ValueError(
                f"hydra.sweeper.selection_seed={selection_seed!r}: give the seed of the stage-1 runs, "
                "one that is not among the verdict seeds (default 0)"
            )
        self.selection_seed = str(selection_seed)
        self.verdict_metric = verdict_metric
        self.margin_basis = margin_basis
        self.job_idx = 0

    # -- what to run

    def _grid(self, lr: Override | None, variant: list[str]) -> list[str]:
        if lr is not None and lr.is_sweep_override():
            if not lr.is_discrete_sweep():
                raise HydraException(
                    f"tuned_lr: {lr.input_line}: give the grid as a list of learning rates, "
                    "e.g. optim.lr=1e-4,3e-4,1e-3"
                )
            texts = _dedupe(lr.sweep_string_iterator())
            try:
                return sorted(texts, key=float)
            except ValueError:
                raise HydraException(f"tuned_lr: {lr.input_line}: the learning rates must be numbers") from None
        if lr is not None:
            center = float(lr.get_value_element_as_str())
        else:
            assert self.hydra_context is not None and self.config is not None
            composed = self.hydra_context.config_loader.load_sweep_config(self.config, list(variant))
            center = float(OmegaConf.select(composed, LR_KEY))
        return log_grid(center, self.num_lrs, self.lr_factor)

    def _say_what_the_grid_ignores(self, lr: Override | None, arguments: list[str]) -> None:
        """An explicit grid (``optim.lr=a,b,c``, the command line's or an experiment's
        ``hydra.sweeper.params``) makes ``num_lrs``/``lr_factor`` moot: say so when they were typed,
        and name where the grid came from, so a command-line setting is never silently dropped."""
        if lr is None or not lr.is_sweep_override():
            return
        assert self.config is not None
        typed = [str(o) for o in OmegaConf.select(self.config, "hydra.overrides.hydra", default=[]) or []]
        moot = [
            o for o in typed if o.split("=", 1)[0].lstrip("+") in ("hydra.sweeper.num_lrs", "hydra.sweeper.lr_factor")
        ]
        if not moot:
            return
        source = (
            "the command line's"
            if any(a.split("=", 1)[0].lstrip("+") == LR_KEY for a in arguments)
            else "the config's (hydra.sweeper.params of an experiment or preset)"
        )
        log.warning(
            "tuned_lr: %s ignored: the grid is %s %s; give optim.lr=a,b,c on the command line to change it",
            " and ".join(moot),
            source,
            lr.input_line,
        )

    def _seeds(self, seed: Override | None) -> list[str]:
        if self.auto:
            if seed is not None:
                log.warning(
                    "tuned_lr: hydra.sweeper.seeds=auto chooses the seeds (1..%d): %s is ignored",
                    self.looks[-1],
                    seed.input_line,
                )
            return list(self.default_seeds)
        if seed is None:
            return list(self.default_seeds)
        if seed.is_sweep_override():
            if not seed.is_discrete_sweep():
                raise HydraException(f"tuned_lr: {seed.input_line}: give the seeds as a list, e.g. seed=1,2,3")
            return _dedupe(seed.sweep_string_iterator())
        return [seed.get_value_element_as_str()]

    def _rung_steps(self, v: _Variant) -> tuple[int, ...]:
        """``hydra.sweeper.halving.rungs`` as steps of this variant's run, checked (exit 2 naming the key)."""
        assert self.hydra_context is not None and self.config is not None
        from ablate import cli
        from ablate.config.options import ConfigError

        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(v.overrides))
            return sh.config_rung_steps(cfg, self.rungs, v.label)
        except ValueError as err:
            cli.report_user_error(ConfigError(str(err)))
            raise  # not reached

    def _interrupted(self) -> bool:
        """Ctrl-C in a worker-process sweep (:mod:`ablate.sweepers.sweep_stop`): the jobs just launched may have
        stopped early, so nothing is chosen or decided from them (stage 2 stays ``pending``)."""
        assert self.config is not None
        return stop_requested(Path(str(self.config.hydra.sweep.dir)) / STOP_FILE)

    def _launch(self, batch: list[list[str]]) -> list[JobReturn]:
        returns: list[JobReturn] = []
        if not batch:
            return returns
        assert self.launcher is not None
        for chunk in self.split_overrides_to_chunks(batch, self.max_batch_size):
            self.validate_batch_is_legal(chunk)
            returns.extend(self.launcher.launch(chunk, initial_job_idx=self.job_idx))
            self.job_idx += len(chunk)
        return returns

    # -- the sweep

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        self.check_before_sweep()  # before multirun.yaml is written: a refused command changes nothing
        from ablate.analysis.runs import higher_is_better  # pandas: imported when a sweep runs, not at plugin scan

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*sweeper_params_overrides(self), *arguments])
        last = {o.key_or_group: o for o in overrides}  # a later override of a key wins (command line over params)
        lr, seed = last.get(LR_KEY), last.get(SEED_KEY)
        for special in (lr, seed):
            if special is not None and special.is_delete():
                raise HydraException(f"tuned_lr sets {special.key_or_group} itself: remove {special.input_line}")
        lr_name = lr.get_key_element() if lr is not None else LR_KEY
        seed_name = seed.get_key_element() if seed is not None else SEED_KEY
        self._say_what_the_grid_ignores(lr, arguments)
        rest = [o for o in overrides if o.key_or_group not in (LR_KEY, SEED_KEY)]
        swept = {o.get_key_element() for o in rest if o.is_sweep_override()}
        seeds = self._seeds(seed)
        if self.selection_seed in seeds:
            raise HydraException(
                f"tuned_lr: hydra.sweeper.selection_seed={self.selection_seed} is one of the verdict seeds "
                f"({seed_name}={','.join(seeds)}): the learning rate would be chosen on a run a verdict rests on, "
                "which biases it towards that variant. Choose a selection seed outside them, e.g. "
                f"hydra.sweeper.selection_seed={_free_seed(seeds)}"
            )
        select = self.selection_seed
        metric = str(self.metric or self.config.get("optimized_metric") or "val/loss")
        higher = higher_is_better(metric)
        verdict_metric = held_out_metric(metric, self.verdict_metric)
        shared_text = validation_as_test_warning(self.config)
        if shared_text:
            log.warning(shared_text)

        variants = []
        for items in self.split_arguments(rest, None)[0]:
            label = ",".join(i for i in items if i.split("=", 1)[0] in swept) or "all"
            variants.append(_Variant(list(items), label, self._grid(lr, list(items))))

        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        extend_also = f"hydra.sweep.dir={sweep_dir}"

        # stage 1: every variant at every learning rate of its grid, the selection seed
        for v in variants if self.rungs else []:  # checked before any job starts
            v.rung_steps = self._rung_steps(v)
        plan = [(v, text) for v in variants for text in v.grid]
        print(
            f"LR tuning, stage 1: {len(variants)} variant(s) x {len(variants[0].grid)} learning rates, "
            f"{seed_name}={select} (the selection seed, no verdict rests on it)"
            + (f", successive halving at {','.join(f'{r:g}' for r in self.rungs)} of the steps" if self.rungs else ""),
            flush=True,
        )
        if self.rungs:
            stage1, stopped = sh.run_stage1(
                variants, self._launch, self._interrupted, metric, higher, lr_name, seed_name, select
            )
        else:
            stage1 = self._launch([[*v.overrides, f"{lr_name}={text}", f"{seed_name}={select}"] for v, text in plan])
            stopped = self._interrupted()
        if stopped:
            # an incomplete grid chooses nothing: no learning rate is recorded from it
            print("LR tuning interrupted in stage 1: nothing chosen; re-run the same command to resume", flush=True)
            return [stage1]
        for v in variants:
            v.results = [t.result(v.rung_steps[-1]) for t in v.tracks] if self.rungs else []
        for (v, text), ret in zip(plan, [] if self.rungs else stage1):
            job_dir = job_dir_of(ret)
            status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
            v.results.append(LRResult(float(text), text, status, value, job_dir.name if job_dir else None))
        for v in variants:
            v.selection = select_lr(
                v.results, higher_is_better=higher, factor=self.lr_factor, lr_key=lr_name, also=extend_also
            )
        print(self._stage1_table(variants, metric, higher, seed_name, select), flush=True)
        self._write(sweep_dir, variants, metric, higher, seeds, lr, stage2_done=False)
        self._declare(sweep_dir, metric, verdict_metric, seeds, seed_name)  # the verdict's rule, before its data

        if self.auto:  # stage 2 in batches of seeds, until every comparison is decided
            stage2 = self._sequential_stage2(variants, verdict_metric, lr_name, seed_name, seeds)
            path = self._write(sweep_dir, variants, metric, higher, seeds, lr, stage2_done=not self._interrupted())
            print(f"LR tuning: {path}", flush=True)
            for ret in [*stage1, *stage2]:
                _ = ret.return_value
            return [stage1, stage2]

        # stage 2: every variant with a usable learning rate at that rate, every verdict seed, fresh
        plan2 = [(v, s) for v in variants if v.selection.chosen is not None for s in seeds]
        if plan2:
            print(
                f"LR tuning, stage 2: {len({id(v) for v, _ in plan2})} variant(s) at their chosen learning rate, "
                f"{seed_name}={','.join(seeds)}",
                flush=True,
            )
        stage2 = self._launch([[*v.overrides, f"{lr_name}={v.chosen_text}", f"{seed_name}={s}"] for v, s in plan2])
        for v in variants:
            v.seeds = []
        for (v, s), ret in zip(plan2, stage2):
            job_dir = job_dir_of(ret)
            status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
            v.seeds.append(
                {"seed": _number(s), "status": status, "value": value, "job": job_dir.name if job_dir else None}
            )
        path = self._write(sweep_dir, variants, metric, higher, seeds, lr, stage2_done=not self._interrupted())
        print(self._stage2_table(variants, metric, lr_name, seed_name, seeds), flush=True)
        print(f"LR tuning: {path}", flush=True)

        for ret in [*stage1, *stage2]:
            _ = ret.return_value  # as BasicSweeper: a job that failed inside Hydra raises here, once all have run
        return [stage1, stage2]

    def _sequential_stage2(
        self, variants: list[_Variant], metric: str, lr_name: str, seed_name: str, seeds: list[str]
    ) -> list[JobReturn]:
        """``seeds=auto``: the baseline and every undecided variant at their chosen rates, seeds
        added up to each look; after each look every undecided variant gets the sequential verdict
        on its paired differences of ``metric`` (the held-out verdict metric, not the one the rate
        was selected on; seeds both have a finite value for, in seed order); decided variants get
        no more seeds. A diverged seed has no difference: it delays the decision, and a variant
        still undecided after the last look is ``inconclusive``."""
        from ablate.analysis.runs import higher_is_better as better_up

        higher = better_up(metric)
        from ablate.analysis.runs import parse_overrides
        from ablate.analysis.sequential import ALPHA, sequential_verdict
        from ablate.analysis.tables import parse_baseline

        assert self.baseline is not None and self.margin is not None  # auto_settings checked them
        wanted = parse_baseline(self.baseline)
        margin = self.margin
        matches = [v for v in variants if all(parse_overrides(v.overrides).get(k) == x for k, x in wanted.items())]
        if len(matches) != 1:
            raise HydraException(
                f"tuned_lr: hydra.sweeper.baseline={self.baseline} matches {len(matches)} variants "
                f"of {', '.join(v.label for v in variants)}: name exactly one"
            )
        base = matches[0]
        for v in variants:
            v.seeds = []
        if base.selection.chosen is None:
            log.warning("tuned_lr: the baseline %s has no usable learning rate: no stage 2", base.label)
            return []
        others = [v for v in variants if v is not base and v.selection.chosen is not None]
        alpha = ALPHA / max(len(others), 1)
        undecided, returns, done = list(others), [], 0
        for n in self.looks:
            batch = seeds[done:n]
            plan = [(v, s) for v in [base, *undecided] for s in batch]
            print(
                f"LR tuning, stage 2 (seeds=auto): {seed_name}={','.join(batch)} for {base.label} (baseline) and "
                f"{len(undecided)} undecided variant(s)",
                flush=True,
            )
            rets = self._launch([[*v.overrides, f"{lr_name}={v.chosen_text}", f"{seed_name}={s}"] for v, s in plan])
            returns += rets
            if self._interrupted():  # this look's seeds are incomplete: no verdict rests on them
                break
            for (v, s), ret in zip(plan, rets, strict=True):
                job_dir = job_dir_of(ret)
                status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
                v.seeds.append(
                    {"seed": _number(s), "status": status, "value": value, "job": job_dir.name if job_dir else None}
                )
            done = n
            base_values = {str(r["seed"]): r["value"] for r in base.seeds if r["value"] is not None}
            for v in list(undecided):
                mine = {str(r["seed"]): r["value"] for r in v.seeds if r["value"] is not None}
                diffs = [mine[s] - base_values[s] for s in seeds[:n] if s in mine and s in base_values]
                v.decision = sequential_verdict(diffs, margin, self.looks, alpha, self.spending, higher)
                if v.decision.verdict != "continue":
                    undecided.remove(v)
            if not undecided:
                break
        rows = [["variant", f"verdict vs {base.label}", "seeds", "look"]]
        for v in others:
            verdict = v.decision.verdict if v.decision.verdict != "continue" else "inconclusive (diverged seeds)"
            rows.append(
                [v.label, verdict, str(len(v.seeds)), str(v.decision.look + 1 if v.decision.look >= 0 else "-")]
            )
        print(
            f"LR tuning, stage 2 (seeds=auto): group-sequential verdicts on {metric} (held-out text; the rates were "
            f"selected on validation), margin ±{self.margin:g}, looks at {','.join(map(str, self.looks))} seeds, "
            f"{self.spending} spending (exact boundaries), alpha {alpha:.3g} per variant\n" + _table(rows),
            flush=True,
        )
        return returns

    def _declare(self, sweep_dir: Path, metric: str, verdict_metric: str, seeds: list[str], seed_name: str) -> None:
        """Write the verdict's rule to ``<sweep dir>/analysis_plan.json`` before stage 2 starts
        (:mod:`ablate.analysis.plan`): the held-out metric, the baseline and margin when given, the
        seeds or looks and the stopping rule. A plan the user declared before (``scripts/declare.py``)
        is kept, and a different one is not written over it: a warning says so."""
        from ablate.analysis.plan import Plan, PlanError, declare

        margin_basis = self.margin_basis or (
            f"hydra.sweeper.margin={self.margin:g}, given with the command before stage 2 (its reason was not "
            "recorded: hydra.sweeper.margin_basis='...')"
            if self.margin is not None
            else ""
        )
        try:
            plan = Plan(
                metrics=(verdict_metric,),
                baseline=self.baseline,
                margin=self.margin,
                margin_basis=margin_basis,
                split=verdict_metric.split("/", 1)[0],
                seeds=() if self.auto else tuple(_number(s) for s in seeds),
                looks=tuple(self.looks) if self.auto else (),
                stopping="group-sequential" if self.auto else "fixed",
                spending=self.spending if self.auto else None,
                selection=f"tune=lr: each variant's learning rate by its final {metric} on {seed_name}={self.selection_seed}",
                declared_by="train.py (tune=lr), before stage 2",
                note="" if self.baseline else "no hydra.sweeper.baseline: no comparison was declared",
            )
            declared = declare(sweep_dir, plan)
        except PlanError as err:
            existing = read_plan_quietly(sweep_dir)
            if existing is None:
                log.warning("tuned_lr: %s", err)
            else:  # declared before the sweep (scripts/declare.py): that is the plan of record
                print(
                    f"LR tuning: keeping the analysis plan declared before this sweep, {existing.path} (sha256 "
                    f"{existing.sha256[:12]}, {existing.declared_at}): {existing.plan.describe()}",
                    flush=True,
                )
            return
        print(
            f"LR tuning: analysis plan {declared.path} (sha256 {declared.sha256[:12]}): {plan.describe()}", flush=True
        )

    # -- output

    @staticmethod
    def _stage1_table(variants: list[_Variant], metric: str, higher: bool, seed_name: str, seed: str) -> str:
        lrs = sorted({r.lr for v in variants for r in v.results})
        header = ["variant", *(format_lr(lr) for lr in lrs), "chosen"]
        rows = [header]
        for v in variants:
            by_lr = {r.lr: r for r in v.results}
            cells = [_cell(by_lr[lr].value, by_lr[lr].status) if lr in by_lr else "" for lr in lrs]
            if v.tracks:  # halving: the value at each rung reached, and the rung that eliminated it
                tracks = {t.lr: sh.cell(t) for t in v.tracks}
                cells = [tracks.get(lr, "") for lr in lrs]
            sel = v.selection
            chosen = "none" if sel.chosen is None else sel.chosen.text + (" (edge)" if sel.edge else "")
            rows.append([v.label, *cells, chosen])
        title = (
            f"LR tuning, stage 1: final {metric} at each learning rate ({seed_name}={seed}; "
            f"{'highest' if higher else 'lowest'} wins, diverged/crashed rank last)"
        )
        lines = [title, _table(rows)]
        lines += sh.stage1_lines([v for v in variants if v.tracks])
        lines += [f"  {v.label}: {v.selection.note}" for v in variants if v.selection.note]
        return "\n".join(lines)

    @staticmethod
    def _stage2_table(variants: list[_Variant], metric: str, lr_name: str, seed_name: str, seeds: list[str]) -> str:
        rows = [["variant", lr_name, *(f"{seed_name}={s}" for s in seeds), f"{metric} mean ± std"]]
        for v in variants:
            if v.selection.chosen is None:
                rows.append([v.label, "none", *("" for _ in seeds), "no stage 2"])
                continue
            by_seed = {str(r["seed"]): r for r in v.seeds}
            cells = [_cell(by_seed[s]["value"], by_seed[s]["status"]) if s in by_seed else "" for s in seeds]
            mean, std, n = _mean_std(v.seeds)
            summary = "n/a" if n == 0 else f"{mean:.4f}" + (f" ± {std:.4f}" if n > 1 else "") + f" (n={n})"
            rows.append([v.label, v.selection.chosen.text, *cells, summary])
        return f"LR tuning, stage 2: final {metric} at each variant's chosen learning rate\n{_table(rows)}"

    def _write(
        self,
        sweep_dir: Path,
        variants: list[_Variant],
        metric: str,
        higher: bool,
        seeds: list[str],
        lr: Override | None,
        stage2_done: bool,
    ) -> Path:
        lr_name = lr.get_key_element() if lr is not None else LR_KEY
        if lr is not None and lr.is_sweep_override():
            grid = f"the sweep's {lr.input_line}"
        else:
            grid = (
                f"hydra.sweeper.num_lrs={self.num_lrs} values hydra.sweeper.lr_factor={self.lr_factor:g} apart, "
                f"centred on each variant's {LR_KEY}"
            )
        out: dict[str, Any] = {
            "metric": metric,
            "key": lr_name,  # the tuned key: a property of each job, not of a variant (compute_multiplier.py)
            "direction": "max" if higher else "min",
            "ranking": "the final value in each stage-1 job's status.json; diverged or crashed jobs rank last",
            "grid": grid,
            "selection_seed": _number(self.selection_seed),  # stage 1 only: no verdict rests on it
            "tuning_seed": _number(self.selection_seed),
            "seeds": [
                _number(s)
                for s in seeds
                if not self.auto
                or any(  # stage 2: the verdict seeds, each fresh
                    str(r["seed"]) == s for v in variants for r in v.seeds
                )
            ],
            "stage2": "done" if stage2_done else "pending",
            "variants": [],
        }
        if self.rungs:
            out["halving"] = {"rungs": list(self.rungs), "rule": sh.RULE}
        for v in variants:
            sel = v.selection
            record: dict[str, Any] = {
                "variant": v.label,
                "overrides": v.overrides,
                "selection_seed": _number(self.selection_seed),  # this command's: no verdict of this variant uses it
                "grid": [float(t) for t in v.grid],
                "stage1": [
                    {"lr": r.lr, "override": f"{lr_name}={r.text}", "status": r.status, "value": r.value, "job": r.job}
                    for r in sorted(v.results, key=lambda r: r.lr)
                ],
                "chosen_lr": sel.chosen.lr if sel.chosen else None,
                "chosen_override": f"{lr_name}={sel.chosen.text}" if sel.chosen else None,
                "edge": sel.edge,
                "warning": sel.note,
                "extend_with": sel.extend_with,
            }
            if v.tracks:
                record["halving"] = sh.history(v.tracks, v.rung_steps, self.rungs)
            if v.decision is not None:
                verdict = v.decision.verdict if v.decision.verdict != "continue" else "inconclusive (diverged seeds)"
                record["sequential"] = {
                    "verdict": verdict,
                    "metric": held_out_metric(metric, self.verdict_metric),
                    "seeds": len(v.seeds),
                    "look": v.decision.look,
                    "baseline": self.baseline,
                    "margin": self.margin,
                    "looks": self.looks,
                    "spending": self.spending,
                }
            if stage2_done and sel.chosen is not None:
                mean, std, n = _mean_std(v.seeds)
                record["seeds"] = v.seeds
                record["mean"], record["std"], record["completed_seeds"] = mean, std, n
            out["variants"].append(record)
        path = sweep_dir / RESULT_FILE
        save_selection(path, out)
        return path


def read_plan_quietly(sweep_dir: Path) -> Any:
    """The sweep directory's declared plan (:func:`ablate.analysis.plan.read_plan`), or None when it
    has none or it cannot be read."""
    from ablate.analysis.plan import PlanError, read_plan

    try:
        return read_plan(sweep_dir)
    except PlanError:
        return None


def held_out_metric(metric: str, given: str | None = None) -> str:
    """The metric the verdicts read: ``hydra.sweeper.verdict_metric`` when given, else the
    selection metric on the test split (``val/loss`` -> ``test/loss``): the rate is chosen on
    validation, the verdict read on text the choice never saw."""
    if given:
        return str(given)
    return "test/" + metric.split("/", 1)[1] if metric.startswith("val/") else metric


def _free_seed(seeds: Sequence[str]) -> int:
    """A seed that is not among ``seeds``: 0 if free, else one above the largest integer seed."""
    numbers = [int(s) for s in seeds if s.lstrip("-").isdigit()]
    return 0 if "0" not in seeds else max(numbers) + 1


def _mean_std(records: list[dict[str, Any]]) -> tuple[float | None, float | None, int]:
    values = [r["value"] for r in records if r["status"] == "completed" and r["value"] is not None]
    if not values:
        return None, None, 0
    mean = sum(values) / len(values)
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1)) if len(values) > 1 else None
    return mean, std, len(values)
