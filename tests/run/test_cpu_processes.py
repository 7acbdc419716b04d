"""Several processes on a CPU machine only when asked for, in fp32 (issue 39 item 3); and the CPU
imitation of NCCL's device rule that the DDP tests run under (``tests/helpers/device_rules.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from ablate.errors import ConfigError
from ablate.run import environment
from helpers.device_rules import HostTensorRefused, HostTensorTracker, _refusing, is_host
from helpers.runs import REPO


def hydra(*overrides: str) -> dict:
    """The part of a job's ``hydra`` config the check reads: its command line."""
    return {"overrides": {"task": list(overrides)}}


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


DDP = {"accelerator": "auto", "devices": "auto", "strategy": "ddp"}
CPU = {"accelerator": "cpu", "devices": 1}


@pytest.mark.parametrize(
    ("trainer", "typed", "says"),
    [
        (DDP, ["trainer=ddp"], "trainer.strategy=ddp .* add trainer.accelerator=cpu trainer.devices=2; .*trainer=ddp"),
        ({**DDP, "devices": 4}, ["trainer=ddp", "trainer.devices=4"], r"trainer.devices=4 .* 4 CPU processes"),
        ({**CPU, "devices": 2}, ["trainer.devices=2"], r"trainer.devices=2 .* add trainer.accelerator=cpu; .*devices"),
        ({**CPU, "devices": "0,1"}, ["trainer.devices='0,1'"], r"trainer.devices=0,1 .* 2 CPU processes"),
    ],
)
def test_several_processes_without_a_gpu_are_refused_unless_asked_for(no_gpu, trainer, typed, says) -> None:
    with pytest.raises(ConfigError, match=says):
        environment.check_accelerator(trainer, hydra(*typed))
    # the explicit way the message names: accepted
    environment.check_accelerator({**trainer, "accelerator": "cpu"}, hydra(*typed, "trainer.accelerator=cpu"))


