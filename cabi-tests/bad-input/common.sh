# Sourced by the bad-input scripts: where things are. $1 (optional) is the folder of our
# libggml-base.so.0, relative to the repository root or absolute.
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/cabi-tests/bad-input
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
model=$root/target/models/SmolLM2-135M-Instruct.Q4_1.gguf
