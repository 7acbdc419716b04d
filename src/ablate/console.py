"""What a run prints on the console at start: the resolved config as a tree, and the model size."""

from __future__ import annotations

import rich
import rich.syntax
import rich.tree
from omegaconf import DictConfig, OmegaConf

# The groups a reader looks at first; the rest follow in config order.
FIRST = ("task", "data", "model", "pos", "norm", "act", "init", "attn", "optim", "trainer")


def print_config_tree(cfg: DictConfig) -> None:
    tree = rich.tree.Tree("config", guide_style="dim")
    keys = [k for k in FIRST if k in cfg] + [k for k in cfg if k not in FIRST]
    for key in keys:
        branch = tree.add(f"[bold]{key}[/bold]")
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, DictConfig) else str(value)
        branch.add(rich.syntax.Syntax(text.rstrip(), "yaml", background_color="default"))
    rich.print(tree)


def param_estimate(n_layers: int, d_model: int, vocab_size: int) -> int:
    """The usual back-of-envelope count: 12 L d^2 (attention 4d^2 + FFN 8d^2 per layer) + V d."""
    return 12 * n_layers * d_model**2 + vocab_size * d_model


def print_param_count(n_params: int, estimate: int) -> None:
    rich.print(f"[bold]parameters:[/bold] {n_params:,} (12·L·d² + V·d estimate: {estimate:,}; ratio {n_params / estimate:.3f})")
