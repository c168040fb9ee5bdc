#!/usr/bin/env bash
# gpu/run.sh STAGE...: the GPU-build checks (issue 16) on a CUDA machine without Rust or
# network, from what gpu/pack.sh wrote to .device/. Each stage skips what is already there,
# so a later call on the same machine goes on where the last one stopped.
#
#   setup    unpack the trimmed llama.cpp tree and the harness bundle into $W
#   build    the stock llama.cpp, CUDA (sm_90), RPC and the programs the checks run ($W/build)
#   model    a random-weight Llama-3.2-1B-shaped model, F16 then Q4_0 ($W/model-q4_0.gguf)
#   ops      ab ab --full: test-backend-ops -b CUDA0 over every op (work `backend-ops CUDA0
#            all`), and llama-simple at -ngl 99, 8 and 0, in the stock arm and ours
#   ctest    ab ab --only ctest: the build's ctest suite (all but the model tests) in both arms,
#            8 at a time (AB_CTEST_JOBS); the build must have made every target
#            (GPU_TARGETS="-k 0 all": test-chat does not build without the server), and the
#            tokenizer and chat tests need the vocabularies (gpu/pack.sh --models)
#   pipeline ab pipeline --self-test: perplexity with -c 2048 -b 2048 -ub 512 on CUDA0 and split
#            over CUDA0,CUDA1 with pipeline parallelism, both arms (needs two GPUs: issue 18;
#            PIPE_ONE, PIPE_TWO name other devices)
#   pipeone  issue 18 on one GPU: ab pipeline --self-test with CUDA0 against HRX0,CUDA0 (our CUDA
#            runtime beside ggml-cuda, F16 model) and against RPC0,CUDA0 (a ggml-rpc-server of
#            the same arm serving the same card, Q4_0 model); needs llama-perplexity and
#            ggml-rpc-server built, and `models`
#   rpc      ab rpc: ggml-rpc-server in one arm, the model split between RPC0 and CUDA0
#   toolchain  what the build's C++ toolchain put into the stock libggml-base besides ggml
#            (the C++ runtime symbols some programs then take from it; gpu/README.md)
#   bench    ab bench gpu: llama-bench, batched-bench and the scheduler's per-call time,
#            arms alternating (BENCH_ROUNDS, default 10)
#   benchrpc the same with every tool split over RPC0,CUDA0 (each arm's own ggml-rpc-server on
#            loopback serving the same card: pipeline parallelism on one GPU, issue 18's bench
#            until two GPUs are lent; BENCH_ROUNDS), report in $W/bench-rpc
#   rpcdiag  which end (server or client library) benchrpc's tg deficit lies in: llama-bench
#            tg128 split RPC0/CUDA0 for the four server/client arm pairings (RPCDIAG_ROUNDS;
#            RPCDIAG_DEV names another device than CUDA0, to try it on a CPU build with HRX0)
#   fusion   which of ggml-cuda's fused kernels each arm's layout forbids: the graphs CUDA0
#            computes in llama-bench (-ngl 99, -ngl 8) and llama-batched-bench, both arms,
#            compared by cabi-tests/sched-bench/fusion_check.py (logs/fusion-*.log)
#   rpctrace where the client's time of rpcdiag goes: every call into the backends in each
#            llama_decode, timed inside the process (backend_trace.c), both client arms side
#            by side, graph reuse on and off (RPCTRACE_ROUNDS, RPCTRACE_DEV, RPCTRACE_SETTINGS,
#            RPCTRACE_EXTRA), logs/rpctrace-SETTING.log
#   trace    where a token's time goes, both arms: every call into the backends in each
#            decode (backend_trace.c), llama-batched-bench -npl 8 and llama-bench tg128 at
#            -ngl 99 (TRACE_RUNS, TRACE_ROUNDS, default 3), logs/trace-RUN.log
#   ppdiag   where pp512's deficit at full offload lies: pp512 in both arms (and stock built
#            here, gpu/pack.sh --stock-base), as is or (PPDIAG_SETTINGS) with ggml-cuda's CUDA
#            graphs off, its fusions off, ours in the stock layout; first repetition apart
#            from the others; host time against the wait per steady compute (PPDIAG_ROUNDS,
#            default 4; PPDIAG_REPS, 10; PPDIAG_P, 512; PPDIAG_NGL, 99: 8 for the partial offload,
#            99,8 for the bench's own process, which loads the model at each in turn: the times
#            are then the last's, the host and wait figures both's; PPDIAG_N, 0: 128 adds
#            the bench's tg128 after each prompt test; setting delay0: ours
#            without the reuse delay); PPDIAG_QUANTS=1 adds arms with the
#            build's own ggml-quants.c object preloaded; both arms' splits (GGML_SCHED_DEBUG=2)
#   buildcpu the stock llama.cpp without CUDA ($W/build-cpu, about a minute): enough for HRX
#            on the CUDA runtime, which brings its own kernels
#   models   the 1B-shaped model in F16 and Q4_0, both kept ($W/model-f16.gguf, model-q4_0.gguf)
#   hrx      HRX0 on the CUDA runtime (GGML_HRX_RUNTIME=cuda): test-backend-ops -b HRX0 in the
#            stock arm and ours (HRX_OPS: -o filter), then greedy text with -dev HRX0 -ngl 99
#            against the CPU's, flash attention off in both (the same attention algorithm)
#   hrxbench llama-bench pp512/tg128 of the F16 and Q4_0 models, -dev HRX0 (CUDA runtime) and
#            -dev CUDA0 (ggml-cuda) from the same CUDA build, alternating (HRX_ROUNDS, default 3);
#            flash attention off, or on in both with HRX_FA=1 (HRX0 then claims FLASH_ATTN_EXT);
#            with it off, ggml-cuda with it on too (CUDA0-fa1, its default), and the ratios
#   realparts  copies the parts of the real model carried so far (.device-real-N/, from
#            gpu/pack.sh --real-model) to $W/real/
#   real     SmolLM2 (a real model, carried in parts) on HRX0 against the CPU, both arms: text,
#            placement, logits check, llama-bench with the arms alternating (REAL_ROUNDS rounds,
#            default 2; a third arm, ours with GGML_ALLOC_LAYOUT=stock), the profile of a
#            token and the scheduler probe's host and wait per compute in each arm
#            (REAL_WAIT: seconds to wait for parts)
#   hrxcheck everything issue 13 asks of the H200 in one go, for a machine held only minutes:
#            test-backend-ops -b HRX0 in both arms (in the background while the models are
#            made; it says when HRX0 was not a CUDA device, as then nothing ran on the GPU),
#            then llama-bench
#            -dev HRX0 in both arms, greedy text CPU against HRX0 (HRX_FA=1: also
#            test-backend-ops -o FLASH_ATTN_EXT with the kernel claimed, both arms, and
#            llama-bench -fa 1 on HRX0); per-token logits of both models on HRX0 against the
#            CPU's, teacher-forced, NMSE <= 1e-4 at every position (cabi-tests/logits/
#            logits_nmse.c, compiled there with cc); every process's libggml-base
#            proven by the probe; the in-place reproducer, the arena with -ot, test-llama-archs
#            -b HRX0 when the build has it (HRX_QUICK=1 stops before those three).
#            HRX_PARTS picks parts (any of: ops bench text logits report profile archs repro
#            arena; default all), for a call with little device time left. Uses
#            .device/llama-cpu-bin.tar.gz (gpu/pack.sh --llama-bin) when present, else
#            buildcpu. Logs in one tarball, $OUT/hrx-logs.tgz
#   kprof    where a decode token's device time goes: Nsight Compute (ncu, clocks left alone)
#            times every kernel of KPROF_TOKENS tokens (default 8) of llama-bench tg on the
#            Q4_0 model (KPROF_MODEL), HRX0 in our arm (gpu/kprof.py sums them by kernel and
#            grid), beside GGML_HRX_PROFILE's graph-replay time a token; and, when the CUDA
#            build is there (`build`), ggml-cuda's kernels on CUDA0 with flash attention off
#            and on. Says so when ncu cannot read the counters (on a gVisor machine)
#   hrxab    our HRX0 kernels against an earlier build of them (.device/old-hrx/libggml-hrx.so,
#            put there by hand; without it, the bundle's own again): llama-bench tg128 of the Q4_0 and F16 models, -fa 0, our
#            arm, the two libraries alternating (HRXAB_ROUNDS rounds, default 3); HRXAB_ENV
#            (VAR=VALUE ...) adds a third arm, the new library with that environment
#   bg S...  the stages S... in the background (setsid; they outlive this call), log $W/bg.log
#   status   what the background run has done so far
#   wait [N] wait until the background run ends or N seconds pass (default 560), then show
#            its log and collect every log into $OUT/gpu-logs.tgz (one file: the lent machine
#            brings back at most 8); end every call with it, as the machine goes back 30 s
#            after a call
#
# GPU_BUILD, GPU_MODEL and OPS_ONLY override the build folder, the model and the ops
# stage's --only (to try the stages on a CPU build here); GPU_JOBS the build's parallel jobs
# (default: every core), GPU_TARGETS the programs `build` makes (hrxbench needs llama-bench).
# Results go to $OUT when it is set (the lent machine brings that folder back), else $W/out.
# Measured on the H200 (16 cores, 2026-12-01): build 2.5 min, model about 1 min, ops 4 min,
# rpc 10 s, bench (10 rounds) 4 min.
# Needs there: CUDA (nvcc), cmake, ninja, cc, python3 with numpy and PyYAML, nm and ldd (binutils);
# graphviz for the main job's pages (without it they are reported missing, the job goes on).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dev=${GPU_DIR:-$root/.device}
W=${GPU_WORK:-$dev/work}
out=${OUT:-$W/out}
mkdir -p "$W/logs" "$out"
B=${GPU_BUILD:-$W/build}
M=${GPU_MODEL:-$W/model-q4_0.gguf}
ab=$W/ab-bundle/ab
jobs=${GPU_JOBS:-$(nproc)}

