"""Progress of a long data preparation: a tqdm bar in a terminal; when stderr is a file (a batch
job) a plain line every :data:`LOG_EVERY_S` seconds and one at the end, so a long tokenisation
never looks hung.
"""

from __future__ import annotations

import logging
import sys
import time
from types import TracebackType

from tqdm import tqdm

log = logging.getLogger(__name__)

LOG_EVERY_S = 30.0
QUIET_BELOW_S = 10.0  # a preparation this quick gets no closing line: the corpus summary says enough
MB = 1e6


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """``with Progress("tokenising train", total_bytes) as p: p.advance(n)`` for each piece done.

    ``total_bytes`` None (a stream of unknown length) shows what is done and the rate, no ETA.
    """

    def __init__(self, label: str, total_bytes: int | None, *, terminal: bool | None = None) -> None:
        self.label, self.total = label, total_bytes
        self.done = 0
        self.start = self.last_line = time.monotonic()
        use_bar = sys.stderr.isatty() if terminal is None else terminal
        self.bar: tqdm | None = (
            tqdm(total=total_bytes, desc=label, unit="B", unit_scale=True, unit_divisor=1000, leave=False)
            if use_bar
            else None
        )

    def __enter__(self) -> Progress:
        return self

    def advance(self, num_bytes: int) -> None:
        self.done += num_bytes
        if self.bar is not None:
            self.bar.update(num_bytes)
        elif time.monotonic() - self.last_line >= LOG_EVERY_S:
            self.last_line = time.monotonic()
            log.info("%s", self.line())

    def line(self, final: bool = False) -> str:
        """``tokenising train: 120 MB of 400 MB (30%), 3.2 MB/s, ETA 1m27s``."""
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.done / elapsed
        text = f"{self.label}: {self.done / MB:,.0f} MB"
        if final:
            return f"{text} in {_duration(elapsed)} ({rate / MB:.1f} MB/s)"
        if self.total:
            text += f" of {self.total / MB:,.0f} MB ({100 * self.done / self.total:.0f}%)"
        text += f", {rate / MB:.1f} MB/s"
        if self.total and rate > 0:
            text += f", ETA {_duration(max(self.total - self.done, 0) / rate)}"
        return text

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.bar is not None:
            self.bar.close()
        if kind is None and time.monotonic() - self.start >= QUIET_BELOW_S:
            log.info("%s", self.line(final=True))
