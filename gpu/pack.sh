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
#   gpu/pack.sh --stock-base   also copies the stock libggml-base.so.0 built here (the CPU
#                          build `./ab build-stock` made, target/llama-stock) to
#                          .device/stock-base/: the ppdiag stage's third arm, stock's code
#                          built by the compiler that built ours (1 MiB)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# the options, in any order, checked before the (slow) bundle
models=0 llama_bin= stock_base=0
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=1; shift ;;
    --stock-base) stock_base=1; shift ;;
    --llama-bin) llama_bin=$(cd "${2:?usage: gpu/pack.sh [--models] [--stock-base] [--llama-bin BUILD_DIR]}" && pwd); shift 2 ;;
    *) echo "gpu/pack.sh: unknown argument $1 (usage: gpu/pack.sh [--models] [--stock-base] [--llama-bin BUILD_DIR])" >&2; exit 2 ;;
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
if [ "$models" = 1 ]; then
  tar -czf "$dev/llama-models.tar.gz" -C "$up" llama.cpp/models
fi
if [ -n "$llama_bin" ]; then
  build=$llama_bin
  (cd "$build" && tar -czf "$root/$dev/llama-cpu-bin.tar.gz" bin/test-backend-ops bin/llama-completion \
    bin/llama-bench bin/llama-quantize $(cd "$build" && ls bin/test-llama-archs 2>/dev/null) bin/*.so*)
fi
du -sh "$dev"/* >&2
