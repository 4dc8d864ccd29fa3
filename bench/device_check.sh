#!/usr/bin/env bash
# Device check of the agent's nvml backend, for a machine with a real NVIDIA GPU (under 2 minutes):
# installs the agent's pinned requirements into a fresh virtualenv, then prints, through the nvml
# backend, the inventory, one metrics sample and the health of every GPU (`python -m agent gpus`),
# and the XID/health classification the agent would report. Exits 1 with one line when the machine
# has no NVIDIA driver or GPU. Offline machines: PIP_FIND_LINKS/PIP_NO_INDEX, or FAIRWAY_VENV=DIR to
# reuse a virtualenv that already has the requirements (e.g. the repo's .venv).
#
#   bash bench/device_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

if [ ! -e /proc/driver/nvidia/version ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "device_check: no NVIDIA driver on this machine (no /proc/driver/nvidia, no nvidia-smi): nothing to check" >&2
    exit 1
fi
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || true

PYTHON="${PYTHON:-python3}"
if [ -n "${FAIRWAY_VENV:-}" ]; then
    VENV="$FAIRWAY_VENV"
    echo "== using the virtualenv $VENV"
else
    VENV="$(mktemp -d)/venv"
    echo "== installing the agent's requirements into $VENV"
    "$PYTHON" -m venv "$VENV"
    if ! timeout 90 "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r agent/requirements.txt; then
        if [ -x .venv/bin/python ] && .venv/bin/python -c 'import pynvml, websockets, yaml' 2>/dev/null; then
            echo "== pip could not install (offline?): using the repo's .venv instead"
            VENV="$PWD/.venv"
        else
            echo "device_check: cannot install agent/requirements.txt (offline? set PIP_FIND_LINKS or FAIRWAY_VENV)" >&2
            exit 1
        fi
    fi
fi

echo "== nvml backend: inventory, one sample, health"
PYTHONPATH="$PWD" timeout 60 "$VENV/bin/python" -m agent gpus --gpu-backend nvml

echo "== nvml backend: two samples 1 s apart (XID watcher running)"
PYTHONPATH="$PWD" timeout 30 "$VENV/bin/python" - <<'PY'
import time
from agent.gpu.nvml import NvmlGpuBackend

backend = NvmlGpuBackend()
try:
    backend.sample()
    time.sleep(1)
    for s in backend.sample():
        print(f"GPU {s.index}: {s.health}, util {s.utilization_pct:.0f}%, {s.memory_used_mb} MiB, "
              f"{s.temperature_c:.0f} C, {s.power_w:.0f} W, ecc_uncorrected {s.ecc_uncorrected}, xids {s.xids}")
finally:
    backend.close()
PY
echo "== done in $(( $(date +%s) - start )) s"
