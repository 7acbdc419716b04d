#!/usr/bin/env bash
# The test suite, offline and non-interactive: W&B offline, Hugging Face Hub offline.
# Files run side by side on every core (pytest-xdist, at most 4 workers; a file stays on one worker, so
# its module fixtures are built once), each worker and the runs it starts on one thread: tiny models,
# faster that way, and no oversubscription. Arguments go to pytest (`-n 0` runs in this process).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_SILENT=true
# (a worker per core, counted by pytest-xdist: not `nproc`, which reports OMP_NUM_THREADS)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The suite starts hundreds of Python processes (runs, sweeps, the README's commands in fresh clones):
# each reuses the bytecode the first one wrote, even where the environment says not to write it.
unset PYTHONDONTWRITEBYTECODE
exec bash scripts/run.sh python -m pytest -q -n auto --maxprocesses 4 --dist loadfile "$@" </dev/null
