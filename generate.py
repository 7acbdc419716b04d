"""Sample text from a trained language model checkpoint (with a KV cache).

    python generate.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt prompt="ROMEO:" max_new_tokens=300
"""

import hydra
import torch
from omegaconf import DictConfig

from ablate.tasks.generation import generate
from ablate.tasks.lm import LanguageModelTask


@hydra.main(version_base="1.3", config_path="conf", config_name="generate")
def main(cfg: DictConfig) -> None:
    task = LanguageModelTask.load_from_checkpoint(cfg.ckpt_path, map_location="cpu")
    if task.tokenizer is None:
        raise SystemExit(f"{cfg.ckpt_path} carries no tokenizer (saved by an older version?); cannot decode")
    prompt = torch.tensor([task.tokenizer.encode(cfg.prompt)] * cfg.num_samples)
    out = generate(task.model, prompt, cfg.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                   use_cache=cfg.use_cache, generator=torch.Generator().manual_seed(cfg.seed))
    for row in out.tolist():
        print(task.tokenizer.decode(row))
        print("-" * 40)


if __name__ == "__main__":
    main()
