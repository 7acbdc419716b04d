"""Sweeps fail fast: every job's config is checked before the first job starts.

Hydra's sweepers compose each job's config before launching a batch (``validate_batch_is_legal``),
which catches a key Hydra does not know; :class:`ValidatingSweeperMixin` also runs ablate's own
checks on it (:func:`ablate.run.preflight.check_config`: option keys that do not apply, run-control numbers,
architecture combinations), so that ``pos=rope,sinusoidal +pos.fraction=0.5`` stops before any job
trains instead of failing half of them later. :class:`ValidatingSweeper` is Hydra's basic grid
sweeper with it (the default, ``conf/hydra/sweeper/validating.yaml``); the tuned-LR sweeper uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from omegaconf import DictConfig

from ablate import cli
from ablate.cli.unknown_key import unknown_key_hint
from ablate.compat import BasicSweeper
from ablate.config.options import ConfigError
from ablate.sweepers import killed_jobs


class ValidatingSweeperMixin(BasicSweeper):
    """``validate_batch_is_legal`` that also runs :func:`ablate.run.preflight.check_config` on each job;
    the launcher behind :class:`~ablate.sweepers.killed_jobs.KilledWorkerGuard` (a killed worker is recorded)."""

    hydra_context: Any
    config: Any
    launcher: Launcher | None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        assert self.launcher is not None
        self.launcher = killed_jobs.guard(self.launcher, config)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from ablate.run.preflight import check_config  # the checks' imports: only when a sweep runs

        for overrides in batch:
            try:
                cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            except HydraException as err:  # an unknown option or key: Hydra's message names the choices
                hint = unknown_key_hint(err)  # for a key, Hydra's does not: say which keys there are
                cli.report_user_error(
                    ConfigError(
                        f"the sweep's job '{' '.join(overrides)}' cannot be composed, so no job was started: {err}"
                        + (f"\n{hint}" if hint else "")
                    )
                )
            try:
                check_config(cfg)
            except (ConfigError, ValueError) as err:
                # printed and exit 2 (ablate.cli), not a traceback through Hydra's error report
                cli.report_user_error(
                    ConfigError(f"the sweep's job '{' '.join(overrides)}' is invalid, so no job was started: {err}")
                )


class ValidatingSweeper(ValidatingSweeperMixin, BasicSweeper):
    """Hydra's basic (grid) sweeper, checking every job's config before the first one starts."""
