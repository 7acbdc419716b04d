#!/usr/bin/env bash
# Run a command inside the project's environment, setting it up first if needed:
#   bash scripts/run.sh python train.py norm=post
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
export PATH="$root/.venv/bin:$PATH"
# the shared corpora beside the checkout, when present and nothing else was chosen
if [ -z "${ABLATE_DATA_DIR:-}" ] && [ -d "$root/../shared/data" ]; then
  export ABLATE_DATA_DIR="$(cd "$root/../shared/data" && pwd)"
fi
exec "$@"
