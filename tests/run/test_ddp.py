"""DDP on CPU (2 processes, gloo) under a Hydra multirun, through train.py as a user runs it.

The failure this guards against (lightning 2.6.6, hydra-core 1.3.8, Lightning's default DDP
launcher): rank 1 is started with the original command line, ``-m`` included, and runs the whole
sweep itself; rank 0 keeps LOCAL_RANK/WORLD_SIZE/MASTER_PORT in its environment, so its later
jobs start no rank 1 and pair up with the child's copy of the sweep, whose output lands in
another multirun directory. Here: exactly one sweep directory with one directory per job, each
job trained once by exactly two ranks (one rank-1 start per job), one W&B run per job, and every
job's numbers equal to a single process training the same global batch.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ablate.data.samplers import ResumableSampler
from ablate.run import distributed
from ablate.run.plan import Job, Plan, Preflight, RunControl
from ablate.run.train import _rank_main
from ablate.tracking.wandb_reader import read_offline_run
from helpers.rank_report import report_rank
from helpers.runs import HANG_TIMEOUT, REPO

COMMON = [
    "model=tiny",
    "init=gpt2",  # weights compared to 1e-4: under xavier Adam turns the ranks' other summation order into more (losses agree to 1e-5 either way)
    "data.seq_len=16",
    "data.eval_seq_len=64",
    "data.batch_size=8",
    "trainer.max_steps=6",
    "trainer.val_check_interval=6",
    "trainer.limit_val_batches=1.0",
    "eval.test_at_end=false",
    "optim.warmup_steps=2",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
    "print_config=false",
    "callbacks.throughput.peak_flops=1e12",
]
# NCCL's rule enforced on gloo (tests/helpers/device_rules.py): a host tensor handed to a collective fails the run
NCCL_RULE = "+callbacks.nccl._target_=helpers.device_rules.NcclDeviceRule"
DDP = ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", NCCL_RULE]
LRS = ("0.004", "0.002")


def column(job: Path, key: str) -> dict[int, float]:
    with open(job / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get(key)]
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), f"{key} logged twice for a step: the job ran more than once"
    return {int(r["step"]): float(r[key]) for r in rows}


def lr_of(job: Path) -> str:
    overrides = dict(o.split("=", 1) for o in json.loads((job / "status.json").read_text())["overrides"])
    return overrides["optim.lr"]


def weights(job: Path) -> dict[str, torch.Tensor]:
    return torch.load(job / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]


@pytest.mark.slow
def test_ddp_multirun_runs_each_job_once_on_two_ranks(
    run_train, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    proc = run_train("-m", f"optim.lr={','.join(LRS)}", *COMMON, *DDP, "logger=wandb", timeout=HANG_TIMEOUT)
    logs = tmp_path / "logs"
    # one sweep directory and nothing else: no runs/ of a re-run command, no second multirun
    assert [p.name for p in logs.iterdir()] == ["multirun"]
    sweeps = list((logs / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    jobs = {lr_of(d): d for d in sweeps[0].iterdir() if d.is_dir()}
    assert sorted(jobs) == sorted(LRS), sorted(p.name for p in sweeps[0].iterdir())

    # each job started one rank 1 and joined one process group of two
    out = proc.stdout + proc.stderr
    assert out.count("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2") == len(LRS), out[-4000:]
    assert out.count("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2") == len(LRS)
    for job in jobs.values():
        status = json.loads((job / "status.json").read_text())
        assert status["status"] == "completed" and status["steps"] == 6 and status["world_size"] == 2, status
        assert sorted(column(job, "train/loss")) == list(range(6))
        runs = sorted((job / "wandb").glob("offline-run-*"))
        assert len(runs) == 1, runs  # rank 0 logs, rank 1 does not
        record = read_offline_run(runs[0])
        assert record["config"]["world_size"] == 2
        assert record["config"]["optim"]["lr"] == float(lr_of(job))

    # the same numbers as one process training the same global batch of 8
    run_train(*COMMON, f"optim.lr={LRS[0]}", "logger=csv", f"hydra.run.dir={tmp_path / 'single'}")
    single, ddp = tmp_path / "single", jobs[LRS[0]]
    for key in ("train/loss", "val/loss", "grad_norm/total"):
        expected, got = column(single, key), column(ddp, key)
        assert sorted(got) == sorted(expected), key
        assert list(got.values()) == pytest.approx(list(expected.values()), rel=1e-5, abs=1e-6), key
    w_single, w_ddp = weights(single), weights(ddp)
    for key in w_single:
        torch.testing.assert_close(w_ddp[key], w_single[key], rtol=1e-4, atol=1e-5, msg=key)
    # and the other job really trained with its own learning rate
    assert column(jobs[LRS[1]], "train/loss")[5] != column(ddp, "train/loss")[5]


@pytest.mark.slow
def test_the_ddp_evaluation_counts_every_window_once(run_train, tmp_path: Path, monkeypatch) -> None:
    """Lightning's distributed sampler evened out the ranks by repeating test windows, so test/loss
    under DDP counted some twice. Now each window is evaluated by one rank (the ranks run different
    numbers of batches) and test/loss is the single process's (token-weighted, synchronised sums)."""
    from ablate.eval_units import read_units

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    common = [
        "model=tiny",
        "data.seq_len=16",
        "data.batch_size=8",
        "data.eval_seq_len=128",
        "data.eval_batch_size=3",  # per rank: the ranks' last batches differ
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=2",
        "eval.test_at_end=true",  # the whole test split
        "optim.warmup_steps=1",
        *COMMON[-4:],
        "logger=csv",
    ]
    runs = {}
    for name, layout in (("single", []), ("ddp", DDP)):
        run_train(*common, *layout, f"hydra.run.dir={tmp_path / name}")
        status = json.loads((tmp_path / name / "status.json").read_text())
        units = read_units(tmp_path / name / "test_units.npz")[0][""]
        runs[name] = (status["metrics"]["test/loss"], list(units.index))
    (single_loss, windows), (ddp_loss, ddp_windows) = runs["single"], runs["ddp"]
    assert len(windows) % 2 and len(windows) % (2 * 3), len(windows)  # padding would repeat windows here
    assert ddp_windows == windows == list(range(len(windows)))
    assert ddp_loss == pytest.approx(single_loss, rel=5e-6)  # a repeated window: 1.6e-5 off here