log() { echo "[gpu $(date -u +%H:%M:%S)] $*"; }
# Everything a run wrote, as one tarball ($out/gpu-logs.tgz): the lent machine brings back at
# most 8 files from $OUT, so loose copies of the logs would be cut off.
collect() {
  local files=() f
  for f in "$W"/logs/*.log "$W"/logs/*.txt "$W"/logs/*.jsonl "$W"/logs/*.trace "$W"/bg.log "$W"/ab-bundle/target/ab/report.json \
    "$W"/bench/report.md "$W"/bench/report.json "$W"/bench-rpc/report.md "$W"/bench-rpc/report.json; do
    [ -f "$f" ] && files+=("${f#"$W"/}")
  done
  [ ${#files[@]} -gt 0 ] && tar -czf "$out/gpu-logs.tgz" -C "$W" "${files[@]}" 2>/dev/null
  true
}

stage_setup() {
  [ -d "$W/llama.cpp" ] || tar -xzf "$dev/llama.tar.gz" -C "$W"
  # the tokenizer vocabularies and chat templates the ctest suite reads (gpu/pack.sh --models)
  [ -f "$dev/llama-models.tar.gz" ] && [ ! -d "$W/llama.cpp/models/templates" ] \
    && tar -xzf "$dev/llama-models.tar.gz" -C "$W"
  rm -rf "$W/ab-bundle" && tar -xzf "$dev/ab-bundle.tar.gz" -C "$W"
  log "setup: $(ls "$W")"
}

stage_build() {
  # not unpacked again when there: a stage running beside this one may be using the bundle
  [ -d "$W/llama.cpp" ] && [ -d "$W/ab-bundle" ] || stage_setup
  if [ ! -f "$B/build.ninja" ]; then
    cmake -S "$W/llama.cpp" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_RPC=ON -DLLAMA_BUILD_TESTS=ON \
      -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_OPENSSL=OFF > "$W/logs/cmake.log" 2>&1 || { log "cmake failed"; tail -20 "$W/logs/cmake.log"; return 1; }
  fi
  local t0=$SECONDS
  # shellcheck disable=SC2086
  ninja -C "$B" -j "$jobs" ${GPU_TARGETS:-llama-simple llama-completion llama-bench llama-batched-bench \
    ggml-rpc-server llama-quantize test-backend-ops} > "$W/logs/ninja.log" 2>&1 \
    || { log "ninja failed"; tail -30 "$W/logs/ninja.log"; return 1; }
  log "build: done in $((SECONDS - t0)) s; $(ls "$B/bin" | tr '\n' ' ' | head -c 400)"
}

stage_buildcpu() {
  stage_setup
  local b=$W/build-cpu
  if [ ! -f "$b/build.ninja" ]; then
    cmake -S "$W/llama.cpp" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_OPENSSL=OFF > "$W/logs/cmake-cpu.log" 2>&1 || { log "cmake failed"; tail -20 "$W/logs/cmake-cpu.log"; return 1; }
  fi
  local t0=$SECONDS
  ninja -C "$b" -j "$jobs" llama-simple llama-completion llama-bench llama-quantize test-backend-ops test-llama-archs \
    > "$W/logs/ninja-cpu.log" 2>&1 || { log "ninja failed"; tail -30 "$W/logs/ninja-cpu.log"; return 1; }
  log "buildcpu: done in $((SECONDS - t0)) s"
}

stage_kprof() {
  [ -d "$W/llama.cpp" ] && [ -d "$W/ab-bundle" ] || stage_setup
  local lib=$W/ab-bundle/lib b=$W/build-cpu n=${KPROF_TOKENS:-8} m=${KPROF_MODEL:-$M} ncu fa
  [ -x "$b/bin/llama-bench" ] || stage_buildcpu || return 1
  GPU_BUILD=$b stage_models || return 1
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { log "kprof: no ncu on this machine"; return 1; }
  local tg=(-m "$m" -ngl 99 -p 0 -r 1 --no-warmup)
  # the same tokens unprofiled first: the device time of a replayed graph, as the profile sees it
  GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=cuda GGML_HRX_PROFILE=1 LD_LIBRARY_PATH=$lib:$b/bin \
    "$b/bin/llama-bench" "${tg[@]}" -n 128 -dev HRX0 -fa 0 > "$W/logs/kprof-hrx-profile.log" 2>&1
  log "kprof HRX0 profile (tg128): $(grep -a -E 'profile|t/s|tg128' "$W/logs/kprof-hrx-profile.log" | head -6 | cut -c1-300 | tr '\n' ';')"
  GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=cuda LD_LIBRARY_PATH=$lib:$b/bin \
    "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw --log-file "$W/logs/kprof-hrx.csv" \
    "$b/bin/llama-bench" "${tg[@]}" -n "$n" -dev HRX0 -fa 0 > "$W/logs/kprof-hrx-run.log" 2>&1
  python3 "$root/gpu/kprof.py" "$W/logs/kprof-hrx.csv" "$n" > "$W/logs/kprof-hrx.txt" 2>&1
  log "kprof HRX0 (Q4_0 -fa 0): $(cat "$W/logs/kprof-hrx.txt")"
  [ -x "$B/bin/llama-bench" ] || { log "kprof: no CUDA build ($B), ggml-cuda left out"; return 0; }
  for fa in 0 1; do
    LD_LIBRARY_PATH=$B/bin "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      --log-file "$W/logs/kprof-cuda-fa$fa.csv" "$B/bin/llama-bench" "${tg[@]}" -n "$n" -dev CUDA0 -fa "$fa" \
      > "$W/logs/kprof-cuda-fa$fa-run.log" 2>&1
    python3 "$root/gpu/kprof.py" "$W/logs/kprof-cuda-fa$fa.csv" "$n" > "$W/logs/kprof-cuda-fa$fa.txt" 2>&1
    log "kprof CUDA0 (Q4_0 -fa $fa): $(cat "$W/logs/kprof-cuda-fa$fa.txt")"
  done
}

stage_hrxab() {
  [ -d "$W/llama.cpp" ] && [ -d "$W/ab-bundle" ] || stage_setup
  local old=$dev/old-hrx/libggml-hrx.so lib=$W/ab-bundle/lib b=$W/build-cpu r v i
  # without an earlier library the old arm repeats the bundle's own (HRXAB_ENV then compares
  # a setting against two arms without it)
  [ -f "$old" ] || { old=$lib/libggml-hrx.so; log "hrxab: no $dev/old-hrx/libggml-hrx.so; old is the bundle's own"; }
  [ -x "$b/bin/llama-bench" ] || stage_buildcpu || return 1
  GPU_BUILD=$b stage_models || return 1
  log "hrxab: old $(sha256sum "$old" | cut -c1-12), new $(sha256sum "$lib/libggml-hrx.so" | cut -c1-12)"
  # HRXAB_ENV (VAR=VALUE ...): a third arm, the new library with that environment; the
  # other two run with those variables unset
  local variants=(old new) unset=() kv; [ -n "${HRXAB_ENV:-}" ] && variants+=(env)
  for kv in ${HRXAB_ENV:-}; do unset+=(-u "${kv%%=*}"); done
  for r in $(seq 1 "${HRXAB_ROUNDS:-3}"); do
    for i in "${!variants[@]}"; do
      v=${variants[$(( (r - 1 + i) % ${#variants[@]} ))]}
      local hl=$lib/libggml-hrx.so extra=("${unset[@]}"); [ "$v" = old ] && hl=$old
      # shellcheck disable=SC2206
      [ "$v" = env ] && extra=($HRXAB_ENV)
      env "${extra[@]}" GGML_BACKEND_PATH="$hl" GGML_HRX_RUNTIME=cuda LD_LIBRARY_PATH="$lib:$b/bin" "$b/bin/llama-bench" \
        -m "$M" -m "$W/model-f16.gguf" -dev HRX0 -ngl 99 -fa 0 -p 0 -n 128 -r 5 > "$W/logs/hrxab-$v-$r.log" 2>&1
      log "hrxab round $r $v${HRXAB_ENV:+ ($([ "$v" = env ] && echo "$HRXAB_ENV" || echo "without it"))}: $(grep -E 'tg128' "$W/logs/hrxab-$v-$r.log" | awk -F'|' '{print $2 $(NF-1)}' | tr -s ' ' | tr '\n' ';')"
    done
  done
}

stage_models() {
  local b=${GPU_BUILD:-$W/build-cpu} f16=$W/model-f16.gguf
  if [ ! -f "$f16" ]; then
    PYTHONPATH=$W/llama.cpp/gguf-py python3 "$dev/mkmodel.py" \
      "$W/llama.cpp/models/ggml-vocab-llama-bpe.gguf" "$f16" --shape llama-3.2-1b > "$W/logs/model.log" 2>&1 \
      || { log "mkmodel failed"; tail "$W/logs/model.log"; return 1; }
  fi
  [ -f "$M" ] || "$b/bin/llama-quantize" "$f16" "$M" Q4_0 >> "$W/logs/model.log" 2>&1 \
    || { log "quantize failed"; tail "$W/logs/model.log"; return 1; }
  log "models: $(ls -la "$f16" "$M" | awk '{print $5, $9}' | tr '\n' ' ')"
}

stage_hrx() {
  local b=${GPU_BUILD:-$W/build-cpu} lib=$W/ab-bundle/lib
  export GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=cuda
  local filt=(); [ -n "${HRX_OPS:-}" ] && filt=(-o "$HRX_OPS")
  logged hrx-ops-stock 12 "$b/bin/test-backend-ops" test -b HRX0 "${filt[@]}"
  grep -E "FAIL|not supported \[HRX0\]" "$W/logs/hrx-ops-stock.log" | grep -v "^ *$" | sort | uniq -c | sort -rn | head -40 > "$W/logs/hrx-ops-fails.log"
  LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} logged hrx-ops-ours 6 "$b/bin/test-backend-ops" test -b HRX0 "${filt[@]}"
  [ -n "${HRX_OPS:-}" ] && return 0
  local p="The capital of France is" m
  for m in "$W/model-f16.gguf" "$M"; do
    [ -f "$m" ] || continue
    local n; n=$(basename "$m" .gguf)
    "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -ngl 0 -no-cnv --no-warmup \
      > "$W/logs/text-cpu-$n.log" 2>&1 < /dev/null
    GGML_HRX_REPORT=1 "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 -ngl 99 \
      -no-cnv --no-warmup > "$W/logs/text-hrx-$n.log" 2>&1 < /dev/null
    LD_LIBRARY_PATH=$lib "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 -ngl 99 \
      -no-cnv --no-warmup > "$W/logs/text-hrx-ours-$n.log" 2>&1 < /dev/null
    for a in cpu hrx hrx-ours; do
      log "text $n $a: $(grep -a -o "$p.*" "$W/logs/text-$a-$n.log" | head -1 | head -c 300)"
    done
  done
}

stage_hrxbench() {
  local lib=$W/ab-bundle/lib r m dev
  [ -x "$B/bin/llama-bench" ] && [ -f "$M" ] && [ -f "$W/model-f16.gguf" ] \
    || { log "hrxbench: needs the CUDA build ($B/bin/llama-bench) and both models (hrxcheck or models makes them)"; return 1; }
  export GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=cuda
  # HRX_FA=1: flash attention on both devices (HRX0 claims FLASH_ATTN_EXT only when asked)
  local fa=0
  if [ "${HRX_FA:-0}" = 1 ]; then
    fa=1; export GGML_HRX_EAGER_OPS=+FLASH_ATTN_EXT
  fi
  : > "$W/logs/hrxbench.log"
  # HRX0-nographs: our runtime with every launch issued (GGML_HRX_CUDA_GRAPHS=0); CUDA0-fa1:
  # ggml-cuda with flash attention, its default (-fa auto), when HRX0 runs without it
  local devs="HRX0 CUDA0 HRX0-nographs"; [ $fa = 0 ] && devs="$devs CUDA0-fa1"
  for r in $(seq "${HRX_ROUNDS:-3}"); do
    for m in "$M" "$W/model-f16.gguf"; do
      for dev in $devs; do
        GGML_HRX_CUDA_GRAPHS=$([ $dev = HRX0-nographs ] && echo 0 || echo 1) \
          "$B/bin/llama-bench" -m "$m" -dev "${dev%-*}" -ngl 99 -fa "$([ $dev = CUDA0-fa1 ] && echo 1 || echo $fa)" \
          -p 512 -n 128 -r 2 -o csv 2>/dev/null | tail -n +2 | sed "s|^|round $r,$dev,|" >> "$W/logs/hrxbench.log"
      done
    done
  done
  log "hrxbench: $(wc -l < "$W/logs/hrxbench.log") rows"
  cp "$W/logs/hrxbench.log" "$out/" 2>/dev/null
  # round, device, model type, test, t/s: the csv's model_type, n_prompt/n_gen and avg_ts
  python3 - "$W/logs/hrxbench.log" <<'PY'
import csv, sys, statistics
rows = list(csv.reader(open(sys.argv[1])))
# after our round and device: llama-bench's fields, model_type the 7th, and from the end
# n_prompt, n_gen, n_depth, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts
by = {}
for r in rows:
    rnd, dev, rest = r[0], r[1], r[2:]
    test = f"pp{rest[-8]}" if rest[-8] != "0" else f"tg{rest[-7]}"
    by.setdefault((rest[6], test, dev), []).append(float(rest[-2]))
for (typ, test, dev), v in sorted(by.items()):
    print(f"{typ:28s} {test:6s} {dev:14s} median {statistics.median(v):10.1f} t/s  {['%.1f' % x for x in v]}")
for typ in sorted({k[0] for k in by}):
    for test in ('pp512', 'tg128'):
        h = by.get((typ, test, 'HRX0'))
        for other in ('CUDA0', 'CUDA0-fa1'):
            c = by.get((typ, test, other))
            if h and c:
                print(f"{typ:28s} {test:6s} HRX0 / {other} = {statistics.median(h) / statistics.median(c):.3f}")
PY
}

# arm NAME CMD...: CMD in arm NAME (stock: the build's own libraries; ours: our libggml-base
# first), under the probe, which records what each process mapped in
# $W/logs/probe-${probe_tag}NAME.jsonl. It reads the calling stage's locals `b` (the llama.cpp
# build) and `lib` (the bundle's libraries), and `probe_tag` when set: bash functions see
# their caller's locals.
arm() {
  local a=$1; shift
  local path=$b/bin; [ "$a" = ours ] && path=$lib:$b/bin
  LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=${ARM_PRELOAD:+$ARM_PRELOAD:}$lib/libab_probe.so \
    GGML_AB_PROBE_OUT=$W/logs/probe-${probe_tag:-}$a.jsonl "$@"
}

# Arm specs, as RPCTRACE_ARMS and TRACE_ARMS list them: ARM or ARM:VAR=VALUE[,VAR=VALUE].
# arm_spec SPEC CMD...: `arm` of the spec's arm with its variables set (in a subshell).
arm_spec() {
  local spec=$1 a=${1%%:*} envs=()
  shift
  [ "$spec" != "$a" ] && IFS=, read -ra envs <<< "${spec#*:}"
  ( [ ${#envs[@]} -gt 0 ] && export "${envs[@]}"; arm "$a" "$@" )
}
# spec_label SPEC: the spec as a file-name part (ours:GGML_X=1 -> ours-GGML_X-1).
spec_label() { echo "$1" | tr ':=,' '---'; }
# specs_in_round R SPECS: the specs in their order for round R, turned every other round.
specs_in_round() {
  if [ $(($1 % 2)) = 0 ]; then echo "$2" | tr ' ' '\n' | tac | tr '\n' ' '; else echo "$2"; fi
}

# rpc_server_start ARM PORT LOG: starts the build's ggml-rpc-server in ARM on 127.0.0.1:PORT
# (output to LOG; ARM_PRELOAD and probe_tag as for `arm`), waits until it accepts a connection
# (30 s at most) and prints the server's own pid (on stdout: call it as `pid=$(...)`; its
# complaints go to stderr). `arm` runs in a background subshell that does
# not exec the program, so killing `$!` would leave the server listening, and the next server
# of the stage could not bind the port: its clients would reach the old one, of another arm.
# Fails when something already listens on PORT.
rpc_server_start() {
  local a=$1 port=$2 log=$3 i pid
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    log "port $port is taken: $(pgrep -af "ggml-rpc-server.* -p $port$" | head -1)" >&2; return 1
  fi
  arm "$a" "$b/bin/ggml-rpc-server" -H 127.0.0.1 -p "$port" > "$log" 2>&1 &
  for i in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  pid=$(pgrep -n -f "ggml-rpc-server -H 127.0.0.1 -p $port$") \
    || { log "the ggml-rpc-server on $port did not start: $(tail -2 "$log")" >&2; return 1; }
  echo "$pid"
}

# rpc_server_stop PID: SIGTERM (a traced server writes its trace then), 10 s at most, then
# SIGKILL
rpc_server_stop() {
  local i
  kill "$1" 2>/dev/null
  for i in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -9 "$1" 2>/dev/null
}

# build_logits BUILD: compiles the per-token logits check (cabi-tests/logits/logits_nmse.c)
# against BUILD's libraries into $W/logits_nmse
build_logits() {
  cc -std=c11 -O2 -Wall -Wextra -I"$W/llama.cpp/include" -I"$W/llama.cpp/ggml/include" \
    "$root/cabi-tests/logits/logits_nmse.c" -o "$W/logits_nmse" -L"$1/bin" -Wl,-rpath-link,"$1/bin" \
    -l:libllama.so.0 -l:libggml-base.so.0 -l:libggml.so.0 -lm > "$W/logs/logits-cc.log" 2>&1 \
    || { log "logits: compile failed: $(tail -3 "$W/logs/logits-cc.log")"; return 1; }
}

# as_f32 MODEL BUILD: MODEL's weights dequantized to F32 (made once, by BUILD's llama-quantize,
# next to MODEL), printed as a path: the CPU reference of a quantized model on HRX0, whose
# kernels multiply dequantized weights by F32 activations where the CPU's quantize the
# activations to 8 bits (cabi-tests/logits/logits_nmse.c, --ref-model)
as_f32() {
  local f=${1%.gguf}-as-f32.gguf
  if [ ! -f "$f" ]; then
    "$2/bin/llama-quantize" --allow-requantize "$1" "$f.tmp" F32 > "$W/logs/as-f32.log" 2>&1 \
      || { log "as_f32: llama-quantize failed: $(tail -3 "$W/logs/as-f32.log")" >&2; return 1; }
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

# logits_check TAG MODEL DEV_ARGS...: logits_nmse in both arms (log logits-ARM-TAG.log), one line each
logits_check() {
  local tag=$1 m=$2 a; shift 2
  for a in stock ours; do
    arm $a timeout 600 "$W/logits_nmse" -m "$m" --dev HRX0 -t "$jobs" "$@" > "$W/logs/logits-$a-$tag.log" 2>&1
    log "logits $tag $a: exit $?; $(grep -a -E '^(argmax|logits NMSE)' "$W/logs/logits-$a-$tag.log" | tr '\n' ' ')"
  done
}

# gen_text PROMPT FILE: the generated text in FILE (llama-completion's stdout) from PROMPT on,
# every line of it: two texts that part after the first line part all the same
gen_text() { sed -n "/$1/,\$p" "$2" 2>/dev/null; }

# log_texts LABEL PROMPT PATTERN: one line per run, the CPU's first, each HRX0 run said to be
# the CPU's text or not; PATTERN names a run's stdout with %s for cpu, hrx-stock or hrx-ours
log_texts() {
  local t_cpu t a
  # shellcheck disable=SC2059 # the pattern is ours
  t_cpu=$(gen_text "$2" "$(printf "$3" cpu)")
  for a in cpu hrx-stock hrx-ours; do
    # shellcheck disable=SC2059
    t=$(gen_text "$2" "$(printf "$3" "$a")")
    log "$1 $a$([ "$a" != cpu ] && { [ -n "$t" ] && [ "$t" = "$t_cpu" ] && echo " (the CPU's)" || echo " (NOT the CPU's)"; }): $(echo "$t" | tr '\n' ' ' | head -c 200)"
  done
}

# build_sched_probe: compiles the scheduler probe (cabi-tests/sched-bench/sched_probe.c, from
# the bundle) into $W/libsched-probe.so, anew each time: the bundle's source may be newer
build_sched_probe() {
  cc -O2 -fPIC -shared -I"$W/llama.cpp/ggml/include" "$W/ab-bundle/cabi-tests/sched-bench/sched_probe.c" \
    -o "$W/libsched-probe.so" -ldl > "$W/logs/sched-probe-cc.log" 2>&1 \
    || { log "the scheduler probe did not compile: $(tail -3 "$W/logs/sched-probe-cc.log")"; return 1; }
}

# part NAME: whether hrxcheck runs part NAME (HRX_PARTS, a space-separated list; unset: all)
part() { [ -z "${HRX_PARTS:-}" ] || [[ " $HRX_PARTS " == *" $1 "* ]]; }

stage_hrxcheck() {
  [ -d "$W/llama.cpp" ] && [ -d "$W/ab-bundle" ] || stage_setup
  local lib=$W/ab-bundle/lib b
  if [ -f "$dev/llama-cpu-bin.tar.gz" ]; then
    b=$W/prebuilt; mkdir -p "$b"; tar -xzf "$dev/llama-cpu-bin.tar.gz" -C "$b"
  else
    stage_buildcpu || return 1; b=$W/build-cpu
  fi
  export GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=${GGML_HRX_RUNTIME:-cuda}
  local filt=(); [ -n "${HRX_OPS:-}" ] && filt=(-o "$HRX_OPS")
  local t0=$SECONDS a
  part ops && for a in stock ours; do
    arm $a "$b/bin/test-backend-ops" test -b HRX0 "${filt[@]}" > "$W/logs/hrx-ops-$a.log" 2>&1 &
  done
  # HRX_FA=1: the flash-attention kernel too, claimed on request (docs/hrx-cuda.md)
  if [ "${HRX_FA:-0}" = 1 ]; then
    for a in stock ours; do
      GGML_HRX_EAGER_OPS=+FLASH_ATTN_EXT arm $a "$b/bin/test-backend-ops" test -b HRX0 -o FLASH_ATTN_EXT \
        > "$W/logs/hrx-fa-ops-$a.log" 2>&1 &
    done
  fi
  GPU_BUILD=$b stage_models || return 1
  # the GPU to itself for what is timed: the two test-backend-ops runs end first
  wait
  if [ "${HRX_FA:-0}" = 1 ]; then
    for a in stock ours; do
      log "FLASH_ATTN_EXT ops $a: $(grep -a 'tests passed' "$W/logs/hrx-fa-ops-$a.log" | tail -1) FAIL lines: $(grep -a -c FAIL "$W/logs/hrx-fa-ops-$a.log")"
    done
    GGML_HRX_EAGER_OPS=+FLASH_ATTN_EXT arm ours "$b/bin/llama-bench" -m "$M" -m "$W/model-f16.gguf" -dev HRX0 -ngl 99 \
      -fa 1 -p 512 -n 128 -r 3 > "$W/logs/hrx-bench-fa.log" 2>&1
    log "bench ours -fa 1: $(grep -E 'pp512|tg128' "$W/logs/hrx-bench-fa.log" | awk -F'|' '{print $2 $9 $10}' | tr -s ' ' | tr '\n' ';')"
  fi
  part ops && for a in stock ours; do
    log "ops $a: $(grep -a -o 'Device description: HRX on CUDA[^)]*)' "$W/logs/hrx-ops-$a.log" | head -1 || true) $(grep -a 'tests passed' "$W/logs/hrx-ops-$a.log" | tail -1) FAIL lines: $(grep -a -c FAIL "$W/logs/hrx-ops-$a.log")"
    grep -a -q "Device description: HRX on CUDA" "$W/logs/hrx-ops-$a.log" \
      || log "ops $a: NO HRX0 ON CUDA in this run (no device, or the simulator): the counts above mean nothing"
  done
  part bench && for a in stock ours; do
    arm $a "$b/bin/llama-bench" -m "$M" -m "$W/model-f16.gguf" -dev HRX0 -ngl 99 -fa 0 -p 512 -n 128 -r 3 \
      > "$W/logs/hrx-bench-$a.log" 2>&1
    log "bench $a: $(grep -E 'pp512|tg128' "$W/logs/hrx-bench-$a.log" | awk -F'|' '{print $2 $9 $10}' | tr -s ' ' | tr '\n' ';')"
  done
  local p="The capital of France is" m n
  part text && for m in "$W/model-f16.gguf" "$M"; do
    n=$(basename "$m" .gguf)
    # the text on stdout (.txt), the logs on stderr (.log): apart, or they interleave
    arm stock "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -ngl 0 -no-cnv --no-warmup \
      > "$W/logs/text-cpu-$n.txt" 2> "$W/logs/text-cpu-$n.log" < /dev/null
    for a in stock ours; do
      arm $a "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 \
        -ngl 99 -no-cnv --no-warmup > "$W/logs/text-hrx-$a-$n.txt" 2> "$W/logs/text-hrx-$a-$n.log" < /dev/null
    done
    log_texts "text $n" "$p" "$W/logs/text-%s-$n.txt"
  done
  # per-token logits against the CPU's, NMSE <= 1e-4 at every position (issue 13), the same
  # tokens fed to both runs, a prompt batch then single-token decodes, flash attention off in
  # both (cabi-tests/logits/logits_nmse.c). F16 against the same file; Q4_0 against its
  # dequantization to F32, the CPU's run then on HRX0's numeric path (F32 activations): the
  # same file is measured too, for the record, with the CPU on its own path (activations
  # rounded to Q8_0), which parts the logits by about 1e-3 with no fault on either side
  if part logits && build_logits "$b"; then
    local f32; f32=$(as_f32 "$M" "$b") && logits_check model-q4_0 "$M" --ref-model "$f32"
    logits_check model-f16 "$W/model-f16.gguf"
    logits_check model-q4_0-own-path "$M"
  fi
  # the placement report (ggml INFO, so -v), and where a token's time goes
  if part report; then
    GGML_HRX_REPORT=1 arm ours "$b/bin/llama-completion" -v -m "$M" -p "$p" -n 4 --temp 0 -fa off -dev HRX0 \
      -ngl 99 -no-cnv --no-warmup > "$W/logs/report.log" 2>&1 < /dev/null
    log "report: $(grep -a 'HRX0 report' "$W/logs/report.log" | head -1 | cut -c1-300)"
    log "graphs: $(grep -a 'captured a CUDA graph' "$W/logs/report.log" | tail -1 | cut -c1-200)"
  fi
  # with graphs a replay is timed as a whole (device time of a token's graph); without,
  # every kernel (upper bounds while the host is the bottleneck)
  if part profile; then
    GGML_HRX_PROFILE=1 arm ours "$b/bin/llama-bench" -m "$M" -dev HRX0 -ngl 99 -fa 0 -p 0 -n 128 -r 1 \
      > "$W/logs/profile.log" 2>&1
    log "graphs on: $(grep -a 'profile:' "$W/logs/profile.log" | head -1)"
    GGML_HRX_CUDA_GRAPHS=0 GGML_HRX_PROFILE=1 arm ours "$b/bin/llama-bench" -m "$M" -dev HRX0 -ngl 99 -fa 0 -p 0 \
      -n 128 -r 1 > "$W/logs/profile-nographs.log" 2>&1
    log "graphs off: $(grep -a 'profile:' "$W/logs/profile-nographs.log" | head -1)"
  fi
  if [ -n "${HRX_QUICK:-}" ] && [ "${HRX_QUICK}" != 0 ]; then
    log "hrxcheck (HRX_QUICK: no archs, reproducer or arena): $((SECONDS - t0)) s"
    tar -czf "$out/hrx-logs.tgz" -C "$W" logs
    return 0
  fi
  # every architecture's logits on HRX0 against the CPU, NMSE <= 1e-4 (upstream's bound);
  # test-llama-archs never loads backends itself, so HRX registers itself when preloaded
  if part archs && [ -x "$b/bin/test-llama-archs" ]; then
    for a in stock ours; do
      GGML_HRX_AUTOREGISTER=1 ARM_PRELOAD=$lib/libggml-hrx.so arm $a "$b/bin/test-llama-archs" -b HRX0 -s 42 \
        > "$W/logs/archs-$a.log" 2>&1
      log "test-llama-archs -b HRX0 $a: exit $?; $(grep -a -E '^Summary' "$W/logs/archs-$a.log" | head -c 300)"
    done
  fi
  # the in-place defect on this device: a device FILL feeding a CPU SET_ROWS (DESIGN.md);
  # stock is expected to die on a host write through a device address, ours to pass 32/32
  if part repro; then
    local rp=$W/inplace_repro
    cc -std=c11 -O1 -I"$W/llama.cpp/ggml/include" "$root/cabi-tests/inplace-repro/inplace_repro.c" -o "$rp" \
      -L"$b/bin" -l:libggml-base.so.0 -l:libggml.so.0 -l:libggml-cpu.so.0 -lm > "$W/logs/repro-cc.log" 2>&1 \
      || log "repro: compile failed: $(tail -3 "$W/logs/repro-cc.log")"
    for a in stock ours; do
      [ -x "$rp" ] || break
      GGML_HRX_EAGER_OPS=+FILL,-SET_ROWS GGML_NO_BACKTRACE=1 arm $a timeout 120 "$rp" --dev HRX0 --mode repro \
        > "$W/logs/repro-$a.log" 2>&1
      local rc=$?
      log "repro $a: exit $rc$( [ $rc -gt 128 ] && echo " (signal $((rc - 128)))"); $(grep -a -i -E 'passed|cases' "$W/logs/repro-$a.log" | tail -1 | head -c 200)"
    done
  fi
  # host weights through the arena: every weight on the CPU (-ot), read by HRX0 through a
  # budget below the model (evictions, refills, the same text), then below the largest weight
  # (refused by name, exit non-zero, no crash)
  if part arena; then
    local ev=${HRX_EVICT_MB:-300} rf=${HRX_REFUSE_MB:-100}
    GGML_HRX_REPORT=1 GGML_HRX_HOST_WEIGHT_LIMIT_MB=$ev arm ours "$b/bin/llama-completion" -v -m "$M" -p "$p" -n 24 \
      --temp 0 -fa off -dev HRX0 -ngl 99 -ot '.*=CPU' -no-cnv --no-warmup > "$W/logs/arena-evict.txt" \
      2> "$W/logs/arena-evict.log" < /dev/null
    log "arena ${ev} MiB: exit $?; $(grep -a -o 'arena: hits[^;]*' "$W/logs/arena-evict.log" | tail -1)"
    local t_arena t_hrx
    t_arena=$(gen_text "$p" "$W/logs/arena-evict.txt")
    # the text without -ot: the text part's, or made here when HRX_PARTS left that part out
    local th
    th=$W/logs/text-hrx-ours-$(basename "$M" .gguf)
    [ -f "$th.txt" ] || arm ours "$b/bin/llama-completion" -m "$M" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 \
      -ngl 99 -no-cnv --no-warmup > "$th.txt" 2> "$th.log" < /dev/null
    t_hrx=$(gen_text "$p" "$th.txt")
    log "arena ${ev} MiB text, the same as without -ot: $([ -n "$t_arena" ] && [ "$t_arena" = "$t_hrx" ] && echo yes || echo NO): $(echo "$t_arena" | tr '\n' ' ' | head -c 200)"
    # the same with the prefetch (GGML_HRX_PREFETCH=1: fresh weight copies uploaded on a side
    # stream while the kernels queued before them run; docs/hrx-cuda.md): the text must not
    # change, and the exit line says how many uploads overlapped earlier work
    GGML_HRX_PREFETCH=1 GGML_HRX_REPORT=1 GGML_HRX_HOST_WEIGHT_LIMIT_MB=$ev arm ours "$b/bin/llama-completion" -v \
      -m "$M" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 -ngl 99 -ot '.*=CPU' -no-cnv --no-warmup \
      > "$W/logs/arena-prefetch.txt" 2> "$W/logs/arena-prefetch.log" < /dev/null
    log "arena ${ev} MiB, prefetch: exit $?; $(grep -a -o 'HRX0 at exit.*' "$W/logs/arena-prefetch.log" | tail -1)"
    t_arena=$(gen_text "$p" "$W/logs/arena-prefetch.txt")
    log "arena ${ev} MiB prefetch text, the same as without -ot: $([ -n "$t_arena" ] && [ "$t_arena" = "$t_hrx" ] && echo yes || echo NO)"
    # and its speed: tg32 with every weight on the host through the budget, prefetch off and on
    # alternating (two rounds)
    local pf
    for pf in 0 1 0 1; do
      GGML_HRX_PREFETCH=$pf GGML_HRX_HOST_WEIGHT_LIMIT_MB=$ev arm ours "$b/bin/llama-bench" -m "$M" -dev HRX0 -ngl 99 \
        -ot '.*=CPU' -fa 0 -p 0 -n 32 -r 2 > "$W/logs/arena-bench-$pf.log" 2>&1
      log "arena ${ev} MiB tg32, GGML_HRX_PREFETCH=$pf: $(grep -E 'tg32' "$W/logs/arena-bench-$pf.log" | awk -F'|' '{print $(NF-1)}' | tr -s ' ')"
    done
    GGML_HRX_HOST_WEIGHT_LIMIT_MB=$rf arm ours "$b/bin/llama-completion" -m "$M" -p "$p" -n 4 --temp 0 -fa off \
      -dev HRX0 -ngl 99 -ot '.*=CPU' -no-cnv --no-warmup > "$W/logs/arena-refuse.log" 2>&1 < /dev/null
    log "arena ${rf} MiB: exit $?; $(grep -a 'refused by the arena' "$W/logs/arena-refuse.log" | head -1 | head -c 300)"
  fi
  for a in stock ours; do
    log "probe $a (processes, program, libggml-base mapped, sha256): $(grep -h '"name":"libggml-base"' \
      "$W/logs/probe-$a.jsonl" 2>/dev/null | sed -E 's/.*"exe":"([^"]*)".*"path":"([^"]*)".*"sha256":"(.{12}).*/\1 \2 \3/' \
      | awk '{sub(".*/", "", $1); print}' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  done
  log "hrxcheck: $((SECONDS - t0)) s"
  tar -czf "$out/hrx-logs.tgz" -C "$W" logs
}

