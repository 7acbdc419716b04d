"""Heat maps of a trained model's attention weights for one input: rows = layers, columns = heads.

    python scripts/attention_maps.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt text="ROMEO: But soft"
    python scripts/attention_maps.py ckpt_path=... text="Ein Hund läuft." out=maps.png   # translation checkpoint

Works whatever ``attn=`` the model was trained with (the weights come from the model's own
forward pass through the explicit softmax kernel; ``src/ablate/analysis/attention.py``). Config:
``conf/attention_maps.yaml``. Prints the path of each PNG written. The title names the model,
the run directory and the checkpoint file (not their full path).
"""

from __future__ import annotations

from pathlib import Path

import hydra
import matplotlib

matplotlib.use("Agg")  # files only, never a window

from omegaconf import DictConfig

from ablate import cli
from ablate.analysis.attention import attention_figure, checkpoint_maps, map_title, save_figure
from ablate.config.arguments import checker


def output_paths(ckpt_path: str, out: str | None, names: list[str]) -> list[Path]:
    """``out`` (one kind of attention) or ``<out stem>_<kind>.png`` (several); by default beside
    the job's ``checkpoints/`` folder."""
    ckpt = Path(ckpt_path)
    default = (ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent) / "attention_maps.png"
    base = Path(out) if out else default
    if len(names) == 1:
        return [base]
    return [base.with_name(f"{base.stem}_{name.replace(' ', '_')}{base.suffix or '.png'}") for name in names]


def unescape(text: str | None) -> str | None:
    """``\\n`` and ``\\t`` typed on the command line (Hydra keeps them literally) -> newline, tab."""
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


@hydra.main(version_base="1.3", config_path="../conf", config_name="attention_maps")
@cli.task
def main(cfg: DictConfig) -> None:
    text = unescape(cfg.text)
    if text is None:
        raise SystemExit("attention_maps.py: give the input, text=...")
    try:
        maps, model = checkpoint_maps(cfg.ckpt_path, text, unescape(cfg.target), cfg.max_tokens)
    except (OSError, ValueError) as err:  # a missing file, a character the tokenizer does not know, ...
        raise SystemExit(f"attention_maps.py: {err}") from None
    for amap, path in zip(maps, output_paths(cfg.ckpt_path, cfg.out, [m.name for m in maps])):
        title = map_title(amap.name, model, cfg.ckpt_path)  # run and checkpoint names, not the full path
        print(save_figure(attention_figure(amap.weights, amap.query_labels, amap.key_labels, title), path))


if __name__ == "__main__":
    cli.entry_point(main, "attention_maps", checker("attention_maps"))