def test_one_process_and_gpu_nodes_are_not_refused(monkeypatch: pytest.MonkeyPatch, no_gpu) -> None:
    environment.check_accelerator(CPU, hydra())  # the default: trainer=cpu
    environment.check_accelerator({**CPU, "devices": "auto"}, hydra())
    environment.check_accelerator(DDP, None)  # not a Hydra job (a script, a test): not this check's to judge
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    slurm = {**hydra("trainer=ddp"), "launcher": {"_target_": "hydra_plugins.x.SlurmLauncher"}}
    environment.check_accelerator(DDP, slurm)  # submitted: the jobs run on the cluster's GPU nodes
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    environment.check_accelerator({**DDP, "devices": 4}, hydra("trainer=ddp", "trainer.devices=4"))


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_ddp_trains_in_fp32_on_the_cpu_and_in_bf16_on_gpus() -> None:
    """conf/trainer/ddp.yaml's precision follows its accelerator (it was bf16-mixed on the CPU too)."""
    assert composed("trainer=ddp", "trainer.accelerator=cpu").trainer.precision == "32-true"
    assert composed("trainer=ddp").trainer.precision == "bf16-mixed"  # auto: a GPU node (the CPU is refused above)
    assert composed("trainer=ddp", "trainer.accelerator=gpu").trainer.precision == "bf16-mixed"
    assert composed("trainer=fsdp").trainer.precision == "bf16-mixed"
    assert composed("trainer=ddp", "trainer.accelerator=cpu", "trainer.precision=bf16-mixed").trainer.precision == (
        "bf16-mixed"  # a precision typed wins
    )


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_trainer_ddp_on_a_cpu_machine_is_refused_before_any_run_folder(run_train, tmp_path: Path) -> None:
    small = ["model=tiny", "data.seq_len=16", "data.batch_size=4", "trainer.max_steps=2"]  # if it ran: briefly
    proc = run_train("trainer=ddp", "trainer.devices=4", *small, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: trainer.devices=4 asks for the processes of a GPU node"), proc.stderr
    assert "trainer.accelerator=cpu" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists()  # refused before Hydra made a run folder


# ------------------------------------------------------------------ the NCCL imitation itself


@pytest.fixture
def tracker():
    mode = HostTensorTracker()
    with mode:
        yield mode


def test_the_tracker_knows_where_a_gpu_machine_would_keep_each_tensor(tracker) -> None:
    device = torch.device("cpu")  # stands for the module's device (a torch.device object)
    host_value = torch.tensor(3.0, dtype=torch.float64)  # a Python number made a tensor, no device: the host
    on_device = torch.zeros(2, device=device)
    assert is_host(host_value) and not is_host(on_device)
    assert is_host(host_value.clone().detach() * 2)  # what is computed from host tensors only stays there
    assert not is_host(on_device + host_value)  # a host scalar mixed into a device op: the device
    assert not is_host(host_value.to(device))  # moved
    assert is_host(torch.tensor(0.0).to(host_value.device))  # "moved" to a host tensor's device: still the host
    assert is_host(on_device.cpu()) and is_host(torch.zeros(1, device="cpu"))
    state = torch.tensor(0.0).to(host_value.device)
    state += on_device.sum()  # in place: a tensor stays where it is
    assert is_host(state)
    assert not is_host(torch.zeros_like(on_device)) and is_host(torch.zeros_like(host_value))


def test_a_collective_refuses_a_host_tensor_with_nccls_message(tracker) -> None:
    all_reduce = _refusing("all_reduce", lambda tensor, **kwargs: tensor)
    on_device = torch.ones(1, device=torch.device("cpu"))
    assert all_reduce(on_device) is on_device
    with pytest.raises(HostTensorRefused, match="No backend type associated with device type cpu"):
        all_reduce(torch.tensor(1.0))


# ------------------------------------------------------------------ FSDP, as far as the CPU goes


@pytest.mark.parametrize("kind", ["full", "sharded"])
def test_fsdp_composes_with_either_checkpoint_format(kind: str) -> None:
    """Lightning runs FSDP on GPUs only; here: the strategy trainer=fsdp builds, with the checkpoint
    format asked for (``full``: one ordinary file on rank 0; ``sharded``: a folder per checkpoint)."""
    from hydra.utils import instantiate
    from lightning.pytorch.strategies import FSDPStrategy

    cfg = composed("trainer=fsdp", f"trainer.strategy.state_dict_type={kind}", "trainer.devices=2")
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, FSDPStrategy) and strategy._state_dict_type == kind
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"


def test_fsdp_on_a_machine_without_a_gpu_is_refused_in_one_line(no_gpu) -> None:
    trainer = composed("trainer=fsdp", "trainer.devices=2").trainer
    with pytest.raises(ConfigError, match=r"^trainer.accelerator=gpu needs a CUDA GPU, and none is visible here"):
        environment.check_accelerator(trainer, hydra("trainer=fsdp", "trainer.devices=2"))


# ------------------------------------------------------------------ the launching process's stop relay