def test_global_batch_must_divide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An indivisible layout fails before any process starts or data is read."""
    from hydra import compose, initialize_config_dir

    from ablate.run.plan import check_config

    with initialize_config_dir(config_dir=str(Path(__file__).parents[2] / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                *COMMON,
                *DDP,
                "data.batch_size=7",
                f"paths.data_dir={tmp_path / 'none'}",
                f"paths.output_dir={tmp_path}",
            ],
        )
    monkeypatch.setattr(distributed, "launch", lambda *a, **k: pytest.fail("a process was started"))
    with pytest.raises(
        ValueError, match=r"data.batch_size=7 \(the global batch\) is not divisible by the world size 2"
    ):
        check_config(cfg)  # train.py's check, before the job's processes are started


# ------------------------------------------------------------------------------ units


def test_sampler_splits_each_global_batch_across_ranks_and_accumulation() -> None:
    data = list(range(103))
    single = list(ResumableSampler(data, batch_size=8, seed=3))
    ranks = [list(ResumableSampler(data, batch_size=4, num_replicas=2, rank=r, seed=3)) for r in (0, 1)]
    accumulated = list(ResumableSampler(data, batch_size=4, seed=3))
    assert len(single) == 96 and sorted(single) == sorted(set(single))  # a permutation, tail dropped
    for step in range(12):
        global_batch = single[8 * step : 8 * step + 8]
        assert ranks[0][4 * step : 4 * step + 4] + ranks[1][4 * step : 4 * step + 4] == global_batch
        assert accumulated[8 * step : 8 * step + 8] == global_batch  # two micro-batches of 4


def test_sampler_resumes_mid_epoch_and_reshuffles_per_epoch() -> None:
    sampler = ResumableSampler(list(range(50)), batch_size=5, seed=0)
    epoch0 = list(sampler)
    sampler.resume_at(epoch=0, start_batch=3)
    assert list(sampler) == epoch0[15:]
    assert list(sampler) == epoch0  # only the next iteration starts late
    sampler.set_epoch(1)
    assert sorted(list(sampler)) == sorted(epoch0) and list(sampler) != epoch0
    sampler.resume_at(epoch=0, start_batch=3)  # a position in an epoch already over: ignored
    assert len(list(sampler)) == 50


@pytest.mark.parametrize(
    ("devices", "accelerator", "expected"),
    [
        (2, "cpu", 2),
        ("2", "cpu", 2),
        ("0,1,3", "gpu", 3),
        ([0, 1], "gpu", 2),
        ("auto", "cpu", 1),
    ],
)
def test_devices_per_node(devices, accelerator, expected) -> None:
    assert distributed.devices_per_node({"devices": devices, "accelerator": accelerator}) == expected


def test_batch_layout() -> None:
    assert distributed.batch_layout(32, None, 1) == (32, 1)
    assert distributed.batch_layout(32, None, 4) == (8, 1)
    assert distributed.batch_layout(32, 4, 4) == (4, 2)
    with pytest.raises(ValueError, match="not divisible by the world size 3"):
        distributed.batch_layout(32, None, 3)
    with pytest.raises(ValueError, match="micro_batch_size=3 does not divide the per-device batch 8"):
        distributed.batch_layout(32, 3, 4)


def test_needs_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_JOB_NAME"):
        monkeypatch.delenv(key, raising=False)
    assert distributed.needs_launch({"devices": 2, "accelerator": "cpu", "strategy": "ddp"})
    assert not distributed.needs_launch({"devices": 1, "accelerator": "cpu", "strategy": "ddp"})
    assert not distributed.needs_launch({"devices": 2, "accelerator": "cpu", "strategy": "ddp_spawn"})
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # already a rank of torchrun
    assert not distributed.needs_launch({"devices": 2, "accelerator": "cpu", "strategy": "ddp"})


@pytest.mark.slow
def test_spawned_ranks_get_their_job_and_a_torchelastic_environment() -> None:
    """The spawn path (what runs where CUDA is present): the rank function and the job survive
    pickling, and a launched rank is one Lightning recognises as started by torchelastic."""
    control = RunControl(Path("/out"), Path("/logs"), (Path("/out/checkpoints"),), ckpt_path="last")
    job = Job(control, ["optim.lr=0.1"], "optim.lr=0.1", "sweep", True)
    container = OmegaConf.to_container(OmegaConf.create({"a": 1}), resolve=True)
    checked = Preflight({"optim.lr": 0.1}, world_size=2, accumulate=1, max_len=64)
    plan = Plan(ckpt_path="/out/checkpoints/last.ckpt", wandb_run_id="abc")
    fn, args = pickle.loads(pickle.dumps((_rank_main, (container, job, checked, plan))))
    assert fn is _rank_main and args[1:] == (job, checked, plan)
    assert distributed.launch(report_rank, (), 2, method="spawn") == ("0", "2", True)


def test_fsdp_config_builds_the_strategy() -> None:
    """trainer=fsdp composes into Lightning's FSDPStrategy wrapping each Transformer block (it
    only runs on GPUs: Lightning refuses FSDP on CPU, so this is as far as CI goes)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from ablate.nn.block import Block

    with initialize_config_dir(config_dir=str(Path(__file__).parents[2] / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["trainer=fsdp", "trainer.devices=8"])
    assert cfg.trainer.precision == "bf16-mixed" and cfg.trainer.devices == 8
    strategy = instantiate(cfg.trainer.strategy)
    policy = strategy.kwargs["auto_wrap_policy"]
    assert isinstance(strategy, FSDPStrategy) and isinstance(policy, ModuleWrapPolicy)
    assert set(policy._module_classes) == {Block}
    assert strategy.sharding_strategy.name == "FULL_SHARD" and strategy._state_dict_type == "full"


# ------------------------------------------------------------------ how a failed rank is reported


def _failure(tmp_path: Path, exitcode: int, data: dict | None, rank: int = 0):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    error_file = tmp_path / f"error{len(list(tmp_path.iterdir()))}.json"
    if data is not None:
        error_file.write_text(json.dumps(data))
    return ChildFailedError("_rank_main", {rank: ProcessFailure(rank, 1234, exitcode, str(error_file))})


def _recorded(message: str, **extra) -> dict:
    return {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1", **extra}}}


def test_a_failed_rank_is_reported_as_its_own_error_with_its_exit_code(tmp_path: Path) -> None:
    """It was a ChildFailedError (100+ lines, exit 1) whatever the rank's error was."""
    user = distributed.rank_failure(_failure(tmp_path, 2, _recorded("data file x is missing", ablate_exit_code=2)))
    assert isinstance(user, distributed.RankUserError) and str(user) == "data file x is missing"
    stop = distributed.rank_failure(_failure(tmp_path, 130, _recorded("KeyboardInterrupt", ablate_exit_code=130)))
    assert isinstance(stop, KeyboardInterrupt)
    crash = distributed.rank_failure(_failure(tmp_path, 1, _recorded("RuntimeError: boom\n  more"), rank=1))
    assert isinstance(crash, distributed.RankCrashed) and str(crash) == "rank 1 failed: RuntimeError: boom"
    assert distributed.failure_message(crash) == ("rank 1 failed: RuntimeError: boom", "Traceback ...")
    # an exit code that the rank did not choose (its error file says 2, it ended otherwise) is a crash
    odd = distributed.rank_failure(_failure(tmp_path, 1, _recorded("x", ablate_exit_code=2)))
    assert isinstance(odd, distributed.RankCrashed)
    killed = distributed.rank_failure(_failure(tmp_path, -9, None))
    assert str(killed) == "rank 0 failed: ended by signal SIGKILL (out of memory, or killed by another process)"
    silent = distributed.rank_failure(_failure(tmp_path, 3, None))
    assert str(silent) == "rank 0 failed: exit code 3, no error recorded"


def test_a_rank_ends_with_its_user_error_written_for_the_launcher(tmp_path: Path, monkeypatch) -> None:
    from ablate.data.sources import DataFormatError

    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(tmp_path / "error.json"))
    with pytest.raises(SystemExit) as ended:
        distributed.end_rank(DataFormatError("input.txt is not valid UTF-8"), 2)
    assert ended.value.code == 2
    written = json.loads((tmp_path / "error.json").read_text())
    reported = distributed.rank_failure(_failure(tmp_path, 2, written))
    assert isinstance(reported, distributed.RankUserError) and str(reported) == "input.txt is not valid UTF-8"


def test_the_evaluation_sampler_deals_each_item_to_one_rank() -> None:
    from types import SimpleNamespace

    from ablate.data.corpus import CachedCorpus, SplitTooSmallForRanks

    corpus = CachedCorpus()
    items = list(range(11))
    assert corpus.evaluation_sampler(items, "test") is None  # one process: the loader's own order
    dealt = []
    for rank in (0, 1, 2):
        corpus.trainer = SimpleNamespace(world_size=3, global_rank=rank)  # type: ignore[assignment]
        dealt.append(list(corpus.evaluation_sampler(items, "test")))
    assert sorted(i for part in dealt for i in part) == items  # each once: no padding
    assert [len(part) for part in dealt] == [4, 4, 3]
    with pytest.raises(SplitTooSmallForRanks, match="the val split has 2 evaluation item"):
        corpus.evaluation_sampler(items[:2], "val")
