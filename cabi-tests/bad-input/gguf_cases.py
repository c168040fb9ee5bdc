#!/usr/bin/env python3
"""Writes corrupted copies of a GGUF model, one fault per file, for cabi-tests/bad-input/gguf.sh.

    gguf_cases.py MODEL OUTDIR      write OUTDIR/NAME.gguf for every case, print the names
    gguf_cases.py --list            print the case names only

The layout is read from the GGUF v3 format (little-endian):

    header   "GGUF", u32 version, i64 n_tensors, i64 n_kv
    n_kv     key-value pairs: string key, i32 type, value
             (string: u64 length + bytes; array: i32 element type, u64 count, elements)
    n_tensors tensor infos: string name, u32 n_dims, i64 ne[n_dims], i32 ggml type,
             u64 offset (relative to the data section)
    padding  to general.alignment (32 when the key is absent)
    data     the tensors, each at its offset

Each case changes one thing in a faithful copy of the model (or cuts it short), so that the
file is wrong in exactly the way its name says; the rest of the file stays valid, so the
reader has to notice that one fault and nothing else. Written with the standard library only.
"""
import os
import struct
import sys

# Value types of the format, and the struct code of each fixed-size one.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL = range(8)
T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = 8, 9, 10, 11, 12
FIXED = {T_UINT8: 'B', T_INT8: 'b', T_UINT16: 'H', T_INT16: 'h', T_UINT32: 'I', T_INT32: 'i',
         T_FLOAT32: 'f', T_BOOL: '?', T_UINT64: 'Q', T_INT64: 'q', T_FLOAT64: 'd'}


class Layout:
    """Where every field of the model's header, key-value pairs and tensor infos lies."""

    def __init__(self, data):
        self.data = data
        self.pos = 0
        assert data[:4] == b'GGUF', 'not a GGUF file'
        self.pos = 4
        self.version = self.take('I')
        self.n_tensors = self.take('q')
        self.n_kv = self.take('q')
        self.kv = {}        # key -> dict(start, key_len, type, value, end)
        for _ in range(self.n_kv):
            start = self.pos
            key = self.string()
            type_at = self.pos
            t = self.take('i')
            value_at = self.pos
            if t == T_ARRAY:
                et = self.take('i')
                count_at = self.pos
                n = self.take('Q')
                for _ in range(n):
                    self.value(et)
            else:
                count_at = None
                self.value(t)
            self.kv[key] = dict(start=start, type_at=type_at, type=t, value_at=value_at,
                                count_at=count_at, end=self.pos)
        self.tinfo_start = self.pos
        self.tensors = []   # dict(name, start, ndims_at, ne_at, ne, type_at, type, offset_at)
        for _ in range(self.n_tensors):
            start = self.pos
            name = self.string()
            ndims_at = self.pos
            nd = self.take('I')
            ne_at = self.pos
            ne = [self.take('q') for _ in range(nd)]
            type_at = self.pos
            ty = self.take('i')
            offset_at = self.pos
            off = self.take('Q')
            self.tensors.append(dict(name=name, start=start, ndims_at=ndims_at, ne_at=ne_at,
                                     ne=ne, type_at=type_at, type=ty, offset_at=offset_at,
                                     offset=off))
        self.tinfo_end = self.pos
        align = 32
        self.data_start = (self.tinfo_end + align - 1) // align * align

    def take(self, code):
        v = struct.unpack_from('<' + code, self.data, self.pos)[0]
        self.pos += struct.calcsize(code)
        return v

    def string(self):
        n = self.take('Q')
        s = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return s.decode()

    def value(self, t):
        if t == T_STRING:
            self.string()
        else:
            self.take(FIXED[t])

    def tensor(self, name):
        return next(t for t in self.tensors if t['name'] == name)


def put(buf, at, code, value):
    struct.pack_into('<' + code, buf, at, value)
    return buf


def kv_bytes(key, t, code, value):
    k = key.encode()
    return struct.pack('<Q', len(k)) + k + struct.pack('<i', t) + struct.pack('<' + code, value)