def test_the_launcher_relays_the_first_stop_signal_and_ends_the_ranks_on_the_second(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys
) -> None:
    import signal
    from types import SimpleNamespace

    from ablate.run import distributed

    sent: list[tuple[int, int]] = []
    ranks = [SimpleNamespace(pid=101), SimpleNamespace(pid=102)]
    monkeypatch.setattr(distributed.multiprocessing, "active_children", lambda: list(ranks))
    monkeypatch.setattr(distributed.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    stop_file = tmp_path / "sweep" / ".stop"
    before = signal.getsignal(signal.SIGTERM)
    with distributed.StopRelay(stop_file) as relay:
        assert signal.getsignal(signal.SIGTERM) == relay._handle
        relay._handle(signal.SIGTERM, None)  # kill <launcher pid>: the ranks are told, nothing else yet
        assert sent == [(101, signal.SIGTERM), (102, signal.SIGTERM)]
        assert stop_file.read_text().startswith("SIGTERM in a job")  # the sweep's other jobs stop too
        with pytest.raises(KeyboardInterrupt):
            relay._handle(signal.SIGINT, None)  # again: at once
        assert sent[2:] == [(101, signal.SIGKILL), (102, signal.SIGKILL)]
    assert signal.getsignal(signal.SIGTERM) == before
    assert capsys.readouterr().err.count("every rank stops after the same step") == 1

    ranks.clear()  # a signal before the agent started any rank: nothing to save, at once
    with distributed.StopRelay() as relay, pytest.raises(KeyboardInterrupt):
        relay._handle(signal.SIGINT, None)


def test_in_a_slurm_job_the_launcher_relays_slurms_requeue_signal(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A single SLURM task that starts its own ranks died on ``--signal=USR1`` (no handler): passed on
    to the ranks as a requeue request, once, and SLURM's SIGTERM after it is no second stop."""
    import signal
    from types import SimpleNamespace

    from ablate.run import distributed

    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(distributed.multiprocessing, "active_children", lambda: [SimpleNamespace(pid=101)])
    monkeypatch.setattr(distributed.os, "kill", lambda pid, signum: sent.append((pid, signum)))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with distributed.StopRelay() as relay:
        assert signal.SIGUSR1 not in relay._previous  # outside SLURM: not ours to take
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    before = signal.getsignal(signal.SIGTERM)
    try:
        with distributed.StopRelay() as relay:
            assert signal.getsignal(signal.SIGUSR1) == relay._handle
            relay._handle(signal.SIGUSR1, None)
            relay._handle(signal.SIGUSR1, None)  # SLURM's signal reached the ranks' group too: one request
            assert sent == [(101, signal.SIGUSR1)] and relay.requeue
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # scontrol requeue's SIGTERM: expected
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # also after the ranks are done
    finally:
        signal.signal(signal.SIGTERM, before)
    assert capsys.readouterr().err.count("SIGUSR1 (SLURM's requeue signal): every rank stops") == 1


def test_a_relayed_rank_takes_slurms_requeue_signal_as_a_requeue(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal

    from ablate.callbacks import interrupt

    monkeypatch.setattr(interrupt, "_relayed", True)
    before = signal.getsignal(signal.SIGTERM)
    callback = interrupt.GracefulInterrupt()
    callback._requeue_signal = int(interrupt.REQUEUE_SIGNAL)  # on_train_start's, in a SLURM job
    try:
        callback._handler(signal.SIGUSR1, None)
        assert callback._requested and callback._requeue  # rank 0 runs scontrol requeue after the save
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_relayed_rank_takes_any_number_of_copies_as_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal's Ctrl-C and the launcher's relay of it both reach a rank: one request, never
    "again: at once" (the launcher decides that)."""
    import signal

    from ablate.callbacks import interrupt

    monkeypatch.setattr(interrupt, "_relayed", True)
    callback = interrupt.GracefulInterrupt()
    for _ in range(3):
        callback._handler(signal.SIGINT, None)
    assert callback._requested


def test_slurms_sigterm_after_the_requeue_signal_is_ignored_process_wide(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    from types import SimpleNamespace

    from ablate.callbacks import interrupt

    monkeypatch.setattr(interrupt, "_relayed", False)
    before = signal.getsignal(signal.SIGTERM)
    originals: dict = {signal.SIGTERM: signal.SIG_DFL}
    callback = interrupt.GracefulInterrupt()
    callback._trainer = SimpleNamespace(_signal_connector=SimpleNamespace(_original_handlers=originals))  # type: ignore[assignment]
    callback._requeue_signal = int(signal.SIGUSR1)
    try:
        callback._handler(signal.SIGUSR1, None)
        assert callback._requested and callback._requeue
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # whichever thread the kernel picks
        assert originals[signal.SIGTERM] == signal.SIG_IGN  # what Lightning restores after the Trainer
        callback._handler(signal.SIGTERM, None)  # (were it still handled) expected: no "stop at once"
    finally:
        signal.signal(signal.SIGTERM, before)
