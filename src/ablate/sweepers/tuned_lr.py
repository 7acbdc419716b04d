"""Each variant at its own tuned learning rate, in one command (``tune=lr``).

    python train.py -m experiment=shazeer2020_glu_cpu act=relu,gelu,swiglu tune=lr

Hydra's ``BasicSweeper`` with two launcher batches (docs/tuning.md):

1. **Stage 1, the grid**: every variant at each rate of a log-spaced grid, once per verdict seed s
   on its own *selection seed* s + ``hydra.sweeper.selection_offset`` (``selection=nested``), so
   that the arms' rates differ by chance within the seeds' spread, which the verdict's interval
   estimates (``benchmarks/lr_selection/simulate.py``). No selection seed is a verdict seed.
2. **Stage 2, the seeds**: every variant at its best rate, every seed trained fresh (reusing the
   selection job would carry the selection's winner's curse into the verdict).

Both stages launch ordinary jobs named by their overrides, so a re-run skips finished ones; the
selection goes to ``<sweep dir>/lr_tuning.json`` (the rule: :mod:`ablate.sweepers.lr_selection`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
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
    format_lr,
    job_dir_of,
    log_grid,
    read_outcome,
    save_selection,
    select_lr,
    validation_as_test_warning,
)
from ablate.sweepers.tuning_report import Variant, stage1_table, stage2_table, tuning_record
from ablate.sweepers.tuning_stage2 import declare_plan, fixed_stage2, held_out_metric, refuse_auto_seeds
from ablate.sweepers.validating import ValidatingSweeperMixin

log = logging.getLogger(__name__)

SEED_KEY = "seed"
RESULT_FILE = "lr_tuning.json"


@dataclass(frozen=True)
class _Command:
    """What a ``tune=lr`` command fixed before its first job (:meth:`TunedLRSweeper._read_command`)."""

    lr: Override | None  # the sweep's own optim.lr override (a grid or a centre), if any
    lr_name: str  # optim.lr as the command spells it, e.g. +optim.lr
    seed_name: str  # seed, likewise
    seeds: list[str]  # the verdict seeds (stage 2)
    metric: str  # the selection metric
    higher: bool  # whether a larger metric is better
    verdict_metric: str  # stage 2's: the held-out version of the selection metric (held_out_metric)
    sweep_dir: Path
    selection_seeds: dict[str, str]  # selection=nested: verdict seed -> the seed of its own stage-1 grid


def _record_outcomes(batch: list[tuple[Variant, str]], returns: list[JobReturn], metric: str) -> None:
    """Append each stage-1 job's outcome (its status and final ``metric``) to its variant's results."""
    for (v, text), ret in zip(batch, returns, strict=True):
        job_dir = job_dir_of(ret)
        status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
        v.results.append(LRResult(float(text), text, status, value, job_dir.name if job_dir else None))


class TunedLRSweeper(ValidatingSweeperMixin, BasicSweeper):
    """Stage 1: each variant over a learning-rate grid; stage 2: each at its best rate with every seed."""

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
        halving: Any = None,
        verdict_metric: str | None = None,
        margin_basis: str | None = None,
        extend_edges: int = 2,
        selection: str = "nested",
        selection_offset: int = 1000,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        try:  # a bad setting exits 2 with its message, as every refused key does (not Hydra's wrapper, exit 1)
            self.rungs = sh.check_rungs((halving or {}).get("rungs"))  # () : the full grid (ablate.sweepers.halving)
            if not (isinstance(num_lrs, int) and num_lrs >= 1):
                raise ValueError(f"hydra.sweeper.num_lrs={num_lrs!r}: give a number of learning rates >= 1")
            if not (isinstance(lr_factor, (int, float)) and lr_factor > 1):
                raise ValueError(
                    f"hydra.sweeper.lr_factor={lr_factor!r}: give the ratio of neighbouring learning rates, > 1"
                )
            refuse_auto_seeds(seeds)
            # the comparison to declare before stage 2 (ablate.analysis.plan)
            self.baseline: str | None = baseline
            self.margin: float | None = None if margin is None else float(margin)
            if seeds is None or isinstance(seeds, (str, int)) or not list(seeds):
                raise ValueError(f"hydra.sweeper.seeds={seeds!r}: give a list of seeds, e.g. [1,2,3]")
            if not (isinstance(extend_edges, int) and not isinstance(extend_edges, bool) and extend_edges >= 0):
                raise ValueError(
                    f"hydra.sweeper.extend_edges={extend_edges!r}: give how many rates a variant's grid may grow "
                    "past its edge before stage 2, >= 0 (0: never)"
                )
            self.extend_edges = extend_edges
            self.num_lrs, self.lr_factor = num_lrs, float(lr_factor)
            self.default_seeds = list(dict.fromkeys(str(s) for s in seeds))  # in order, no duplicates
            self.metric = metric
            if selection_seed is None or isinstance(selection_seed, bool) or not str(selection_seed).strip():
                raise ValueError(
                    f"hydra.sweeper.selection_seed={selection_seed!r}: give the seed of the stage-1 runs, "
                    "one that is not among the verdict seeds (default 0)"
                )
            self.selection_seed = str(selection_seed)
            if selection not in ("nested", "shared"):
                raise ValueError(
                    f"hydra.sweeper.selection={selection!r}: give nested (each verdict seed's rate chosen by a "
                    "stage-1 grid of its own, the default) or shared (one grid per variant, on "
                    "hydra.sweeper.selection_seed)"
                )
            if not (
                isinstance(selection_offset, int) and not isinstance(selection_offset, bool) and selection_offset > 0
            ):
                raise ValueError(
                    f"hydra.sweeper.selection_offset={selection_offset!r}: give the number added to a verdict seed "
                    "to make the seed of its selection grid, > 0 (default 1000)"
                )
            self.selection, self.selection_offset = selection, selection_offset
            self.verdict_metric = verdict_metric
            self.margin_basis = margin_basis
        except ValueError as err:
            from ablate import cli
            from ablate.errors import ConfigError

            cli.report_user_error(ConfigError(str(err)))
        self.job_idx = 0

    # -- what to run

    def _grid(self, lr: Override | None, variant: list[str]) -> list[str]:
        if lr is not None and lr.is_sweep_override():
            if not lr.is_discrete_sweep():
                raise HydraException(
                    f"tuned_lr: {lr.input_line}: give the grid as a list of learning rates, "
                    "e.g. optim.lr=1e-4,3e-4,1e-3"
                )
            texts = list(dict.fromkeys(lr.sweep_string_iterator()))
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
        """Warn when typed ``num_lrs``/``lr_factor`` are moot (an explicit grid), naming where it came from."""
        if lr is None or not lr.is_sweep_override():
            return
        moot = self._typed("hydra.sweeper.num_lrs", "hydra.sweeper.lr_factor")
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

    def _typed(self, *keys: str) -> list[str]:
        """The overrides of ``keys`` that the command line typed (``hydra.overrides.hydra``)."""
        assert self.config is not None
        typed = [str(o) for o in OmegaConf.select(self.config, "hydra.overrides.hydra", default=[]) or []]
        return [o for o in typed if o.split("=", 1)[0].lstrip("+") in keys]

    def _selection_seeds(self, seeds: list[str], seed_name: str) -> dict[str, str]:
        """Each verdict seed's selection seed under ``nested`` (never a verdict seed); ``shared``: {}."""
        if self.selection == "shared":
            return {}
        moot = self._typed("hydra.sweeper.selection_seed")
        if moot:
            log.warning(
                "tuned_lr: %s ignored: under hydra.sweeper.selection=nested each verdict seed's grid runs on that "
                "seed + hydra.sweeper.selection_offset=%d; hydra.sweeper.selection=shared uses one selection seed",
                moot[0],
                self.selection_offset,
            )
        bad = [s for s in seeds if not s.lstrip("-").isdigit()]
        if bad:
            raise HydraException(
                f"tuned_lr: {seed_name}={bad[0]}: hydra.sweeper.selection=nested makes each verdict seed's selection "
                "seed by adding hydra.sweeper.selection_offset to it: give integer seeds, or "
                "hydra.sweeper.selection=shared"
            )
        out = {s: str(int(s) + self.selection_offset) for s in seeds}
        clash = [s for s in seeds if out[s] in seeds]
        if clash:
            span = max(int(s) for s in seeds) - min(int(s) for s in seeds)
            raise HydraException(
                f"tuned_lr: hydra.sweeper.selection_offset={self.selection_offset} makes {seed_name}={clash[0]}'s "
                f"selection seed {out[clash[0]]}, one of the verdict seeds ({seed_name}={','.join(seeds)}): the rate "
                f"would be chosen on a run a verdict rests on. Give hydra.sweeper.selection_offset={span + 1000}"
            )
        return out

    def _units(self, cmd: _Command, variants: list[Variant]) -> list[Variant]:
        """What stage 1 selects a rate for: each variant (``shared``), or each variant per verdict seed (``nested``)."""
        if self.selection == "shared":
            for v in variants:
                v.selection_seed = self.selection_seed
            return variants
        return [
            Variant(list(v.overrides), v.label, list(v.grid), selection_seed=cmd.selection_seeds[s], seed=s)
            for v in variants
            for s in cmd.seeds
        ]

    def _selection_text(self) -> str:
        """The seed stage 1 ran on, as the stage-1 table's title says it."""
        if self.selection == "shared":
            return self.selection_seed
        return f"each verdict seed + {self.selection_offset}, one grid per verdict seed"

    def _seeds(self, seed: Override | None) -> list[str]:
        if seed is None:
            return list(self.default_seeds)
        if seed.is_sweep_override():
            if not seed.is_discrete_sweep():
                raise HydraException(f"tuned_lr: {seed.input_line}: give the seeds as a list, e.g. seed=1,2,3")
            return list(dict.fromkeys(seed.sweep_string_iterator()))
        return [seed.get_value_element_as_str()]

    def _rung_steps(self, v: Variant) -> tuple[int, ...]:
        """``hydra.sweeper.halving.rungs`` as steps of this variant's run, checked (exit 2 naming the key)."""
        assert self.hydra_context is not None and self.config is not None
        from ablate import cli
        from ablate.errors import ConfigError

        try:
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(v.overrides))
            return sh.config_rung_steps(cfg, self.rungs, v.label)
        except ValueError as err:
            cli.report_user_error(ConfigError(str(err)))
            raise  # not reached

    def _interrupted(self) -> bool:
        """Ctrl-C in a worker-process sweep (:mod:`ablate.sweepers.sweep_stop`): nothing is chosen then."""
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
        cmd, variants = self._read_command(arguments)
        variants = self._units(cmd, variants)  # selection=nested: one per variant and verdict seed
        cmd.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, cmd.sweep_dir / "multirun.yaml")
        stage1, stopped = self._stage1(cmd, variants)
        if stopped:
            return [stage1]
        print(stage1_table(variants, cmd.metric, cmd.higher, cmd.seed_name, self._selection_text()), flush=True)
        self._write(cmd, variants, stage2_done=False)
        self._declare_plan(cmd, variants)  # the verdict's rule, before its data
        stage2 = self._stage2(cmd, variants)
        path = self._write(cmd, variants, stage2_done=not self._interrupted())
        print(stage2_table(variants, cmd.metric, cmd.lr_name, cmd.seed_name, cmd.seeds), flush=True)
        print(f"LR tuning: {path}", flush=True)
        for ret in [*stage1, *stage2]:
            _ = ret.return_value  # as BasicSweeper: a job that failed inside Hydra raises here, once all have run
        return [stage1, stage2]

    def _read_command(self, arguments: list[str]) -> tuple[_Command, list[Variant]]:
        """The overrides (params, then command line) as both stages' settings and variants; refused before any job."""
        assert self.config is not None and self.hydra_context is not None
        from ablate.analysis.job import higher_is_better  # pandas: imported when a sweep runs, not at plugin scan

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
        seeds = self._seeds(seed)
        if self.selection == "shared" and self.selection_seed in seeds:
            raise HydraException(
                f"tuned_lr: hydra.sweeper.selection_seed={self.selection_seed} is one of the verdict seeds "
                f"({seed_name}={','.join(seeds)}): the learning rate would be chosen on a run a verdict rests on, "
                "which biases it towards that variant. Choose a selection seed outside them, e.g. "
                f"hydra.sweeper.selection_seed={_free_seed(seeds)}"
            )
        metric = str(self.metric or self.config.get("optimized_metric") or "val/loss")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        verdict_metric = held_out_metric(metric, self.verdict_metric)
        cmd = _Command(
            lr,
            lr_name,
            seed_name,
            seeds,
            metric,
            higher_is_better(metric),
            verdict_metric,
            sweep_dir,
            self._selection_seeds(seeds, seed_name),
        )
        shared_text = validation_as_test_warning(self.config)
        if shared_text:
            log.warning(shared_text)
        return cmd, self._variants(lr, [o for o in overrides if o.key_or_group not in (LR_KEY, SEED_KEY)])

    def _variants(self, lr: Override | None, rest: list[Override]) -> list[Variant]:
        """Each combination of the sweep's other values, labelled by its swept ones, with its grid."""
        swept = {o.get_key_element() for o in rest if o.is_sweep_override()}
        variants = []
        for items in self.split_arguments(rest, None)[0]:
            label = ",".join(i for i in items if i.split("=", 1)[0] in swept) or "all"
            variants.append(Variant(list(items), label, self._grid(lr, list(items))))
        return variants

    def _stage1(self, cmd: _Command, variants: list[Variant]) -> tuple[list[JobReturn], bool]:
        """Stage 1 (full grid or halving), rates chosen and edges extended; and whether a Ctrl-C stopped it."""
        for v in variants if self.rungs else []:  # checked before any job starts
            v.rung_steps = self._rung_steps(v)
        plan = [(v, text) for v in variants for text in v.grid]
        what = f"{len(variants)} variant(s)"
        if self.selection == "nested":
            what = f"{len({v.label for v in variants})} variant(s) x {len(cmd.seeds)} verdict seeds"
        print(
            f"LR tuning, stage 1: {what} x {len(variants[0].grid)} learning rates, "
            f"{cmd.seed_name}={self._selection_text()} (the selection seed, no verdict rests on it)"
            + (f", successive halving at {','.join(f'{r:g}' for r in self.rungs)} of the steps" if self.rungs else ""),
            flush=True,
        )
        if self.rungs:  # one halving per selection seed (selection=nested: per verdict seed)
            stage1, stopped = [], False
            for seed in dict.fromkeys(v.selection_seed for v in variants):
                group = [v for v in variants if v.selection_seed == seed]
                rets, stopped = sh.run_stage1(
                    group, self._launch, self._interrupted, cmd.metric, cmd.higher, cmd.lr_name, cmd.seed_name, seed
                )
                stage1 += rets
                if stopped:
                    break
        else:
            stage1 = self._launch(self._selection_jobs(cmd, plan))
            stopped = self._interrupted()
        if stopped:
            # an incomplete grid chooses nothing: no learning rate is recorded from it
            print("LR tuning interrupted in stage 1: nothing chosen; re-run the same command to resume", flush=True)
            return stage1, True
        for v in variants:
            v.results = [t.result(v.rung_steps[-1]) for t in v.tracks] if self.rungs else []
        if not self.rungs:
            _record_outcomes(plan, stage1, cmd.metric)
        self._choose(cmd, variants)
        stage1 = [*stage1, *self._extend_edges(cmd, variants)]
        if self._interrupted():
            print("LR tuning interrupted while extending the grid: nothing chosen; re-run the same command", flush=True)
            return stage1, True
        return stage1, False

    def _selection_jobs(self, cmd: _Command, batch: list[tuple[Variant, str]]) -> list[list[str]]:
        """The overrides of stage-1 jobs: each variant at a learning rate, on its selection seed."""
        return [[*v.overrides, f"{cmd.lr_name}={t}", f"{cmd.seed_name}={v.selection_seed}"] for v, t in batch]

    def _choose(self, cmd: _Command, variants: list[Variant]) -> None:
        """Each variant's learning rate from its stage-1 results (:func:`select_lr`)."""
        also = f"hydra.sweep.dir={cmd.sweep_dir}"  # an edge's note names the override that extends the grid
        for v in variants:
            v.selection = select_lr(
                v.results, higher_is_better=cmd.higher, factor=self.lr_factor, lr_key=cmd.lr_name, also=also
            )

    def _extend_edges(self, cmd: _Command, variants: list[Variant]) -> list[JobReturn]:
        """Before stage 2, a rate chosen at its grid's edge is chosen again on the grid grown one rate
        past that edge at a time (selection seed, full length), up to ``hydra.sweeper.extend_edges``
        rates: a too-narrow grid handicaps a variant (issue 43 item 4: one step moved Pre-LN by 0.08 bpb)."""
        returns: list[JobReturn] = []
        for _ in range(self.extend_edges):
            todo = [v for v in variants if v.selection.chosen is not None and v.selection.edge is not None]
            if not todo:
                break
            batch: list[tuple[Variant, str]] = []
            for v in todo:
                rates = sorted(float(t) for t in v.grid)
                edge = v.selection.edge
                new = [format_lr(rates[0] / self.lr_factor)] if edge in ("lowest", "only") else []
                new += [format_lr(rates[-1] * self.lr_factor)] if edge in ("highest", "only") else []
                new = [t for t in new if t not in v.grid]
                v.grid = sorted([*v.grid, *new], key=float)
                v.extended += new
                batch += [(v, t) for t in new]
            print(
                "LR tuning, stage 1: best rate at the edge of the grid; extending it: "
                + "; ".join(f"{v.name}: {t}" for v, t in batch),
                flush=True,
            )
            rets = self._launch(self._selection_jobs(cmd, batch))
            returns += rets
            if self._interrupted():
                break
            _record_outcomes(batch, rets, cmd.metric)
            self._choose(cmd, todo)
        for v in variants:
            if v.extended and v.selection.edge is not None:
                v.selection.note = (
                    f"still at the {v.selection.edge} edge after extending the grid by {len(v.extended)} rate(s) "
                    f"(hydra.sweeper.extend_edges={self.extend_edges}): " + (v.selection.note or "")
                )
        return returns

    def _declare_plan(self, cmd: _Command, variants: list[Variant]) -> None:
        """Declare the analysis plan of stage 2's verdicts (:func:`declare_plan`) before its first job."""
        assert self.config is not None and self.hydra_context is not None
        composed = self.hydra_context.config_loader.load_sweep_config(self.config, list(variants[0].overrides))
        on = f"{cmd.seed_name}={self.selection_seed}"
        if self.selection == "nested":
            on = f"a grid per verdict seed, on that {cmd.seed_name} + {self.selection_offset}"
        compared = (v.label for v in variants if v.selection.chosen is not None and not self._is_baseline(v))
        declare_plan(
            cmd.sweep_dir,
            selection=f"tune=lr: each variant's learning rate by its final {cmd.metric} on {on}",
            verdict_metric=cmd.verdict_metric,
            seeds=cmd.seeds,
            baseline=self.baseline,
            margin=self.margin,
            margin_basis=self.margin_basis,
            variants=tuple(dict.fromkeys(compared)),
            layout=OmegaConf.select(composed, "data.splits", default=None),
            log_dir=OmegaConf.select(composed, "paths.log_dir", default=None),
        )

    def _stage2(self, cmd: _Command, variants: list[Variant]) -> list[JobReturn]:
        """Stage 2: each variant at its rate with every seed."""
        return fixed_stage2(
            variants, self._launch, metric=cmd.metric, lr_name=cmd.lr_name, seed_name=cmd.seed_name, seeds=cmd.seeds
        )

    def _is_baseline(self, v: Variant) -> bool:
        """Whether ``v`` is the variant ``hydra.sweeper.baseline`` names."""
        if not self.baseline:
            return False
        from ablate.analysis.job import parse_overrides
        from ablate.analysis.specs import parse_baseline

        mine = parse_overrides(v.overrides)
        return all(mine.get(k) == x for k, x in parse_baseline(self.baseline).items())

    def _write(self, cmd: _Command, variants: list[Variant], stage2_done: bool) -> Path:
        """The selection so far as ``<sweep dir>/lr_tuning.json`` (:func:`tuning_record`)."""
        if cmd.lr is not None and cmd.lr.is_sweep_override():
            grid = f"the sweep's {cmd.lr.input_line}"
        else:
            grid = (
                f"hydra.sweeper.num_lrs={self.num_lrs} values hydra.sweeper.lr_factor={self.lr_factor:g} apart, "
                f"centred on each variant's {LR_KEY}"
            )
        record = tuning_record(
            variants,
            cmd.metric,
            cmd.higher,
            cmd.lr_name,
            grid,
            self.selection_seed,
            cmd.seeds,
            self.rungs,
            stage2_done,
            self.selection_offset if self.selection == "nested" else None,
        )
        save_selection(cmd.sweep_dir / RESULT_FILE, record)
        return cmd.sweep_dir / RESULT_FILE


def _free_seed(seeds: Sequence[str]) -> int:
    """A seed that is not among ``seeds``: 0 if free, else one above the largest integer seed."""
    numbers = [int(s) for s in seeds if s.lstrip("-").isdigit()]
    return 0 if "0" not in seeds else max(numbers) + 1
