"""No host synchronisation on a training step that logs nothing (issue 31).

On a GPU, reading a device value on the host (``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()``,
``bool(t)``, ...) or copying a Python number to the device (``torch.tensor(x, device=...)``) makes
the CPU wait for the GPU, which then idles while the CPU catches up: at GPT-2 small's shape on an
H100 one such read per step cost 10% of the step. There is no GPU here, so the test counts those
calls instead: a run as ``train.py`` builds it (the task's logging, every default callback, the
progress display, Lightning's loop) trains a few steps on the CPU with the calls patched, and
every step window that logs nothing must make none of them.

A window is the time from one ``on_train_batch_start`` to the next: one optimiser step and what
follows it. It logs when Lightning writes its logs after it (``trainer.log_every_n_steps``), when
the grad-norm and residual-RMS monitors measure it (``log.grad_norm_every_n_steps``), and at the
first and the last step (the text progress prints both). Calls made by the data loading do not
count: the batch is built on the host there, on a GPU too.
"""

from __future__ import annotations

import traceback
from collections import Counter, defaultdict
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import Callback
from omegaconf import open_dict

REPO = Path(__file__).resolve().parents[2]
EVERY = 5  # trainer.log_every_n_steps and log.grad_norm_every_n_steps
STEPS = 12
# what a read of a device value on the host looks like (each blocks until the GPU has caught up)
READS = ("item", "tolist", "__float__", "__int__", "__bool__", "__index__", "cpu", "numpy", "nonzero")
DATA_CODE = ("/ablate/data/", "/torch/utils/data/")  # the host-side batch pipeline


def logging_window(step: int) -> bool:
    """Whether the window of the step that starts at ``global_step == step`` logs anything."""
    return step % EVERY == 0 or (step + 1) % EVERY == 0 or step == 0 or step + 1 == STEPS


class SyncCounter(Callback):
    """Counts host reads and host-to-device copies per step window (first callback of the run)."""

    def __init__(self) -> None:
        self.window: int | None = None
        self.calls: dict[int, Counter[str]] = defaultdict(Counter)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.window = trainer.global_step

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.window = None

    def record(self, what: str) -> None:
        if self.window is None:
            return
        stack = traceback.extract_stack()[:-2]
        if any(part in frame.filename for frame in stack for part in DATA_CODE):
            return
        site = next(
            (f"{Path(f.filename).name}:{f.lineno}" for f in reversed(stack) if "test_host_sync" not in f.filename),
            "?",
        )
        self.calls[self.window][f"{what} at {site}"] += 1


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> SyncCounter:
    probe = SyncCounter()
    for name in READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            probe.record(f"Tensor.{_name}")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def copied(*args, _original=original, _name=name, **kwargs):
            if kwargs.get("device") is not None:  # on a GPU: a blocking host-to-device copy
                probe.record(f"torch.{_name}(device=...)")
            return _original(*args, **kwargs)

        monkeypatch.setattr(torch, name, copied)
    import ablate.run.assembly as assembly

    build = assembly.build_callbacks
    monkeypatch.setattr(assembly, "build_callbacks", lambda *a, **k: [probe, *build(*a, **k)])
    return probe


def compose_run(tmp_path: Path, data_dir: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                "model=tiny",
                "data.seq_len=16",
                "data.batch_size=4",
                f"trainer.max_steps={STEPS}",
                f"trainer.val_check_interval={STEPS}",
                "trainer.limit_val_batches=1",
                f"trainer.log_every_n_steps={EVERY}",
                f"log.grad_norm_every_n_steps={EVERY}",
                "log.grad_norm_dense_steps=0",
                "optim.warmup_steps=2",
                "eval.test_at_end=false",
                "logger=csv",
                "callbacks.throughput.peak_flops=1e12",
                "callbacks.progress_bar.every_n_seconds=0",
                # what trainer=gpu trains with: bf16 autocast and the fused AdamW (optim.fused: null
                # picks it on CUDA; the CPU's default foreach AdamW reads its host-side step counters)
                "trainer.precision=bf16-mixed",
                "optim.fused=true",
                *overrides,
            ],
        )
    with open_dict(cfg):
        cfg.paths.data_dir, cfg.paths.cache_dir = str(data_dir), str(tmp_path / "cache")
        cfg.paths.output_dir = str(tmp_path / "run")
        for node in cfg.callbacks.values():
            if node is not None and "dirpath" in node:
                node.dirpath = str(tmp_path / "run" / "checkpoints")
    return cfg


@pytest.mark.integration
@pytest.mark.parametrize("progress", ["text", "bar"])
def test_steps_that_log_nothing_read_nothing_from_the_device(
    counter: SyncCounter, tmp_path: Path, data_dir: Path, one_thread, progress: str
) -> None:
    from ablate.run.config import RunConfig
    from ablate.run.plan import Job, Plan, RunControl, check_config
    from ablate.run.train import fit

    cfg = compose_run(tmp_path, data_dir, f"callbacks.progress_bar.mode={progress}")
    status = fit(
        RunConfig.from_hydra(cfg), Job(control=RunControl.from_config(cfg, tmp_path / "run")), check_config(cfg), Plan()
    )
    assert status.status == "completed" and status.steps == STEPS
    quiet = [s for s in range(STEPS) if not logging_window(s)]
    assert quiet == [1, 2, 3, 6, 7, 8]
    found = {s: dict(counter.calls[s]) for s in quiet if counter.calls[s]}
    assert found == {}, f"host reads on steps that log nothing: {found}"
    # the probe sees what it should: the logging windows do read the device
    assert any(counter.calls[s] for s in range(STEPS) if logging_window(s))


def test_ddp_ranks_agree_on_a_stop_only_at_logging_steps() -> None:
    """Under DDP the ranks agree on a Ctrl-C with a collective read on the host (Lightning's
    ``reduce_boolean_decision``: a GPU sync): at the logging steps, the same on every rank, not
    after every step."""
    from types import SimpleNamespace

    from ablate.callbacks.interrupt import GracefulInterrupt

    agreed: list[int] = []
    trainer = SimpleNamespace(
        global_step=0,
        accumulate_grad_batches=1,
        world_size=2,
        log_every_n_steps=EVERY,
        should_stop=False,
        strategy=SimpleNamespace(reduce_boolean_decision=lambda d, all: agreed.append(trainer.global_step) or d),
    )
    callback = GracefulInterrupt()
    for step in range(1, 13):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, None, None, None, step - 1)  # type: ignore[arg-type]
    assert agreed == [5, 10]
    callback._requested = True  # Ctrl-C at step 12: every rank stops at step 15
    for step in (13, 14, 15):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, None, None, None, step - 1)  # type: ignore[arg-type]
    assert agreed == [5, 10, 15] and callback.interrupted_at == 15 and trainer.should_stop
