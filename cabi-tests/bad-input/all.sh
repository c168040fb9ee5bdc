#!/usr/bin/env bash
# The bad-input checks in both arms, one after the other: run.sh (NULL arguments to the
# backend layer and the scheduler), gguf.sh (corrupted GGUF files through llama-completion)
# and env.sh (garbage in every GGML_* variable ours reads). Each prints its own table; this
# exits non-zero when any of them fails, after running all three, so one failure does not
# hide another.
#
#   cabi-tests/bad-input/all.sh [OURS_LIB_DIR]     (default target/ours/lib)
#
# Measured on 2 shared cores: 144 s with the GGUF copies written first (gguf.sh 31 s,
# env.sh 113 s under load; 47 s alone), about 60 s once they are cached.
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
