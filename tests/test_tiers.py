"""The test tiers are enforced (tests/conftest.py, tests/helpers/tiers.py): a unit test cannot start a process or train."""

from __future__ import annotations

import subprocess
import sys

import lightning.pytorch as lp
import pytest

from helpers import forked_python
from helpers.tiers import TierError, tier_guard

# integration: so that the guard under test is the only one in place (a unit test runs under its own)
pytestmark = pytest.mark.integration


class _Item:
    def __init__(self, *markers: str) -> None:
        self.nodeid = "tests/test_x.py::test_y"
        self._markers = set(markers)

    def get_closest_marker(self, name: str):
        return name if name in self._markers else None


def test_an_unmarked_test_may_not_start_a_process_or_fit():
    with tier_guard(_Item()):
        with pytest.raises(TierError, match="starts a subprocess: mark it @pytest.mark.integration"):
            subprocess.run([sys.executable, "-c", "pass"], check=False)
        with pytest.raises(TierError, match=r"starts a \(forked\) subprocess"):
            forked_python.run([sys.executable, "script.py"], capture_output=True, text=True)
        with pytest.raises(TierError, match="calls Trainer.fit"):
            lp.Trainer.fit(None, None)  # type: ignore[arg-type]
    # and everything is back afterwards
    assert subprocess.Popen.__init__ is not None and "refused" not in lp.Trainer.fit.__name__


@pytest.mark.parametrize("marker", ["integration", "slow", "acceptance"])
def test_a_marked_test_may(marker):
    with tier_guard(_Item(marker)):
        assert "refused" not in lp.Trainer.fit.__name__
        assert subprocess.Popen.__init__.__name__ == "__init__"
