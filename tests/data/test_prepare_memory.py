"""A corpus is prepared in bounded memory (issue 20): under an address-space limit smaller than
its text would need as one string, the cache is built and decodes back to the file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

CORPUS_MB = 120
HEADROOM_MB = 96  # what the preparation may add to the process: less than the text as one string

_PREPARE = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    from ablate.data.lm_data import TextFiles

    train, val, cache_dir, headroom = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    dm = TextFiles(train, val, cache_dir=cache_dir, tokenizer="char", seq_len=8)
    with open("/proc/self/status") as f:  # what torch, numpy and the interpreter already take
        size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (size + headroom, hard))
    dm.prepare_data()
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    dm.setup("fit")
    tokens = dm.datasets["train"].tokens
    print(len(tokens), dm.tokenizer.decode(np.asarray(tokens[:40])))
    """
)


def _corpus(path: Path, megabytes: int) -> str:
    """``megabytes`` of lines (1 MB pieces in shuffled order, never held whole); returns the first line."""
    rng = np.random.default_rng(0)
    words = np.array(["the", "model", "attention", "norm", "layer", "residual", "über", "naïve", "42", "token"])
    lines = [" ".join(row) + "\n" for row in rng.choice(words, size=(14_000, 12))]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(megabytes):
            f.write("".join(lines[i] for i in rng.permutation(len(lines))))
    with open(path, encoding="utf-8") as f:
        return f.readline()


@pytest.mark.integration
def test_corpus_larger_than_the_memory_limit_is_prepared(tmp_path: Path) -> None:
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    first = _corpus(train, CORPUS_MB)
    val.write_text(first * 100, encoding="utf-8")
    text_bytes = train.stat().st_size
    assert text_bytes > HEADROOM_MB * 2**20  # the text alone would not fit in the headroom
    env = {"MALLOC_ARENA_MAX": "1", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", _PREPARE, str(train), str(val), str(tmp_path / "cache"), str(HEADROOM_MB * 2**20)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count, head = done.stdout.split(" ", 1)
    assert int(count) == len(train.read_text(encoding="utf-8"))  # char level: one token per character
    assert first.startswith(head.rstrip("\n")[:40])
