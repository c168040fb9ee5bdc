#!/usr/bin/env bash
# Makes the pages of issue 17's acceptance (docs/sched-view.md): runs each work with
# GGML_SCHED_DUMP set, renders each dump with `./ab view`, then loads every page in headless
# Chromium (browser-check.sh) and writes its screenshot to docs/view/. Run from anywhere;
# needs the stock build (target/llama-stock), the model (target/models) and ours
# (`./ab build-ours`: target/ours/lib with libggml-base.so.0 and libggml-hrx.so).
#
# Dumps: target/dumps/NAME/, pages: target/view/NAME.html, screenshots: docs/view/NAME.png.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
S=$root/target/llama-stock/bin
OURS=${OURS_LIB_DIR:-$root/target/ours/lib}
HRX=$OURS/libggml-hrx.so
MODEL=$root/target/models/SmolLM2-135M-Instruct.Q4_1.gguf
D=$root/target/dumps
V=$root/target/view
mkdir -p "$D" "$V"
say() { printf '[pages] %s\n' "$*"; }
fresh() { rm -rf "${D:?}/$1"; mkdir -p "$D/$1"; }
# The SmolLM2 runs of crates/hrx/scripts/check.sh (same numeric path), 8 tokens.
smollm2() { # NAME RULE ARGS...
  local name=$1 rule=$2; shift 2; fresh "$name"
  GGML_SCHED_DUMP=$D/$name GGML_SCHED_INPLACE_RULE=$rule GGML_BACKEND_PATH=$HRX \
    LD_LIBRARY_PATH=$OURS:$S "$S/llama-completion" -m "$MODEL" -n 8 -p "The capital of France is" \
    --temp 0 -no-cnv -fa off --no-repack -t 2 --no-warmup "$@" >"$D/$name.out" 2>"$D/$name.err"
  say "$name: $(ls "$D/$name" | wc -l) records; text: $(tr '\n' ' ' <"$D/$name.out" | cut -c1-60)"
}
smollm2 smollm2-hrx0-ngl99 1 -dev HRX0 -ngl 99
smollm2 smollm2-hrx0-cpu-ngl15 1 -dev HRX0 -ngl 15
smollm2 smollm2-hrx0-cpu-ngl15-rule0 0 -dev HRX0 -ngl 15

