#!/usr/bin/env bash
# Builds the stock libggml-cpu of the pinned tree for a chosen CPU feature set, so that a
# check can run as it would on another processor of the same architecture (ggml's CPU
# kernels are chosen when libggml-cpu is compiled):
#
#   crates/hrx/scripts/cpu-variant.sh avx2      # AVX, AVX2, FMA, F16C, BMI2; no AVX-512
#   HRX_CPU_LIB_DIR=target/cpu-variants/avx2 crates/hrx/scripts/check.sh smollm2
#
# Variants: avx2, avx512 (AVX2 plus AVX512F/BW/VBMI/VNNI/BF16), sse42 (no AVX). The machine
# must have the features of the variant it runs. Output: target/cpu-variants/VARIANT/
# libggml-cpu.so.0 (the build folder beside it); a second call reuses it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
variant=${1:?usage: cpu-variant.sh avx2|avx512|sse42}
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp
[ -f "$up/CMakeLists.txt" ] || { echo "the pinned tree is missing: run ./ab fetch" >&2; exit 2; }
avx2=(-DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON)
case $variant in
  sse42) flags=(-DGGML_SSE42=ON -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_AVX512=OFF) ;;
  avx2) flags=("${avx2[@]}" -DGGML_AVX512=OFF) ;;
  avx512) flags=("${avx2[@]}" -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON) ;;
  *) echo "unknown variant $variant (avx2, avx512, sse42)" >&2; exit 2 ;;
esac
out=$root/target/cpu-variants/$variant
if [ -f "$out/libggml-cpu.so.0" ]; then echo "$out/libggml-cpu.so.0 (built before)"; exit 0; fi
mkdir -p "$out"
cmake -S "$up" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF "${flags[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF >"$out/configure.log"
ninja -C "$out/build" ggml-cpu >"$out/build.log"
cp -L "$out/build/bin/libggml-cpu.so.0" "$out/libggml-cpu.so.0"
echo "$out/libggml-cpu.so.0"
