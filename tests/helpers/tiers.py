"""The test tiers, enforced while each test (and its fixtures) runs (``tests/conftest.py`` installs
the guard): an unmarked test that starts a process or calls ``Trainer.fit`` fails, naming the
marker it needs. At run time rather than at collection, so that a helper function or a fixture that
trains cannot hide it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from helpers import forked_python

TIERS = ("integration", "acceptance", "slow")


class TierError(AssertionError):
    pass


@contextmanager
def tier_guard(item) -> Iterator[None]:
    if any(item.get_closest_marker(name) for name in TIERS):
        yield
        return
    import lightning.pytorch as lp

    def refuse(what: str):
        def refused(*args, **kwargs):
            raise TierError(f"{item.nodeid} {what}: mark it @pytest.mark.integration (tests/conftest.py: test tiers)")

        return refused

    popen_init, fit, forked_init = subprocess.Popen.__init__, lp.Trainer.fit, forked_python.ForkedProcess.__init__
    subprocess.Popen.__init__ = refuse("starts a subprocess")  # type: ignore[method-assign]
    forked_python.ForkedProcess.__init__ = refuse("starts a (forked) subprocess")  # type: ignore[method-assign]
    lp.Trainer.fit = refuse("calls Trainer.fit")  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__, lp.Trainer.fit = popen_init, fit  # type: ignore[method-assign]
        forked_python.ForkedProcess.__init__ = forked_init  # type: ignore[method-assign]