# The in-place reproducer (cabi-tests/inplace-repro, the program `./ab repro` runs) on HRX0
# claiming FILL but not SET_ROWS: with the rule off it is stock's placement and crashes
# (SIGSEGV, the defect of issue 5) after the scheduler wrote its record.
UP=$(ls -d "$root"/target/upstream/*/vendor/llama.cpp | head -1)
cc -std=c11 -O1 -g -I"$UP/ggml/include" cabi-tests/inplace-repro/inplace_repro.c -o "$D/inplace_repro" \
  -L"$S" -l:libggml-base.so.0 -l:libggml.so.0 -l:libggml-cpu.so.0 -lm
for rule in 0 1; do
  fresh "repro-rule$rule"
  rc=0
  GGML_SCHED_DUMP=$D/repro-rule$rule GGML_SCHED_INPLACE_RULE=$rule GGML_BACKEND_PATH=$HRX \
    GGML_HRX_EAGER_OPS=+FILL,-SET_ROWS GGML_NO_BACKTRACE=1 LD_LIBRARY_PATH=$OURS:$S \
    "$D/inplace_repro" --dev HRX0 --mode repro >"$D/repro-rule$rule.log" 2>&1 || rc=$?
  say "repro rule=$rule: exit $rc, $(ls "$D/repro-rule$rule" | wc -l) records, $(tail -n1 "$D/repro-rule$rule.log")"
done

# A deepseek-class graph: test-llama-archs' deepseek4 (MLA, MoE, sparse indexer) on HRX0.
fresh deepseek4-hrx0
rc=0
GGML_SCHED_DUMP=$D/deepseek4-hrx0 GGML_HRX_AUTOREGISTER=1 LD_PRELOAD=$HRX LD_LIBRARY_PATH=$OURS:$S \
  "$S/test-llama-archs" -a deepseek4 -b HRX0 -s 42 >"$D/deepseek4-hrx0.log" 2>&1 || rc=$?
say "deepseek4: exit $rc, $(ls "$D/deepseek4-hrx0" | wc -l) records"

# The biggest graph: the 6,092-node DeepSeek-style graph of the scheduler benchmark
# (cabi-tests/sched-bench, docs/bench.md) on its fake devices FAKE0, FAKE1 and FCPU, rule
# off against rule on.
cc -std=c11 -O2 -I"$UP/ggml/include" -I"$UP/ggml/src" -Icabi-tests/common cabi-tests/sched-bench/sched_bench.c \
  cabi-tests/common/fake_backend.c -o "$D/sched-bench" -L"$S" -l:libggml-base.so.0 -lm -ldl
for rule in 0 1; do
  fresh "sched-bench-deepseek3-rule$rule"
  GGML_SCHED_DUMP=$D/sched-bench-deepseek3-rule$rule GGML_SCHED_INPLACE_RULE=$rule LD_LIBRARY_PATH=$OURS:$S \
    "$D/sched-bench" --graph deepseek --backends 3 --iters 2 --warmup 1 >"$D/sched-bench-deepseek3-rule$rule.log" 2>&1
  say "sched-bench deepseek rule=$rule: $(ls "$D/sched-bench-deepseek3-rule$rule" | wc -l) records"
done

v() { "$root/ab" view "$@"; }
v "$D/smollm2-hrx0-ngl99" --out "$V/smollm2-hrx0-ngl99.html" --title "SmolLM2-135M on HRX0, -ngl 99" \
  --command "GGML_SCHED_DUMP=DIR GGML_BACKEND_PATH=target/ours/lib/libggml-hrx.so llama-completion -m SmolLM2-135M-Instruct.Q4_1.gguf -dev HRX0 -ngl 99 -fa off --no-repack -t 2 -n 8 (crates/view/scripts/pages.sh)"
v "$D/smollm2-hrx0-cpu-ngl15" --out "$V/smollm2-hrx0-cpu-ngl15.html" --title "SmolLM2-135M on HRX0 + CPU, -ngl 15 (partial offload)" \
  --command "GGML_SCHED_DUMP=DIR GGML_BACKEND_PATH=target/ours/lib/libggml-hrx.so llama-completion -m SmolLM2-135M-Instruct.Q4_1.gguf -dev HRX0 -ngl 15 -fa off --no-repack -t 2 -n 8 (crates/view/scripts/pages.sh)"
v --a "$D/smollm2-hrx0-cpu-ngl15-rule0" --b "$D/smollm2-hrx0-cpu-ngl15" --out "$V/smollm2-ngl15-ab.html" \
  --title "SmolLM2-135M on HRX0 + CPU, -ngl 15: rule off (stock) vs on" \
  --command "as smollm2-hrx0-cpu-ngl15, side A with GGML_SCHED_INPLACE_RULE=0 (crates/view/scripts/pages.sh)"
v --a "$D/repro-rule0" --b "$D/repro-rule1" --out "$V/repro-ab.html" \
  --title "In-place reproducer on HRX0: rule off (stock) vs on" \
  --command "GGML_SCHED_DUMP=DIR GGML_SCHED_INPLACE_RULE=0|1 GGML_BACKEND_PATH=target/ours/lib/libggml-hrx.so GGML_HRX_EAGER_OPS=+FILL,-SET_ROWS inplace_repro --dev HRX0 --mode repro (crates/view/scripts/pages.sh)"
# The last record of the deepseek4 run: its largest graph.
last=$(ls "$D/deepseek4-hrx0"/sched-*.json | tail -n1)
v "$last" --out "$V/deepseek4-hrx0.html" --title "test-llama-archs deepseek4 on HRX0 (largest graph)" \
  --command "GGML_SCHED_DUMP=DIR GGML_HRX_AUTOREGISTER=1 LD_PRELOAD=target/ours/lib/libggml-hrx.so test-llama-archs -a deepseek4 -b HRX0 -s 42 (crates/view/scripts/pages.sh; the last record)"

v --a "$D/sched-bench-deepseek3-rule0" --b "$D/sched-bench-deepseek3-rule1" --out "$V/sched-bench-deepseek3-ab.html" \
  --title "sched-bench deepseek graph (6,092 nodes) on FAKE0 + FAKE1 + FCPU: rule off (stock) vs on" \
  --command "GGML_SCHED_DUMP=DIR GGML_SCHED_INPLACE_RULE=0|1 sched-bench --graph deepseek --backends 3 --iters 2 --warmup 1 (crates/view/scripts/pages.sh)"

# The browser check, with a node of interest selected on each page.
"$root/crates/view/scripts/browser-check.sh" "$root/docs/view" \
  "$V/smollm2-hrx0-ngl99.html#q=set_rows&node=12" \
  "$V/smollm2-hrx0-cpu-ngl15.html#q=norm&node=1" \
  "$V/smollm2-ngl15-ab.html#node=12" \
  "$V/repro-ab.html#node=1" \
  "$V/deepseek4-hrx0.html#q=cache_k&node=43" \
  "$V/sched-bench-deepseek3-ab.html#q=fill&node=100"
