#!/usr/bin/env bash
# Builds and runs the C tests of libggml-hrx.so against one libggml-base arm.
#   cabi-tests/hrx/run.sh [BASE_LIB_DIR]
# BASE_LIB_DIR holds libggml-base.so.0 (default: the stock build's target/llama-stock/bin);
# libggml-cpu comes from the stock build. Compiled with -Wall -Wextra -Wpedantic -Werror.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
stock=${HRX_STOCK_BIN:-$root/target/llama-stock/bin}
base=${1:-$stock}
up=$root/target/upstream/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml
out=$root/target/hrx-cabi
hrx=$root/target/release
mkdir -p "$out"
[ -f "$hrx/libggml_hrx.so" ] || { echo "build first: cargo build -p hrx --release" >&2; exit 2; }
for t in api null segv env; do
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror -O1 -g \
     -I"$root/include" -I"$up/include" -I"$up/src" "$root/cabi-tests/hrx/$t.c" -o "$out/$t" \
     -L"$stock" -Wl,--no-as-needed -lggml-base -lggml-cpu -Wl,--as-needed -L"$hrx" -lggml_hrx
  [ "$t" = env ] && continue # run per case below
  echo "== $t (libggml-base from $base)"
  LD_LIBRARY_PATH="$base:$stock:$hrx" "$out/$t"
done

# GGML_HRX_* values HRX must refuse: each is named in a warning, the default is kept, and the
# program ends at once (GGML_HRX_DEVICES=inf used to start thousands of device threads).
# One process per case, since the registry reads the environment once.
echo "== env (libggml-base from $base)"
env_fail=0
env_case() { # VAR=VALUE "expected log text" (empty: no warning) "expected line"
  local got
  got=$(env "$1" LD_LIBRARY_PATH="$base:$stock:$hrx" timeout 20 "$out/env" 2>&1)
  local rc=$? logged=yes
  if [ -n "$2" ]; then grep -qF -- "$2" <<<"$got" || logged=no
  else ! grep -q "^log: HRX: GGML_HRX" <<<"$got" || logged=no; fi
  if [ $rc -eq 0 ] && [ $logged = yes ] && grep -qxF -- "$3" <<<"$got"; then
    echo "hrx env: $1: $([ -n "$2" ] && echo "refused by name" || echo "taken, no warning"), '$3'"
  else
    echo "hrx env: $1: FAILED (rc=$rc; expected log '$2' and line '$3'); got:"
    sed 's/^/    /' <<<"$got"
    env_fail=1
  fi
}
env_case GGML_HRX_DEVICES=inf "GGML_HRX_DEVICES='inf' is not a whole number from 0 to 64; using 1" "devices: 1"
env_case GGML_HRX_DEVICES=1e9 "GGML_HRX_DEVICES='1e9' is not a whole number from 0 to 64; using 1" "devices: 1"
env_case GGML_HRX_DEVICES=100000 "GGML_HRX_DEVICES='100000' is out of range: 0 to 64 allowed; using 1" "devices: 1"
env_case GGML_HRX_SIM_MEMORY_MB=inf "GGML_HRX_SIM_MEMORY_MB='inf' is not a finite number of MiB; using 8192" "address range: non-NULL, 8192 MiB"
env_case GGML_HRX_SIM_MEMORY_MB=0 "GGML_HRX_SIM_MEMORY_MB='0' is out of range: 1 to 1048576 MiB allowed; using 8192" "address range: non-NULL, 8192 MiB"
env_case GGML_HRX_HOST_WEIGHT_LIMIT_MB=-5 "GGML_HRX_HOST_WEIGHT_LIMIT_MB='-5' is negative: a size in MiB is at least 0; using 1024" "arena limit bytes: 1073741824"
env_case GGML_HRX_HOST_WEIGHT_LIMIT_MB=nan "GGML_HRX_HOST_WEIGHT_LIMIT_MB='nan' is not a finite number of MiB; using 1024" "arena limit bytes: 1073741824"
env_case GGML_HRX_FAKE_PTR_BASE=0 "GGML_HRX_FAKE_PTR_BASE='0' is 0: the fake address range cannot start at NULL; using a kernel-chosen range" "address range: non-NULL, 8192 MiB"
env_case GGML_HRX_SIM_THREADS=many "GGML_HRX_SIM_THREADS='many' is not a whole number from 1 to 1024; using the available cores" "devices: 1"
env_case GGML_HRX_REPORT=maybe "GGML_HRX_REPORT='maybe' is not a switch" "devices: 1"
# And values it takes: no warning.
env_case GGML_HRX_HOST_WEIGHT_LIMIT_MB=0.5 "" "arena limit bytes: 524288"
[ $env_fail -eq 0 ] || { echo "hrx env: FAILED"; exit 1; }
echo "hrx env: ok"