# realparts: the parts of the real model carried so far (gpu/pack.sh --real-model writes one
# .device-real-N/ a device call can carry) go to $W/real/, where they outlive the checkout
stage_realparts() {
  mkdir -p "$W/real"
  local d f
  for d in "$root"/.device-real-*/; do
    [ -d "$d" ] || continue
    # copied under another name, then renamed: the background `real` stage and a call's
    # `realparts` may copy at the same time, and a half-copied part must never look whole
    for f in "$d"part-*; do
      [ -f "$f" ] && [ ! -f "$W/real/${f##*/}" ] && cp "$f" "$W/real/.${f##*/}.$$" \
        && mv -n "$W/real/.${f##*/}.$$" "$W/real/${f##*/}"
      rm -f "$W/real/.${f##*/}.$$"
    done
  done
  [ -f "$dev/real-model.txt" ] && cp "$dev/real-model.txt" "$W/real/"
  log "realparts: $(ls "$W/real" | tr '\n' ' ')"
}

# real: a real model (SmolLM2-135M-Instruct Q4_1) on HRX0 (CUDA runtime) against a CPU-only
# run, in the stock arm and ours, once every part has arrived (waits REAL_WAIT seconds for
# them, default 0): greedy text, the placement report, the logits check when hrxcheck built
# it, and llama-bench. Needs a CPU build of the pin (hrxcheck's, or buildcpu).
stage_real() {
  stage_realparts
  local man=$W/real/real-model.txt name sum n t0=$SECONDS
  [ -f "$man" ] || { log "real: no real-model.txt (gpu/pack.sh --real-model, then carry .device)"; return 1; }
  read -r name sum n < "$man"
  while [ "$(ls "$W/real"/part-* 2>/dev/null | wc -l)" -lt "$n" ]; do
    if [ $((SECONDS - t0)) -ge "${REAL_WAIT:-0}" ]; then
      log "real: $(ls "$W/real"/part-* 2>/dev/null | wc -l) of $n parts here; carry the others (.device-real-N) and run again"
      return 1
    fi
    sleep 5
    stage_realparts > /dev/null
  done
  local m=$W/real/$name
  [ -f "$m" ] || { cat "$W/real"/part-* > "$m.tmp" && mv "$m.tmp" "$m"; }
  if [ "$(sha256sum "$m" | cut -d' ' -f1)" != "$sum" ]; then
    log "real: $name does not have the sha256 of the manifest; parts: $(ls "$W/real"/part-* | tr '\n' ' ')"
    rm -f "$m"
    return 1
  fi
  local b=$W/prebuilt lib=$W/ab-bundle/lib a p="The capital of France is" mn
  [ -x "$b/bin/llama-completion" ] || { b=$W/build-cpu; [ -x "$b/bin/llama-completion" ] || stage_buildcpu || return 1; }
  mn=$(basename "$m" .gguf)
  export GGML_BACKEND_PATH=$lib/libggml-hrx.so GGML_HRX_RUNTIME=${GGML_HRX_RUNTIME:-cuda}
  local probe_tag=real-
  # the text on stdout, the logs (the report needs -v) on stderr: apart, or they interleave
  arm stock "$b/bin/llama-completion" -m "$m" -p "$p" -n 24 --temp 0 -fa off -ngl 0 -no-cnv --no-warmup \
    > "$W/logs/real-text-cpu.txt" 2> "$W/logs/real-text-cpu.log" < /dev/null
  for a in stock ours; do
    GGML_HRX_REPORT=1 arm $a "$b/bin/llama-completion" -v -m "$m" -p "$p" -n 24 --temp 0 -fa off -dev HRX0 \
      -ngl 99 -no-cnv --no-warmup > "$W/logs/real-text-hrx-$a.txt" 2> "$W/logs/real-text-hrx-$a.log" < /dev/null
  done
  # the whole generated text (it may run over several lines), from the prompt on: a text
  # that parts from the CPU's after the first line parts all the same
  log_texts "real $mn text" "$p" "$W/logs/real-text-%s.txt"
  log "real report: $(grep -a -o 'HRX0 report.*' "$W/logs/real-text-hrx-ours.log" | head -1 | cut -c1-300)"
  # the logits check (built here when hrxcheck has not built it), against the F32
  # dequantization as in hrxcheck, then against the file itself for the record
  if [ -x "$W/logits_nmse" ] || build_logits "$b"; then
    local f32; f32=$(as_f32 "$m" "$b") && logits_check real "$m" --ref-model "$f32"
    logits_check real-own-path "$m"
  fi
  # the arms alternating (stock ours, then ours stock: REAL_ROUNDS pairs, default 2), as a
  # model this small is bound by the host, where one run after the other can mislead; then
  # where a token's time goes in each arm (GGML_HRX_PROFILE: host issuing, waiting, device)
  # A third arm, ours with the stock layout of the compute buffers (GGML_ALLOC_LAYOUT=stock,
  # docs/alloc.md), tells a cost of the packed layout apart from the rest of ours
  local r order
  for r in $(seq 1 "${REAL_ROUNDS:-2}"); do
    order="stock ours ours-stock-layout"; [ $((r % 2)) = 0 ] && order="ours-stock-layout ours stock"
    for a in $order; do
      local cmd=("$b/bin/llama-bench" -m "$m" -dev HRX0 -ngl 99 -fa 0 -p 512 -n 128 -r 3)
      if [ "$a" = ours-stock-layout ]; then
        GGML_ALLOC_LAYOUT=stock arm ours "${cmd[@]}" > "$W/logs/real-bench-$a-$r.log" 2>&1
      else
        arm $a "${cmd[@]}" > "$W/logs/real-bench-$a-$r.log" 2>&1
      fi
      log "real bench round $r $a: $(grep -E 'pp512|tg128' "$W/logs/real-bench-$a-$r.log" | awk -F'|' '{print $(NF-2) $(NF-1)}' | tr -s ' ' | tr '\n' ';')"
    done
  done
  # the scheduler's side of a token in each arm: the probe (cabi-tests/sched-bench/
  # sched_probe.c) times graph_compute_async (the host's part: input copies, queueing the
  # split) and synchronize (the wait) per call; the median of the steady calls (the first
  # two left out: warm-up, the CUDA graph's capture)
  local sp=$W/libsched-probe.so
  build_sched_probe || sp=
  for a in stock ours; do
    rm -f "$W/logs/real-sched-$a.jsonl"
    ARM_PRELOAD=$sp SCHED_PROBE_OUT=$W/logs/real-sched-$a.jsonl GGML_HRX_PROFILE=1 arm $a "$b/bin/llama-bench" \
      -m "$m" -dev HRX0 -ngl 99 -fa 0 -p 0 -n 128 -r 1 > "$W/logs/real-profile-$a.log" 2>&1
    log "real profile $a: $(grep -a 'profile:' "$W/logs/real-profile-$a.log" | head -1 | cut -c1-300)"
    [ -f "$W/logs/real-sched-$a.jsonl" ] && log "real scheduler $a: $(python3 - "$W/logs/real-sched-$a.jsonl" <<'PY'
import json, statistics, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    c, w = d.get("compute_each_ns", [])[2:], d.get("synchronize_each_ns", [])[2:]
    if c:
        print("%d computes; per steady call: host %.1f us, wait %.1f us;" % (
            d["compute"]["calls"], statistics.median(c) / 1e3, statistics.median(w) / 1e3 if w else 0), end=" ")
PY
)"
  done
  log "real probe (program, libggml-base mapped): $(cat "$W"/logs/probe-real-*.jsonl 2>/dev/null | grep -o '"name":"libggml-base"[^}]*' \
    | grep -o '"path":"[^"]*"' | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
}

