#!/usr/bin/env bash
# HRX backend checks, one step per call, for the harness (exit 0 = pass).
#
#   crates/hrx/scripts/check.sh STEP [BASE_LIB_DIR]
#
# STEP: unit | cabi | backend-ops | smollm2 | logits | archs | all
# BASE_LIB_DIR: a directory holding the libggml-base.so.0 to run with (put first on
#   LD_LIBRARY_PATH); empty or omitted = the stock one from the stock build.
# Environment: HRX_STOCK_BIN (default target/llama-stock/bin), HRX_MODEL (default
#   target/models/SmolLM2-135M-Instruct.Q4_1.gguf), HRX_OPS (test-backend-ops -o filter),
#   HRX_OPS_JOBS (test-backend-ops -j, default 2),
#   HRX_LOGS (default target/hrx-logs/<arm>), HRX_CPU_LIB_DIR (a folder holding another
#   libggml-cpu.so.0 of the same pin, put first on LD_LIBRARY_PATH: e.g. one built for AVX2
#   only by crates/hrx/scripts/cpu-variant.sh, to run the checks as on another processor).
# The library under test is target/release/libggml_hrx.so (cargo build -p hrx --release),
# copied to target/hrx-run/libggml-hrx.so so rebuilds cannot disturb a running check.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
step=${1:?usage: check.sh STEP [BASE_LIB_DIR]}
base=${2:-}
# A relative BASE_LIB_DIR is taken from the repository root, where the harness runs.
[ -z "$base" ] || base=$(cd "$root" && cd "$base" && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
model=${HRX_MODEL:-$root/target/models/SmolLM2-135M-Instruct.Q4_1.gguf}
arm=$([ -n "$base" ] && echo ours || echo stock)
logs=${HRX_LOGS:-$root/target/hrx-logs/$arm}
mkdir -p "$logs" "$root/target/hrx-run"
lib=$root/target/hrx-run/libggml-hrx.so
cp "$root/target/release/libggml_hrx.so" "$lib.tmp.$$" && mv "$lib.tmp.$$" "$lib"
cpu_lib=${HRX_CPU_LIB_DIR:-}
[ -z "$cpu_lib" ] || cpu_lib=$(cd "$root" && cd "$cpu_lib" && pwd)
libpath=${cpu_lib:+$cpu_lib:}${base:+$base:}$stock
fail=0
# These checks are the simulator's: its texts and values are compared with the CPU's on the
# same numeric path (ggml's CPU kernels). On a machine with a GPU, GGML_HRX_RUNTIME=auto
# would take the CUDA runtime, whose kernels round differently; the GPU checks are
# gpu/run.sh hrxcheck (docs/hrx-cuda.md). Set it yourself to run these on CUDA anyway.
export GGML_HRX_RUNTIME=${GGML_HRX_RUNTIME:-sim}
say() { printf '[hrx %s %s] %s\n' "$arm" "$step" "$*"; }

run_unit() {
  (cd "$root" && cargo test -p hrx 2>&1 | tail -n 30) || fail=1
}

run_cabi() {
  HRX_STOCK_BIN=$stock "$root/cabi-tests/hrx/run.sh" "${base:-$stock}" || fail=1
}

# test-backend-ops' workers (`-j`): each opens its own HRX0 backend (on the one device and
# its queue) and CPU reference backend, and takes cases from a shared list. With one worker
# a case's HRX0 run and its CPU reference run one after the other and most of the time one
# core is idle: on 2 cores, -j 2 halves the step (3 min 35 s to 1 min 52 s; the same 4,214
# cases passed, the same lines in the log). Not more by default: each worker's CPU reference
# backend runs ggml's default 4 threads, which spin while they wait for each other.
ops_jobs=${HRX_OPS_JOBS:-2}

run_backend_ops() {
  local out=$logs/test-backend-ops.log
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath \
    "$stock/test-backend-ops" test -b HRX0 -j "$ops_jobs" ${HRX_OPS:+-o "$HRX_OPS"} >"$out" 2>&1
  local rc=$?
  say "rc=$rc $(grep -E 'tests passed' "$out" | tr -s ' ') ok=$(grep -c 'OK' "$out") not_supported=$(grep -c 'not supported' "$out") failed=$(grep -c 'FAIL' "$out") (log: $out)"
  [ $rc -eq 0 ] || fail=1
}

# The numeric path every SmolLM2 run takes, so that the CPU-only reference and the HRX0 runs
# compute the same thing with the same kernels, on whatever processor this is:
# - `-fa off`: HRX0 does not claim FLASH_ATTN_EXT, so llama.cpp turns flash attention off for
#   a model on HRX0, while `auto` turns it on for the CPU; the two algorithms round
#   differently, and on some processors the greedy text then parts (issue 11: "321" against
#   "311" on an AVX2-only EPYC);
# - `--no-repack`: weights in ggml's plain layout on the CPU too, since the CPU backend
#   repacks some types (Q4_0, Q4_K, Q6_K, Q8_0, ...) into interleaved blocks, and which ones
#   depends on the CPU's features;
# - `-t 2`: the simulator runs ggml's CPU kernels with llama.cpp's thread count.
# With the same path, the texts are compared byte for byte; the text itself depends on the
# CPU's features (it is never compared with a fixed string), and both runs use the same CPU.
SMOLLM2_PATH=(-fa off --no-repack -t 2)

complete() { # name extra-env... -- extra-args...
  local name=$1; shift
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" LD_LIBRARY_PATH=$libpath "$stock/llama-completion" -m "$model" -n 32 \
    -p "The capital of France is" --temp 0 -no-cnv "${SMOLLM2_PATH[@]}" --no-warmup -v "$@" \
    >"$logs/$name.out" 2>"$logs/$name.err"
}

# The CPU features of a run, from llama.cpp's system_info line (the CPU backend's own list).
cpu_features() {
  grep -h -m1 'system_info:' "$1" | sed 's/.*CPU : //; s/ = 1//g; s/ |/,/g; s/,* *$//'
}

# Prints where two outputs first differ: the byte offset and 40 bytes of each from there.
first_difference() {
  local at
  at=$(cmp "$1" "$2" 2>/dev/null | sed -n 's/.* byte \([0-9]*\),.*/\1/p')
  if [ -z "$at" ]; then say "    outputs differ in length: $(wc -c <"$1") and $(wc -c <"$2") bytes"; return; fi
  say "    first difference at byte $at: $(basename "$1"): $(tail -c +"$at" "$1" | head -c 40 | tr '\n' ' ')"
  say "    $(printf '%*s' $((${#at} + 25)) '')$(basename "$2"): $(tail -c +"$at" "$2" | head -c 40 | tr '\n' ' ')"
}

same_text() { # reference candidate
  cmp -s "$1" "$2" && return 0
  first_difference "$1" "$2"; return 1
}

run_smollm2() {
  [ -f "$model" ] || { say "model missing: $model"; fail=1; return; }
  complete cpu -- -ngl 0; local rc_cpu=$?
  complete hrx GGML_BACKEND_PATH=$lib GGML_HRX_REPORT=1 -- -dev HRX0 -ngl 99; local rc_hrx=$?
  complete hrx-evict GGML_BACKEND_PATH=$lib GGML_HRX_REPORT=1 GGML_HRX_HOST_WEIGHT_LIMIT_MB=40 -- -dev HRX0 -ngl 99 -ot '.*=CPU'; local rc_ev=$?
  complete hrx-refuse GGML_BACKEND_PATH=$lib GGML_HRX_HOST_WEIGHT_LIMIT_MB=16 -- -dev HRX0 -ngl 99 -ot '.*=CPU'; local rc_rf=$?
  say "numeric path of every run: ${SMOLLM2_PATH[*]} (flash attention off, plain weight layout, 2 threads)"
  say "CPU backend features (the text depends on them; both runs use this CPU): $(cpu_features "$logs/cpu.err")"
  say "cpu rc=$rc_cpu text: $(tr '\n' ' ' <"$logs/cpu.out" | cut -c1-100)"
  if [ $rc_cpu -eq 0 ] && [ $rc_hrx -eq 0 ] && same_text "$logs/cpu.out" "$logs/hrx.out"; then say "HRX0 -ngl 99: text equal to the CPU-only run"; else say "HRX0 -ngl 99: rc=$rc_hrx, text DIFFERS"; fail=1; fi
  grep -h "HRX0 report" "$logs/hrx.err" | sed 's/^/    /'
  if [ $rc_ev -eq 0 ] && same_text "$logs/cpu.out" "$logs/hrx-evict.out" && grep -q "evictions [1-9]" "$logs/hrx-evict.err"; then
    say "host weights, 40 MiB arena: text equal to the CPU-only run, evictions and refills seen"
  else say "host weights, 40 MiB arena: rc=$rc_ev, FAILED"; fail=1; fi
  grep -h "HRX0 report" "$logs/hrx-evict.err" | sed 's/^/    /'
  if [ $rc_rf -ne 0 ] && [ $rc_rf -lt 128 ] && grep -q "refused by the arena" "$logs/hrx-refuse.err"; then
    say "16 MiB arena: refused by name, exit $rc_rf, no crash"; grep -h "refused by the arena" "$logs/hrx-refuse.err" | sed 's/^/    /'
  else say "16 MiB arena: rc=$rc_rf, refusal FAILED"; fail=1; fi
}

# Per-token logits of SmolLM2 on HRX0 against a CPU-only run (cabi-tests/logits/logits_nmse.c,
# the check gpu/run.sh hrxcheck runs on the GPU with an NMSE bound of 1e-4). Here the simulator
# runs ggml's CPU kernels on the numeric path of the SmolLM2 step, so every position's NMSE
# must be exactly 0, the prompt batch and the single-token decodes alike; and the tool must be
# able to fail: one token changed in the HRX0 run at position LOGITS_PERTURB leaves the positions
# before it at 0 and puts that one over the bound, exit 1.
LOGITS_PERTURB=50
run_logits() {
  [ -f "$model" ] || { say "model missing: $model"; fail=1; return; }
  local up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp
  local bin=$root/target/hrx-logits/logits_nmse
  mkdir -p "$(dirname "$bin")"
  # linked against the stock build's libraries; the arm's libggml-base comes first at run time
  if ! cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O2 -I"$up/include" -I"$up/ggml/include" \
      "$root/cabi-tests/logits/logits_nmse.c" -o "$bin.$arm" \
      -L"$stock" -l:libllama.so.0 -l:libggml-base.so.0 -l:libggml.so.0 -lm >"$logs/logits-cc.log" 2>&1; then
    say "compile failed:"; sed 's/^/    /' "$logs/logits-cc.log"; fail=1; return
  fi
  local args=(-m "$model" --dev HRX0 -t 2 --no-repack)
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath "$bin.$arm" "${args[@]}" >"$logs/logits.out" 2>"$logs/logits.err"
  local rc=$? summary
  summary=$(grep '^logits NMSE:' "$logs/logits.out")
  say "rc=$rc $summary (log: $logs/logits.out)"
  # every position's line, and none with a value other than 0
  local n_pos n_zero
  n_pos=$(grep -c '^position ' "$logs/logits.out")
  n_zero=$(grep -c '^position .* nmse 0\.000e+00 ' "$logs/logits.out")
  if [ $rc -eq 0 ] && [ "$n_pos" -gt "$LOGITS_PERTURB" ] && [ "$n_zero" -eq "$n_pos" ] \
      && grep -q "^argmax: the same in both runs at $n_pos of $n_pos positions$" "$logs/logits.out" \
      && grep -q "^logits NMSE: positions $n_pos, max 0\.000e+00 at position 0, mean 0\.000e+00; bound 1\.0e-04: PASS$" <<<"$summary"; then
    say "HRX0 logits equal to the CPU's at all $n_pos positions (NMSE 0, the same argmax, prompt batch and decodes)"
  else
    say "HRX0 logits: FAILED (rc=$rc, $n_zero of $n_pos positions at NMSE 0)"; sed 's/^/    /' "$logs/logits.err" | tail -20; fail=1
  fi
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath "$bin.$arm" "${args[@]}" --perturb-token $LOGITS_PERTURB \
    >"$logs/logits-perturbed.out" 2>"$logs/logits-perturbed.err"
  rc=$?
  summary=$(grep '^logits NMSE:' "$logs/logits-perturbed.out")
  say "perturbed at position $LOGITS_PERTURB: rc=$rc $summary (log: $logs/logits-perturbed.out)"
  # the position's NMSE, and how many positions before it stayed at 0
  local at before
  # (a position's line: position I prompt|decode token T nmse E argmax ...)
  at=$(awk -v p=$LOGITS_PERTURB '$1 == "position" && $2 == p && /OVER THE BOUND$/ { print $7 }' "$logs/logits-perturbed.out")
  before=$(awk -v p=$LOGITS_PERTURB '$1 == "position" && $2 < p && $7 == "0.000e+00" { n++ } END { print n + 0 }' \
    "$logs/logits-perturbed.out")
  if [ $rc -eq 1 ] && [ -n "$at" ] && awk -v v="$at" 'BEGIN { exit !(v > 1e-4) }' \
      && [ "$before" -eq $LOGITS_PERTURB ] && grep -q ': FAIL$' <<<"$summary"; then
    say "perturbed: exit 1, NMSE $at at position $LOGITS_PERTURB (over 1e-4), positions 0 to $((LOGITS_PERTURB - 1)) at 0"
  else
    say "perturbed: FAILED to fail as expected (rc=$rc, NMSE at $LOGITS_PERTURB '$at', $before positions before it at 0)"; fail=1
  fi
  # the reference compared with itself proves nothing: refused before anything runs
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath "$bin.$arm" -m "$model" --dev CPU \
    >"$logs/logits-cpu.out" 2>"$logs/logits-cpu.err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q "'CPU' is a CPU device, the reference itself" "$logs/logits-cpu.err"; then
    say "--dev CPU: refused (exit 2, the reference itself)"
  else
    say "--dev CPU: NOT refused as expected (rc=$rc)"; sed 's/^/    /' "$logs/logits-cpu.err" | tail -5; fail=1
  fi
  run_logits_ref
}

# --ref-model: the CPU reference from another file of the same model. On the GPU that file is
# the quantized model dequantized to F32 (HRX0's numeric path there, gpu/run.sh); here HRX0
# runs the CPU's quantized kernels, so against the F32 file every position must differ from 0
# (the other file was run) and stay close (the same model: NMSE under 0.1, a loose bound for
# the Q8_1 rounding of activations on one side only). A reference that cannot be loaded is
# refused by name.
run_logits_ref() {
  local f32=$root/target/hrx-logits/$(basename "$model" .gguf)-as-f32.gguf
  if [ ! -f "$f32" ]; then
    "$stock/llama-quantize" --allow-requantize "$model" "$f32.tmp" F32 >"$logs/as-f32.log" 2>&1 \
      && mv "$f32.tmp" "$f32" \
      || { say "--ref-model: llama-quantize to F32 failed"; tail -5 "$logs/as-f32.log" | sed 's/^/    /'; fail=1; return; }
  fi
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath "$bin.$arm" -m "$model" --dev HRX0 -t 2 --no-repack \
    --ref-model "$f32" --bound 0.1 >"$logs/logits-ref.out" 2>"$logs/logits-ref.err"
  local rc=$? n_pos n_nonzero summary
  summary=$(grep '^logits NMSE:' "$logs/logits-ref.out")
  n_pos=$(grep -c '^position ' "$logs/logits-ref.out")
  n_nonzero=$(awk '$1 == "position" && $7 != "0.000e+00" { n++ } END { print n + 0 }' "$logs/logits-ref.out")
  say "--ref-model F32: rc=$rc $summary (log: $logs/logits-ref.out)"
  if [ $rc -eq 0 ] && [ "$n_pos" -gt 0 ] && [ "$n_nonzero" -eq "$n_pos" ] \
      && grep -q "^model .* against the CPU alone running $f32;" "$logs/logits-ref.out"; then
    say "--ref-model F32: the reference ran the F32 file, all $n_pos positions above 0 and under 0.1"
  else
    say "--ref-model F32: FAILED (rc=$rc, $n_nonzero of $n_pos positions above 0)"; tail -5 "$logs/logits-ref.err" | sed 's/^/    /'; fail=1
  fi
  GGML_BACKEND_PATH=$lib LD_LIBRARY_PATH=$libpath "$bin.$arm" -m "$model" --dev HRX0 \
    --ref-model "$logs/no-such-model.gguf" >"$logs/logits-noref.out" 2>"$logs/logits-noref.err"
  rc=$?
  if [ $rc -eq 2 ] && grep -q "cannot load the model '$logs/no-such-model.gguf'" "$logs/logits-noref.err"; then
    say "--ref-model missing file: refused (exit 2, named)"
  else
    say "--ref-model missing file: NOT refused as expected (rc=$rc)"; tail -5 "$logs/logits-noref.err" | sed 's/^/    /'; fail=1
  fi
}

run_archs() {
  # test-llama-archs never calls ggml_backend_load_all(), so GGML_BACKEND_PATH is not
  # honoured; the library registers itself when preloaded with GGML_HRX_AUTOREGISTER=1.
  local out=$logs/test-llama-archs.log
  GGML_HRX_AUTOREGISTER=1 LD_PRELOAD=$lib LD_LIBRARY_PATH=$libpath \
    "$stock/test-llama-archs" -b HRX0 -s 42 >"$out" 2>&1
  local rc=$?
  say "rc=$rc $(grep -E '^Summary' "$out") (log: $out)"
  [ $rc -eq 0 ] || fail=1
}

case $step in
  unit) run_unit ;;
  cabi) run_cabi ;;
  backend-ops) run_backend_ops ;;
  smollm2) run_smollm2 ;;
  logits) run_logits ;;
  archs) run_archs ;;
  all) run_unit; run_cabi; run_backend_ops; run_smollm2; run_logits; run_archs ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
say "$([ $fail -eq 0 ] && echo PASS || echo FAIL)"
exit $fail
