#!/usr/bin/env bash
# The scheduler's waits, in the stock arm and in ours, on test devices whose work waits in a
# queue until synchronize (queue_device.h). Two programs:
#
# queued_copy.c: a queued input copy must run before its source is overwritten
# (src/sched/compute.rs, SplitWaits; docs/sched.md, "One wait per split"). Serial and with
# pipeline copies, with the queued copy first among the split's inputs (user inputs after it)
# or last, 3 tokens, 8 values each. Each run's count of wrong values must be the table's:
#
#   arm    graph   pipeline  wrong   why
#   stock  normal  no         0      its synchronize before the next input runs the copy
#   stock  last    no        16      nothing runs the copy before the next token's CPU split
#   stock  normal  yes       16      event waits do not run a copy queued after the record
#   stock  last    yes       16      the same
#   ours   any     any        0      a queued copy from host memory runs before the compute
#   both   any     any        0      with an eval callback (CB=1): its synchronize runs the copy
#
# direct_write.c: a split that touches, without a copy, host bytes another backend's queued
# split writes must come after that write (src/sched/direct/; docs/sched.md, "Writes another
# backend reads without a copy"). Serial and with pipeline copies, 3 tokens:
#
#   arm    graph   wrong   why
#   stock  cache   24      the CPU reads the cache TA writes in place: every read comes first
#   stock  reuse   48      TA's in-place write into the CPU's compute buffer lands on a later
#                          CPU node the allocator put at those bytes (a review's case)
#   stock  adamw   24      TA's OPT_STEP_ADAMW writes a moment in a CPU buffer besides its
#                          result; the CPU reads the moment first (a second review's case)
#   stock  copy    12      both compute in the CPU buffer type; TA's queued copy of a weight
#                          lands on a later CPU node the allocator put at those bytes (a
#                          third review's case; serial only: with pipeline copies every input
#                          copy is a leaf of the whole graph, and no node gets its bytes)
#   ours   any      0      the host waits for the writer before the split that touches those
#                          bytes
#
# Stock's wrong values are its gaps, kept as measured (stock and ours differ there on
# purpose). Then ours with its sanitizer (GGML_SCHED_SANITIZE=2): no report with our waits;
# with stock's waits (GGML_SCHED_INPUT_WAITS=input), where the values are wrong, the race
# reported, naming the queued copy or the unordered write.
#
#   cabi-tests/sched-waits/run.sh [OURS_LIB_DIR]     (default target/ours/lib)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/sched-waits
mkdir -p "$out"
[ -f "$ours/libggml-base.so.0" ] || { echo "install ours first: $ours/libggml-base.so.0" >&2; exit 2; }
[ -f "$stock/libggml-base.so.0" ] || { echo "build stock first: $stock/libggml-base.so.0" >&2; exit 2; }
for prog in queued_copy direct_write view_input; do
  cc -std=c11 -Wall -Wextra -Werror -O1 -g -I"$up/include" -I"$up/src" \
     "$root/cabi-tests/sched-waits/$prog.c" -o "$out/$prog" -L"$stock" -lggml-base || exit 2
done

