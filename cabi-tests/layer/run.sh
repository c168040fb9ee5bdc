#!/usr/bin/env bash
# Builds the C test of the backend layer once and runs it in both arms: libggml-base.so.0
# from the stock build and ours; the transcripts must be identical.
#   cabi-tests/layer/run.sh [OUR_LIB_DIR]
# OUR_LIB_DIR holds our libggml-base.so.0 (default: target/ours/lib). libggml and libggml-cpu
# come from the stock build. Compiled with -Wall -Wextra -Wpedantic -Werror.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=$root/target/llama-stock/bin
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$ours" && pwd) || exit 2
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/layer-cabi
mkdir -p "$out"
[ -f "$ours/libggml-base.so.0" ] || { echo "install ours first: $ours/libggml-base.so.0" >&2; exit 2; }
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g -I"$up/include" -I"$up/src" \
   "$root/cabi-tests/layer/layer.c" -o "$out/layer" \
   -L"$stock" -lggml-base -lggml -lggml-cpu
echo "== stock arm"
LD_LIBRARY_PATH="$stock" "$out/layer" > "$out/stock.txt"
echo "== our arm"
LD_LIBRARY_PATH="$ours:$stock" "$out/layer" > "$out/ours.txt"
# Prove which libggml-base each arm mapped.
LD_DEBUG=libs LD_LIBRARY_PATH="$ours:$stock" "$out/layer" 2> "$out/ld-debug.txt" >/dev/null
mapped=$(grep "calling init: .*libggml-base" "$out/ld-debug.txt" | sed 's/.*calling init: //')
echo "our arm mapped: $mapped"
[ "$(readlink -f "$mapped")" = "$(readlink -f "$ours/libggml-base.so.0")" ] || { echo "our arm did not map our library" >&2; exit 1; }
if diff -u "$out/stock.txt" "$out/ours.txt"; then
  echo "identical transcripts ($(wc -l < "$out/ours.txt") lines)"
else
  echo "transcripts differ" >&2
  exit 1
fi
# edge.c: the layer's callbacks over a logging test device, fixed and seeded cases.
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g -I"$up/include" -I"$up/src" \
   "$root/cabi-tests/layer/edge.c" -o "$out/edge" \
   -L"$stock" -lggml-base -lggml -lggml-cpu
LD_LIBRARY_PATH="$stock" "$out/edge" > "$out/edge-stock.txt"
LD_LIBRARY_PATH="$ours:$stock" "$out/edge" > "$out/edge-ours.txt"
if diff -u "$out/edge-stock.txt" "$out/edge-ours.txt"; then
  echo "edge cases: identical transcripts ($(wc -l < "$out/edge-ours.txt") lines)"
else
  echo "edge cases: transcripts differ" >&2
  exit 1
fi
