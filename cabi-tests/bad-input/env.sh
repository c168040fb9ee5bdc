#!/usr/bin/env bash
# Every GGML_* environment variable ours reads (ggml-base's GGML_SCHED_* and GGML_ALLOC_* in
# src/, HRX's GGML_HRX_* in crates/hrx/src), but GGML_SCHED_DUMP (a folder to write, whose
# refusals are unit tests in src/sched/record/mod.rs), each set to garbage, in both arms (the
# stock libggml-base and ours), against what each arm is expected to do. The list of what
# ours reads is src/env.rs's KNOWN and HRX's variables.
#
#   cabi-tests/bad-input/env.sh [OURS_LIB_DIR]           (default target/ours/lib)
#   cabi-tests/bad-input/env.sh --print [OURS_LIB_DIR]   print what happened as table rows
#
# Values: on, the empty string, -5, inf, 1e9, 4000000000, 0x, and a 10 kB string. Each run
# is a short real workload under timeout 60:
#
# - the GGML_SCHED_* variables and GGML_ALLOC_LAYOUT (our graph allocator, which the
#   scheduler makes): llama-completion -m MODEL -n 2 on two HRX devices
#   (GGML_HRX_DEVICES=2, -dev HRX0,HRX1 -ngl 99). test-backend-ops never creates a
#   scheduler, so it never reads them; llama builds one, and with two devices that support
#   events it builds it with parallel = true, the only case where GGML_SCHED_MAX_COPIES is
#   read. liblogflush.so is preloaded (see gguf.sh): llama.cpp's logger would otherwise lose
#   messages logged right before exit.
# - the GGML_HRX_* variables: test-backend-ops test -b HRX0 -o ADD, 7 cases of one shape
#   (plain stderr; HRX reads its variables when the registry is created).
#
# Both with GGML_BACKEND_PATH=target/release/libggml_hrx.so. The outcome is written
#
#   "exit N; warning: yes|no; output: same|differs"  (or "signal NAME; ..." or "timeout")
#
# "warning: yes": stderr names the variable and its value the way each reader does:
# "ggml_backend_sched: NAME='VALUE' ..." (src/env.rs) or "HRX: NAME='VALUE' ..."
# (crates/hrx/src/env.rs). "output: same": stdout is byte for byte what the same arm printed
# with the variable unset, i.e. the garbage changed nothing but the warning. Stock reads
# GGML_SCHED_DEBUG and GGML_SCHED_DEBUG_REALLOC with atoi (garbage reads as a number, no
# word), and GGML_SCHED_MAX_COPIES / GGML_SCHED_INPLACE_RULE / GGML_ALLOC_LAYOUT not at all
# (a build-time constant; no such rule; one layout), nor GGML_ALLOC_REUSE_DELAY and
# GGML_SCHED_INPUT_WAITS (no packed layout; its waits are the only ones), so its rows say
# "warning: no"; libggml-hrx is the same file in
# both arms, so HRX's rows are the same in both.
set -uo pipefail
print=no
[ "${1:-}" = --print ] && { print=yes; shift; }
. "$(dirname "$0")/common.sh" "$@"
hrx=$root/target/release/libggml_hrx.so
out=$root/target/bad-input
logs=$out/env-logs
[ -f "$hrx" ] && [ -f "$ours/libggml-base.so.0" ] || { echo "build first: ./ab build-ours" >&2; exit 2; }
[ -f "$model" ] || { echo "no model: $model (./ab fetches it)" >&2; exit 2; }
mkdir -p "$logs"
# One run at a time per tree: two would write the same logs (each case's output is compared
# with its baseline's file) and fail each other's cases.
exec {lock}>"$out/.env.lock"
if ! flock -n "$lock"; then
  echo "[env] waiting for another run of env.sh in this tree to end"
  flock "$lock"
fi
cc -std=gnu11 -Wall -Wextra -Werror -O1 -shared -fPIC "$here/logflush.c" \
   -o "$out/liblogflush.so" -ldl || exit 2

long=$(printf 'x%.0s' $(seq 10240))
labels=(on empty -5 inf 1e9 4000000000 0x 10kB)
value() { case $1 in empty) echo -n "" ;; 10kB) echo -n "$long" ;; *) echo -n "$1" ;; esac; }
sched_vars=(GGML_SCHED_MAX_COPIES GGML_SCHED_DEBUG GGML_SCHED_DEBUG_REALLOC GGML_SCHED_INPLACE_RULE
            GGML_SCHED_SANITIZE GGML_SCHED_TEST_FAULT GGML_ALLOC_LAYOUT GGML_ALLOC_REUSE_DELAY
            GGML_SCHED_INPUT_WAITS)
