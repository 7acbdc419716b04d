"""Average the model weights of the last N checkpoints of a run (fairseq's ``average_checkpoints.py``).

    python train.py ... callbacks.checkpoint_keep.keep_last_n=5          # keeps checkpoints/step-XXXXXXX.ckpt
    python scripts/average_checkpoints.py ckpt_dir=logs/runs/<run>/checkpoints last_n=5 \
        out=logs/runs/<run>/checkpoints/averaged.ckpt
    python eval.py ckpt_path=logs/runs/<run>/checkpoints/averaged.ckpt
    python scripts/average_checkpoints.py ckpts=[a.ckpt,b.ckpt] out=ab.ckpt   # any files of one run

Floating-point weights are averaged (in float64, stored in their own dtype); integer buffers come
from the newest checkpoint. Checkpoints of different runs (their stored run identity) or of
different architectures are refused, naming the differing keys. The output is the newest
checkpoint with the averaged weights and without optimiser/scheduler state: eval.py,
translate.py and generate.py take it (it is not meant for resuming). With ``weights=raw`` a run
trained with ``callbacks.ema`` averages its trained weights instead of its EMA weights. Code:
``src/ablate/callbacks/averaging.py``; config: ``conf/average_checkpoints.yaml``. Prints a JSON line.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.callbacks.averaging import (
    AveragingError,
    average_checkpoints,
    last_step_checkpoints,
    write_averaged,
)
from ablate.config.arguments import checker


@hydra.main(version_base="1.3", config_path="../conf", config_name="average_checkpoints")
@cli.task
def main(cfg: DictConfig) -> None:
    if (cfg.ckpt_dir is None) == (cfg.ckpts is None):
        raise SystemExit("give either ckpt_dir=<checkpoints folder> (with last_n=N) or ckpts=[file,...]")
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        raise SystemExit(f"out={out} exists: choose another name, or overwrite=true")
    try:
        if cfg.ckpt_dir is not None:
            paths = last_step_checkpoints(cfg.ckpt_dir, int(cfg.last_n))
        else:
            paths = [Path(p) for p in cfg.ckpts]
            missing = [str(p) for p in paths if not p.is_file()]
            if missing:
                raise AveragingError(f"no such checkpoint file: {', '.join(missing)}")
        averaged = average_checkpoints(paths, weights=cfg.weights, allow_changes=list(cfg.allow_changes or []))
        write_averaged(averaged, out)
    except AveragingError as err:
        raise SystemExit(f"average_checkpoints.py: {err}") from None
    info = {"out": str(out), **averaged["averaged_checkpoints"]}
    print(f"averaged {len(paths)} checkpoints (steps {info['global_steps']}) into {out}")
    print(json.dumps(info))


if __name__ == "__main__":
    cli.entry_point(main, "average_checkpoints", checker("average_checkpoints"))
