#!/usr/bin/env python3
"""Writes a llama-architecture GGUF with random F16 weights, for GPU runs that need a model of
a real model's shape and no network: the tokenizer is taken from a vocab-only GGUF (the
pinned tree's models/ggml-vocab-llama-bpe.gguf), the weights are N(0, 0.02) from a fixed seed,
so two runs write the same file.

usage: PYTHONPATH=<llama.cpp>/gguf-py python3 gpu/mkmodel.py VOCAB.gguf OUT.gguf
           [--shape llama-3.2-1b | --embd N --layers N --heads N --kv-heads N --ff N]
"""
import argparse

import numpy as np
from gguf import GGUFReader, GGUFWriter

SHAPES = {
    # n_embd, n_layer, n_head, n_head_kv, n_ff
    "llama-3.2-1b": (2048, 16, 32, 8, 8192),
    "tiny": (256, 2, 4, 2, 512),
}


def field(reader, key):
    return reader.fields[key].contents()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("vocab")
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    for name in ("embd", "layers", "heads", "kv-heads", "ff"):
        ap.add_argument("--" + name, type=int)
    a = ap.parse_args()
    embd, layers, heads, kv_heads, ff = SHAPES[a.shape]
    embd = a.embd or embd
    layers = a.layers or layers
    heads = a.heads or heads
    kv_heads = a.kv_heads or kv_heads
    ff = a.ff or ff
    head_dim = embd // heads

    vocab = GGUFReader(a.vocab)
    tokens = field(vocab, "tokenizer.ggml.tokens")
    n_vocab = len(tokens)

    w = GGUFWriter(a.out, "llama")
    w.add_name("random-llama-" + a.shape)
    w.add_file_type(1)  # mostly F16
    w.add_context_length(8192)
    w.add_block_count(layers)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(field(vocab, "tokenizer.ggml.token_type"))
    w.add_token_merges(field(vocab, "tokenizer.ggml.merges"))
    w.add_bos_token_id(field(vocab, "tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(field(vocab, "tokenizer.ggml.eos_token_id"))

    rng = np.random.default_rng(1234)

    def weight(out_dim, in_dim):
        # ggml's 2-D weights are stored rows = output features, so numpy shape (out, in)
        return (0.02 * rng.standard_normal((out_dim, in_dim), dtype=np.float32)).astype(np.float16)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731 (norm weights stay F32)

    w.add_tensor("token_embd.weight", weight(n_vocab, embd))
    for i in range(layers):
        b = "blk.%d." % i
        w.add_tensor(b + "attn_norm.weight", ones(embd))
        w.add_tensor(b + "attn_q.weight", weight(embd, embd))
        w.add_tensor(b + "attn_k.weight", weight(kv_heads * head_dim, embd))
        w.add_tensor(b + "attn_v.weight", weight(kv_heads * head_dim, embd))
        w.add_tensor(b + "attn_output.weight", weight(embd, embd))
        w.add_tensor(b + "ffn_norm.weight", ones(embd))
        w.add_tensor(b + "ffn_gate.weight", weight(ff, embd))
        w.add_tensor(b + "ffn_up.weight", weight(ff, embd))
        w.add_tensor(b + "ffn_down.weight", weight(embd, ff))
    w.add_tensor("output_norm.weight", ones(embd))
    w.add_tensor("output.weight", weight(n_vocab, embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote %s: %s, %d layers, vocab %d" % (a.out, a.shape, layers, n_vocab))


if __name__ == "__main__":
    main()
