"""Train one configuration, or sweep many with -m.

python train.py                                   # the default experiment
python train.py -m norm=pre,post pos=sinusoidal,learned
python train.py experiment=nanogpt_shakespeare_char
"""

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.run.train import run


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
@cli.task
def main(cfg: DictConfig) -> float:
    return run(cfg)


if __name__ == "__main__":
    cli.entry_point(main)