stage_model() {
  [ -f "$M" ] && { log "model: $M exists"; return 0; }
  local f16=$W/model-f16.gguf
  PYTHONPATH=$W/llama.cpp/gguf-py python3 "$dev/mkmodel.py" \
    "$W/llama.cpp/models/ggml-vocab-llama-bpe.gguf" "$f16" --shape llama-3.2-1b > "$W/logs/model.log" 2>&1 \
    || { log "mkmodel failed"; tail "$W/logs/model.log"; return 1; }
  "$B/bin/llama-quantize" "$f16" "$M" Q4_0 >> "$W/logs/model.log" 2>&1 \
    || { log "quantize failed"; tail "$W/logs/model.log"; return 1; }
  rm -f "$f16"
  log "model: $(ls -la "$M")"
}

# logged NAME LINES CMD...: runs CMD with its output in $W/logs/NAME.log, shows its last LINES
# lines and its exit status, and returns that status.
logged() {
  local name=$1 lines=$2
  shift 2
  "$@" > "$W/logs/$name.log" 2>&1
  local rc=$?
  tail -"$lines" "$W/logs/$name.log"
  log "$name: exit $rc"
  return $rc
}

stage_ops() {
  logged ops 25 "$ab" ab --llama-build "$B" --model "$M" --full --partial-ngl 8 \
    --only "${OPS_ONLY:-llama-simple,backend-ops CUDA0 all}"
}

