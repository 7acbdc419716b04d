"""Every GPU configuration the README or a config file names runs (issue 31), checked on the CPU
wherever the option exists there: bf16 autocast, the fused AdamW (what ``optim.fused: null`` picks
on CUDA) and gradient clipping together; fp16 with a gradient scaler; every ``conf/trainer`` file
and every experiment taking a training step with its own precision, optimiser, clipping,
accumulation and architecture options (only the accelerator, the corpus where it is not on this
machine, and the model's size are swapped). What Lightning would refuse once the run has started
is refused before any data is read, naming the key (``ablate.config.checks``).

Before the fix, the README's GPU command crashed on its first step
(``RuntimeError: The current optimizer, AdamW, does not allow for gradient clipping because it
performs unscaling of gradients internally``), and so did ``trainer.precision=bf16-mixed
optim.fused=true`` on the CPU.
"""

from __future__ import annotations

import copy
import csv
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.config.checks import check_precision_and_strategy
from ablate.errors import ConfigError
from ablate.optim import clip_gradients, unscale_once

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
TRAINERS = sorted(p.stem for p in (CONF / "trainer").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
LOCAL_CORPORA = {"lm": "tinyshakespeare", "translation": "multi30k"}  # what ../shared/data holds


def composed(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def global_norm(params: list[torch.Tensor]) -> float:
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))


# --- clipping under every precision (unit) ------------------------------------------------------


def toy(fused: bool) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused or None)


def fp16_step(fused: bool, clip: float) -> tuple[torch.nn.Module, float]:
    """One step with a GradScaler, as Lightning's mixed-precision plugin runs it plus our clipping
    hook: Lightning unscales a non-fused optimiser itself; ``unscale_once`` covers the fused one."""
    model, optimizer = toy(fused)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    loss = model(torch.linspace(-1, 1, 24).view(3, 8)).pow(2).sum()
    scaler.scale(loss).backward()
    if not fused:
        scaler.unscale_(optimizer)  # what Lightning does for an optimiser that does not unscale in its step
    unscale_once(scaler, optimizer)  # the grad-norm monitor ...
    unscale_once(scaler, optimizer)  # ... and the clipping both call it: the second is a no-op
    params = [p for group in optimizer.param_groups for p in group["params"]]
    clip_gradients(params, clip)
    clipped = global_norm(params)
    scaler.step(optimizer)
    scaler.update()
    return model, clipped


def test_fp16_with_a_scaler_unscales_a_fused_adamw_before_clipping() -> None:
    reference, reference_norm = fp16_step(fused=False, clip=0.5)
    model, norm = fp16_step(fused=True, clip=0.5)
    assert norm == pytest.approx(0.5, rel=1e-4) and reference_norm == pytest.approx(0.5, rel=1e-4)
    for a, b in zip(model.parameters(), reference.parameters()):  # fused and foreach AdamW: the same step
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_unscale_once_leaves_unscaled_precisions_alone() -> None:
    model, optimizer = toy(fused=True)
    model(torch.ones(2, 8)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    unscale_once(None, optimizer)  # bf16 / fp32: no scaler
    unscale_once(torch.amp.GradScaler("cpu", enabled=False), optimizer)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))


def test_fsdp_clips_through_its_root_module() -> None:
    """Under FSDP each rank holds a shard of every gradient: the global norm is the root module's
    collective ``clip_grad_norm_`` (Lightning's own clipping refuses norm clipping under FSDP)."""
    from lightning.pytorch.strategies import FSDPStrategy

    from ablate.nn.spec import ModelSpec
    from ablate.tasks.lm import LanguageModelTask

    calls: list[float] = []
    root = SimpleNamespace(clip_grad_norm_=calls.append)
    strategy = FSDPStrategy()
    strategy.model = root  # what the strategy wraps the module in
    task = LanguageModelTask(
        ModelSpec(vocab_size=11, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=8).as_dict(), {}
    )
    optimizer = torch.optim.AdamW(task.parameters())
    task.trainer = SimpleNamespace(strategy=strategy, precision_plugin=L.pytorch.plugins.precision.Precision())
    task.configure_gradient_clipping(optimizer, 0.7, "norm")
    assert calls == [0.7]


# --- refused before any data is read (unit) -----------------------------------------------------


