#!/usr/bin/env bash
# gpu/pack.sh: writes .device/ (ignored by git), what gpu/run.sh needs on a CUDA machine that
# has no Rust and no network: the harness bundle (`./ab bundle`), the pinned llama.cpp tree
# trimmed to what a CUDA build reads (no models/ but one vocab, no docs/ but build.md, no media/ or tools/ui,
# no backends but cpu, cuda, rpc, blas), and the random-weight model writer gpu/mkmodel.py.
# About 16 MiB:
# small enough to travel with the working tree (the lent machine's limit is 64 MiB).
#
#   gpu/pack.sh            then, there: gpu/run.sh STAGE ...   (see gpu/README.md)
#   gpu/pack.sh --llama-bin DIR   also packs DIR/bin of a CPU-only llama.cpp build made here
#                          (x86-64, AVX2, RUNPATH $ORIGIN) as .device/llama-cpu-bin.tar.gz, so
#                          the hrxcheck stage needs no build there
#   gpu/pack.sh --models   (with or without --llama-bin, in any order) also packs the pinned tree's models/ (tokenizer vocabularies, chat
#                          templates: 23 MiB) as .device/llama-models.tar.gz, for ctest there
#   gpu/pack.sh --real-model   also splits the real model (target/models/SmolLM2-135M-Instruct.Q4_1.gguf,
#                          94 MiB, more than one call carries) into .device-real-0/, -1/, -2/ (each at
#                          most 36 MiB, one call each: gpu/README.md) with its sha256 in
#                          .device/real-model.txt, for the `real` stage there
#   gpu/pack.sh --stock-base   also copies the stock libggml-base.so.0 built here (the CPU
#                          build `./ab build-stock` made, target/llama-stock) to
#                          .device/stock-base/: the ppdiag stage's third arm, stock's code
#                          built by the compiler that built ours (1 MiB)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# the options, in any order, checked before the (slow) bundle
models=0 llama_bin='' stock_base=0 real=0
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=1; shift ;;
    --real-model) real=1; shift ;;
    --stock-base) stock_base=1; shift ;;
    --llama-bin) llama_bin=$(cd "${2:?usage: gpu/pack.sh [--models] [--real-model] [--stock-base] [--llama-bin BUILD_DIR]}" && pwd); shift 2 ;;
    *) echo "gpu/pack.sh: unknown argument $1 (usage: gpu/pack.sh [--models] [--real-model] [--stock-base] [--llama-bin BUILD_DIR])" >&2; exit 2 ;;
  esac
done
cd "$root"
dev=.device
mkdir -p "$dev"
./ab bundle --out "$root/target/ab-bundle" >&2
cp target/ab-bundle.tar.gz "$dev/ab-bundle.tar.gz"

up=target/upstream/llama_cpp_python-0.3.36/vendor
[ -d "$up/llama.cpp" ] || ./ab fetch >&2
if [ ! -f "$dev/llama.tar.gz" ]; then
  keep_backends='ggml-cpu|ggml-cuda|ggml-rpc|ggml-blas'
  excludes=(--exclude='llama.cpp/models' --exclude='llama.cpp/docs' --exclude='llama.cpp/media'
            --exclude='llama.cpp/tools/ui' --exclude='llama.cpp/.git')
  for d in "$up"/llama.cpp/ggml/src/ggml-*/; do
    n=$(basename "$d")
    [[ $n =~ ^($keep_backends)$ ]] || excludes+=(--exclude="llama.cpp/ggml/src/$n")
  done
  tmp=$(mktemp -d)
  mkdir -p "$tmp/llama.cpp/models" "$tmp/llama.cpp/docs"
  cp "$up/llama.cpp/models/ggml-vocab-llama-bpe.gguf" "$tmp/llama.cpp/models/"
  cp "$up/llama.cpp/docs/build.md" "$tmp/llama.cpp/docs/"
  tar -cf "$tmp/llama.tar" "${excludes[@]}" -C "$up" llama.cpp
  # the one vocab mkmodel.py reads and the text `ab pipeline` reads, added without the
  # excludes (they would drop them)
  tar -rf "$tmp/llama.tar" -C "$tmp" llama.cpp/models llama.cpp/docs
  gzip -c "$tmp/llama.tar" > "$dev/llama.tar.gz"
  rm -rf "$tmp"
fi
cp gpu/mkmodel.py "$dev/mkmodel.py"
# an older tarball would be taken by hrxcheck (or setup) without a word: only those asked for stay
rm -f "$dev/llama-cpu-bin.tar.gz" "$dev/llama-models.tar.gz"
rm -rf "$dev/stock-base"
if [ "$stock_base" = 1 ]; then
  [ -f target/llama-stock/bin/libggml-base.so.0 ] || ./ab build-stock >&2
  mkdir -p "$dev/stock-base"
  cp -L target/llama-stock/bin/libggml-base.so.0 "$dev/stock-base/"
fi
rm -rf .device-real-* "$dev/real-model.txt"
# the default GPU_WORK of a run here: never carried along (a call's 64 MiB)
rm -rf "$dev/work"
if [ "$real" = 1 ]; then
  model=target/models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -f "$model" ] || ./ab fetch >&2
  [ -f "$model" ] || { echo "gpu/pack.sh: $model is missing after ./ab fetch" >&2; exit 1; }
  tmp=$(mktemp -d)
  # 36 MiB: with .device (about 19 MiB without --models) and the tracked files (about 3 MiB),
  # the first part still leaves room under a call's 64 MiB
  split -b 36M -d -a 1 "$model" "$tmp/part-"
  n=0
  for f in "$tmp"/part-*; do
    mkdir -p ".device-real-$n" && mv "$f" ".device-real-$n/"
    n=$((n + 1))
  done
  rm -rf "$tmp"
  # name, sha256 of the whole file, number of parts: the `real` stage checks all three
  echo "$(basename "$model") $(sha256sum "$model" | cut -d' ' -f1) $n" > "$dev/real-model.txt"
  echo "gpu/pack.sh: $(basename "$model") in $n parts: $(ls -d .device-real-* | tr '\n' ' ')" >&2
fi
if [ "$models" = 1 ]; then
  tar -czf "$dev/llama-models.tar.gz" -C "$up" llama.cpp/models
fi
if [ -n "$llama_bin" ]; then
  build=$llama_bin
  # test-llama-archs only when the build has it (a build of fewer targets does not)
  archs=()
  [ -x "$build/bin/test-llama-archs" ] && archs=(bin/test-llama-archs)
  (cd "$build" && tar -czf "$root/$dev/llama-cpu-bin.tar.gz" bin/test-backend-ops bin/llama-completion \
    bin/llama-bench bin/llama-quantize "${archs[@]}" bin/*.so*)
fi
du -sh "$dev"/* .device-real-* >&2 2>/dev/null || true
