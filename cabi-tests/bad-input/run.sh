#!/usr/bin/env bash
# Builds cabi-tests/bad-input/bad_input.c and runs every case in both arms, the stock
# libggml-base and ours, against what each arm is expected to do. Where stock crashes and ours
# aborts by name (or goes on), both outcomes are written down here and both are checked: a
# stock outcome that changes means the pin changed, an outcome of ours that changes is a bug.
#
#   cabi-tests/bad-input/run.sh [OURS_LIB_DIR]     (default target/ours/lib)
#
# Needs the stock build (target/llama-stock/bin) and libggml-hrx (target/release).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
ours=${1:-$root/target/ours/lib}
[ -z "${1:-}" ] || ours=$(cd "$root" && cd "$ours" && pwd)
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/bad-input
hrx=$root/target/release
mkdir -p "$out"
[ -f "$hrx/libggml_hrx.so" ] || { echo "build first: ./ab build-ours" >&2; exit 2; }
cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g -I"$root/include" -I"$up/include" \
   "$root/cabi-tests/bad-input/bad_input.c" -o "$out/bad_input" \
   -L"$stock" -Wl,--no-as-needed -lggml-base -lggml-cpu -Wl,--as-needed -L"$hrx" -lggml_hrx || exit 2

# case | stock's outcome | ours' outcome  ("signal SIGABRT; message: yes" = a named abort;
# "A or B": either, for an outcome stock does not fix: it reads past its buffer-type array
# for a bad buffer id (whatever lies there decides), and for a race: stock frees buffers a queued
# compute still reads, which crashes unless the queue happened to finish first)
expected=$(cat <<'TABLE'
graph_compute(cpu, NULL)|signal SIGSEGV; message: no|signal SIGABRT; message: yes
supports_op(cpu, NULL)|signal SIGSEGV; message: no|signal SIGABRT; message: yes
reg_get_proc_address(reg, NULL)|signal SIGSEGV; message: no|signal SIGABRT; message: yes
dev_memory(dev, NULL, NULL)|signal SIGSEGV; message: no|signal SIGABRT; message: yes
sched_set_tensor_backend(s, NULL, cpu)|exit 0; message: no|signal SIGABRT; message: yes
gallocr_reserve_n(node buffer id 5 of 1)|exit 0; message: no or signal SIGABRT; message: no or signal SIGSEGV; message: no|signal SIGABRT; message: yes
sched_new(graph_size SIZE_MAX)|signal SIGABRT; message: no|signal SIGABRT; message: yes
sched_new(graph_size 1000000) memory|exit 0; message: no|exit 0; message: no
alloc_graph(A), graph_compute(B)|exit 1; message: no|exit 0; message: no
parallel sched, pre-allocated input|signal SIGSEGV; message: no|exit 0; message: no
reserve(A), compute(B), same counts|exit 1; message: no|exit 0; message: no
free while busy (HRX0)|signal SIGSEGV; message: no or exit 0; message: no|exit 0; message: no
TABLE
)

fail=0
for arm in stock ours; do
  dir=$([ $arm = stock ] && echo "$stock" || echo "$ours:$stock")
  got=$(LD_LIBRARY_PATH="$dir:$hrx" timeout 120 "$out/bad_input" --hrx)
  col=$([ $arm = stock ] && echo 2 || echo 3)
  while IFS='|' read -r name s o; do
    want=$([ $col = 2 ] && echo "$s" || echo "$o")
    line=$(grep -F "case $name: " <<<"$got" | head -1)
    have=${line#"case $name: "}
    ok=no
    while read -r alt; do [ "$have" = "$alt" ] && ok=yes; done < <(sed 's/ or /\n/g' <<<"$want")
    if [ $ok = yes ]; then
      printf '[bad-input] %-5s %-40s %s\n' "$arm" "$name" "$have"
    else
      printf '[bad-input] %-5s %-40s %s   FAILED: expected %s\n' "$arm" "$name" "${have:-no result}" "$want"
      fail=1
    fi
  done <<<"$expected"
done
[ $fail -eq 0 ] && echo "[bad-input] PASS" || echo "[bad-input] FAIL"
exit $fail