fail=0
# cmd_of GRAPH: sets cmd to the program and arguments of a graph (normal, last: queued_copy;
# cache, reuse, adamw, copy: direct_write), 3 tokens
cmd_of() {
  case $1 in
    cache) cmd=("$out/direct_write" 3 cache) ;;
    reuse) cmd=("$out/direct_write" 3 reuse) ;;
    adamw) cmd=("$out/direct_write" 3 adamw) ;;
    copy) cmd=("$out/direct_write" 3 copy) ;;
    order | apart | viewof | prealloc | reread) cmd=("$out/view_input" 3 "$1") ;;
    *) cmd=("$out/queued_copy" 3 "$1") ;;
  esac
}
# check ARM LIBDIR GRAPH PIPELINE WANT [CB]: one run (CB=1: with an eval callback), its
# wrong-value count against WANT; with the settings in the array `extra` (names both arms)
extra=()
check() {
  local arm=$1 lib=$2 graph=$3 pipe=$4 want=$5 cb=${6:-0} log got envs=() cmd
  [ "$pipe" = 1 ] && envs+=(PIPELINE=1)
  [ "$cb" = 1 ] && envs+=(CB=1)
  envs+=("${extra[@]}")
  [ ${#extra[@]} = 0 ] || arm="$arm ${extra[*]}"
  log=$out/${arm// /_}-$graph-pipeline$pipe-cb$cb.out
  cmd_of "$graph"
  env "${envs[@]}" LD_LIBRARY_PATH="$lib" timeout 60 "${cmd[@]}" > "$log" 2>&1
  got=$(sed -n 's/^\(OK\|FAIL\): \([0-9]*\) wrong values$/\2/p' "$log")
  if [ "$got" = "$want" ]; then
    printf '[sched-waits] %-5s %-6s pipeline %s callback %s: %s wrong values, as expected\n' \
      "$arm" "$graph" "$pipe" "$cb" "$got"
  else
    printf '[sched-waits] FAILED: %s %s pipeline %s callback %s: %s wrong values, expected %s (%s)\n' \
      "$arm" "$graph" "$pipe" "$cb" "${got:-no result}" "$want" "$log"
    fail=1
  fi
}
check stock "$stock" normal 0 0
check stock "$stock" last 0 16
check stock "$stock" normal 1 16
check stock "$stock" last 1 16
for graph in normal last; do
  for pipe in 0 1; do
    check ours "$ours:$stock" "$graph" "$pipe" 0
    # an eval callback synchronizes after the split's first run of nodes: right in both arms
    check stock "$stock" "$graph" "$pipe" 0 1
    check ours "$ours:$stock" "$graph" "$pipe" 0 1
  done
done
for pipe in 0 1; do
  check stock "$stock" cache "$pipe" 24
  check ours "$ours:$stock" cache "$pipe" 0
  check stock "$stock" reuse "$pipe" 48
  check ours "$ours:$stock" reuse "$pipe" 0
  check stock "$stock" adamw "$pipe" 24
  check ours "$ours:$stock" adamw "$pipe" 0
done
# serial only (the table's why); direct_write refuses to run where no CPU node gets the bytes
check stock "$stock" copy 0 12
check ours "$ours:$stock" copy 0 0
# view_input.c: a view split input is read where its bytes are. Its copy waits for the
# backend that last wrote them: TA's in-place write, not the root's producer on TCPU (order;
# viewof, where the view is of the writer's result but names the root as its view_src;
# prealloc, a pre-allocated root assigned to TCPU that TA writes in place). Ours gave 24
# wrong values before 2026-12-08 with stock's waits (GGML_SCHED_INPUT_WAITS=input) in order
# and viewof, and with its own in prealloc (three break helpers' cases). A view placed apart
# from a root beside its reader is read without a copy (apart: stock copies it at the start
# of the split that computes the root, before the root is written, 24 wrong values; ours
# with the in-place rule off does as stock, on purpose). A copy read again by a later split
# after its source was written in place is filled anew (reread: stock fills it once per
# backend, 24 wrong values; ours with the rule off likewise).
#
#   arm                 graph                     wrong
#   stock               order, viewof, prealloc    0
#   ours, either waits  order, viewof, prealloc    0
#   stock               apart, reread             24
#   ours                apart, reread              0
#   ours, rule off      apart, reread             24
for pipe in 0 1; do
  for graph in order viewof prealloc; do
    check stock "$stock" "$graph" "$pipe" 0
    check ours "$ours:$stock" "$graph" "$pipe" 0
    extra=(GGML_SCHED_INPUT_WAITS=input)
    check ours "$ours:$stock" "$graph" "$pipe" 0
    extra=()
  done
  for graph in apart reread; do
    check stock "$stock" "$graph" "$pipe" 24
    check ours "$ours:$stock" "$graph" "$pipe" 0
    extra=(GGML_SCHED_INPLACE_RULE=0)
    check ours "$ours:$stock" "$graph" "$pipe" 24
    extra=()
  done
done
# The sanitizer (ours only) must see the race where it happens and nothing where it does not:
# our waits, every variant, no report; stock's waits (GGML_SCHED_INPUT_WAITS=input) with the
# copy last or with pipeline copies, one report for each token whose CPU split overwrote the
# copy's source (2); for direct_write, one for each token whose CPU split read the cache
# before TA's queued write (3), and with the reuse graph three a token serial (two for the
# CPU's write over TA's queued read and write, one for the input copy over TA's queued read
# of x) and two a token with pipeline copies (9, 6); with the adamw graph one a token (3);
# with the copy graph (serial) four a token, y's write and the input copy of z, each over TA's
# queued copy of u and its read of that copy (12).
# sanitize ENV... -- GRAPH PIPELINE WANT_REPORTS
sanitize() {
  local envs=() graph pipe want log got cmd
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  graph=$1 pipe=$2 want=$3
  log=$out/sanitize-$graph-pipeline$pipe-${#envs[@]}.err
  cmd_of "$graph"
  env "${envs[@]}" GGML_SCHED_SANITIZE=2 $([ "$pipe" = 1 ] && echo PIPELINE=1) LD_LIBRARY_PATH="$ours:$stock" \
    timeout 60 "${cmd[@]}" > "$log" 2>&1
  # what a report must name: the queued copy, or TA's write the CPU split read too early
  local named="earlier: read of .*(cpy_tensor_async).*expected: the queued copy run before its source is written again"
  [ "$graph" = cache ] &&
    named="read after unordered write.*split 1 on TCPU.*earlier: write of .* on TA.*a host wait on TA"
  [ "$graph" = adamw ] &&
    named="read after unordered write.*split 1 on TCPU.*earlier: write of .* on TA"
  [ "$graph" = reuse ] &&
    named="write after unordered write.*now: *write of .* of split 2 on TCPU.*earlier: write of .* on TA"
  [ "$graph" = apart ] &&
    named="stale split input copy: node .* 's' (ADD) of split 0 on TB reads 'TB#v#0'.*written again after that copy: write of 'r'"
  [ "$graph" = reread ] &&
    named="stale split input copy: node .* 's' (ADD) of split 3 on TB reads 'TB#v#0'.*written again after that copy: write of 'w'"
  [ "$graph" = copy ] &&
    named="write after unordered write.*now: *write of 'y' .* of split 1 on TCPU.*earlier: write of .*(cpy_tensor_async).* on TA"
  got=$(sed -n 's/^ggml_backend_sched_sanitize: [0-9]* accesses checked, \([0-9]*\) reports$/\1/p' "$log")
  if [ "$got" != "$want" ]; then
    printf '[sched-waits] FAILED: sanitizer, %s %s pipeline %s: %s reports, expected %s (%s)\n' \
      "${envs[*]:-ours}" "$graph" "$pipe" "${got:-no count}" "$want" "$log"
    fail=1
  elif [ "$want" != 0 ] && ! grep -q "$named" <(tr '\n' ' ' < "$log"); then
    printf '[sched-waits] FAILED: sanitizer, %s %s pipeline %s: the report does not name the race (%s)\n' \
      "${envs[*]}" "$graph" "$pipe" "$log"
    fail=1
  else
    printf '[sched-waits] sanitizer, %-38s %-6s pipeline %s: %s reports, as expected\n' \
      "${envs[*]:-ours}" "$graph" "$pipe" "$got"
  fi
}
for graph in normal last cache reuse adamw; do
  for pipe in 0 1; do
    sanitize -- "$graph" "$pipe" 0
  done
done
sanitize -- copy 0 0
sanitize GGML_SCHED_INPUT_WAITS=input -- last 0 2
sanitize GGML_SCHED_INPUT_WAITS=input -- normal 1 2
sanitize GGML_SCHED_INPUT_WAITS=input -- last 1 2
sanitize GGML_SCHED_INPUT_WAITS=input -- cache 0 3
sanitize GGML_SCHED_INPUT_WAITS=input -- cache 1 3
sanitize GGML_SCHED_INPUT_WAITS=input -- reuse 0 9
sanitize GGML_SCHED_INPUT_WAITS=input -- reuse 1 6
sanitize GGML_SCHED_INPUT_WAITS=input -- adamw 0 3
sanitize GGML_SCHED_INPUT_WAITS=input -- adamw 1 3
sanitize GGML_SCHED_INPUT_WAITS=input -- copy 0 12
# view_input.c: no report in ours, with either waits; with the rule off the apart graph's
# stale copy is reported once a token
for pipe in 0 1; do
  for graph in order viewof prealloc; do
    sanitize -- "$graph" "$pipe" 0
    sanitize GGML_SCHED_INPUT_WAITS=input -- "$graph" "$pipe" 0
  done
  for graph in apart reread; do
    sanitize -- "$graph" "$pipe" 0
    sanitize GGML_SCHED_INPLACE_RULE=0 -- "$graph" "$pipe" 3
  done
done
[ "$fail" = 0 ] && echo "[sched-waits] PASS" || echo "[sched-waits] FAIL"
exit "$fail"
