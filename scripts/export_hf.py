"""Export a language-model checkpoint as a Hugging Face ``transformers`` model directory.

    python scripts/export_hf.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt out=exports/my_gpt2
    python -c "import transformers; m = transformers.AutoModelForCausalLM.from_pretrained('exports/my_gpt2')"

GPT-2 (``GPT2LMHeadModel``) for ``pos=learned norm=pre norm.layer=layernorm`` with a plain FFN;
Llama (``LlamaForCausalLM``) for ``pos=rope norm=pre norm.layer=rmsnorm`` with a gated FFN
(``act=swiglu``). Other architectures are refused, naming the option that does not map. The
exported model's logits are checked against ours before anything is written (``verify=false``
skips that). The tokenizer is not exported: the token ids are the checkpoint's. Mapping and
refusals: ``src/ablate/export/hf.py``. Config: ``conf/export_hf.yaml``. Prints a JSON line.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ablate import cli
from ablate.config.arguments import checker
from ablate.export.hf import ExportError, export_checkpoint


@hydra.main(version_base="1.3", config_path="../conf", config_name="export_hf")
@cli.task
def main(cfg: DictConfig) -> None:
    out = Path(cfg.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not cfg.overwrite:
        raise SystemExit(f"out={out} exists and is not an empty folder: choose another one, or overwrite=true")
    try:
        info = export_checkpoint(cfg.ckpt_path, out, verify=cfg.verify)
    except ExportError as err:
        raise SystemExit(f"export_hf.py: {err}") from None
    print(f"wrote {info['architecture']} to {out}")
    print(f"note: {info['context']}")
    print(json.dumps(info))


if __name__ == "__main__":
    cli.entry_point(main, "export_hf", checker("export_hf"))
