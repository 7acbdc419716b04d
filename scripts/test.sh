#!/usr/bin/env bash
# The test suite, offline and non-interactive: W&B offline, Hugging Face Hub offline.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_SILENT=true
exec bash scripts/run.sh python -m pytest -q "$@" </dev/null
