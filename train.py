"""Train one configuration, or sweep many with -m.

python train.py                                   # the default experiment
python train.py -m norm=pre,post pos=sinusoidal,learned
python train.py experiment=nanogpt_shakespeare_char

The command line is composed and checked (every key known, every value of its type) before Hydra
runs and before torch or Lightning is imported (:func:`ablate.cli.entry_point`): a refusal is
immediate and leaves no run folder.
"""

import sys

import hydra
from omegaconf import DictConfig

from ablate import cli


def check(cfg: DictConfig, overrides: list[str]) -> None:
    """What a command line must pass before Hydra starts a job (:func:`ablate.cli.entry_point`)."""
    from ablate.run.environment import running_hydra
    from ablate.run.gpu_visibility import refuse_missing_gpu

    refuse_missing_gpu(cfg.trainer, running_hydra())  # first: before the checks below import torch

    from ablate.config.locations import check_writable_folders
    from ablate.config.schema import check_command_line_config
    from ablate.run.environment import check_accelerator
    from ablate.tasks import config_keys
    from ablate.tracking.options import logger_keys

    check_command_line_config(cfg, {**config_keys(cfg), **logger_keys()})  # keys, types, data choices
    check_accelerator(cfg.trainer, running_hydra())  # a GPU or several processes this machine does not have
    check_writable_folders(cfg.paths, cli.run_dir())  # the log, cache and run folders: before Hydra writes


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@cli.task
def main(cfg: DictConfig) -> float:
    from ablate.run.train import run  # the training stack (torch, Lightning): only once the command is checked

    return run(cfg)


if __name__ == "__main__":
    from ablate.run.resume_command import with_stored_overrides

    sys.argv[1:] = with_stored_overrides(sys.argv[1:])  # hydra.run.dir=<run> ckpt_path=last: that run's overrides
    cli.entry_point(main, "train", check)
