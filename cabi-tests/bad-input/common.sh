# Sourced by the bad-input scripts: where things are. $1 (optional) is the folder of our
# libggml-base.so.0, relative to the repository root or absolute.
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/cabi-tests/bad-input
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
model=$root/target/models/SmolLM2-135M-Instruct.Q4_1.gguf
# How many cases gguf.sh and env.sh run at a time: BAD_INPUT_JOBS, default one per core.
jobs=${BAD_INPUT_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "[bad-input] BAD_INPUT_JOBS='$jobs' is not a positive count" >&2; exit 2; }
# throttle: waits until fewer than $jobs runs are in flight
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done; }
