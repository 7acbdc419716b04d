"""Sample text from a trained language model checkpoint (with a KV cache).

python generate.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt prompt="ROMEO:" max_new_tokens=300
"""

from typing import TYPE_CHECKING, cast

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.config.arguments import checker

if TYPE_CHECKING:
    from ablate.tasks.lm import LanguageModelTask


@hydra.main(version_base="1.3", config_path="conf", config_name="generate")
@cli.task
def main(cfg: DictConfig) -> None:
    from ablate.checkpoints.paths import require_file

    require_file(cfg.ckpt_path)  # a missing path, a directory: said as what it is, before torch is imported
    import torch  # the stack: only once the command is checked

    from ablate.tasks.generation import generate
    from ablate.tasks.lm_eval import load_lm_checkpoint

    # checked: task=lm, its weights and its logits finite
    task = cast("LanguageModelTask", load_lm_checkpoint(cfg.ckpt_path, script="generate.py"))
    if task.tokenizer is None:
        raise SystemExit(f"{cfg.ckpt_path} carries no tokenizer (saved by an older version?); cannot decode")
    try:
        ids = task.tokenizer.encode(cfg.prompt or "")
    except ValueError as err:  # a character the model's vocabulary does not have
        raise SystemExit(f"prompt={cfg.prompt!r}: {err}") from None
    if not ids:
        raise SystemExit("prompt is empty: the model needs at least one token to continue, e.g. prompt='ROMEO:'")
    prompt = torch.tensor([ids] * cfg.num_samples)
    out = generate(
        task.model,
        prompt,
        cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        use_cache=cfg.use_cache,
        generator=torch.Generator().manual_seed(cfg.seed),
    )
    for row in out.tolist():
        print(task.tokenizer.decode(row))
        print("-" * 40)


if __name__ == "__main__":
    cli.entry_point(main, "generate", checker("generate"))