hrx_vars=(GGML_HRX_DEVICES GGML_HRX_SIM_MEMORY_MB GGML_HRX_HOST_WEIGHT_LIMIT_MB
          GGML_HRX_FAKE_PTR_BASE GGML_HRX_SIM_THREADS GGML_HRX_REPORT GGML_HRX_EAGER_OPS
          GGML_HRX_AUTOREGISTER GGML_HRX_RUNTIME GGML_HRX_PROFILE GGML_HRX_CUDA_GRAPHS
          GGML_HRX_PREFETCH GGML_HRX_MMV_BLOCKS GGML_HRX_CUDA_FUSE)

# The lists above must be every variable ours reads: src/env.rs's KNOWN, every quoted
# GGML_SCHED_* or GGML_ALLOC_* name in the rest of src/ (a reader need not be listed in KNOWN;
# env.rs itself is left out for its test's misspellings), less GGML_SCHED_DUMP (see the top),
# and every GGML_HRX_* name in HRX's sources. A variable added there without a row here fails
# the step instead of going untested.
read_by_ours=$( { sed -n '/^pub const KNOWN/,/^];/p' "$root/src/env.rs" | grep -o '"GGML_[A-Z0-9_]*"';
                  grep -rhoE --include='*.rs' --exclude=env.rs '"GGML_(SCHED|ALLOC)_[A-Z0-9_]+"' "$root/src";
                  grep -rhoE '"GGML_HRX_[A-Z0-9_]+"' "$root/crates/hrx/src"; } | tr -d '"' | grep -vx GGML_SCHED_DUMP | sort -u)
listed=$(printf '%s\n' "${sched_vars[@]}" "${hrx_vars[@]}" | sort -u)
if [ "$read_by_ours" != "$listed" ]; then
  echo "[env] the variables ours reads and the ones this script sets differ (< read by ours, > listed here):" >&2
  diff <(echo "$read_by_ours") <(echo "$listed") >&2
  exit 1
fi

# work ARM TAG [NAME VALUE]: runs the variable's workload, stdout and stderr into logs/TAG.*;
# prints the exit code
work() {
  local arm=$1 tag=$2 name=${3:-} val=${4:-} dir
  dir=$([ "$arm" = stock ] && echo "$stock" || echo "$ours:$stock")
  local -a envs=(LD_LIBRARY_PATH="$dir" GGML_BACKEND_PATH="$hrx" GGML_NO_BACKTRACE=1)
  [ -n "$name" ] && envs+=("$name=$val")
  if [[ $tag == sched* ]]; then
    env GGML_HRX_DEVICES=2 LD_PRELOAD="$out/liblogflush.so" "${envs[@]}" timeout -k 5 60 \
      "$stock/llama-completion" -m "$model" -n 2 -p hi --temp 0 -no-cnv -t 2 --no-warmup \
      -dev HRX0,HRX1 -ngl 99 >"$logs/$tag.out" 2>"$logs/$tag.err" </dev/null
  else
    env "${envs[@]}" timeout -k 5 60 "$stock/test-backend-ops" test -b HRX0 -o ADD \
      -p 'ne=\[10,5,4,3\],nr=\[1,1,1,1\],nf=1,' >"$logs/$tag.out" 2>"$logs/$tag.err" </dev/null
  fi
  echo $?
}

# outcome ARM TAG NAME VALUE PREFIX BASE: the outcome string of one run against the baseline
outcome() {
  local arm=$1 tag=$2 name=$3 val=$4 prefix=$5 base=$6 rc what warn same
  rc=$(work "$arm" "$tag" "$name" "$val")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo timeout; return; fi
  if [ "$rc" -gt 128 ]; then what="signal SIG$(kill -l $((rc - 128)))"; else what="exit $rc"; fi
  grep -qF -- "$prefix: $name='$val'" "$logs/$tag.err" && warn=yes || warn=no
  cmp -s "$logs/$tag.out" "$logs/$base.out" && same=same || same=differs
  echo "$what; warning: $warn; output: $same"
}

