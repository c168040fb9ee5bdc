#!/usr/bin/env bash
# The `./ab test` step that compiles the CUDA runtime's kernels with NVRTC (no GPU needed):
# see check-kernels.py. (The harness runs a step's script with bash.)
set -euo pipefail
exec python3 "$(dirname "$0")/check-kernels.py" "$@"
