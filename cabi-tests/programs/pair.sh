#!/usr/bin/env bash
# Runs one llama.cpp program in both arms (the stock libggml-base, then ours), each through
# `./ab exec` (which proves the library each process mapped), with the simulated HRX device
# backend loadable, and compares the two outputs after removing what changes from run to
# run (timings, rates, addresses, pids, seeds printed, the arm's folder name).
#
#   cabi-tests/programs/pair.sh NAME [VAR=VALUE ...] -- PROGRAM ARGS...
#
# Outputs: target/programs/NAME.{stock,ours}.{stdout,stderr,norm}. Exit 0 when the normalized
# outputs are equal (or equal but for the order of lines, which two output streams
# interleaving can change: said so), 1 when they differ (the first lines of the diff are
# printed), 2 on a usage error, 3 when a proof failed. Both arms must use the same numeric
# path: give the same -t, --no-repack, -fa and sampling settings (docs/programs.md).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
name=${1:?usage: pair.sh NAME [VAR=VALUE ...] -- PROGRAM ARGS...}
shift
envs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
[ "${1:-}" = "--" ] && [ $# -ge 2 ] || { echo "usage: pair.sh NAME [VAR=VALUE ...] -- PROGRAM ARGS..." >&2; exit 2; }
shift
case $name in */*|.*|'') echo "pair.sh: NAME must be a plain file name: $name" >&2; exit 2 ;; esac
out=$root/target/programs
mkdir -p "$out"
normalize() {
  sed -E -e 's/^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+ //' \
  | grep -v -E '^\[ab\]|time =|t/s|tokens per second|ms per|speed:|sampler seed|seed =|elapsed|took| ms$|sec$| s$' \
  | sed -E -e 's/0x[0-9a-f]+/ADDR/g' -e 's/[0-9]+\.[0-9]+ ?ms/Xms/g' -e 's/t=[0-9:]+ ETA=[0-9:]+//g' \
           -e 's/pid[ =:]*[0-9]+/pid/g' -e 's/ab\/arms\/[A-Za-z0-9._-]+\//ab\/arms\/ARM\//g'
}
proof_failed=0
for arm in stock ours; do
  if [ $arm = stock ]; then lib=target/llama-stock/bin/libggml-base.so.0; else lib=target/ours/lib/libggml-base.so.0; fi
  (cd "$root" && env GGML_HRX_RUNTIME=sim "${envs[@]}" ./ab exec --lib "$lib" --arm "pair-$arm" \
     --backend target/ours/lib/libggml-hrx.so -- "$@" < /dev/null \
     > "$out/$name.$arm.stdout" 2> "$out/$name.$arm.stderr")
  rc=$?
  [ $rc -eq 3 ] && proof_failed=1
  echo "exit $rc" >> "$out/$name.$arm.stdout"
  cat "$out/$name.$arm.stderr" "$out/$name.$arm.stdout" | normalize > "$out/$name.$arm.norm"
  echo "[pair] $name $arm: exit $rc"
done
if [ $proof_failed = 1 ]; then echo "[pair] $name: a proof failed (see $out/$name.*.stderr)"; exit 3; fi
a=$out/$name.stock.norm b=$out/$name.ours.norm
if cmp -s "$a" "$b"; then
  echo "[pair] $name: same"
elif cmp -s <(sort "$a") <(sort "$b"); then
  echo "[pair] $name: same but for the order of lines"
else
  echo "[pair] $name: DIFFERS"
  diff "$a" "$b" | head -"${PAIR_DIFF_LINES:-30}"
  exit 1
fi
