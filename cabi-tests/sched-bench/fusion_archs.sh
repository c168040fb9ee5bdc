#!/usr/bin/env bash
# Whether our allocation layout keeps ggml-cuda's kernel fusions open on every architecture,
# without a GPU: every model test-llama-archs writes (random weights, 128 architectures, dense
# and MoE) runs llama-bench (a 32-token prompt, then 2 tokens) with all layers on HRX0, in the
# stock arm and in ours, with backend_trace.c preloaded to write each graph HRX0 computes with
# its layout. fusion_check.py --compare (HRX0's graphs: the CPU's layout fuses nothing) then
# looks at every run of consecutive nodes: ggml-cuda refuses to fuse a run whose output
# overlaps a source from outside it, so a run that ours' layout forbids and stock's allows is
# a fused kernel lost on a CUDA build.
#
#   cabi-tests/sched-bench/fusion_archs.sh [OURS_LIB_DIR]   (default target/ours/lib, which
#                                                            holds libggml-hrx.so too)
#
# Passes when, in every model's graphs, ours forbids no run of up to 5 nodes that stock allows
# (the memory-checked fusions of dense models are at most 5 nodes: norm, mul, rope, view,
# set_rows; product, bias, product, bias, GLU. ggml-cuda guards its MoE routing runs itself,
# through the scheduler's add_alloc_dep; its NVFP4 scaled-GLU runs, 7 to 13 nodes, are not
# covered) and both arms computed the same graphs (ops and shapes); and when the control
# fails, as it must: ours in the packed layout with GGML_ALLOC_REUSE_DELAY=0 (the packing
# before 2026-12-05) forbids such runs in some models. The control sets GGML_ALLOC_LAYOUT=packed
# itself, so that it finds what it must under any layout the caller chose (`ours` runs in the
# caller's: with GGML_ALLOC_LAYOUT=stock, the check is that stock's layout in our allocator
# forbids nothing stock's allows). Runs of up to 12 nodes are counted too, for information.
# HRX0's layout is ggml-cuda's but for two things: HRX0 has no graph_optimize (no reordering,
# no add_alloc_dep) and allots each tensor its ggml_nbytes. Logs and graphs in
# target/fusion-archs/. About a minute.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp
out=$root/target/fusion-archs
check=$root/cabi-tests/sched-bench/fusion_check.py
say() { printf '[fusion-archs] %s\n' "$*"; }
for f in "$ours/libggml-base.so.0" "$ours/libggml-hrx.so" "$stock/llama-bench" "$stock/test-llama-archs" "$up/ggml/include/ggml.h"; do
  [ -e "$f" ] || { say "missing $f (./ab build-stock, ./ab build-ours)"; exit 2; }
done
mkdir -p "$out/models"
python3 "$check" --self-test | sed 's/^/[fusion-archs] /'
[ "${PIPESTATUS[0]}" = 0 ] || { say "FAILED: fusion_check.py's own cases"; exit 1; }
# the models are written once; a run cut short while writing them starts over
cc -O2 -fPIC -shared -pthread -I"$up/ggml/include" -I"$up/ggml/src" -I"$up/include" -Wno-unused-function \
  "$root/cabi-tests/sched-bench/backend_trace.c" -o "$out/libbackend-trace.so" -ldl \
  || { say "the tracer did not compile"; exit 2; }
if [ ! -f "$out/models/written" ]; then
  rm -f "$out"/models/*.gguf
  LD_LIBRARY_PATH=$stock "$stock/test-llama-archs" -o "$out/models" > "$out/test-llama-archs.log" 2>&1 \
    || { say "test-llama-archs -o failed: $(tail -2 "$out/test-llama-archs.log")"; exit 2; }
  ls "$out"/models/*.gguf > /dev/null 2>&1 || { say "test-llama-archs -o wrote no models"; exit 2; }
  touch "$out/models/written"
fi

# graphs ARM LIB_DIR MODEL ENV...: the graphs HRX0 computes in one llama-bench run
graphs() {
  local arm=$1 lib=$2 model=$3 name
  shift 3
  name=$(basename "$model" .gguf)
  rm -f "$out/$arm/$name.txt"
  env "$@" LD_LIBRARY_PATH="$lib:$stock" GGML_BACKEND_PATH="$ours/libggml-hrx.so" \
    LD_PRELOAD="$out/libbackend-trace.so" BACKEND_TRACE_GRAPHS="$out/$arm/$name.txt" \
    timeout 120 "$stock/llama-bench" -m "$model" -dev HRX0 -ngl 99 -p 32 -n 2 -r 1 -t 2 -o csv \
    > "$out/$arm/$name.log" 2>&1
}

fail=0 n=0 control=0 long=0
mkdir -p "$out/stock" "$out/ours" "$out/ours-delay0"
for model in "$out"/models/*.gguf; do
  name=$(basename "$model" .gguf)
  n=$((n + 1))
  for arm in stock ours ours-delay0; do
    case $arm in
      stock) graphs stock "$stock" "$model" ;;
      ours) graphs ours "$ours" "$model" ;;
      ours-delay0) graphs ours-delay0 "$ours" "$model" GGML_ALLOC_LAYOUT=packed GGML_ALLOC_REUSE_DELAY=0 ;;
    esac || { say "FAILED: $name: llama-bench in the $arm arm: $(tail -1 "$out/$arm/$name.log")"; fail=1; continue 2; }
  done
  python3 "$check" --compare --backend HRX0 --window 5 "$out/stock/$name.txt" "$out/ours/$name.txt" > "$out/ours/$name.fusion" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    say "FAILED: $name: $(tail -1 "$out/ours/$name.fusion")"
    grep "B's layout forbids\|skipped" "$out/ours/$name.fusion" | head -5 | sed 's/^/    /'
    fail=1
  fi
  # for information and for the control, only a run found counts (not a failure to compare)
  python3 "$check" --compare --backend HRX0 --window 12 "$out/stock/$name.txt" "$out/ours/$name.txt" > "$out/ours/$name.fusion12" 2>&1
  grep -q "B's layout forbids" "$out/ours/$name.fusion12" && long=$((long + 1))
  python3 "$check" --compare --backend HRX0 --window 5 "$out/stock/$name.txt" "$out/ours-delay0/$name.txt" > "$out/ours-delay0/$name.fusion" 2>&1
  grep -q "B's layout forbids" "$out/ours-delay0/$name.fusion" && control=$((control + 1))
done
say "$n models: ours forbids no run of up to 5 nodes that stock allows in $([ $fail -eq 0 ] && echo all of them || echo "some: see above"); runs of 6 to 12 nodes in $long models (for information: target/fusion-archs/ours/*.fusion12)"
if [ "$control" -eq 0 ]; then
  say "FAILED: the control found nothing: packed with GGML_ALLOC_REUSE_DELAY=0, ours should forbid runs stock allows"
  fail=1
else
  say "control: packed with GGML_ALLOC_REUSE_DELAY=0, ours forbids such runs in $control of $n models"
fi
[ $fail -eq 0 ] && say PASS || say FAIL
exit $fail