stage_ctest() {
  # the build's own test suite in both arms (needs GPU_TARGETS="-k 0 all" at build: the tests)
  [ -x "$B/bin/test-backend-ops" ] && [ -n "$(find "$B/bin" -maxdepth 1 -name 'test-*' ! -name test-backend-ops | head -1)" ] \
    || { log "ctest needs the tests built: GPU_TARGETS=\"-k 0 all\" gpu/run.sh build"; return 1; }
  AB_CTEST_JOBS=${AB_CTEST_JOBS:-8} logged ctest 25 "$ab" ab --llama-build "$B" --model "$M" --only ctest
}

stage_pipeline() {
  # issue 18, on a machine with two GPUs: pipeline parallelism by perplexity, CUDA0 against
  # CUDA0,CUDA1 in both arms, with the planted-fault self-test (README: ab pipeline)
  logged pipeline 16 "$ab" pipeline --llama-build "$B" --model "$M" \
    --text "$W/llama.cpp/docs/build.md" --one "${PIPE_ONE:-CUDA0}" --two "${PIPE_TWO:-CUDA0,CUDA1}" --self-test
}

# pipeone: what issue 18 asks of one GPU before the two-GPU machine: pipeline parallelism by
# perplexity (and, where the numeric path is the same, greedy text) with two devices on the one
# card, both arms, the planted fault caught. HRX0 (our
# CUDA runtime) beside CUDA0 on the F16 model (HRX0's products take F32 activations where
# ggml-cuda's quantized ones round them to Q8_1), then RPC0 (a ggml-rpc-server of the same
# arm on loopback, serving CUDA0 of the same card) beside CUDA0 on the Q4_0 model. Needs the
# build with llama-perplexity and ggml-rpc-server, and both models (`models`).
stage_pipeone() {
  [ -x "$B/bin/llama-perplexity" ] && [ -x "$B/bin/ggml-rpc-server" ] \
    || { log "pipeone needs llama-perplexity and ggml-rpc-server in $B/bin (GPU_TARGETS)"; return 1; }
  GPU_BUILD=$B stage_models || return 1
  local rc=0 text=$W/llama.cpp/docs/build.md
  # --greedy 0: HRX0's kernels are not ggml-cuda's, so the split's greedy text may part from
  # CUDA0's without a fault; perplexity (within 0.1 %) is the check there
  GGML_HRX_RUNTIME=cuda logged pipeline-hrx 16 "$ab" pipeline --llama-build "$B" --model "$W/model-f16.gguf" \
    --text "$text" --one CUDA0 --two HRX0,CUDA0 --greedy 0 --self-test || rc=1
  logged pipeline-rpc 16 "$ab" pipeline --llama-build "$B" --model "$W/model-q4_0.gguf" \
    --text "$text" --one CUDA0 --two RPC0,CUDA0 --self-test || rc=1
  return $rc
}

