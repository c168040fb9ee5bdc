#!/usr/bin/env bash
# The scheduler's compute side, stock against ours (a review's driver, 2026-12-07): a test
# device DEV whose buffers the CPU cannot use (every crossing is a split input) and which
# really computes (through a private ggml-cpu), with or without events, cpy_tensor_async and
# pipeline copies, beside the real ggml-cpu; random graphs (with MUL_MAT_ID over host expert
# weights, so the used-experts upload runs), user assignments of nodes and leafs, the eval
# callback (want some nodes, want none; its user data checked; the scheduler queried from
# it), four flows (alloc + compute; compute without alloc; compute_async + synchronize;
# reserve, then graphs larger than the reserve), alternating shapes or one shape (replays).
#
# Exact: with stock's waits, layout and placement (GGML_SCHED_INPUT_WAITS=input,
# GGML_ALLOC_LAYOUT=stock, GGML_SCHED_INPLACE_RULE=0) the two outputs must be identical
# (every backend call on DEV, every eval callback call, every value). Defaults: the same
# with DEV's waits and the buffer sizes left out (one wait per split moves and drops them,
# docs/sched.md). Left out on purpose: pre-allocated inputs with pipeline copies (stock
# SIGSEGV, docs/sched.md "pipeline copies of pre-allocated inputs"), and a stopping
# callback (return false), whose later values are whatever the buffers held.
#
#   cabi-tests/compute-diff/run.sh [OURS_LIB_DIR] [SEEDS]   (default target/ours/lib, 60)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$ours" && pwd) || exit 2
seeds=${2:-60}
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/compute-diff
mkdir -p "$out"
cc -std=c11 -Wall -Wextra -Wno-unused-function -Werror -O1 -g -I"$up/include" -I"$up/src" \
   "$root/cabi-tests/compute-diff/compute_diff.c" -o "$out/compute_diff" \
   -L"$stock" -lggml-base -lggml-cpu -lggml || exit 2
[ -f "$ours/libggml-base.so.0" ] || { echo "install ours first: $ours/libggml-base.so.0" >&2; exit 2; }
# Prove that the second arm maps our library (a wrong folder would compare stock with itself).
mapped=$(LD_DEBUG=libs LD_LIBRARY_PATH="$ours:$stock" "$out/compute_diff" 0 1 2>&1 >/dev/null \
  | grep "calling init: .*libggml-base" | sed 's/.*calling init: //')
echo "our arm mapped: $mapped"
[ "$(readlink -f "$mapped")" = "$(readlink -f "$ours/libggml-base.so.0")" ] \
  || { echo "compute-diff: our arm did not map $ours/libggml-base.so.0" >&2; exit 1; }
fail=0; n=0
one() { # MODE(exact|default) then KEY=VALUE...
  local mode=$1; shift
  local e=()
  [ "$mode" = exact ] && e=(GGML_SCHED_INPUT_WAITS=input GGML_ALLOC_LAYOUT=stock GGML_SCHED_INPLACE_RULE=0)
  env "${e[@]}" "$@" LD_LIBRARY_PATH="$stock" "$out/compute_diff" 0 "$seeds" > "$out/a.txt" 2>&1; local ra=$?
  env "${e[@]}" "$@" LD_LIBRARY_PATH="$ours:$stock" "$out/compute_diff" 0 "$seeds" > "$out/b.txt" 2>&1; local rb=$?
  local f=cat
  [ "$mode" = default ] && f="grep -v SYNC\|EVWAIT\|EVREC\|BUFSIZE"
  n=$((n + 1))
  if [ $ra -ne 0 ] || [ $rb -ne 0 ] || ! diff -q <($f "$out/a.txt") <($f "$out/b.txt") >/dev/null; then
    echo "DIFF ($mode $*): stock rc=$ra ours rc=$rb"; fail=$((fail + 1))
  fi
}
for mode in exact default; do
  for dev in "CD_PARALLEL=0" "CD_ASYNC=1" "CD_PARALLEL=1 CD_EVENTS=1 CD_ASYNC=1" "CD_PARALLEL=1 CD_HOST=1"; do
    for cb in 0 1 3; do
      for flow in 0 1 2 3; do
        [ $flow = 1 ] && [[ $dev == *PARALLEL=1* ]] && continue
        # shellcheck disable=SC2086
        one $mode $dev CD_CB=$cb CD_FLOW=$flow CD_USER=1 CD_MOE=1
        # shellcheck disable=SC2086
        [ $flow = 0 ] && one $mode $dev CD_CB=$cb CD_FLOW=0 CD_SAME=1 CD_ROUNDS=8
      done
    done
  done
done
echo "compute-diff: $n configurations, $fail different"
[ $fail -eq 0 ]
