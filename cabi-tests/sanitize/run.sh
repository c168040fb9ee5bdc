#!/usr/bin/env bash
# GGML_SCHED_SANITIZE's planted faults (issue 14): builds sanitize.c and runs each case with
# the fault off (no report, right value) and on (the report's text, level 2 logging and
# level 1 aborting through ggml_abort), then the scheduler case with GGML_SCHED_DEBUG=2 too,
# and a garbage level (named in a warning; the sanitizer runs at level 2).
#
#   cabi-tests/sanitize/run.sh [OURS_LIB_DIR]     (default target/ours/lib)
#
# Our arm only: the sanitizer exists only in our libggml-base. The stock arm is not checked
# (it has nothing to report with); it is run once with a fault on to show the race is real
# there too (the value it prints is wrong, silently), without a verdict, as timing decides it.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/sanitize
mkdir -p "$out"
[ -f "$ours/libggml-base.so.0" ] || { echo "install ours first: $ours/libggml-base.so.0" >&2; exit 2; }
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g -I"$up/include" -I"$up/src" \
   "$root/cabi-tests/sanitize/sanitize.c" "$root/cabi-tests/common/fake_backend.c" -o "$out/sanitize" \
   -L"$stock" -lggml-base -lggml -lggml-cpu -lpthread || exit 2

fail=0
say() { printf '[sanitize] %s\n' "$*"; }
bad() { say "FAILED: $*"; fail=1; }

# run NAME CASE FAULT ENV... : runs one case in our arm; stderr in $out/NAME.err
run() {
  local name=$1 c=$2 f=$3; shift 3
  env "$@" LD_LIBRARY_PATH="$ours:$stock" timeout 60 "$out/sanitize" "$c" "$f" >"$out/$name.out" 2>"$out/$name.err"
  echo $?
}
reports() { grep -c "^ggml_backend_sched_sanitize: .*\(after unordered\|stale split input copy\)" "$1"; }
has() { # file substring...
  local f=$1; shift
  for s in "$@"; do grep -qF -- "$s" "$f" || { bad "$(basename "$f"): missing: $s"; return 1; }; done
}

declare -A want
want[copy-without-wait]="read after unordered write: buffer type DEV0|now:     read of 'y' by ggml_backend_tensor_copy into 'y_on_dev1' on the host|earlier: write of 'y' by node 0 'y' (SCALE) of a graph on DEV0|expected: ggml_backend_synchronize(DEV0), or ggml_backend_event_synchronize of an event recorded on DEV0 after the earlier access"
want[event-before-work]="read after unordered write: buffer type DEV0|now:     read of 'y_leaf' by node 0 'z' (ADD) of a graph on DEV1|earlier: write of 'y' by node 0 'y' (SCALE) of a graph on DEV0|expected: ggml_backend_event_record(event, DEV0) after the earlier access and ggml_backend_event_wait(DEV1, event) before this one"
want[sched-inputless]="write after unordered read: buffer type CPU|now:     write of 'kv_write' (a view of 'kv') by node 0 'kv_write' (CPY) of split 1 on CPU|earlier: read of 'kv' by node 0 'kv_read' (SCALE) of split 0 on DEV0|expected: the scheduler's wait before a split without inputs"
# A strided view is checked as its rows: the host's row between them is no conflict (fault
# off), one of them is (on).
want[strided-rows]="write after unordered write: buffer type DEV0|now:     write of 'x' by ggml_backend_tensor_set on the host, bytes [256, 384)|earlier: write of 'write_even' (a view of 'x', 4 runs of bytes) by node 1 'write_even' (CPY) of a graph on DEV0|expected: ggml_backend_synchronize(DEV0)"
# A copy writes its destination without reading it: one report (write after write), not a
# read after write besides.
want[cpy-over-unordered]="write after unordered write: buffer type DEV0|now:     write of 'y_write' (a view of 'y_leaf') by node 0 'y_write' (CPY) of a graph on DEV1|earlier: write of 'y' by node 0 'y' (SCALE) of a graph on DEV0|expected: ggml_backend_event_record(event, DEV0) after the earlier access and ggml_backend_event_wait(DEV1, event) before this one"
FAULT=GGML_SCHED_TEST_FAULT=no-wait-before-inputless-split

