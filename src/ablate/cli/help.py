"""``python train.py --help`` (``hydra.help.template: ${ablate_help:}``): the axes and their options
(:data:`ablate.nn.axes.AXES`), the other config groups' options, the main commands and the docs."""

from __future__ import annotations

from pathlib import Path

# the groups a user picks an option of, besides the axes; in the order a reader needs them
OTHER_GROUPS = ("model", "task", "data", "optim", "trainer", "experiment", "scale", "tune", "debug", "logger")
COMMANDS = (
    ("python train.py debug=fdr", "one step of everything, in seconds"),
    ("python train.py pos=rope", "one run, one axis flipped (logs/runs/<time>/)"),
    ("python train.py -m norm=pre,post seed=1,2,3", "a sweep: every combination (logs/multirun/<sweep>/)"),
    ("python scripts/summarize.py logs/multirun/<sweep>", "its table, with --baseline norm=pre the verdicts"),
    ("python train.py hydra.run.dir=<run dir> ckpt_path=last", "continue a run (Ctrl-C prints the command)"),
    ("python eval.py ckpt_path=<run dir>/checkpoints/best.ckpt", "evaluate a checkpoint"),
    ("bash scripts/test.sh -m unit", "the fast tests"),
)
DOCS = (
    "README.md; docs/recipes.md, docs/troubleshooting.md, docs/analysis.md, docs/architecture.md, docs/distributed.md"
)


def help_text(conf: Path | None = None) -> str:
    """The help of ``train.py``. Imports the axes' registries (torch): their options are the code's."""
    from ablate.cli import conf_dir
    from ablate.nn.axes import AXES

    conf = conf or conf_dir()
    width = max(len(axis.key if axis.label != axis.group else axis.group) for axis in AXES) + 2
    lines = [
        "ablate: Transformer architecture ablations from the command line (PyTorch, Lightning, Hydra).",
        "",
        "Usage:  python train.py [key=value ...]           one run",
        "        python train.py -m key=a,b [key=c,d ...]  a sweep: one job per combination",
        "",
        "Axes (key=option; a sweep: key=a,b):",
    ]
    for axis in AXES:
        lines.append(f"  {axis.label:<{width}}{', '.join(axis.options())}")
    lines += ["", "Other choices (group=option):"]
    for group in OTHER_GROUPS:
        options = sorted(p.stem for p in (conf / group).glob("*.yaml"))
        if options:
            lines.append(f"  {group:<{width}}{', '.join(options)}")
    lines += [
        "",
        "Any key of the config: model.n_layers=2 trainer.max_steps=200 optim.lr=1e-3 seed=2 ...",
        "(print_config=true prints the resolved config before training; --cfg job prints it and stops).",
        "",
        "Main commands:",
    ]
    command_width = max(len(c) for c, _ in COMMANDS) + 2
    lines += [f"  {command:<{command_width}}{what}" for command, what in COMMANDS]
    lines += ["", f"Documentation: {DOCS}", "Hydra's own help: --hydra-help"]
    return "\n".join(lines).replace("$", "$$")  # a string.Template: no placeholder of Hydra's here


def register() -> None:
    """The ``ablate_help`` resolver of ``hydra.help.template`` (registered on import of :mod:`ablate`)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("ablate_help"):
        OmegaConf.register_new_resolver("ablate_help", lambda: help_text())
