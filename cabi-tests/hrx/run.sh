#!/usr/bin/env bash
# Builds and runs the C tests of libggml-hrx.so against one libggml-base arm.
#   cabi-tests/hrx/run.sh [BASE_LIB_DIR]
# BASE_LIB_DIR holds libggml-base.so.0 (default: the stock build's target/llama-stock/bin);
# libggml-cpu comes from the stock build. Compiled with -Wall -Wextra -Wpedantic -Werror.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
base=${1:-$stock}
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/hrx-cabi
hrx=$root/target/release
mkdir -p "$out"
[ -f "$hrx/libggml_hrx.so" ] || { echo "build first: cargo build -p hrx --release" >&2; exit 2; }
for t in api null segv; do
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g \
     -I"$root/include" -I"$up/include" "$root/cabi-tests/hrx/$t.c" -o "$out/$t" \
     -L"$stock" -Wl,--no-as-needed -lggml-base -lggml-cpu -Wl,--as-needed -L"$hrx" -lggml_hrx
  echo "== $t (libggml-base from $base)"
  LD_LIBRARY_PATH="$base:$stock:$hrx" "$out/$t"
done
