#!/usr/bin/env bash
# The test suite on both LeRobot lines (the README's second command and .ci/run end here):
#   1. the whole suite on Python 3.12 with LeRobot 0.6.x, in .venv312/ (created and installed on first use);
#   2. the LeRobot tests (marker `lerobot`) again on this Python (3.11: LeRobot 0.4.4).
# Each line loads checkpoints saved by the other (LEROBOT_HYDRA_OTHER_PYTHON). Arguments go to both pytest runs.
# Each run spreads its test modules over LEROBOT_HYDRA_TEST_WORKERS pytest-xdist workers (default 2; 0 runs them in
# this process): most tests wait on subprocesses, simulators and SLURM, so two share two cores well. A module's tests
# stay in one worker, and so do all the SLURM tests (tests/conftest.py).
# Python 3.12 is `python3.12`, else pyenv's newest 3.12 (PYTHON312=/path/to/python3.12 chooses another).
set -euo pipefail
cd "$(dirname "$0")/.."

python311="$(command -v "${PYTHON:-python}")"
venv=.venv312
if [[ ! -f $venv/.installed ]]; then  # written once the install succeeded
  python312="${PYTHON312:-}"
  if [[ -z $python312 ]] && python3.12 -c "" 2>/dev/null; then
    python312=python3.12
  fi
  if [[ -z $python312 ]] && command -v pyenv >/dev/null; then
    version="$(pyenv versions --bare | grep -E '^3\.12(\.|$)' | sort -V | tail -n 1 || true)"
    [[ -n $version ]] && python312="$(pyenv prefix "$version")/bin/python3.12"
  fi
  if [[ -z $python312 ]]; then
    echo "error: Python 3.12 not found (LeRobot 0.6 needs it); install it (pyenv install 3.12) or set PYTHON312" >&2
    exit 2
  fi
  "$python312" -m venv "$venv"
  PYTHON="$venv/bin/python" bash scripts/install.sh all,test
  touch "$venv/.installed"
fi

# The simulator environments of the env.python tests (tests/helpers/sim_envs.py), made once from the 3.11 base
# (kept under .venvs/; the tests make any that is missing themselves).
for mujoco in 3.3.0 3.5.0 4.0.1; do
  SIM_ENV_SYSTEM_SITE=1 PYTHON="$python311" bash scripts/sim_env.sh metaworld ".venvs/metaworld-mujoco-$mujoco" "mujoco==$mujoco" >/dev/null
done
PYTHON="$python311" bash scripts/sim_env.sh none .venvs/no-benchmark >/dev/null
SIM_ENV_SYSTEM_SITE=1 PYTHON="$python311" bash scripts/sim_env.sh robosuite .venvs/robosuite-1.5.2 >/dev/null

# Both runs always run; the script fails if either did.
status=0
workers=(-n "${LEROBOT_HYDRA_TEST_WORKERS:-2}" --dist loadgroup)
LEROBOT_HYDRA_OTHER_PYTHON="$python311" "$venv/bin/python" -m pytest -q "${workers[@]}" "$@" || status=$?
LEROBOT_HYDRA_OTHER_PYTHON="$PWD/$venv/bin/python" "$python311" -m pytest -q -m lerobot "${workers[@]}" "$@" || status=$?
exit "$status"
