"""Gradient norm per layer at initialisation: Post-LN vs Pre-LN (Xiong et al. 2020, Fig. 3).

Xiong et al. 2020 ("On Layer Normalization in the Transformer Architecture", Sec. 3.3, Fig. 3)
measure, for freshly initialised 6+6-layer Post-LN and Pre-LN Transformers, the expected
gradient norm of each layer's weights over many mini-batches: with Post-LN it grows with the
layer index, with Pre-LN it stays flat. Theorem 1 bounds the last FFN layer's gradient: of order
d sqrt(ln d) for Post-LN, whatever the depth L, and d sqrt(ln d / L) for Pre-LN.

This measurement builds the model as ``train.py`` does (the same config checks and the same
assembly, :mod:`ablate.run.assembly`; the initialisation is seeded with ``seed + repeat`` just
before the model is built), runs N
training batches through it at initialisation (forward, loss, backward; no optimiser step), and
records every batch's per-layer gradient norms with the grouping that training logs
(:func:`ablate.callbacks.grad_norm.group_name`: ``enc_layer_03/ffn`` is the norm over all
parameters of encoder layer 3's FFN sub-layer, both matrices and biases). It repeats that with a
fresh initialisation for ``--repeats`` seeds (``seed``, ``seed + 1``, ...), the same batches each
time, and writes

* ``<out>/grad_norm_at_init.json``: per norm placement and group, mean / std / n over all
  (seed, batch) pairs, plus every per-batch value;
* ``<out>/grad_norm_at_init.png``: one panel per stack (encoder, decoder; one panel for a
  decoder-only LM), layer index on x, mean gradient norm on y, one line per norm placement and
  sub-layer (``--slots``), a band of +-1 std over batches and seeds.

    python experiments/xiong2020_prenorm/grad_norm_at_init.py experiment=xiong2020_prenorm_cpu --norms post pre
    python experiments/xiong2020_prenorm/grad_norm_at_init.py task=translation data=multi30k model=transformer_iwslt_de_en \\
        norm=post,pre --batches 50 --repeats 3 --slots ffn attn --out experiments/xiong2020_prenorm/figures

Dropout stays as configured (the model is in training mode, as in the first training step); add
``model.dropout=0`` to measure the deterministic network.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import lightning as L
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from ablate.callbacks.grad_norm import GradNormMonitor
from ablate.config.checks import matmul_precision
from ablate.config.locations import checkout_root
from ablate.run.assembly import build_datamodule, build_model, seed_and_runtime
from ablate.run.config import RunConfig
from ablate.run.plan import check_config
from ablate.tasks.base import TaskModule

LAYER_GROUP = re.compile(r"^(?:(enc|dec)_)?layer_(\d+)/(\w+)$")
STACK_TITLES = {"enc": "encoder", "dec": "decoder", "": "decoder (LM)"}
Records = list[list[dict[str, float]]]  # [repeat][batch] -> {group: norm}


# --------------------------------------------------------------------------- configuration


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """Script options (``--...``) and Hydra overrides (``key=value``, as for ``train.py``)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--norms",
        nargs="+",
        default=None,
        help="norm placements to compare (conf/norm/*); also accepted as the override norm=post,pre",
    )
    parser.add_argument("--batches", type=int, default=20, help="training batches per model (default 20)")
    parser.add_argument(
        "--repeats", type=int, default=1, help="fresh initialisations per norm: seed, seed+1, ... (default 1)"
    )
    parser.add_argument(
        "--slots",
        nargs="+",
        default=["ffn"],
        help="sub-layers to plot: ffn, attn, cross_attn, ffn_norm, ... (default ffn)",
    )
    parser.add_argument("--out", type=Path, default=Path("logs/grad_norm_at_init"), help="output folder")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. task=translation model.d_model=64")
    args = parser.parse_intermixed_args(argv)
    if args.batches < 1 or args.repeats < 1:
        parser.error("--batches and --repeats must be at least 1")
    # `--norms post pre key=value`: nargs="+" also swallows the overrides that follow; give them back
    for option in ("norms", "slots"):
        values = getattr(args, option) or []
        args.overrides += [v for v in values if "=" in v]
        setattr(args, option, [v for v in values if "=" not in v] or None)
    args.slots = args.slots or ["ffn"]
    norms, overrides = split_norm_override(args.overrides)
    if norms and args.norms:
        parser.error("give the norm placements once: either --norms or norm=a,b")
    args.norms, args.overrides = args.norms or norms, overrides
    return args, overrides


