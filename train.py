"""Train one configuration, or sweep many with -m.

python train.py                                   # the default experiment
python train.py -m norm=pre,post pos=sinusoidal,learned
python train.py experiment=nanogpt_shakespeare_char

The command line is composed and typed (:meth:`ablate.run.config.RunConfig.from_hydra`: every key
known, every value of its type and range) before Hydra runs (:func:`ablate.cli.entry_point`): a
refusal is immediate and leaves no run folder; a misspelt key costs the composition only (no torch).
"""

import sys

import hydra
from omegaconf import DictConfig

from ablate import cli


def check(cfg: DictConfig, overrides: list[str]) -> None:
    """What a command line must pass before Hydra starts a job (:func:`ablate.cli.entry_point`)."""
    from ablate.run.environment import refuse_missing_gpu, running_hydra

    refuse_missing_gpu(cfg.trainer, running_hydra())  # first: before the checks below import torch

    from ablate.config.locations import check_writable_folders
    from ablate.run import plan
    from ablate.run.config import RunConfig

    RunConfig.from_hydra(cfg, overrides)  # keys, types, ranges, combinations
    check_writable_folders(cfg.paths, cli.run_dir())  # the log, cache and run folders: before Hydra writes
    plan.note(cli.run_dir())  # what the run folder holds before Hydra writes: a refusal takes back the rest


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@cli.task
def main(cfg: DictConfig) -> float:
    """The job Hydra started: what Hydra knows of it (which may continue an earlier run's directory),
    then its config typed, once, and run."""
    from ablate.run.config import RunConfig
    from ablate.run.plan import Job
    from ablate.run.train import run  # the training stack (torch, Lightning): only once the command is checked

    job = Job.current(cfg)
    return run(RunConfig.from_hydra(cfg, job.overrides), job)


if __name__ == "__main__":
    from ablate.run.plan import with_stored_overrides

    sys.argv[1:] = with_stored_overrides(sys.argv[1:])  # hydra.run.dir=<run> ckpt_path=last: that run's overrides
    cli.entry_point(main, "train", check)
