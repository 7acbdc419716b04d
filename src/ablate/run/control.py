"""The run-control keys of a job, typed: what it does with its directory and checkpoints.

These keys do not define what is trained (that is :func:`ablate.config.identity.run_identity`); they say
whether a job resumes (``ckpt_path``), skips a finished run (``skip_completed``), replaces one
(``overwrite``), which changes a resume accepts (``resume_allow_changes``) and what a sweeper
optimises (``optimized_metric``). Read once from the config in :func:`ablate.run.train.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig


@dataclass(frozen=True)
class RunControl:
    output_dir: Path
    log_dir: Path  # paths.log_dir: single runs live in <log_dir>/runs/<timestamp>
    checkpoint_dirs: tuple[Path, ...]  # the configured checkpoint callbacks' dirpath
    ckpt_path: str | None = None  # "last", a path, or None (a fresh run)
    skip_completed: bool = True
    overwrite: bool = False
    resume_allow_changes: tuple[str, ...] = ()
    print_config: bool = False
    optimized_metric: str = "val/loss"
    max_steps: int | None = None  # trainer.max_steps; None: unset or -1 (the run is counted in epochs)

    @classmethod
    def from_config(cls, cfg: DictConfig, output_dir: Path) -> RunControl:
        """``output_dir`` is the job's directory (``paths.output_dir``, resolved where Hydra runs)."""
        nodes = (cfg.get("callbacks") or {}).values()
        max_steps = cfg.trainer.get("max_steps", -1)
        return cls(
            output_dir=output_dir,
            log_dir=Path(str(cfg.paths.log_dir)),
            checkpoint_dirs=tuple(Path(str(n.dirpath)) for n in nodes if n is not None and n.get("dirpath")),
            ckpt_path=None if cfg.get("ckpt_path") is None else str(cfg.ckpt_path),
            skip_completed=bool(cfg.get("skip_completed", True)),
            overwrite=bool(cfg.get("overwrite", False)),
            resume_allow_changes=tuple(str(k) for k in cfg.get("resume_allow_changes") or []),
            print_config=bool(cfg.get("print_config", False)),
            optimized_metric=str(cfg.get("optimized_metric", "val/loss")),
            max_steps=max_steps if isinstance(max_steps, int) and max_steps >= 0 else None,
        )

    def resuming_from(self, ckpt_path: str) -> RunControl:
        """The same job, resuming from ``ckpt_path`` (a re-run sweep found its ``last.ckpt``)."""
        return replace(self, ckpt_path=ckpt_path)