def split_norm_override(overrides: list[str]) -> tuple[list[str] | None, list[str]]:
    """Take ``norm=post,pre`` (a sweep in train.py's syntax) out of the overrides as a list."""
    norms, rest = None, []
    for item in overrides:
        if item.startswith("norm="):
            norms = [n.strip() for n in item.removeprefix("norm=").split(",") if n.strip()]
        else:
            rest.append(item)
    return norms, rest


def compose_config(overrides: list[str], norm: str | None) -> DictConfig:
    """``conf/train.yaml`` composed with the overrides, as ``train.py`` would see it. The paths
    that ``train.py`` takes from Hydra's runtime (the working directory) are given explicitly."""
    extra = [f"norm={norm}"] if norm else []
    root = checkout_root()
    if root is None:
        raise SystemExit("grad_norm_at_init needs the checkout's conf/ (run it from a clone of the repository)")
    with initialize_config_dir(config_dir=str(root / "conf"), version_base="1.3"):
        return compose("train", overrides=[f"paths.root_dir={Path.cwd()}", *overrides, *extra])


# --------------------------------------------------------------------------- measurement


def grad_norms_at_init(task: TaskModule, batches: Iterable[Any]) -> list[dict[str, float]]:
    """Per-group gradient norms (without the ``grad_norm/`` prefix) of each batch, each from
    zeroed gradients: the expectation over batches is taken afterwards, on the norms."""
    monitor = GradNormMonitor()
    monitor.setup(
        cast(L.Trainer, None), task, "fit"
    )  # groups parameters exactly as training logs them (no Trainer needed)
    task.train()
    out = []
    for batch in batches:
        task.zero_grad(set_to_none=True)
        task.train_loss(batch)[0].backward()  # the loss training_step minimises
        out.append({k.removeprefix("grad_norm/"): v for k, v in monitor.compute().items()})
    task.zero_grad(set_to_none=True)
    return out


def first_batches(datamodule: Any, n: int) -> list[Any]:
    """The first ``n`` batches of the (seeded) training order; fewer only if an epoch is shorter."""
    batches = []
    for batch in datamodule.train_dataloader():
        batches.append(batch)
        if len(batches) == n:
            break
    return batches


def measure(cfg: DictConfig, batches: list[Any], datamodule: Any, repeats: int) -> Records:
    """Gradient norms of ``repeats`` fresh initialisations (seeds ``cfg.seed + r``) on ``batches``,
    the model built as ``train.py`` builds it (its config checked first)."""
    max_len = check_config(cfg).max_len
    records = []
    for r in range(repeats):
        L.seed_everything(cfg.seed + r, verbose=False)
        records.append(grad_norms_at_init(build_model(RunConfig.of(cfg), datamodule, max_len), batches))
    return records


# --------------------------------------------------------------------------- summary and plot


def summarize(records: Records) -> dict[str, dict[str, float]]:
    """Mean, std (over all seeds x batches; 0 for a single value) and count of every group."""
    values: dict[str, list[float]] = {}
    for run in records:
        for batch in run:
            for group, value in batch.items():
                values.setdefault(group, []).append(value)
    return {
        g: {"mean": statistics.fmean(v), "std": statistics.stdev(v) if len(v) > 1 else 0.0, "n": len(v)}
        for g, v in sorted(values.items())
    }