def with_kv(model, lay, key, t, code, value):
    """The model with one more key-value pair after the last one (n_kv + 1); everything after
    it moves, which matters not: the cases that use it fail before the data section."""
    b = bytearray(model[:lay.tinfo_start]) + kv_bytes(key, t, code, value) + model[lay.tinfo_start:]
    return put(b, 16, 'q', lay.n_kv + 1)


def cases(model, lay):
    """(name, bytes) for every case, in the order of the file."""
    size = len(model)
    c = lambda: bytearray(model)  # a fresh copy to change
    emb = lay.tensor('token_embd.weight')   # Q8_0 (block 32), ne [576, 49152], first tensor
    norm = lay.tensor('output_norm.weight')  # F32, ne [576], last tensor
    down = lay.tensor('blk.0.ffn_down.weight')  # Q4_1, ne [1536, 576]
    gate = lay.tensor('blk.0.ffn_gate.weight')
    name_kv = lay.kv['general.name']
    type_kv = lay.kv['general.type']
    tokens = lay.kv['tokenizer.ggml.tokens']
    mid_tinfo = lay.tinfo_start + (lay.tinfo_end - lay.tinfo_start) // 2
    # Truncations: at each section of the file.
    yield 'trunc_empty', b''
    yield 'trunc_in_magic', model[:2]
    yield 'trunc_in_header', model[:12]              # inside n_tensors
    yield 'trunc_in_kv', model[:tokens['value_at'] + 400_000]   # inside the token list
    yield 'trunc_in_tinfo', model[:mid_tinfo]
    yield 'trunc_in_data_first', model[:lay.data_start + 1000]  # inside token_embd
    yield 'trunc_in_data_last', model[:size - 1000]             # inside output_norm
    # Header.
    b = c(); b[0:4] = b'GGUX'
    yield 'bad_magic', b
    yield 'version_0', put(c(), 4, 'I', 0)
    yield 'version_1', put(c(), 4, 'I', 1)
    yield 'version_4', put(c(), 4, 'I', 4)
    yield 'version_byteswapped', put(c(), 4, 'I', 0x03000000)
    yield 'n_tensors_huge', put(c(), 8, 'q', 0x7fffffffffffffff)
    yield 'n_tensors_negative', put(c(), 8, 'q', -1)
    yield 'n_tensors_one_more', put(c(), 8, 'q', lay.n_tensors + 1)
    yield 'n_tensors_one_fewer', put(c(), 8, 'q', lay.n_tensors - 1)
    yield 'n_kv_huge', put(c(), 16, 'q', 0x7fffffffffffffff)
    yield 'n_kv_past_section', put(c(), 16, 'q', lay.n_kv + 1000)
    # Key-value pairs.
    yield 'key_len_huge', put(c(), lay.kv['general.architecture']['start'], 'Q', 1 << 63)
    yield 'string_len_past_end', put(c(), name_kv['value_at'], 'Q', 1 << 29)
    yield 'array_count_huge', put(c(), tokens['count_at'], 'Q', 1 << 40)
    yield 'kv_type_bad', put(c(), type_kv['type_at'], 'i', 99)
    b = bytearray(model[:type_kv['start']]) + struct.pack('<Q', 0) + model[type_kv['type_at']:]
    yield 'key_empty', b
    b = c(); b[type_kv['start'] + 8:type_kv['type_at']] = b'general.name'  # same length
    yield 'key_duplicate', b
    yield 'alignment_0', with_kv(model, lay, 'general.alignment', T_UINT32, 'I', 0)
    yield 'alignment_3', with_kv(model, lay, 'general.alignment', T_UINT32, 'I', 3)
    yield 'alignment_wrong_type', with_kv(model, lay, 'general.alignment', T_UINT8, 'B', 32)
    # Tensor infos.
    long = ('x' * 70).encode()
    b = (bytearray(model[:emb['start']]) + struct.pack('<Q', len(long)) + long
         + model[emb['ndims_at']:])
    yield 'tensor_name_too_long', b
    b = c(); b[gate['start'] + 8:gate['ndims_at']] = b'blk.0.ffn_down.weight'  # same length
    yield 'tensor_name_duplicate', b
    yield 'tensor_n_dims_5', put(c(), emb['ndims_at'], 'I', 5)
    yield 'tensor_ne_negative', put(c(), emb['ne_at'] + 8, 'q', -1)
    yield 'tensor_ne_overflow', put(c(), emb['ne_at'] + 8, 'q', 1 << 62)
    yield 'tensor_nbytes_overflow', put(c(), norm['ne_at'], 'q', 1 << 62)
    yield 'tensor_ne0_not_block', put(c(), emb['ne_at'], 'q', 575)
    yield 'tensor_type_99', put(c(), emb['type_at'], 'i', 99)
    yield 'tensor_type_negative', put(c(), emb['type_at'], 'i', -1)
    yield 'tensor_type_removed', put(c(), emb['type_at'], 'i', 4)   # Q4_2, long gone
    yield 'tensor_offset_past_end', put(c(), norm['offset_at'], 'Q', 1 << 40)
    yield 'tensor_offset_misaligned', put(c(), down['offset_at'], 'Q', down['offset'] + 1)
    # Valid GGUF, wrong model: for llama's loader to catch.
    arch = lay.kv['general.architecture']['value_at'] + 8  # the bytes of 'llama'
    b = c(); b[arch:arch + 5] = b'llamb'
    yield 'arch_unknown', b
    b = c(); put(b, down['ne_at'], 'q', down['ne'][1]); put(b, down['ne_at'] + 8, 'q', down['ne'][0])
    yield 'tensor_shape_swapped', b
    yield 'block_count_huge', put(c(), lay.kv['llama.block_count']['value_at'], 'I', 1_000_000)
    yield 'head_count_0', put(c(), lay.kv['llama.attention.head_count']['value_at'], 'I', 0)
    # Valid file, garbage weights: every byte of token_embd 0xff (NaN scales).
    lo = lay.data_start + emb['offset']
    hi = lay.data_start + lay.tensor('blk.0.attn_norm.weight')['offset']
    b = c(); b[lo:hi] = b'\xff' * (hi - lo)
    yield 'weights_nan', b


