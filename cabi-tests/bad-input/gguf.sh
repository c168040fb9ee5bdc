#!/usr/bin/env bash
# Corrupted GGUF files through the stock llama-completion, in both arms (the stock
# libggml-base and ours), against what each arm is expected to do.
#
#   cabi-tests/bad-input/gguf.sh [OURS_LIB_DIR]     (default target/ours/lib)
#
# gguf_cases.py writes one corrupted copy of the pinned model per case into
# target/bad-input/gguf/ (about 3.5 GB, written once: a stamp of the generator and the model
# says when they are current; rm -rf that folder to reclaim the space). Each file is run as
#
#   llama-completion -m FILE -n 4 -p hi --temp 0 -no-cnv -t 2 --no-warmup
#
# under timeout 60, with LD_LIBRARY_PATH naming the arm's folder first, and the outcome is
# written as "exit N; message: yes|no", "signal NAME; message: yes|no" or "timeout", where
# "message: yes" means stderr holds the case's words (the error that names the fault). Where
# a case runs to the end (exit 0), ours must also print exactly what stock printed.
#
# GGUF is parsed by gguf.cpp, which both arms compile from the same upstream source, and the
# model is checked by libllama, which both arms share, so every outcome is expected to be the
# same in both arms; the table still writes down each arm's outcome, so that a difference
# shows as a failure of one arm with the case's name, and a change of stock's outcome (a new
# pin) shows as well.
#
# Two things keep the check honest: llama.cpp's logger writes from a worker thread and may
# lose the last messages of a program that fails fast, so liblogflush.so (logflush.c) is
# preloaded in both arms and drains it at exit; and GGML_NO_BACKTRACE=1 keeps ggml's abort
# from attaching gdb (slow, and nothing to compare). The case "control" is the unchanged
# model: it proves the command works, so that every other failure is the fault's.
set -uo pipefail
. "$(dirname "$0")/common.sh" "$@"
out=$root/target/bad-input
files=$out/gguf
[ -f "$model" ] || { echo "no model: $model (./ab fetches it)" >&2; exit 2; }
[ -f "$ours/libggml-base.so.0" ] || { echo "build first: ./ab build-ours" >&2; exit 2; }
mkdir -p "$files" "$out/gguf-logs"
# One run at a time per tree: two would write the same logs (each case's output is compared
# with its baseline's file) and fail each other's cases.
exec {lock}>"$out/.gguf.lock"
if ! flock -n "$lock"; then
  echo "[gguf] waiting for another run of gguf.sh in this tree to end"
  flock "$lock"
fi
cc -std=gnu11 -Wall -Wextra -Werror -O1 -shared -fPIC "$here/logflush.c" \
   -o "$out/liblogflush.so" -ldl || exit 2

