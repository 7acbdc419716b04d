"""The run-control keys read once into a typed RunControl (issue 19: the config stops travelling)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from ablate.run.plan import RunControl


def test_run_control_reads_every_key_once(tmp_path: Path) -> None:
    cfg = OmegaConf.create(
        {
            "paths": {"log_dir": str(tmp_path / "logs")},
            "callbacks": {
                "last": {"dirpath": str(tmp_path / "run" / "checkpoints")},
                "progress": {"refresh": 1},  # no dirpath: not a checkpoint folder
                "off": None,  # a callback switched off with null
            },
            "trainer": {"max_steps": 300},
            "ckpt_path": "last",
            "skip_completed": False,
            "overwrite": True,
            "resume_allow_changes": ["trainer.max_steps"],
            "print_config": True,
            "optimized_metric": "val/bleu",
        }
    )
    control = RunControl.from_config(cfg, tmp_path / "run")
    assert control == RunControl(
        output_dir=tmp_path / "run",
        log_dir=tmp_path / "logs",
        checkpoint_dirs=(tmp_path / "run" / "checkpoints",),
        ckpt_path="last",
        skip_completed=False,
        overwrite=True,
        resume_allow_changes=("trainer.max_steps",),
        print_config=True,
        optimized_metric="val/bleu",
        max_steps=300,
    )
    assert control.resuming_from("/x/last.ckpt").ckpt_path == "/x/last.ckpt" and control.ckpt_path == "last"


def test_run_control_defaults_are_the_documented_ones(tmp_path: Path) -> None:
    cfg = OmegaConf.create({"paths": {"log_dir": "logs"}, "trainer": {"max_epochs": 3}})
    control = RunControl.from_config(cfg, tmp_path)
    assert (control.ckpt_path, control.skip_completed, control.overwrite) == (None, True, False)
    assert control.optimized_metric == "val/loss" and control.max_steps is None and control.checkpoint_dirs == ()