stage_rpc() {
  logged rpc 12 "$ab" rpc --llama-build "$B" --model "$M"
}

stage_bench() {
  logged bench 40 "$ab" bench gpu --llama-build "$B" --model "$M" --rounds "${BENCH_ROUNDS:-10}" \
    --out "$W/bench"
}

stage_benchrpc() {
  [ -x "$B/bin/ggml-rpc-server" ] || { log "benchrpc needs ggml-rpc-server in $B/bin (GPU_TARGETS)"; return 1; }
  logged bench-rpc 40 "$ab" bench gpu --llama-build "$B" --model "$M" --rounds "${BENCH_ROUNDS:-10}" \
    --devices RPC0,CUDA0 --out "$W/bench-rpc"
}

# rpcdiag: which end of the RPC0,CUDA0 split the tg deficit of benchrpc lies in (issue 16/18).
# llama-bench -p 0 -n 128 -r 3 split RPC0/CUDA0 for the four pairings of server arm and client
# arm (ss, oo, so, os; RPCDIAG_ROUNDS rounds, default 3, the order rotated each round); every
# process under the probe (logs/probe-rpcdiag-*.jsonl); t/s per pairing and round in
# logs/rpcdiag.log, medians at the end.
stage_rpcdiag() {
  [ -x "$B/bin/ggml-rpc-server" ] && [ -f "$M" ] || { log "rpcdiag needs ggml-rpc-server and the model"; return 1; }
  local b=$B lib=$W/ab-bundle/lib port=50755 r i pair sv cl ts out=$W/logs/rpcdiag.log
  local pairs=(stock:stock ours:ours stock:ours ours:stock)
  : > "$out"
  for r in $(seq 1 "${RPCDIAG_ROUNDS:-3}"); do
    for i in 0 1 2 3; do
      pair=${pairs[$(((i + r) % 4))]}; sv=${pair%%:*}; cl=${pair##*:}
      local spid
      spid=$(probe_tag=rpcdiag-server- rpc_server_start "$sv" "$port" "$W/logs/rpcdiag-server.log") || return 1
      ts=$(probe_tag=rpcdiag-client- arm "$cl" "$b/bin/llama-bench" -m "$M" -rpc "127.0.0.1:$port" -dev "RPC0/${RPCDIAG_DEV:-CUDA0}" \
        -ts 1/1 -ngl 99 -p 0 -n 128 -r 3 -o csv 2>> "$W/logs/rpcdiag-client.log" | tail -1 | awk -F, '{print $(NF-1)}' | tr -d '"')
      rpc_server_stop "$spid"
      echo "round $r server $sv client $cl tg128 ${ts:-failed}" >> "$out"
    done
  done
  python3 - "$out" <<'PY' >> "$out"
import statistics, sys, collections
by = collections.defaultdict(list)
for line in open(sys.argv[1]):
    w = line.split()
    if len(w) == 8 and w[7] != "failed":
        by[(w[3], w[5])].append(float(w[7]))
for (sv, cl), v in sorted(by.items()):
    print(f"median server {sv} client {cl}: {statistics.median(v):.1f} t/s over {len(v)} rounds")
PY
  log "rpcdiag: $(tail -4 "$out" | tr '\n' ';')"
}

# build_tracer FILE: compiles cabi-tests/sched-bench/backend_trace.c (from the bundle) into FILE.
build_tracer() {
  cc -O2 -fPIC -shared -pthread -I"$W/llama.cpp/ggml/include" -I"$W/llama.cpp/ggml/src" -I"$W/llama.cpp/include" \
    -Wno-unused-function "$W/ab-bundle/cabi-tests/sched-bench/backend_trace.c" -o "$1" -ldl \
    > "$W/logs/backend-trace-cc.log" 2>&1 \
    || { log "the backend tracer did not compile: $(tail -3 "$W/logs/backend-trace-cc.log")"; return 1; }
}

# fusion: which of ggml-cuda's fused kernels each arm's memory layout forbids, on the card
# (issue 16): the graphs CUDA0 computes (FUSION_DEV: another device), in ggml-cuda's own node
# order after its graph_optimize, written by backend_trace.c (BACKEND_TRACE_GRAPHS) in
# llama-bench -p 512 -n 4 at -ngl 99 and -ngl 8 and in llama-batched-bench -npl 1,4,8, stock
# arm then ours; fusion_check.py --compare then lists every run of up to 12 consecutive nodes
# whose output overlaps a source from outside it in ours and not in stock (ggml-cuda runs such
# a run unfused). logs/fusion-RUN.log; fails when ours forbids a run of up to 5 nodes that
# stock allows, or the arms computed different graphs.
stage_fusion() {
  [ -x "$B/bin/llama-bench" ] && [ -x "$B/bin/llama-batched-bench" ] && [ -f "$M" ] \
    || { log "fusion needs llama-bench, llama-batched-bench and the model"; return 1; }
  local b=$B lib=$W/ab-bundle/lib tr=$W/libbackend-trace.so run a fails=0 dev=${FUSION_DEV:-CUDA0}
  local check=$W/ab-bundle/cabi-tests/sched-bench/fusion_check.py
  build_tracer "$tr" || return 1
  for run in ngl99 ngl8 batched; do
    for a in stock ours; do
      rm -f "$W/logs/fusion-$run-$a.graphs"
      case $run in
        ngl99|ngl8)
          ARM_PRELOAD=$tr BACKEND_TRACE_GRAPHS=$W/logs/fusion-$run-$a.graphs probe_tag=fusion- arm "$a" \
            "$b/bin/llama-bench" -m "$M" -dev "$dev" -ngl "${run#ngl}" -p 512 -n 4 -r 1 -o csv ;;
        batched)
          ARM_PRELOAD=$tr BACKEND_TRACE_GRAPHS=$W/logs/fusion-$run-$a.graphs probe_tag=fusion- arm "$a" \
            "$b/bin/llama-batched-bench" -m "$M" -dev "$dev" -ngl 99 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 4 -npl 1,4,8 ;;
      esac > "$W/logs/fusion-$run-$a.out" 2>&1 || { log "fusion $run: $a exited $? (logs/fusion-$run-$a.out)"; fails=1; }
    done
    python3 "$check" --compare --backend "$dev" "$W/logs/fusion-$run-stock.graphs" "$W/logs/fusion-$run-ours.graphs" \
      > "$W/logs/fusion-$run.log" 2>&1
    python3 "$check" --compare --backend "$dev" --window 5 "$W/logs/fusion-$run-stock.graphs" \
      "$W/logs/fusion-$run-ours.graphs" > "$W/logs/fusion-$run-5.log" 2>&1 || fails=1
    log "fusion $run: up to 5 nodes: $(tail -1 "$W/logs/fusion-$run-5.log"); up to 12: $(tail -1 "$W/logs/fusion-$run.log")"
  done
  [ "$fails" = 0 ]
}

