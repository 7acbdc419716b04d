"""Translate lines from stdin with a translation checkpoint (one output line per input line).

echo "Ein Hund rennt durch den Schnee." | python translate.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
python translate.py ckpt_path=... beam_size=1 < input.de > output.en
"""

import sys
from collections.abc import Iterable, Iterator

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.config.arguments import checker
from ablate.errors import UserError


def text_lines(stream: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream as UTF-8 text; binary input (bytes that are not UTF-8, or NUL
    bytes) is refused naming the line, instead of a decoding traceback or translated garbage."""
    for number, raw in enumerate(stream, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise UserError(
                f"stdin line {number} is not UTF-8 text ({err.reason} at byte {err.start}): translate.py reads "
                "one sentence per line of UTF-8 text"
            ) from None
        if "\x00" in line:
            raise UserError(f"stdin line {number} holds NUL bytes: binary input, not one sentence per line of text")
        yield line


def batches(stream: Iterable[str], size: int) -> Iterator[list[str]]:
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
    from ablate.tasks.translation import decode_config, load_translation_checkpoint  # the stack: once checked

    task = load_translation_checkpoint(cfg.ckpt_path, cfg.device, script="translate.py")
    decode = decode_config(task, cfg)
    for chunk in batches(text_lines(sys.stdin.buffer), cfg.batch_lines):
        for line in task.translate_text(chunk, decode, max_tokens=cfg.batch_tokens):
            print(line, flush=False)
        sys.stdout.flush()


if __name__ == "__main__":
    cli.entry_point(main, "translate", checker("translate"))
