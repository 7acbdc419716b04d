"""One quiet console format (ablate.cli.log_format): the project's, Lightning's, Hydra's and Python's
lines read the same (the message; ``warning: ``/``error: `` before it), the known noise is dropped, a
Python warning shows no file, line or source; ``train.py --help`` is the project's own help,
generated from the axis table."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ablate.cli.log_format import ConsoleFormatter, DropKnownNoise, route_to_console
from ablate.nn.axes import AXES

CONF = Path(__file__).resolve().parents[2] / "conf"


def record(message: str, level: int = logging.INFO, name: str = "ablate.x") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_one_format_for_every_level() -> None:
    formatter = ConsoleFormatter(format="[%(asctime)s][%(name)s] %(message)s")  # a config's format is not used
    assert formatter.format(record("run completed")) == "run completed"
    assert formatter.format(record("the cache is stale", logging.WARNING)) == "warning: the cache is stale"
    assert formatter.format(record("no GPU", logging.ERROR)) == "error: no GPU"


@pytest.mark.parametrize(
    "noise",
    [
        "GPU available: False, used: False",
        "Running in `fast_dev_run` mode: will run the requested loop using 1 batch(es). Logging and checkpointing is suppressed.",
        "Joblib.Parallel(n_jobs=2,backend=loky,prefer=processes,require=None,verbose=0) is launching 4 jobs",
        "TPU available: False, using: 0 TPU cores",
    ],
)
def test_known_noise_is_dropped(noise: str) -> None:
    assert not DropKnownNoise().filter(record(noise))


def test_information_is_kept() -> None:
    for message in ("GPU available: True (cuda), used: True", "GPU available: True (cuda), used: False", "step 10"):
        assert DropKnownNoise().filter(record(message))


def test_every_job_logging_of_the_project_uses_the_format() -> None:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for name in ("train", "eval", "generate", "export_hf", "average_checkpoints", "attention_maps"):
            hydra = compose(name, return_hydra_config=True).hydra
            for logging_cfg in (hydra.job_logging, *([hydra.hydra_logging] if name == "train" else [])):
                console = logging_cfg.handlers.console
                assert logging_cfg.formatters[console.formatter]["()"].endswith("ConsoleFormatter"), name
                assert console.filters == ["known_noise"], name


def test_a_python_warning_is_one_line_without_its_source(caplog: pytest.LogCaptureFixture) -> None:
    """A raw ``UserWarning`` printed the file, the line number and the source line."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        route_to_console()
        with caplog.at_level(logging.WARNING):
            warnings.warn("ckpt_path=last: something to know", UserWarning, stacklevel=1)
            warnings.warn("an old argument", DeprecationWarning, stacklevel=1)
    assert [r.getMessage() for r in caplog.records] == [
        "ckpt_path=last: something to know",
        "an old argument (DeprecationWarning)",
    ]
    assert all(r.name == "py.warnings" for r in caplog.records)


def test_help_lists_every_axis_and_its_options() -> None:
    """``--help`` was Hydra's generic dump, listing internal groups the README never mentions."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        text = compose("train", return_hydra_config=True).hydra.help.template
    lines = text.splitlines()
    for axis in AXES:
        line = next(line for line in lines if line.split()[:1] == [axis.label])
        assert line.split(None, 1)[1] == ", ".join(axis.options()).replace("$", "$$")
    assert "python scripts/summarize.py logs/multirun/<sweep>" in text and "docs/" in text
    assert "Powered by Hydra" not in text and "hydra/launcher" not in text