# rpctrace: where the client's extra time of rpcdiag goes (issue 16/18). Every call the
# scheduler makes into the backends during each decode, timed from inside the process
# (cabi-tests/sched-bench/backend_trace.c, preloaded), for llama-bench tg128 split RPC0/CUDA0
# (RPCTRACE_DEV: another device), a stock server, the client in each arm (RPCTRACE_ROUNDS,
# default 2, arms alternating), under each setting of RPCTRACE_SETTINGS (default "reuse_on
# reuse_off": llama.cpp's graph reuse as is, and off with LLAMA_GRAPH_REUSE_DISABLE=1); then
# backend_trace.py sets the arms' steady decodes side by side (logs/rpctrace-SETTING.log: one
# row per call, median start and duration in each arm). RPCTRACE_EXTRA adds llama-bench
# arguments (-fa 1, ...). RPCTRACE_ARMS lists the client arms (default "stock ours"); an arm
# ARM:VAR=VALUE[,VAR=VALUE] runs ARM with those variables set (ours:GGML_ALLOC_LAYOUT=stock),
# each compared with stock. RPCTRACE_TAG adds -TAG to the logs' names (a second run beside the
# first). The server is traced too: its calls join each decode's rows as srv:KIND.
stage_rpctrace() {
  [ -x "$B/bin/ggml-rpc-server" ] && [ -f "$M" ] || { log "rpctrace needs ggml-rpc-server and the model"; return 1; }
  local b=$B lib=$W/ab-bundle/lib r spid set reuse tr=$W/libbackend-trace.so out spec label rc fails=0
  local src=$W/ab-bundle/cabi-tests/sched-bench arms=${RPCTRACE_ARMS:-stock ours} tag=${RPCTRACE_TAG:+-$RPCTRACE_TAG}
  # a port of its own per tag, so that two runs side by side never find each other's server
  local port=$((50756 + $(printf '%s' "${RPCTRACE_TAG:-}" | cksum | cut -d' ' -f1) % 200))
  # shellcheck disable=SC2086 # RPCTRACE_EXTRA is a list of arguments
  set -- ${RPCTRACE_EXTRA:-}
  build_tracer "$tr" || return 1
  for set in ${RPCTRACE_SETTINGS:-reuse_on reuse_off}; do
    case $set in
      reuse_on) reuse=0 ;;
      reuse_off) reuse=1 ;;
      *) log "rpctrace: unknown setting $set (reuse_on, reuse_off)"; continue ;;
    esac
    # the server traced too (absolute times), one server per setting
    rm -f "$W/logs/rpctrace-$set$tag"-*.trace
    spid=$(ARM_PRELOAD=$tr BACKEND_TRACE_OUT=$W/logs/rpctrace-$set$tag-server.trace probe_tag=rpctrace-server- \
      rpc_server_start stock "$port" "$W/logs/rpctrace-server.log") || return 1
    out=$W/logs/rpctrace-$set$tag.log
    : > "$out"
    for r in $(seq 1 "${RPCTRACE_ROUNDS:-2}"); do
      for spec in $(specs_in_round "$r" "$arms"); do
        label=$(spec_label "$spec")
        LLAMA_GRAPH_REUSE_DISABLE=$reuse ARM_PRELOAD=$tr BACKEND_TRACE_OUT=$W/logs/rpctrace-$set$tag-$label.trace \
          probe_tag=rpctrace-client- arm_spec "$spec" "$b/bin/llama-bench" -m "$M" -rpc "127.0.0.1:$port" \
          -dev "RPC0/${RPCTRACE_DEV:-CUDA0}" -ts 1/1 -ngl 99 -p 0 -n 128 -r 3 -o csv "$@" \
          > "$W/logs/rpctrace-bench.csv" 2>> "$W/logs/rpctrace-client.log"
        rc=$?
        [ "$rc" = 0 ] || { fails=$((fails + 1)); log "rpctrace: client $label exited $rc (logs/rpctrace-client.log)"; }
        echo "round $r client $label tg128 $(tail -1 "$W/logs/rpctrace-bench.csv" | awk -F, '{print $(NF-1)}' | tr -d '"') exit $rc" >> "$out"
      done
    done
    rpc_server_stop "$spid"
    for spec in $arms; do
      label=$(spec_label "$spec")
      [ "$label" = stock ] && continue
      echo "== stock (A) against $spec (B)" >> "$out"
      python3 "$src/backend_trace.py" --server "$W/logs/rpctrace-$set$tag-server.trace" \
        "$W/logs/rpctrace-$set$tag-stock.trace" "$W/logs/rpctrace-$set$tag-$label.trace" >> "$out" 2>&1
    done
    log "rpctrace $set$tag: $(grep -E '^ +(decode|cycle)' "$out" | tr -s ' ')"
  done
  [ "$fails" = 0 ]
}

# trace: where a token's time goes on the card, both arms (issue 16: the batched rows were
# 0.99 of stock's on the H100, and the wait for the card 0.7 % longer, p < 0.001). Every call
# the scheduler makes into the backends during each decode, timed from inside the process
# (backend_trace.c, preloaded), for each run TRACE_RUNS names (default "batched8 tg128":
# llama-batched-bench -npl 8 as the bench runs it, and llama-bench tg128 at -ngl 99), arms
# alternating (TRACE_ROUNDS, default 3; the order turned every other round); backend_trace.py
# then sets each arm's steady decodes beside stock's, round by round (logs/trace-RUN.log: one
# row per call, median start and duration in each arm, and B's start minus A's). TRACE_ARMS
# lists the arms (default "stock ours"); ARM:VAR=VALUE[,VAR=VALUE] runs ARM with those
# variables set (ours:GGML_SCHED_INPUT_WAITS=input: ours with stock's waits), each compared
# with stock.
stage_trace() {
  [ -x "$B/bin/llama-bench" ] && [ -x "$B/bin/llama-batched-bench" ] && [ -f "$M" ] \
    || { log "trace needs the build (llama-bench, llama-batched-bench) and the model"; return 1; }
  local b=$B lib=$W/ab-bundle/lib tr=$W/libbackend-trace.so src=$W/ab-bundle/cabi-tests/sched-bench
  local run r spec label out rc fails=0 arms=${TRACE_ARMS:-stock ours}
  case " $arms " in *" stock "*) ;; *) log "trace: TRACE_ARMS must name stock (the arm the others are set beside)"; return 1 ;; esac
  build_tracer "$tr" || return 1
  for run in ${TRACE_RUNS:-batched8 tg128}; do
    case $run in
      batched8|tg128) ;;
      *) log "trace: unknown run $run (batched8, tg128)"; fails=1; continue ;;
    esac
    out=$W/logs/trace-$run.log
    : > "$out"
    rm -f "$W/logs/trace-$run"-*.trace
    for r in $(seq 1 "${TRACE_ROUNDS:-3}"); do
      for spec in $(specs_in_round "$r" "$arms"); do
        label=$(spec_label "$spec")
        case $run in
          batched8) ARM_PRELOAD=$tr BACKEND_TRACE_OUT=$W/logs/trace-$run-$label-$r.trace probe_tag=trace- arm_spec "$spec" \
            "$b/bin/llama-batched-bench" -m "$M" -ngl 99 -c 4096 -npp 128 -ntg 128 -npl 8 ;;
          tg128) ARM_PRELOAD=$tr BACKEND_TRACE_OUT=$W/logs/trace-$run-$label-$r.trace probe_tag=trace- arm_spec "$spec" \
            "$b/bin/llama-bench" -m "$M" -ngl 99 -p 0 -n 128 -r 3 -o csv ;;
        esac > "$W/logs/trace-$run-$label.out" 2>&1
        rc=$?
        [ "$rc" = 0 ] || { fails=1; log "trace $run: $label exited $rc (logs/trace-$run-$label.out)"; }
      done
    done
    for spec in $arms; do
      label=$(spec_label "$spec")
      [ "$label" = stock ] && continue
      for r in $(seq 1 "${TRACE_ROUNDS:-3}"); do
        echo "== round $r: stock (A) against $spec (B)" >> "$out"
        python3 "$src/backend_trace.py" "$W/logs/trace-$run-stock-$r.trace" "$W/logs/trace-$run-$label-$r.trace" >> "$out" 2>&1
      done
    done
    log "trace $run: $(grep -E '^ +(decode|cycle)' "$out" | tr -s ' ' | tr '\n' ';')"
  done
  [ "$fails" = 0 ]
}

# ppdiag: where pp512's deficit at full offload lies (issue 16). llama-bench -p P -n 0 -ngl 99
# -r PPDIAG_REPS (default 10), arms alternating (PPDIAG_ROUNDS, default 4), under the settings
# PPDIAG_SETTINGS names (default "as_is"; also graphs_off: ggml-cuda's CUDA graphs off,
# fusion_off: its fusions off, layout_stock: ours in GGML_ALLOC_LAYOUT=stock). Arms: a, the
# build's own libggml-base; b, ours; c, when .device/stock-base/libggml-base.so.0 is there
# (gpu/pack.sh --stock-base): stock's sources built on the development machine, with the
# compiler that built ours. c tells the two causes apart: if c is as slow as b, the deficit
# comes from how the library was built, not from our code. Per setting and arm: the first
# repetition's time (warm-up, CUDA graph capture) apart from the median of the others, and,
# per steady compute (the probe's per-call figures, the first compute left out), the host part
# (graph_compute_async) against the wait (synchronize). Then one verbose run an arm with
# GGML_SCHED_DEBUG=2 (the splits, nodes and use counts). Rows: $W/logs/ppdiag.jsonl.
stage_ppdiag() {
  [ -x "$B/bin/llama-bench" ] && [ -f "$M" ] || { log "ppdiag needs the build and the model stages"; return 1; }
  local probe=$W/libsched-probe.so shim=$W/libcxxrt-diag.so
  build_sched_probe || return 1
  # the C++ runtime symbols some programs take from stock's libggml-base (gpu/README.md)
  [ -f "$shim" ] || c++ -shared -o "$shim" -Wl,--whole-archive "$(c++ -print-file-name=libsupc++.a)" \
    -Wl,--no-whole-archive || return 1
  local arms="a b"
  mkdir -p "$W/arms/a" "$W/arms/b"
  cp -L "$B/bin/libggml-base.so.0" "$W/arms/a/libggml-base.so.0"
  cp -L "$W/ab-bundle/lib/libggml-base.so.0" "$W/arms/b/libggml-base.so.0"
  if [ -f "$dev/stock-base/libggml-base.so.0" ]; then
    mkdir -p "$W/arms/c" && cp -L "$dev/stock-base/libggml-base.so.0" "$W/arms/c/" && arms="a b c"
  fi
  sha256sum "$W"/arms/*/libggml-base.so.0 | sed "s|$W/||" > "$W/logs/ppdiag-arms.log"
  # PPDIAG_QUANTS=1: arms bq and cq, b and c with the build's own ggml-quants.c object (the
  # dequantisers llama.cpp's CPU GET_ROWS calls through ggml_get_type_traits) preloaded over
  # theirs: if they come out as fast as a, the host time lies in how that file was compiled.
  local qo=$B/ggml/src/CMakeFiles/ggml-base.dir/ggml-quants.c.o quants=$W/libstock-quants.so
  if [ "${PPDIAG_QUANTS:-0}" = 1 ] && [ -f "$qo" ]; then
    cc -shared -o "$quants" "$qo" -lm || return 1
    arms="$arms bq"; [ -d "$W/arms/c" ] && arms="$arms cq"
    {
      echo "compile command of $qo:"; ninja -C "$B" -t commands "${qo#"$B"/}" | tail -1
      local lib
      for lib in "$W"/arms/*/libggml-base.so.0; do
        echo "$lib: dequantize_row_q4_0 $(objdump -d --no-show-raw-insn "$lib" | awk '/<dequantize_row_q4_0>:/,/^$/' | wc -l) lines;" \
          "NEEDED $(readelf -d "$lib" | grep NEEDED | grep -o '\[.*\]' | tr '\n' ' ')"
      done
      echo "the build's own ggml-quants.c.o: $(objdump -d --no-show-raw-insn "$qo" | awk '/<dequantize_row_q4_0>:/,/^$/' | wc -l) lines"
    } > "$W/logs/ppdiag-build.log" 2>&1
  fi
  local rows=$W/logs/ppdiag.jsonl reps=${PPDIAG_REPS:-10} ngl=${PPDIAG_NGL:-99}
  # the first repetition is set apart (the CUDA graph's capture): at least one more is needed
  [ "$reps" -ge 2 ] || { log "ppdiag: PPDIAG_REPS must be at least 2"; return 1; }
  : > "$rows"
  one() { # one ROUND SETTING P ARM
    local r=$1 set=$2 p=$3 a=$4 env=() out=$W/logs/ppdiag-probe.jsonl res=$W/logs/ppdiag-bench.json
    case $set in
      as_is) ;;
      graphs_off) env=(GGML_CUDA_DISABLE_GRAPHS=1) ;;
      fusion_off) env=(GGML_CUDA_DISABLE_FUSION=1) ;;
      layout_stock) env=(GGML_ALLOC_LAYOUT=stock) ;;
      delay0) env=(GGML_ALLOC_REUSE_DELAY=0) ;;
      *) log "ppdiag: unknown setting $set (as_is, graphs_off, fusion_off, layout_stock, delay0)"; return 1 ;;
    esac
    rm -f "$out"
    local pre=$shim:$probe; [ "${a%q}" != "$a" ] && pre=$shim:$W/libstock-quants.so:$probe
    env "${env[@]}" LD_LIBRARY_PATH="$W/arms/${a%q}:$B/bin" LD_PRELOAD="$pre" SCHED_PROBE_OUT="$out" \
      "$B/bin/llama-bench" -m "$M" -ngl "$ngl" -p "$p" -n "${PPDIAG_N:-0}" -r "$reps" -o json > "$res" 2> "$W/logs/ppdiag-bench.err" \
      || log "ppdiag: llama-bench failed ($set, arm $a): $(grep -a -i -m1 'error\|invalid\|failed' "$W/logs/ppdiag-bench.err")"
    python3 - "$out" "$res" "$r" "$set" "$p" "$a" >> "$rows" <<'PY'
