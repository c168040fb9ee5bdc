#!/usr/bin/env bash
# A plan for one graph must not place another where it would be wrong for it, although the
# two share structure and counts and every tensor fits (src/alloc/gallocr.rs, `fits`;
# tests/plan_reuse.rs is the same check inside the Rust test suite). Builds plan_reuse.c and
# runs both cases in the stock arm and in ours, with the real ggml-cpu on one thread:
#
#   arm    case   outcome                                  why
#   stock  bcast  FAIL: 9 wrong values                     the plan's in-place reuse applied to
#                                                          a broadcast source: rows 1-3 read
#                                                          row 0 after it was overwritten (column
#                                                          0 adds a[0][0] = 0, so right anyway)
#   stock  leaf   abort: ggml_backend_tensor_alloc's       no fit check of a leaf no node reads:
#                 GGML_ASSERT that the tensor fits its     it grew past the buffer's end
#                 buffer
#   stock  outside  8 wrong values (exit 1)                two sources outside the graph and
#                                                          one read twice share a plan: n1 takes
#                                                          the memory n2 still reads (outside.c)
#   ours   all    OK: 0 wrong values                       planned again
#
# Stock's outcomes are its gaps, kept as measured (stock and ours differ there on purpose).
#
#   cabi-tests/plan-reuse/run.sh [OURS_LIB_DIR]     (default target/ours/lib)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/plan-reuse
mkdir -p "$out"
[ -f "$ours/libggml-base.so.0" ] || { echo "install ours first: $ours/libggml-base.so.0" >&2; exit 2; }
[ -f "$stock/libggml-base.so.0" ] || { echo "build stock first: $stock/libggml-base.so.0" >&2; exit 2; }
cc -std=c11 -Wall -Wextra -Werror -O1 -g -I"$up/include" \
   "$root/cabi-tests/plan-reuse/plan_reuse.c" -o "$out/plan_reuse" \
   -L"$stock" -lggml-base -lggml-cpu -lggml || exit 2
cc -std=c11 -Wall -Wextra -Werror -O1 -g -I"$up/include" \
   "$root/cabi-tests/plan-reuse/outside.c" -o "$out/outside" \
   -L"$stock" -lggml-base -lggml-cpu -lggml || exit 2

fail=0
# check ARM LIBDIR CASE WANT_EXIT WANT_TEXT: one run, its exit status and a line of its output
check() {
  local arm=$1 lib=$2 case=$3 want_exit=$4 want=$5 log rc
  log=$out/$arm-$case.out
  # The shell's own note of an abort goes nowhere (the log has the program's message).
  if [ "$case" = outside ]; then
    { LD_LIBRARY_PATH="$lib" timeout 60 "$out/outside" < /dev/null > "$log" 2>&1; } 2> /dev/null
  else
    { LD_LIBRARY_PATH="$lib" timeout 60 "$out/plan_reuse" "$case" < /dev/null > "$log" 2>&1; } 2> /dev/null
  fi
  rc=$?
  if [ "$rc" = "$want_exit" ] && grep -qF -- "$want" "$log"; then
    printf '[plan-reuse] %-5s %-5s exit %s, %s: as expected\n' "$arm" "$case" "$rc" "$want"
  else
    printf '[plan-reuse] FAILED: %s %s: exit %s, expected %s with "%s" (%s)\n' \
      "$arm" "$case" "$rc" "$want_exit" "$want" "$log"
    fail=1
  fi
}
check stock "$stock" bcast 1 "FAIL: 9 wrong values"
check stock "$stock" leaf 134 "ggml_backend_buffer_get_alloc_size(buffer, tensor) <="
check ours "$ours:$stock" bcast 0 "OK: 0 wrong values"
check ours "$ours:$stock" leaf 0 "OK: 0 wrong values"
check stock "$stock" outside 1 "second after first: shared=1 o[0]=8 want 5, 8 wrong"
check ours "$ours:$stock" outside 0 "second after first: shared=1 o[0]=5 want 5, 0 wrong"
[ "$fail" = 0 ] && echo "[plan-reuse] PASS" || echo "[plan-reuse] FAIL"
exit "$fail"