for c in copy-without-wait event-before-work sched-inputless strided-rows cpy-over-unordered; do
  planted=$([ $c = sched-inputless ] && echo "$FAULT" || echo "UNUSED_=1")
  rc=$(run "$c-off" "$c" off GGML_SCHED_SANITIZE=2)
  n=$(reports "$out/$c-off.err")
  if [ "$rc" = 0 ] && [ "$n" = 0 ] && grep -q "accesses checked, 0 reports" "$out/$c-off.err"; then
    say "$c, fault off: no report, $(grep -o '[0-9]* accesses checked' "$out/$c-off.err"), $(grep -o 'value .*' "$out/$c-off.out")"
  else bad "$c, fault off: rc=$rc, $n reports"; sed 's/^/    /' "$out/$c-off.err"; fi

  rc=$(run "$c-on" "$c" on GGML_SCHED_SANITIZE=2 "$planted")
  n=$(reports "$out/$c-on.err")
  IFS='|' read -ra subs <<<"${want[$c]}"
  if [ "$rc" = 0 ] && [ "$n" = 1 ] && has "$out/$c-on.err" "${subs[@]}"; then
    say "$c, fault on, level 2: 1 report, run went on ($(grep -o 'value .*' "$out/$c-on.out")):"
    sed -n '/after unordered/,/expected:/p' "$out/$c-on.err" | sed 's/^/    /'
  else bad "$c, fault on, level 2: rc=$rc, $n reports"; sed 's/^/    /' "$out/$c-on.err"; fi

  rc=$(run "$c-abort" "$c" on GGML_SCHED_SANITIZE=1 "$planted")
  if [ "$rc" = 134 ] && has "$out/$c-abort.err" "${subs[0]}" && ! grep -q "^case " "$out/$c-abort.out"; then
    say "$c, fault on, level 1: aborted through ggml_abort (exit $rc) at the report: $(grep -m1 -o 'ggml_backend_sched_sanitize: [a-z ]*after unordered [a-z]*' "$out/$c-abort.err")"
  else bad "$c, fault on, level 1: rc=$rc"; sed 's/^/    /' "$out/$c-abort.err" | head -20; fi
done

# With the stock-compatible dump: both work together.
rc=$(run sched-debug sched-inputless on GGML_SCHED_SANITIZE=2 GGML_SCHED_DEBUG=2 "$FAULT")
if [ "$rc" = 0 ] && [ "$(reports "$out/sched-debug.err")" = 1 ] && has "$out/sched-debug.err" "## SPLIT #1: CPU # 0 inputs" "write after unordered read: buffer type CPU"; then
  say "with GGML_SCHED_DEBUG=2: the split dump and the report, both"
else bad "with GGML_SCHED_DEBUG=2: rc=$rc"; fi

# A value we do not understand: named, and the checks stay on (level 2).
rc=$(run garbage copy-without-wait on GGML_SCHED_SANITIZE=abort)
if [ "$rc" = 0 ] && has "$out/garbage.err" "GGML_SCHED_SANITIZE='abort' is not a sanitizer level" && [ "$(reports "$out/garbage.err")" = 1 ]; then
  say "GGML_SCHED_SANITIZE=abort: $(grep -o "GGML_SCHED_SANITIZE='abort'.*" "$out/garbage.err")"
else bad "garbage level: rc=$rc"; sed 's/^/    /' "$out/garbage.err"; fi

# Unset: nothing said, nothing checked.
rc=$(run unset copy-without-wait on)
if [ "$rc" = 0 ] && ! grep -q ggml_backend_sched_sanitize "$out/unset.err"; then say "unset: off (no line)"; else bad "unset: rc=$rc"; fi

# The stock arm: not checked (no sanitizer there); the race itself, for the record.
LD_LIBRARY_PATH="$stock" timeout 60 "$out/sanitize" copy-without-wait on >"$out/stock.out" 2>&1
say "stock arm: not checked (stock libggml-base has no sanitizer); with the fault on it says: $(grep -o 'value .*' "$out/stock.out") and no report"

[ $fail -eq 0 ] && say PASS || say FAIL
exit $fail