import json, sys
out, res, r, s, p, a = sys.argv[1:]
row = {"round": int(r), "setting": s, "p": int(p), "arm": a}
try:
    # the prompt test of the model loaded last (PPDIAG_NGL a list such as 99,8; PPDIAG_N > 0
    # adds a generation test after each prompt test, as the bench's first process has)
    tests = [t for t in json.load(open(res)) if t.get("n_prompt") == int(p) and t.get("n_gen") == 0]
    row["samples_ns"] = tests[-1]["samples_ns"]
    row["probe"] = json.loads(open(out).read().strip().splitlines()[-1])
except Exception as e:
    row["error"] = repr(e)
print(json.dumps(row))
PY
  }
  local r set p a i
  local -a list order
  read -r -a list <<< "$arms"
  for r in $(seq 1 "${PPDIAG_ROUNDS:-4}"); do
    # the arms' order turns each round (a b c, b c a, c a b, ...)
    order=()
    for i in "${!list[@]}"; do order+=("${list[$(( (r - 1 + i) % ${#list[@]} ))]}"); done
    for set in ${PPDIAG_SETTINGS:-as_is}; do
      for p in ${PPDIAG_P:-512}; do
        for a in "${order[@]}"; do one "$r" "$set" "$p" "$a" || return 1; done
      done
    done
  done
  python3 - "$rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = [r for r in rows if "error" in r]
rows = [r for r in rows if "error" not in r]
med = statistics.median
def steady(r, k):
    # per-call ns of the probe, the first call (warm-up) left out
    v = r["probe"].get(k + "_each_ns", [])[1:]
    return med(v) / 1e3 if v else float("nan")
def wait(r):
    # synchronize calls that waited for a compute (llama-bench adds near-empty ones)
    v = [x for x in r["probe"].get("synchronize_each_ns", [])[1:] if x > 50_000]
    return med(v) / 1e3 if v else float("nan")
arms = sorted({r["arm"] for r in rows})
print("per setting and arm, medians over rounds: first rep ms | later reps ms (x/a) | paired x/a per round | host us | wait us")
for s, p in sorted({(r["setting"], r["p"]) for r in rows}):
    m = {a: {r["round"]: r for r in rows if r["setting"] == s and r["p"] == p and r["arm"] == a} for a in arms}
    later = {a: {k: med(x / 1e6 for x in r["samples_ns"][1:]) for k, r in m[a].items()} for a in arms}
    for a in arms:
        if not m[a]:
            continue
        first = med(r["samples_ns"][0] / 1e6 for r in m[a].values())
        lat = med(later[a].values())
        paired = [later[a][k] / later["a"][k] for k in sorted(later[a]) if k in later.get("a", {})]
        print(f"{s:12s} {p:5d} arm {a}: first {first:7.2f} | later {lat:7.3f} ({lat / med(later['a'].values()):.3f})"
              f" | paired {med(paired):.3f} {['%.3f' % x for x in paired]}"
              f" | host {med(steady(r, 'compute') for r in m[a].values()):8.1f} | wait {med(wait(r) for r in m[a].values()):8.1f}")
for r in bad:
    print("failed:", r)
PY
  local a
  for a in a b; do
    GGML_SCHED_DEBUG=2 LD_LIBRARY_PATH="$W/arms/$a:$B/bin" LD_PRELOAD="$shim" \
      "$B/bin/llama-bench" -m "$M" -ngl "$ngl" -p 512 -n 0 -r 1 -v > "$W/logs/ppdiag-sched-$a.log" 2>&1
  done
  # the same graph, placement and use counts in both arms: the node lines without their markers
  local na nb
  na=$(grep -a '^node #' "$W/logs/ppdiag-sched-a.log" | sed -E 's/\[ *([A-Z0-9_]+|NULL)[ a-z-]*\]/[\1]/g; s/ +/ /g' | md5sum)
  nb=$(grep -a '^node #' "$W/logs/ppdiag-sched-b.log" | sed -E 's/\[ *([A-Z0-9_]+|NULL)[ a-z-]*\]/[\1]/g; s/ +/ /g' | md5sum)
  local ca cb
  ca=$(grep -a -c '^node #' "$W/logs/ppdiag-sched-a.log"); cb=$(grep -a -c '^node #' "$W/logs/ppdiag-sched-b.log")
  log "GGML_SCHED_DEBUG node lines: $ca / $cb, $([ "$ca" -gt 0 ] && [ "$na" = "$nb" ] && echo identical || echo 'DIFFER (or none: see ppdiag-sched-*.log)')"
}

stage_toolchain() {
  local lib=$B/bin/libggml-base.so
  {
    c++ --version | head -1; nvcc --version | tail -2; ld --version | head -1
    cat /etc/os-release 2>/dev/null | grep -E '^(ID|VERSION_ID)='
    echo "libstdc++ the compiler links: $(c++ -print-file-name=libstdc++.so)"
    head -c 300 "$(c++ -print-file-name=libstdc++.so)" | tr -cd '[:print:]\n'; echo
    echo "nonshared archive: $(c++ -print-file-name=libstdc++_nonshared.a)"
    echo "system libstdc++: $(ldconfig -p | grep 'libstdc++.so.6 ' | head -2)"
    echo "stock libggml-base exports, not ggml_/gguf_:"
    nm -D --defined-only "$lib" | awk '{print $3}' | grep -v -E '^(ggml|gguf)_' | head -60
    echo "llama-simple imports of those:"
    nm -D --undefined-only "$B/bin/llama-simple" | grep -i cxxabi
    echo "ldd llama-simple:"; ldd "$B/bin/llama-simple"
    local ns; ns=$(c++ -print-file-name=libstdc++_nonshared.a)
    if [ -f "$ns" ]; then
      echo "shim from $ns:"
      c++ -shared -o "$W/libcxxrt-shim.so" -Wl,--whole-archive "$ns" -Wl,--no-whole-archive 2>&1 | tail -3
      nm -D --defined-only "$W/libcxxrt-shim.so" | grep -c cxxabiv1
      echo "llama-simple, our arm, shim preloaded:"
      LD_PRELOAD="$W/libcxxrt-shim.so" LD_LIBRARY_PATH="$W/ab-bundle/lib" "$B/bin/llama-simple" \
        -m "$M" -n 8 -ngl 99 "Hello" 2>&1 | tail -3; echo "exit $?"
      echo "llama-simple, our arm, no shim:"
      LD_LIBRARY_PATH="$W/ab-bundle/lib" "$B/bin/llama-simple" -m "$M" -n 8 -ngl 99 "Hello" 2>&1 | tail -2
    fi
  } > "$W/logs/toolchain.log" 2>&1
  log "toolchain: $(wc -l < "$W/logs/toolchain.log") lines in logs/toolchain.log"
}

run_stages() {
  local rc=0
  for s in "$@"; do
    log "== $s"
    "stage_$s" || rc=1
    collect
  done
  return $rc
}

case "${1:-}" in
  bg)
    shift
    setsid nohup "$0" "$@" > "$W/bg.log" 2>&1 < /dev/null &
    echo $! > "$W/bg.pid"
    log "started in the background: $* (log $W/bg.log)"
    ;;
  wait)
    # wait [SECONDS]: until the background run ends or SECONDS pass (default 560), then what
    # status shows, and the logs collected. A call may last 600 s and the machine goes back
    # 30 s after a call: end each call with this, and start the next one at once.
    n=${2:-560} t0=$SECONDS
    while [ -f "$W/bg.pid" ] && kill -0 "$(cat "$W/bg.pid")" 2>/dev/null && [ $((SECONDS - t0)) -lt "$n" ]; do
      sleep 5
    done
    if [ -f "$W/bg.pid" ] && kill -0 "$(cat "$W/bg.pid")" 2>/dev/null; then
      log "the background run goes on after $n s: call wait again within 30 s"
    else
      log "the background run has ended"
    fi
    tail -60 "$W/bg.log" 2>/dev/null
    collect
    ;;
  status)
    tail -40 "$W/bg.log" 2>/dev/null
    for f in "$W"/logs/*.log; do [ -f "$f" ] && log "$(basename "$f"): $(tail -1 "$f" | head -c 300)"; done
    collect
    ;;
  "")
    sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d'
    ;;
  *)
    run_stages "$@"
    ;;
esac
