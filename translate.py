"""Translate lines from stdin with a translation checkpoint (one output line per input line).

echo "Ein Hund rennt durch den Schnee." | python translate.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
python translate.py ckpt_path=... beam_size=1 < input.de > output.en
"""

import sys

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.tasks.translation import decode_config, load_translation_checkpoint


def batches(stream, size: int):
    chunk = []
    for line in stream:
        chunk.append(line.rstrip("\n").strip())
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@hydra.main(version_base="1.3", config_path="conf", config_name="translate")
@cli.task
def main(cfg: DictConfig) -> None:
    task = load_translation_checkpoint(cfg.ckpt_path, cfg.device)
    decode = decode_config(task, cfg)
    for chunk in batches(sys.stdin, cfg.batch_lines):
        for line in task.translate_text(chunk, decode, max_tokens=cfg.batch_tokens):
            print(line, flush=False)
        sys.stdout.flush()


if __name__ == "__main__":
    cli.entry_point(main)
