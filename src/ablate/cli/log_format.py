"""The console's one format for log lines, and the known noise kept off it. Every console line
(ours, Lightning's, Hydra's, Python warnings) is the message alone, after ``warning: `` or ``error:
`` when it is one (``<run dir>/train.log`` keeps time, logger and level). Hydra's loggers use
:class:`ConsoleFormatter` and :class:`DropKnownNoise` (``conf/hydra/*_logging/``);
:func:`route_to_console` sends Lightning's loggers and Python warnings through the same handlers.
The noise is dropped by its exact text; every other message still reaches the console."""

from __future__ import annotations

import logging
import warnings
from typing import Any, ClassVar, TextIO

# Lightning 2.6's rank_zero_info lines, Hydra's launcher lines and library warnings that say
# nothing about this run
NOISE = (
    "💡 Tip: For seamless cloud logging",  # an advertisement, on every Trainer
    "TPU available:",  # on every CPU/GPU machine
    "HPU available:",
    "GPU available: False, used: False",  # a CPU machine running on the CPU (the header says where it runs)
    "was configured so 100% of the batches",  # `limit_val_batches: 1.0` in conf/trainer/*.yaml is the default
    # the normal end of every run; the summary block says "run completed" and its steps. Other
    # reasons to stop (max_epochs, max_time) are kept: they are not in the summary's words
    "`Trainer.fit` stopped: `max_steps=",
    # debug=fdr chose fast_dev_run and says so (conf/debug/fdr.yaml)
    "Running in `fast_dev_run` mode",
    # on an Ampere or later GPU when the fp32 matmul precision is "highest": runtime.matmul_precision
    # (auto: "high", TF32 as nanoGPT, on CUDA) is set before the Trainer exists, so it prints only
    # when a user chose runtime.matmul_precision=highest (exact fp32) on purpose, or in an entry
    # point that trains nothing
    "that has Tensor Cores. To properly utilize them, you should set `torch.set_float32_matmul_precision",
    "Joblib.Parallel(",  # hydra-joblib-launcher's repr of its settings (hydra.launcher.* says them)
    # a resumed run says "resuming <checkpoint> ..." once (ablate.run.plan); Lightning says it
    # twice more, once before and once after loading
    "Restoring states from the checkpoint path at ",
    "Restored all states from the checkpoint at ",
)
# warnings.filterwarnings message patterns
WARNING_NOISE = (
    # Lightning 2.6's copy of torch's pytree code calls LeafSpec(), which torch 2.13 deprecates;
    # nothing to change on our side, and flattening works the same
    r".*isinstance\(treespec, LeafSpec\)",
    # trainer.detect_anomaly=true, which the debug presets choose on purpose (conf/debug/default.yaml)
    r"Anomaly Detection has been enabled",
    # under DDP, Lightning's advice to reduce every value logged at epoch level: ours are reduced
    # already (torchmetrics states, by their compute) or the same on every rank (the throughput monitor's)
    r"It is recommended to use `self\.log\('(train|val|test)/.*', \.\.\., sync_dist=True\)`",
)
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning")


class ConsoleFormatter(logging.Formatter):
    """``message``; ``warning: message``; ``error: message`` (with the traceback of an exception)."""

    PREFIX: ClassVar[dict[int, str]] = {
        logging.WARNING: "warning: ",
        logging.ERROR: "error: ",
        logging.CRITICAL: "error: ",
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # a logging config's `format` etc. are not used
        super().__init__("%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return self.PREFIX.get(record.levelno, "") + super().format(record)


class DropKnownNoise(logging.Filter):
    """Drops the records whose message contains one of :data:`NOISE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(needle in message for needle in NOISE)


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A Python warning as a log line: its text (and its category unless a plain UserWarning), no
    file, line number or source line."""
    kind = "" if category is UserWarning else f" ({category.__name__})"
    logging.getLogger("py.warnings").warning(f"{message}{kind}")


def route_to_console() -> None:
    """Lightning's records and Python's warnings through the root logger's handlers (Hydra's,
    configured with :class:`ConsoleFormatter`); the known noise filtered (idempotent)."""
    for pattern in WARNING_NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    warnings.showwarning = _show_warning
    if not logging.getLogger().handlers:
        return  # no handler to route to (outside a Hydra app): Lightning keeps its own
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if type(h) is logging.StreamHandler]:
            logger.removeHandler(handler)  # its own, added at import when nothing was configured yet
        logger.propagate = True
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropKnownNoise) for f in logger.filters):
            logger.addFilter(DropKnownNoise())