@pytest.mark.parametrize(
    ("trainer", "key"),
    [
        ({"precision": "fp16"}, "trainer.precision='fp16' is invalid"),
        ({"precision": "16-mixed", "accelerator": "cpu"}, "trainer.precision=16-mixed"),
        (
            {"strategy": {"_target_": "lightning.pytorch.strategies.FSDPStrategy"}, "accelerator": "auto"},
            "trainer=fsdp",
        ),
    ],
)
def test_combinations_lightning_refuses_late_are_refused_first(trainer: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("(", r"\(")):
        check_precision_and_strategy({"trainer": trainer})


def test_every_trainer_file_passes_the_checks_for_its_hardware() -> None:
    for name in TRAINERS:
        cfg = composed(f"trainer={name}")
        checked = OmegaConf.to_container(cfg, resolve=False)
        checked["trainer"] = OmegaConf.to_container(cfg.trainer, resolve=True)  # type: ignore[index]  # ddp.yaml's precision follows its accelerator
        check_precision_and_strategy(checked)  # type: ignore[arg-type]
    assert composed("trainer=fsdp").trainer.accelerator == "gpu"


# --- one training step with the GPU options, on the CPU (integration) ---------------------------


def on_the_cpu(cfg: DictConfig, tmp_path: Path, data_dir: Path) -> DictConfig:
    """``cfg`` trained for one step on this machine: the accelerator and devices swapped for the
    CPU, the fused AdamW where the config trains in mixed precision (what CUDA would pick), the
    corpus swapped for the local one of the same task where it is not here, the model shrunk
    (every architecture option kept), no validation or test, CSV logging, paths in ``tmp_path``."""
    cfg = copy.deepcopy(cfg)
    task = str(cfg.task.name)
    micro = cfg.data.get("micro_batch_size")
    accumulate = min(2, cfg.data.batch_size // micro) if micro else 1  # the experiment's accumulation, kept
    with open_dict(cfg):
        if str(cfg.data.get("name", "")) != "multi30k" and not str(cfg.data._target_).endswith("TinyShakespeare"):
            cfg.data = composed(f"task={task}", f"data={LOCAL_CORPORA[task]}").data
        if task == "lm":
            cfg.data.seq_len, cfg.data.eval_seq_len = 16, None
            cfg.data.batch_size, cfg.data.micro_batch_size = 2 * accumulate, 2 if accumulate > 1 else None
        else:  # token batches: data.batch_size counts them per step, one per forward pass
            cfg.data.batch_size, cfg.data.micro_batch_size = accumulate, 1
            cfg.data.vocab_size, cfg.data.max_tokens, cfg.data.max_train_pairs = 300, 256, 2000
            cfg.data.max_eval_pairs = 16
        cfg.data.num_workers, cfg.data.pin_memory = 0, False
        for key in ("n_layers", "encoder_layers", "decoder_layers"):
            if cfg.model.get(key) is not None:
                cfg.model[key] = 1
        cfg.model.d_model, cfg.model.n_heads, cfg.model.d_ff, cfg.model.max_len = 32, 4, 64, None
        if cfg.model.get("n_kv_heads"):
            cfg.model.n_kv_heads = 2
        if cfg.trainer.get("accelerator") not in ("cpu",):
            cfg.trainer.accelerator, cfg.trainer.devices = "cpu", 1
        if str(cfg.trainer.get("precision")).endswith("-mixed") and "fused" in cfg.optim:
            cfg.optim.fused = True
        cfg.trainer.max_steps, cfg.trainer.val_check_interval, cfg.trainer.limit_val_batches = 1, 1, 0
        cfg.optim.warmup_steps = 0
        cfg.eval.test_at_end, cfg.eval.seq_lens, cfg.eval.seq_len = False, None, None
        cfg.callbacks.throughput.peak_flops = 1e12
        cfg.callbacks.progress_bar = None
        cfg.logger = composed("logger=csv").logger
        cfg.paths.data_dir, cfg.paths.cache_dir = str(data_dir), str(tmp_path.parent / "gpu-options-cache")
        cfg.paths.output_dir = str(tmp_path / "run")
        for node in cfg.callbacks.values():
            if node is not None and "dirpath" in node:
                node.dirpath = str(tmp_path / "run" / "checkpoints")
    return cfg


def fit_here(cfg: DictConfig, tmp_path: Path):
    """``train.py``'s fit of ``cfg`` in this process, as a single run into ``tmp_path / "run"``."""
    from ablate.run.config import RunConfig
    from ablate.run.plan import Job, Plan, RunControl, check_config
    from ablate.run.train import fit

    return fit(
        RunConfig.from_hydra(cfg), Job(control=RunControl.from_config(cfg, tmp_path / "run")), check_config(cfg), Plan()
    )


def one_step(cfg: DictConfig, tmp_path: Path):
    status = fit_here(cfg, tmp_path)
    assert status.status == "completed" and status.steps == 1, status
    return status


@pytest.fixture
def clip_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float, float]]:
    """``(max norm, norm before, norm after)`` of every norm clipping (torch's clip_grad_norm_)."""
    seen: list[tuple[float, float, float]] = []
    original = torch.nn.utils.clip_grad_norm_

    def spy(parameters, max_norm, *args, **kwargs):
        parameters = list(parameters)
        total = original(parameters, max_norm, *args, **kwargs)
        seen.append((float(max_norm), float(total), global_norm(parameters)))
        return total

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    return seen


