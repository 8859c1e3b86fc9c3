#!/usr/bin/env bash
# Runs the test suite: starts the local single-node SLURM cluster the sharding tests submit to, then pytest.
#   bash scripts/test.sh            # everything (about 8 minutes on 2 cores)
#   bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -x scripts/slurm_local.sh ]]; then
  bash scripts/slurm_local.sh start
fi
python -m pytest -q "$@"
