"""A job reads its own ``csv/metrics.csv`` back (:mod:`ablate.run.record`) without the analysis
package, and reads it as the analysis does (:func:`ablate.analysis.job.read_metrics_csv`)."""

from __future__ import annotations

import math
from pathlib import Path

from ablate.analysis.job import read_metrics_csv
from ablate.run.status import read_logged_metrics

# As Lightning's CSVLogger leaves it after a resume: the run logged steps 1-4, was killed, resumed
# from its step-2 checkpoint and logged steps 3-4 again (other values: a different data order is
# not what a resume does, but a re-run step's value is the one that counts). Step 4's re-run row
# logged NaN (a non-finite loss is logged, then stored as null).
LOG = """epoch,step,train/loss,val/loss,val/bleu
0,1,4.0,,
0,2,,3.0,10.0
0,3,3.5,,
0,4,,2.0,20.0
0,3,3.4,,
0,4,,2.8,
0,4,,nan,
0,5,,inf,
"""


def write_log(job: Path, text: str = LOG) -> None:
    (job / "csv").mkdir(parents=True)
    (job / "csv" / "metrics.csv").write_text(text)


def test_each_step_keeps_the_last_value_written_for_it(tmp_path: Path) -> None:
    write_log(tmp_path)
    logged = read_logged_metrics(tmp_path)
    assert logged.columns == {"train/loss", "val/loss", "val/bleu"}  # step and epoch are not metrics
    assert logged.values("train/loss") == [4.0, 3.4]  # step 3 re-run after the resume
    assert logged.values("val/loss")[:2] == [3.0, 2.8]  # the re-run's 2.8 at step 4; its NaN hides nothing
    assert math.isinf(logged.values("val/loss")[2])  # kept: the objective decides what a non-finite value means
    assert logged.values("val/bleu") == [10.0, 20.0]  # the re-run did not log it at step 4: the first run's value
    assert logged.values("val/ppl") == []


def test_a_job_without_a_log_has_logged_nothing(tmp_path: Path) -> None:
    logged = read_logged_metrics(tmp_path)
    assert logged.columns == frozenset() and logged.values("val/loss") == []


def test_the_job_and_the_analysis_read_the_same_values(tmp_path: Path) -> None:
    """The file is the interface between the two readers: they must not drift apart."""
    write_log(tmp_path)
    logged = read_logged_metrics(tmp_path)
    frame = read_metrics_csv(tmp_path / "csv" / "metrics.csv")
    assert logged.columns == {str(c) for c in frame.columns}
    for metric in logged.columns:
        assert logged.values(metric) == [float(v) for v in frame[metric].dropna()], metric
