"""Sweeps fail fast: every job's config is checked before the first job starts.

Hydra composes each job's config before a batch (``validate_batch_is_legal``);
:class:`ValidatingSweeperMixin` also runs ablate's checks on it (:func:`ablate.run.plan.preflight`),
so ``pos=rope,sinusoidal +pos.fraction=0.5`` stops before any job trains. :class:`ValidatingSweeper`
is Hydra's basic grid sweeper with it (the default); the tuned-LR sweeper uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

from ablate import cli
from ablate.cli.unknown_key import composition_error_message
from ablate.compat import BasicSweeper, sweeper_params_overrides
from ablate.errors import ConfigError
from ablate.run import environment
from ablate.sweepers.job_dirs import NamedJobs
from ablate.sweepers.killed_jobs import KilledWorkerGuard


class ValidatingSweeperMixin(BasicSweeper):
    """``validate_batch_is_legal`` with :func:`ablate.run.plan.preflight`; the launcher behind
    :class:`~ablate.sweepers.killed_jobs.KilledWorkerGuard` and :class:`~ablate.sweepers.job_dirs.NamedJobs`."""

    hydra_context: Any
    config: Any
    launcher: Launcher | None
    validated: set[tuple[str, ...]]  # jobs already checked (a grid is checked whole, before it starts)

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.validated = set()
        assert self.launcher is not None
        guarded = KilledWorkerGuard(self.launcher, Path(str(config.hydra.sweep.dir)))
        self.named_jobs = NamedJobs(guarded, config, self)
        self.launcher = self.named_jobs

    def check_before_sweep(self) -> None:
        """Refuse a whole sweep before anything is written (a launcher not usable here, another study's directory)."""
        try:
            environment.check_launcher(self.config.hydra)
        except ConfigError as err:
            cli.report_user_error(err)
        self.named_jobs.check()

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from ablate.run.config import RunConfig  # the checks' imports: only when a sweep runs
        from ablate.run.plan import preflight

        for overrides in batch:
            if tuple(overrides) in self.validated:
                continue
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            except HydraException as err:  # an unknown option or key: ours names the choices, never "+key"
                cli.report_user_error(
                    ConfigError(
                        f"the sweep's job '{' '.join(overrides)}' cannot be composed, so no job was started: "
                        f"{composition_error_message(err)}"
                    )
                )
            try:
                preflight(RunConfig.from_hydra(cfg, list(overrides)))  # typed as its job will type it
                environment.check_accelerator(cfg.trainer, cfg.hydra)  # where the jobs run here
            except (ConfigError, ValueError) as err:
                # printed and exit 2 (ablate.cli), not a traceback through Hydra's error report
                cli.report_user_error(
                    ConfigError(f"the sweep's job '{' '.join(overrides)}' is invalid, so no job was started: {err}")
                )
            self.validated.add(tuple(overrides))


class ValidatingSweeper(ValidatingSweeperMixin, BasicSweeper):
    """Hydra's basic (grid) sweeper, checking every job's config before the first one starts."""

    def sweep(self, arguments: list[str]) -> Any:
        """Every job checked before Hydra writes anything: a refused sweep leaves nothing behind."""
        self.check_before_sweep()
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        grid = self.split_arguments(parser.parse_overrides([*sweeper_params_overrides(self), *arguments]), None)
        self.validate_batch_is_legal(grid[0])
        return super().sweep(arguments)
