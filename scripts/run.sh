#!/usr/bin/env bash
# Run a command inside the project's environment, setting it up first if needed:
#   bash scripts/run.sh python train.py norm=post
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup_env.sh"
export PATH="$root/.venv/bin:$PATH"
# the data, cache and log folders are found by the package itself (src/ablate/config/locations.py), the
# same with or without this script
exec "$@"