def main():
    if sys.argv[1:] == ['--list']:
        for name in NAMES:
            print(name)
        return
    model_path, out = sys.argv[1], sys.argv[2]
    with open(model_path, 'rb') as f:
        model = f.read()
    lay = Layout(bytearray(model))
    # the cases were written for this model's layout; a different model would need new ones
    assert lay.n_tensors == 272 and lay.n_kv == 33 and lay.data_start == 1785664, 'unexpected model'
    os.makedirs(out, exist_ok=True)
    for name, data in cases(model, lay):
        assert name in NAMES, name
        with open(os.path.join(out, name + '.gguf'), 'wb') as f:
            f.write(data)
        print(name)


NAMES = """trunc_empty trunc_in_magic trunc_in_header trunc_in_kv trunc_in_tinfo trunc_in_data_first
trunc_in_data_last bad_magic version_0 version_1 version_4 version_byteswapped n_tensors_huge
n_tensors_negative n_tensors_one_more n_tensors_one_fewer n_kv_huge n_kv_past_section
key_len_huge string_len_past_end array_count_huge kv_type_bad key_empty key_duplicate
alignment_0 alignment_3 alignment_wrong_type tensor_name_too_long tensor_name_duplicate
tensor_n_dims_5 tensor_ne_negative tensor_ne_overflow tensor_nbytes_overflow
tensor_ne0_not_block tensor_type_99 tensor_type_negative tensor_type_removed
tensor_offset_past_end tensor_offset_misaligned arch_unknown tensor_shape_swapped
block_count_huge head_count_0 weights_nan""".split()

if __name__ == '__main__':
    main()
