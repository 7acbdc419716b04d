"""Issue 52 item 1 in one process (the fifth hostile round): the run's ``.lock`` is truncated when
the lock is taken and released, so a ``.lock`` that is a link (symbolic or hard) to a file elsewhere
had that file emptied. Now such a lock file is refused by name and the file stays as it was."""

from __future__ import annotations

import os

import pytest

from ablate.errors import UserError
from ablate.run.lock import RunDirectoryLock


@pytest.mark.parametrize("link", ["symbolic", "hard"])
def test_a_lock_file_linked_to_another_file_is_refused_and_that_file_kept(tmp_path, link):
    run, theirs = tmp_path / "run", tmp_path / "theirs.txt"
    run.mkdir()
    theirs.write_text("the user's notes")
    if link == "symbolic":
        (run / ".lock").symlink_to(theirs)
    else:
        os.link(theirs, run / ".lock")
    with pytest.raises(UserError, match=rf"{run / '.lock'} is a (symbolic link|hard link to another file)"):
        RunDirectoryLock(run).__enter__()
    assert theirs.read_text() == "the user's notes"
