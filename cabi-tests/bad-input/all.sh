#!/usr/bin/env bash
# The bad-input checks in both arms, one after the other: run.sh (NULL arguments to the
# backend layer and the scheduler), gguf.sh (corrupted GGUF files through llama-completion)
# and env.sh (garbage in every GGML_* variable ours reads). Each prints its own table; this
# exits non-zero when any of them fails, after running all three, so one failure does not
# hide another.
#
#   cabi-tests/bad-input/all.sh [OURS_LIB_DIR]     (default target/ours/lib)
#
# gguf.sh and env.sh run their cases one per core (BAD_INPUT_JOBS=N to choose; 1 runs them
# one after another). Measured on a 2-core Intel Xeon (2026-12-07), nothing beside it:
# env.sh's 184 cases 177 s one at a time and 135 s two at a time; gguf.sh 14 s and 6-7 s;
# the whole step 2 min 32 s in a fresh-clone `./ab test`, GGUF copies written first. The
# same step took 4 min 18 s one at a time, with 32 fewer env.sh cases, on the slower AMD
# EPYC.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fail=0
for step in run.sh gguf.sh env.sh; do
  t0=$(date +%s)
  "$here/$step" "$@"
  rc=$?
  echo "[bad-input/all] $step: exit $rc in $(( $(date +%s) - t0 )) s"
  [ $rc -eq 0 ] || fail=1
done
[ $fail -eq 0 ] && echo "[bad-input/all] PASS" || echo "[bad-input/all] FAIL"
exit $fail