@pytest.mark.integration
def test_bf16_mixed_with_fused_adamw_and_clipping_trains_on_the_cpu(
    clip_spy, tmp_path: Path, data_dir: Path, one_thread
) -> None:
    """The issue's CPU reproduction: ``trainer.precision=bf16-mixed optim.fused=true`` crashed in
    Lightning's mixed-precision clipping on step 1; it trains, and the step is clipped."""
    cfg = on_the_cpu(
        composed("trainer.precision=bf16-mixed", "optim.fused=true", "optim.grad_clip=0.05"), tmp_path, data_dir
    )
    cfg.trainer.max_steps, cfg.trainer.log_every_n_steps = 3, 1
    status = fit_here(cfg, tmp_path)
    assert status.status == "completed" and status.steps == 3
    assert len(clip_spy) == 3
    for max_norm, before, after in clip_spy:
        assert before > max_norm and after == pytest.approx(max_norm, rel=1e-3)  # clipped, to the norm asked


@pytest.mark.integration
def test_fp16_with_a_scaler_and_fused_adamw_logs_unscaled_norms(tmp_path: Path, one_thread) -> None:
    """fp16 autocast with a GradScaler (the CPU has the kernels; Lightning allows fp16 on GPUs only,
    so the plugin is given directly): trains with the fused AdamW and clipping, and the logged
    gradient norm is the unscaled one, not 2^16 times it."""
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.plugins.precision import MixedPrecision
    from torch.utils.data import DataLoader, TensorDataset

    from ablate.callbacks.grad_norm import GradNormMonitor
    from ablate.nn.spec import ModelSpec
    from ablate.tasks.lm import LanguageModelTask

    spec = ModelSpec(vocab_size=40, n_layers=1, d_model=32, n_heads=4, d_ff=64, max_len=16).as_dict()
    optim = {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1, "schedule": "constant", "warmup_steps": 0}
    optim["fused"] = True
    torch.manual_seed(0)
    task = LanguageModelTask(spec, optim)
    reference = copy.deepcopy(task)
    x, y = torch.randint(0, 40, (4, 16)), torch.randint(0, 40, (4, 16))
    torch.nn.functional.cross_entropy(reference(x).flatten(0, 1), y.flatten()).backward()
    expected = global_norm(list(reference.parameters()))

    monitor = GradNormMonitor(every_n_steps=1)
    trainer = L.Trainer(
        max_steps=1,
        accelerator="cpu",
        plugins=[MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu", init_scale=2.0**16))],
        gradient_clip_val=1e-3,
        callbacks=[monitor],
        logger=CSVLogger(tmp_path, name="csv", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(task, DataLoader(TensorDataset(x, y), batch_size=4))
    trainer.logger.finalize("success")  # type: ignore[union-attr]
    with open(tmp_path / "csv" / "metrics.csv") as f:
        total = next(float(r["grad_norm/total"]) for r in csv.DictReader(f) if r.get("grad_norm/total"))
    assert total == pytest.approx(expected, rel=0.05)  # fp16 forward: close to the fp32 norm, unscaled
    assert trainer.global_step == 1


@pytest.fixture
def process_group_cleanup():
    """``trainer=ddp`` with one device runs here, in this process: Lightning initialises a process
    group (gloo, world size 1) and sets MASTER_PORT and friends in ``os.environ``; both are undone
    after the test, so that no later test (or the runs it starts) inherits them."""
    environ = dict(os.environ)
    yield
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    os.environ.clear()
    os.environ.update(environ)


@pytest.mark.integration
@pytest.mark.parametrize("name", [t for t in TRAINERS if t != "fsdp"])
def test_every_trainer_file_takes_a_step_on_the_cpu(
    name: str, clip_spy, process_group_cleanup, tmp_path: Path, data_dir: Path, one_thread
) -> None:
    """``trainer=<name>`` with its own precision and clipping (``fsdp`` needs GPUs: Lightning has no
    FSDP on the CPU; its clipping is checked above, its config by the checks)."""
    cfg = on_the_cpu(composed(f"trainer={name}"), tmp_path, data_dir)
    one_step(cfg, tmp_path)
    assert len(clip_spy) == 1 and clip_spy[0][0] == cfg.optim.grad_clip  # optim.grad_clip reached the clipping


@pytest.mark.integration
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_takes_a_step_on_the_cpu(
    name: str, clip_spy, tmp_path: Path, data_dir: Path, one_thread
) -> None:
    cfg = on_the_cpu(composed(f"experiment={name}"), tmp_path, data_dir)
    one_step(cfg, tmp_path)
    assert len(clip_spy) == (1 if cfg.optim.grad_clip else 0)


@pytest.mark.integration
def test_the_readmes_gpu_command_takes_steps_on_the_cpu(
    clip_spy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path, one_thread
) -> None:
    """``python train.py trainer=gpu model=gpt2_small data.seq_len=1024 data.batch_size=16
    model.compile=true``, shrunk, on the CPU: bf16 autocast, fused AdamW, clipping and torch.compile
    together. Inductor's C++ code generation takes over a minute on 2 cores, so the test compiles
    with the ``aot_eager`` backend: Dynamo's graph capture and AOTAutograd, which is where autocast
    or a hook inside the compiled model would break, without generating kernels. (The inductor
    path, run by hand on the CPU: ``python train.py trainer=gpu trainer.accelerator=cpu
    data.num_workers=0 data.pin_memory=false model=tiny data.seq_len=16 data.batch_size=4
    model.compile=true optim.fused=true trainer.max_steps=2 ...`` completed.)"""
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, **{**kw, "backend": "aot_eager"}))
    torch._dynamo.reset()
    cfg = on_the_cpu(
        composed("trainer=gpu", "model=gpt2_small", "data.seq_len=1024", "data.batch_size=16", "model.compile=true"),
        tmp_path,
        data_dir,
    )
    assert cfg.model.compile and cfg.trainer.precision == "bf16-mixed" and cfg.optim.fused
    cfg.trainer.max_steps = cfg.trainer.val_check_interval = 2
    status = fit_here(cfg, tmp_path)
    assert status.status == "completed" and status.steps == 2
    assert len(clip_spy) == 2


def test_a_run_sets_the_matmul_precision_auto_resolves_to(monkeypatch: pytest.MonkeyPatch, recwarn) -> None:
    """``runtime.matmul_precision=auto`` (the default) is resolved before it reaches torch: exact fp32
    on the CPU, TF32 on a GPU trainer (so Lightning's tip never prints); torch never sees "auto"."""
    from ablate.run import plan
    from ablate.run.assembly import seed_and_runtime
    from ablate.run.config import RunConfig
    from ablate.run.plan import check_config

    before = torch.get_float32_matmul_precision()
    try:
        cfg = composed()
        seed_and_runtime(RunConfig.of(cfg), check_config(cfg).matmul_precision)  # as ablate.run.assembly.build
        assert torch.get_float32_matmul_precision() == "highest"
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(plan.memory, "check_training_step", lambda *a: None)  # it would ask the GPU
        gpu = composed("trainer=gpu")
        seed_and_runtime(RunConfig.of(gpu), check_config(gpu).matmul_precision)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)
    assert not [w for w in recwarn if "matmul" in str(w.message).lower()], [str(w.message) for w in recwarn]