# The variants are rewritten only when the generator or the model changed.
stamp="$(sha256sum "$here/gguf_cases.py" | cut -d' ' -f1) $(stat -c '%s %Y' "$model")"
if [ "$(cat "$files/.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "[gguf] writing the corrupted copies into $files"
  rm -f "$files"/*.gguf "$files/.stamp"
  python3 "$here/gguf_cases.py" "$model" "$files" >/dev/null || exit 2
  echo "$stamp" > "$files/.stamp"
fi

# case | the words stderr must hold | stock's outcome | ours' outcome
# ("-": no words expected, the case runs to the end)
expected=$(cat <<'TABLE'
control|-|exit 0; message: n/a|exit 0; message: n/a
trunc_empty|failed to read magic|exit 1; message: yes|exit 1; message: yes
trunc_in_magic|failed to read magic|exit 1; message: yes|exit 1; message: yes
trunc_in_header|failed to read header|exit 1; message: yes|exit 1; message: yes
trunc_in_kv|failed to read key-value pairs|exit 1; message: yes|exit 1; message: yes
trunc_in_tinfo|failed to read tensor info|exit 1; message: yes|exit 1; message: yes
trunc_in_data_first|tensor 'token_embd.weight' data is not within the file bounds|exit 1; message: yes|exit 1; message: yes
trunc_in_data_last|tensor 'output_norm.weight' data is not within the file bounds|exit 1; message: yes|exit 1; message: yes
bad_magic|invalid magic characters: 'GGUX', expected 'GGUF'|exit 1; message: yes|exit 1; message: yes
version_0|bad GGUF version: 0|exit 1; message: yes|exit 1; message: yes
version_1|GGUFv1 is no longer supported|exit 1; message: yes|exit 1; message: yes
version_4|this GGUF file is version 4 but this software only supports up to version 3|exit 1; message: yes|exit 1; message: yes
version_byteswapped|mismatch between the host and model endianness|exit 1; message: yes|exit 1; message: yes
n_tensors_huge|number of tensors is 9223372036854775807 but must be in|exit 1; message: yes|exit 1; message: yes
n_tensors_negative|number of tensors is -1 but must be in|exit 1; message: yes|exit 1; message: yes
n_tensors_one_more|failed to read tensor info|exit 1; message: yes|exit 1; message: yes
n_tensors_one_fewer|tensor 'output_norm.weight' not found|exit 1; message: yes|exit 1; message: yes
n_kv_huge|number of key value pairs is 9223372036854775807 but must be in|exit 1; message: yes|exit 1; message: yes
n_kv_past_section|failed to read key-value pairs|exit 1; message: yes|exit 1; message: yes
key_len_huge|string length 9223372036854775808 exceeds maximum|exit 1; message: yes|exit 1; message: yes
string_len_past_end|string length 536870912 exceeds remaining file size|exit 1; message: yes|exit 1; message: yes
array_count_huge|failed to read key-value pairs|exit 1; message: yes|exit 1; message: yes
kv_type_bad|key 'general.type' has invalid GGUF type 99|exit 1; message: yes|exit 1; message: yes
key_empty|key 1 is empty|exit 1; message: yes|exit 1; message: yes
key_duplicate|duplicate key 'general.name' for KV pair 2|exit 1; message: yes|exit 1; message: yes
alignment_0|alignment 0 is not a power of 2|exit 1; message: yes|exit 1; message: yes
alignment_3|alignment 3 is not a power of 2|exit 1; message: yes|exit 1; message: yes
alignment_wrong_type|key 'general.alignment' must be of type u32 but is u8|exit 1; message: yes|exit 1; message: yes
tensor_name_too_long|tensor name 0 is too long: 70 >= 64|exit 1; message: yes|exit 1; message: yes
tensor_name_duplicate|duplicate tensor name 'blk.0.ffn_down.weight' for tensor 3|exit 1; message: yes|exit 1; message: yes
tensor_n_dims_5|tensor 'token_embd.weight' has invalid number of dimensions: 5 > 4|exit 1; message: yes|exit 1; message: yes
tensor_ne_negative|tensor 'token_embd.weight' dimension 1 has invalid number of elements: -1 < 0|exit 1; message: yes|exit 1; message: yes
tensor_ne_overflow|incorrect shape for a tensor 'token_embd.weight' may cause overflow errors|exit 1; message: yes|exit 1; message: yes
tensor_nbytes_overflow|tensor 'output_norm.weight' with shape (4611686018427387904, 1, 1, 1) has a size in bytes >|exit 1; message: yes|exit 1; message: yes
tensor_ne0_not_block|has 575 elements per row, not a multiple of block size (32)|exit 1; message: yes|exit 1; message: yes
tensor_type_99|tensor 'token_embd.weight' has invalid ggml type 99|exit 1; message: yes|exit 1; message: yes
tensor_type_negative|tensor 'token_embd.weight' has invalid ggml type -1|exit 1; message: yes|exit 1; message: yes
tensor_type_removed|of type 4 (DEPRECATED) has 576 elements per row, not a multiple of block size (0)|exit 1; message: yes|exit 1; message: yes
tensor_offset_past_end|tensor 'output_norm.weight' has offset 1099511627776, expected 96574464|exit 1; message: yes|exit 1; message: yes
tensor_offset_misaligned|tensor 'blk.0.ffn_down.weight' has offset 30083329, expected 30083328|exit 1; message: yes|exit 1; message: yes
arch_unknown|unknown model architecture: 'llamb'|exit 1; message: yes|exit 1; message: yes
tensor_shape_swapped|tensor 'blk.0.ffn_down.weight' has wrong shape|exit 1; message: yes|exit 1; message: yes
block_count_huge|GGML_ASSERT(hparams.n_layer_all > 0 && hparams.n_layer_all <= LLAMA_MAX_LAYERS) failed|signal SIGABRT; message: yes|signal SIGABRT; message: yes
head_count_0|tensor 'blk.0.attn_q.weight' has wrong shape; expected    576,      0|exit 1; message: yes|exit 1; message: yes
weights_nan|-|exit 0; message: n/a|exit 0; message: n/a
TABLE
)

# Every generated file has a row and every row but control a file, so a case added to the
# generator cannot go unchecked.
fail=0
listed=$(cut -d'|' -f1 <<<"$expected" | grep -v '^control$' | sort)
made=$(python3 "$here/gguf_cases.py" --list | sort)
if [ "$listed" != "$made" ]; then
  echo "[gguf] the table and gguf_cases.py --list name different cases:" >&2
  diff <(echo "$listed") <(echo "$made") >&2
  fail=1
fi

# run ARM CASE WORDS: prints the outcome; stdout and stderr stay in gguf-logs/
run() {
  local arm=$1 name=$2 words=$3 dir file rc what msg
  dir=$([ "$arm" = stock ] && echo "$stock" || echo "$ours:$stock")
  file=$([ "$name" = control ] && echo "$model" || echo "$files/$name.gguf")
  LD_LIBRARY_PATH="$dir" LD_PRELOAD="$out/liblogflush.so" GGML_NO_BACKTRACE=1 \
    timeout -k 5 60 "$stock/llama-completion" -m "$file" -n 4 -p hi --temp 0 -no-cnv -t 2 \
    --no-warmup >"$out/gguf-logs/$name.$arm.out" 2>"$out/gguf-logs/$name.$arm.err" </dev/null
  rc=$?
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "timeout"; return; fi
  if [ $rc -gt 128 ]; then what="signal SIG$(kill -l $((rc - 128)))"; else what="exit $rc"; fi
  if [ "$words" = - ]; then msg=n/a
  elif grep -qF -- "$words" "$out/gguf-logs/$name.$arm.err"; then msg=yes
  else msg=no; fi
  echo "$what; message: $msg"
}

start=$(date +%s)
# As in env.sh: JOBS runs at a time, each outcome to a file, the table printed afterwards in
# its fixed order.
while IFS='|' read -r name words _ _; do
  for arm in stock ours; do
    throttle
    # (stderr: the shell's own "Aborted" line for the case that must abort)
    run "$arm" "$name" "$words" >"$out/gguf-logs/$name.$arm.outcome" 2>/dev/null &
  done
done <<<"$expected"
wait
while IFS='|' read -r name words want_stock want_ours; do
  for arm in stock ours; do
    want=$([ $arm = stock ] && echo "$want_stock" || echo "$want_ours")
    have=$(cat "$out/gguf-logs/$name.$arm.outcome")
    if [ "$have" = "$want" ]; then
      printf '[gguf] %-5s %-26s %s\n' "$arm" "$name" "$have"
    else
      printf '[gguf] %-5s %-26s %s   FAILED: expected %s\n' "$arm" "$name" "$have" "$want"
      fail=1
    fi
  done
  # A file that loads runs the same work in both arms: the same text must come out.
  if [ "${have%%;*}" = "exit 0" ] && ! cmp -s "$out/gguf-logs/$name.stock.out" "$out/gguf-logs/$name.ours.out"; then
    printf '[gguf] ours  %-26s FAILED: printed %q, stock printed %q\n' "$name" \
      "$(cat "$out/gguf-logs/$name.ours.out")" "$(cat "$out/gguf-logs/$name.stock.out")"
    fail=1
  fi
done <<<"$expected"
echo "[gguf] $(wc -l <<<"$expected") cases x 2 arms in $(( $(date +%s) - start )) s, $jobs at a time"
[ $fail -eq 0 ] && echo "[gguf] PASS" || echo "[gguf] FAIL"
exit $fail