def layer_curve(
    summary: dict[str, dict[str, float]], stack: str, slot: str
) -> tuple[list[int], list[float], list[float]]:
    """(layer index from 1, mean, std) of one stack's (``enc``, ``dec`` or ``""``) sub-layer ``slot``."""
    points = []
    for group, stats in summary.items():
        match = LAYER_GROUP.match(group)
        if match and (match.group(1) or "") == stack and match.group(3) == slot:
            points.append((int(match.group(2)) + 1, stats["mean"], stats["std"]))
    points.sort()
    return [p[0] for p in points], [p[1] for p in points], [p[2] for p in points]


def stacks_of(summary: dict[str, dict[str, float]]) -> list[str]:
    found = {(m.group(1) or "") for g in summary if (m := LAYER_GROUP.match(g))}
    return [s for s in ("enc", "dec", "") if s in found]


def plot(results: dict[str, dict[str, dict[str, float]]], slots: list[str], path: Path, title: str = "") -> None:
    """One panel per stack; one line per (norm placement, sub-layer) with a +-1 std band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stacks = stacks_of(next(iter(results.values())))
    fig, axes = plt.subplots(1, len(stacks), figsize=(5.2 * len(stacks), 3.8), squeeze=False, sharey=True)
    styles = ["-", "--", ":", "-."]
    for ax, stack in zip(axes[0], stacks):
        for c, (norm, summary) in enumerate(results.items()):
            for s, slot in enumerate(slots):
                x, mean, std = layer_curve(summary, stack, slot)
                if not x:
                    continue
                lo = [m - d for m, d in zip(mean, std)]
                hi = [m + d for m, d in zip(mean, std)]
                ax.plot(x, mean, styles[s % len(styles)], marker="o", color=f"C{c}", label=f"{norm}-LN {slot}")
                ax.fill_between(x, lo, hi, color=f"C{c}", alpha=0.15)
        ax.set_title(STACK_TITLES[stack])
        ax.set_xlabel("layer index")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("gradient norm at init (mean +- std)")
    axes[0][-1].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- entry point


def run(norms: list[str] | None, overrides: list[str], batches: int, repeats: int) -> dict[str, Any]:
    """Measure every norm placement on the same batches; returns the JSON-ready result."""
    base = compose_config(overrides, norms[0] if norms else None)
    norms = norms or [base.norm.placement]
    typed = RunConfig.of(base)
    seed_and_runtime(typed, matmul_precision(base))  # as train.py: Post-LN's tiny gradients are slow as denormals
    datamodule = build_datamodule(typed)
    data = first_batches(datamodule, batches)
    result: dict[str, Any] = {
        "overrides": overrides,
        "norms": norms,
        "batches": len(data),
        "repeats": repeats,
        "seeds": [base.seed + r for r in range(repeats)],
        "model": OmegaConf.to_container(base.model, resolve=True),
        "summary": {},
        "per_batch": {},
    }
    for norm in norms:
        cfg = compose_config(overrides, norm)
        records = measure(cfg, data, datamodule, repeats)
        result["summary"][norm] = summarize(records)
        result["per_batch"][norm] = records
        print(
            f"{norm}: "
            + ", ".join(f"{g}={s['mean']:.3g}" for g, s in result["summary"][norm].items() if g.endswith("/ffn"))
        )
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, overrides = parse_args(argv)
    result = run(args.norms, overrides, args.batches, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grad_norm_at_init.json").write_text(json.dumps(result, indent=1))
    model = result["model"]
    layers = f"{model.get('encoder_layers') or ''}+{model.get('decoder_layers') or model.get('n_layers')}".lstrip("+")
    title = (
        f"gradient norm at init, {layers} layers, d={model['d_model']}; "
        f"{result['batches']} batches x {args.repeats} seed(s)"
    )
    plot(result["summary"], args.slots, args.out / "grad_norm_at_init.png", title)
    print(f"wrote {args.out / 'grad_norm_at_init.json'} and {args.out / 'grad_norm_at_init.png'}")
    return result


if __name__ == "__main__":
    main()
