"""Evaluate a checkpoint; what is measured depends on the task it was trained for (its
:class:`ablate.tasks.TaskSpec` ``evaluate_checkpoint``).

Translation: sacreBLEU (with its signature) on the corpus' test or validation split, or on any
source/reference files; the hypotheses are written to a file.

    python eval.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
    python eval.py ckpt_path=... split=val beam_size=4
    python eval.py ckpt_path=... src_file=test.de ref_file=test.en output=test.hyp

Language model: loss and perplexity (token-weighted mean NLL, exp of it) on the corpus' test or
validation split, or on any text file (tokenised with the checkpoint's tokenizer), at one or more
lengths in non-overlapping windows: the same code as train.py's ``eval.seq_lens``
(:func:`ablate.tasks.lm_eval.evaluate_lengths`).

    python eval.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt seq_lens=[128,256,512]
    python eval.py ckpt_path=... split=val
    python eval.py ckpt_path=... text_file=my_text.txt seq_lens=[256]
"""

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.config.arguments import checker


def refuse_other_tasks_options(cfg: DictConfig, task: str) -> None:
    """Options that only another task's checkpoints take, given with this one: refused by name."""
    from ablate.tasks import TASKS

    own = set(TASKS[task].eval_options)
    for other, spec in TASKS.items():
        given = [k for k in spec.eval_options if k not in own and cfg.get(k) is not None]
        if given:
            raise SystemExit(
                f"{cfg.ckpt_path} holds a task={task} checkpoint; {', '.join(given)} apply to task={other} "
                "checkpoints only"
            )


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
@cli.task
def main(cfg: DictConfig) -> None:
    from ablate.checkpoints.paths import require_file

    require_file(cfg.ckpt_path)  # a missing path, a directory: said as what it is, before torch is imported
    from ablate.checkpoints.files import CheckpointError  # the stack (torch): once the command is checked
    from ablate.tasks import TASKS, resolve
    from ablate.tasks.checkpoints import checkpoint_task

    try:
        task = checkpoint_task(cfg.ckpt_path)
    except CheckpointError as err:
        raise SystemExit(str(err)) from None
    evaluable = [name for name, spec in TASKS.items() if spec.evaluate_checkpoint is not None]
    if task not in evaluable:
        raise SystemExit(
            f"{cfg.ckpt_path} holds a task={task} checkpoint; eval.py takes {' and '.join(f'task={t}' for t in evaluable)}"
        )
    refuse_other_tasks_options(cfg, task)
    resolve(TASKS[task].evaluate_checkpoint)(cfg)


if __name__ == "__main__":
    cli.entry_point(main, "eval", checker("eval"))