# variable | value | stock's outcome | ours' outcome
# Rows with no warning in ours are values the reader understands: on is a documented switch
# value (GGML_SCHED_INPLACE_RULE, GGML_HRX_REPORT, GGML_HRX_AUTOREGISTER) and a sanitizer
# level (GGML_SCHED_SANITIZE: 1, abort at the first report; none comes); an empty
# GGML_SCHED_TEST_FAULT plants no fault; 1e9 and 4000000000
# MiB are in GGML_HRX_HOST_WEIGHT_LIMIT_MB's range (0 to any finite size). An empty
# GGML_HRX_EAGER_OPS names no op, so it is warned about like every other empty value (the
# default set is kept).
expected=$(cat <<'TABLE'
GGML_SCHED_MAX_COPIES|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_MAX_COPIES|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_DEBUG_REALLOC|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_LAYOUT|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_ALLOC_REUSE_DELAY|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPUT_WAITS|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_SCHED_INPLACE_RULE|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_INPLACE_RULE|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_DEVICES|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_MEMORY_MB|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|1e9|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|4000000000|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_HOST_WEIGHT_LIMIT_MB|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_FAKE_PTR_BASE|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_SIM_THREADS|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_REPORT|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_REPORT|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_EAGER_OPS|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_AUTOREGISTER|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_AUTOREGISTER|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_RUNTIME|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_PROFILE|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PROFILE|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_CUDA_GRAPHS|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_GRAPHS|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_PREFETCH|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_PREFETCH|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|on|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_MMV_BLOCKS|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_HRX_CUDA_FUSE|empty|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|-5|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|inf|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|1e9|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|4000000000|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|0x|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_HRX_CUDA_FUSE|10kB|exit 0; warning: yes; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|on|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_SCHED_SANITIZE|empty|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_SANITIZE|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|on|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|empty|exit 0; warning: no; output: same|exit 0; warning: no; output: same
GGML_SCHED_TEST_FAULT|-5|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|inf|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|1e9|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|4000000000|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|0x|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
GGML_SCHED_TEST_FAULT|10kB|exit 0; warning: no; output: same|exit 0; warning: yes; output: same
TABLE
)

start=$(date +%s)
fail=0
# The runs are short and mostly load the model and register backends on one thread, so they
# go JOBS at a time (default: one per core; BAD_INPUT_JOBS=1 runs them one after another).
# Each writes its outcome to a file and the table is printed afterwards in its fixed order,
# so the output is the same whatever the interleaving. A run's baseline is made first.
# ($jobs and throttle come from common.sh.)
for arm in stock ours; do
  # the baselines: the same work with none of the variables set; each must succeed
  for kind in sched hrx; do
    throttle
    work "$arm" "$kind-base-$arm" >"$logs/$kind-base-$arm.rc" 2>/dev/null &
  done
done
wait
for arm in stock ours; do
  for kind in sched hrx; do
    rc=$(cat "$logs/$kind-base-$arm.rc")
    if [ "$rc" -ne 0 ]; then
      echo "[env] $arm: the $kind workload fails with no variable set (exit $rc); see $logs/$kind-base-$arm.err"
      fail=1
    fi
  done
done
kind_of() { if [[ $1 == GGML_SCHED_* || $1 == GGML_ALLOC_* ]]; then echo sched; else echo hrx; fi; }
for name in "${sched_vars[@]}" "${hrx_vars[@]}"; do
  kind=$(kind_of "$name")
  [ "$kind" = sched ] && prefix=ggml_backend_sched || prefix=HRX
  for label in "${labels[@]}"; do
    val=$(value "$label")
    for arm in stock ours; do
      tag=$kind-$name-$label-$arm
      throttle
      outcome "$arm" "$tag" "$name" "$val" "$prefix" "$kind-base-$arm" >"$logs/$tag.outcome" 2>/dev/null &
    done
  done
done
wait
for name in "${sched_vars[@]}" "${hrx_vars[@]}"; do
  kind=$(kind_of "$name")
  for label in "${labels[@]}"; do
    have_stock=$(cat "$logs/$kind-$name-$label-stock.outcome")
    have_ours=$(cat "$logs/$kind-$name-$label-ours.outcome")
    if [ $print = yes ]; then
      echo "$name|$label|$have_stock|$have_ours"
      continue
    fi
    row=$(awk -F'|' -v n="$name" -v l="$label" '$1 == n && $2 == l' <<<"$expected" | head -1)
    IFS='|' read -r _ _ want_stock want_ours <<<"$row"
    for arm in stock ours; do
      have=$([ $arm = stock ] && echo "$have_stock" || echo "$have_ours")
      want=$([ $arm = stock ] && echo "${want_stock:-}" || echo "${want_ours:-}")
      if [ "$have" = "$want" ]; then
        printf '[env] %-5s %-30s %-10s %s\n' "$arm" "$name" "$label" "$have"
      else
        printf '[env] %-5s %-30s %-10s %s   FAILED: expected %s\n' "$arm" "$name" "$label" "$have" "${want:-no row}"
        fail=1
      fi
    done
  done
done
[ $print = yes ] && exit 0
echo "[env] $(( (${#sched_vars[@]} + ${#hrx_vars[@]}) * ${#labels[@]} )) cases x 2 arms in $(( $(date +%s) - start )) s, $jobs at a time"
[ $fail -eq 0 ] && echo "[env] PASS" || echo "[env] FAIL"
exit $fail
