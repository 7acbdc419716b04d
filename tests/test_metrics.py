"""A metric is declared once (ablate.metrics) and every place that shows or ranks metrics knows it.

The built-in declarations keep the conventions users read (loss 4 decimals, perplexity 2, BLEU up,
bits per byte down); a metric added by one declaration appears in the run summary, the progress
line, the W&B summary goals, the figures' axis labels and the analysis' direction; an undeclared
one is refused by name where a direction is needed instead of being ranked by a guess.
"""

from __future__ import annotations

import io

import pytest

import ablate.tasks  # noqa: F401  (the tasks declare the built-in metrics)
from ablate import metrics
from ablate.metrics import Metric
from helpers.fake_trainer import Clock, fake_trainer

ACCURACY = Metric("accuracy", "max", "token accuracy", "fraction of tokens", format=".3f", progress_format="5.3f")


@pytest.fixture
def accuracy():
    metrics.register([ACCURACY])
    yield ACCURACY
    metrics.unregister(["accuracy"])


def test_logged_names_are_taken_apart() -> None:
    assert metrics.parse("test/ppl@512") == ("test", "ppl", 512)
    assert metrics.parse("val/loss") == ("val", "loss", None)
    assert metrics.parse("loss") == (None, "loss", None)


def test_the_built_in_declarations() -> None:
    assert [metrics.higher_is_better(n) for n in ("val/bleu", "val/loss", "test/ppl@64", "val/bpb")] == [
        True,
        False,
        False,
        False,
    ]
    assert metrics.format_value("val/loss", 1.47123) == "1.4712"
    assert metrics.format_value("val/ppl", 4.35449) == "4.35"
    assert metrics.format_value("val/ppl", 2.5e6) == "2.500e+06"  # a perplexity that blew up
    assert metrics.format_value("val/bleu", 23.456) == "23.46"
    assert metrics.format_value("val/loss", None) == "-"
    assert metrics.axis_label("val/ppl") == "perplexity (exp of mean NLL per token)"
    assert metrics.axis_label("train/loss") == "training cross-entropy (nats per token)"
    assert metrics.axis_label("train/lr") == "learning rate"
    assert metrics.shown("val") == ["val/loss", "val/ppl", "val/bleu", "val/acc"]  # bpb is logged, not watched
    assert metrics.format_value("val/acc", 0.91234) == "0.912" and metrics.higher_is_better("test/acc")


def test_an_undeclared_metric_is_refused_by_name_where_a_direction_is_needed() -> None:
    from ablate.analysis.job import higher_is_better

    with pytest.raises(metrics.UndeclaredMetricError, match=r"'val/f1'.*declared: .*bleu"):
        higher_is_better("val/f1")
    with pytest.raises(metrics.UndeclaredMetricError, match="no better direction"):
        higher_is_better("train/lr")
    assert metrics.axis_label("val/f1") == "val/f1" and metrics.format_value("val/f1", 0.123456) == "0.1235"


def test_a_quantity_declared_twice_must_mean_the_same() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        metrics.register([Metric("loss", "max", "likelihood")])
    metrics.register([metrics.find("val/loss")])  # the same declaration again: fine


def test_a_declared_metric_appears_everywhere(accuracy: Metric) -> None:
    from ablate.analysis.job import higher_is_better
    from ablate.callbacks.progress import TextProgress
    from ablate.cli.console import format_run_summary, headline_metrics
    from ablate.tracking.wandb_run import summary_goals

    assert "val/accuracy" in headline_metrics() and "test/accuracy" in headline_metrics()
    from ablate.run.status import RunStatus

    summary = format_run_summary(RunStatus("completed", steps=5, metrics={"val/accuracy": 0.51234}), "out")
    assert "  val/accuracy  0.512" in summary.splitlines()
    assert summary_goals()["val/accuracy"] == "max"
    assert higher_is_better("test/accuracy")
    assert metrics.axis_label("test/accuracy") == "test token accuracy (fraction of tokens)"

    clock, trainer, out = Clock(), fake_trainer(max_steps=10), io.StringIO()
    bar = TextProgress(every_n_steps=1, every_n_seconds=0, clock=clock)
    bar.stream = out
    bar.on_train_start(trainer, None)
    trainer.callback_metrics.update({"val/loss": 2.0, "val/accuracy": 0.25})
    bar.on_validation_end(trainer, None)
    assert "loss 2.000  accuracy 0.250" in out.getvalue()


def test_an_empty_registry_is_refused_not_read_as_blank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry is filled by the tasks (ablate.tasks registers them); asked before any task
    declared its metrics it says so, instead of every summary silently showing no metric."""
    monkeypatch.setattr(metrics, "_REGISTRY", {m.name: m for m in metrics.RUN_METRICS})
    with pytest.raises(metrics.NoTaskRegisteredError, match="import ablate.tasks"):
        metrics.shown("val")
    with pytest.raises(metrics.NoTaskRegisteredError):
        metrics.find("val/loss")
