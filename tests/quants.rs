//! Our `libggml-base.so.0` quantizes and dequantizes every ggml type bit for bit as the stock
//! library of the pinned build does.
//!
//! Both compile the same upstream `ggml-quants.c`, but not always with the same flags: a GCC
//! older than 13 compiles ours with `--param=max-completely-peel-times=1`, so that it
//! vectorizes the dequantizers as GCC 13 does (`build/gcc.rs`). That flag must change no
//! value; this test is what shows it, on whatever compiler built the two libraries (with GCC
//! 13 or clang the flag is absent and the test checks plain parity).
//!
//! Both libraries are opened side by side (`RTLD_LOCAL`), each type's traits taken from each
//! (`ggml_get_type_traits`), and the same input given to both: floats to the reference
//! quantizer (`from_float_ref`, where the type has one), then the quantized blocks to the
//! dequantizer (`to_float`). Types without a reference quantizer get random blocks.
//!
//! Both libraries are built on the machine that runs the test, by its compiler (`./ab
//! build-stock` and cargo): stock's with stock's flags, ours with ours, so the only
//! difference this can see is the flag's. A second test runs the quantizers llama-quantize
//! uses (`ggml_quantize_chunk`, with and without an importance matrix, and the row check);
//! it takes most of a minute, nearly all of it in the grid tables of the IQ1/IQ2 types,
//! which each library builds once (`ggml_quantize_init`), and which the flag compiles
//! differently too.
//!
//! Needs the stock build at `target/llama-stock/bin/libggml-base.so.0` (fails without it).

use std::ffi::{c_void, CString};
use std::path::Path;

use ggml_sys as sys;

type TraitsFn = unsafe extern "C" fn(sys::ggml_type) -> *const sys::ggml_type_traits;
type InitFn = unsafe extern "C" fn(sys::ggml_type);
/// `ggml_quantize_chunk(type, src, dst, start, nrows, n_per_row, imatrix)`.
type ChunkFn = unsafe extern "C" fn(
    sys::ggml_type,
    *const f32,
    *mut c_void,
    i64,
    i64,
    i64,
    *const f32,
) -> usize;
/// `ggml_validate_row_data(type, data, nbytes)`.
type ValidateFn = unsafe extern "C" fn(sys::ggml_type, *const c_void, usize) -> bool;
/// `ggml_quantize_requires_imatrix(type)`.
type NeedsImatrixFn = unsafe extern "C" fn(sys::ggml_type) -> bool;

/// Elements per type: a multiple of every block size (the largest is 256).
const N: usize = 256 * 32;

#[path = "common/libs.rs"]
mod libs;
use libs::{our_lib, stock_lib};

/// One opened library's entry points.
struct Lib {
    name: String,
    traits: TraitsFn,
    quantize_init: InitFn,
    quantize_chunk: ChunkFn,
    validate: ValidateFn,
    needs_imatrix: NeedsImatrixFn,
}

impl Lib {
    fn open(path: &Path) -> Lib {
        assert!(
            path.is_file(),
            "{} is missing (the stock build: ./ab build-stock)",
            path.display()
        );
        let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; the handle is kept for the process (never closed,
        // so the function pointers taken from it stay valid).
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen {} failed", path.display());
        let sym = |name: &str| -> *mut c_void {
            let n = CString::new(name).unwrap();
            // SAFETY: a live handle and a NUL-terminated name.
            let p = unsafe { libc::dlsym(h, n.as_ptr()) };
            assert!(!p.is_null(), "{} lacks {name}", path.display());
            p
        };
        // SAFETY: each symbol is the ggml.h function of that name, with that signature.
        unsafe {
            Lib {
                name: path.display().to_string(),
                traits: std::mem::transmute::<*mut c_void, TraitsFn>(sym("ggml_get_type_traits")),
                quantize_init: std::mem::transmute::<*mut c_void, InitFn>(sym(
                    "ggml_quantize_init",
                )),
                quantize_chunk: std::mem::transmute::<*mut c_void, ChunkFn>(sym(
                    "ggml_quantize_chunk",
                )),
                validate: std::mem::transmute::<*mut c_void, ValidateFn>(sym(
                    "ggml_validate_row_data",
                )),
                needs_imatrix: std::mem::transmute::<*mut c_void, NeedsImatrixFn>(sym(
                    "ggml_quantize_requires_imatrix",
                )),
            }
        }
    }

    fn traits(&self, t: sys::ggml_type) -> sys::ggml_type_traits {
        // SAFETY: any type below GGML_TYPE_COUNT has an entry (a static table).
        unsafe { *(self.traits)(t) }
    }
}

/// A deterministic stream of 64-bit values (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A float in [-4, 4).
    fn float(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 8.0 - 4.0
    }
}

/// The input floats: random, with zeros, a negative zero, tiny and large values among them.
fn input() -> Vec<f32> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut x: Vec<f32> = (0..N).map(|_| rng.float()).collect();
    for (i, v) in [0.0, -0.0, 1e-30, -1e-30, 1e4, -3e4, 65504.0]
        .into_iter()
        .enumerate()
    {
        x[i * 97] = v;
    }
    // one block of all zeros (a zero scale)
    x[512..768].fill(0.0);
    x
}

#[test]
fn every_type_quantizes_and_dequantizes_bit_for_bit_as_stock() {
    let stock = Lib::open(&stock_lib());
    let ours = Lib::open(&our_lib());
    let x = input();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut checked = Vec::new();
    for t in 0..sys::GGML_TYPE_COUNT {
        let (a, b) = (stock.traits(t), ours.traits(t));
        assert_eq!(
            (a.blck_size, a.type_size, a.is_quantized),
            (b.blck_size, b.type_size, b.is_quantized),
            "type {t}: traits differ between {} and {}",
            stock.name,
            ours.name
        );
        let (Some(deq_a), Some(deq_b)) = (a.to_float, b.to_float) else {
            assert_eq!(
                a.to_float.is_some(),
                b.to_float.is_some(),
                "type {t}: to_float"
            );
            continue;
        };
        if a.blck_size <= 0 {
            continue; // a removed type
        }
        let bytes = N / a.blck_size as usize * a.type_size;
        let (mut qa, mut qb) = (vec![0u8; bytes], vec![0u8; bytes]);
        match (a.from_float_ref, b.from_float_ref) {
            (Some(fa), Some(fb)) => {
                // SAFETY: the libraries' own initialisation for a type (grids of the IQ
                // types); `x` holds N floats and each output `bytes`, N / blck_size blocks.
                unsafe {
                    (stock.quantize_init)(t);
                    (ours.quantize_init)(t);
                    fa(x.as_ptr(), qa.as_mut_ptr().cast(), N as i64);
                    fb(x.as_ptr(), qb.as_mut_ptr().cast(), N as i64);
                }
                assert!(qa == qb, "type {t}: quantized blocks differ from stock's");
            }
            (None, None) => {
                for v in qa.iter_mut() {
                    *v = rng.next() as u8;
                }
            }
            _ => panic!("type {t}: one library has a reference quantizer, the other not"),
        }
        let (mut ya, mut yb) = (vec![0f32; N], vec![0f32; N]);
        // SAFETY: `qa` holds N / blck_size blocks of the type; each output N floats.
        unsafe {
            deq_a(qa.as_ptr().cast(), ya.as_mut_ptr(), N as i64);
            deq_b(qa.as_ptr().cast(), yb.as_mut_ptr(), N as i64);
        }
        let first = ya
            .iter()
            .zip(&yb)
            .position(|(p, q)| p.to_bits() != q.to_bits());
        assert!(
            first.is_none(),
            "type {t}: dequantized value {} differs: stock {:?}, ours {:?}",
            first.unwrap(),
            ya[first.unwrap()],
            yb[first.unwrap()]
        );
        // the dequantizer did write: some output is not the zero it started as
        assert!(
            ya.iter().any(|v| *v != 0.0),
            "type {t}: dequantized to all zeros"
        );
        checked.push(t);
    }
    // the pinned ggml has 27 types with a dequantizer (F16, BF16 and the quantized ones)
    assert_eq!(checked.len(), 27, "types checked: {checked:?}");
    for t in [
        sys::GGML_TYPE_F16,
        sys::GGML_TYPE_BF16,
        sys::GGML_TYPE_Q4_0,
        sys::GGML_TYPE_Q8_0,
        sys::GGML_TYPE_Q4_K,
        sys::GGML_TYPE_Q6_K,
        sys::GGML_TYPE_IQ2_XXS,
        sys::GGML_TYPE_IQ3_S,
        sys::GGML_TYPE_IQ4_NL,
        sys::GGML_TYPE_MXFP4,
    ] {
        assert!(checked.contains(&t), "type {t} was not checked");
    }
}

/// Every type `ggml_quantize_chunk` quantizes (its switch in the pinned ggml.c).
const CHUNK_TYPES: &[sys::ggml_type] = &[
    sys::GGML_TYPE_Q1_0,
    sys::GGML_TYPE_Q2_0,
    sys::GGML_TYPE_Q4_0,
    sys::GGML_TYPE_Q4_1,
    sys::GGML_TYPE_Q5_0,
    sys::GGML_TYPE_Q5_1,
    sys::GGML_TYPE_Q8_0,
    sys::GGML_TYPE_MXFP4,
    sys::GGML_TYPE_NVFP4,
    sys::GGML_TYPE_Q2_K,
    sys::GGML_TYPE_Q3_K,
    sys::GGML_TYPE_Q4_K,
    sys::GGML_TYPE_Q5_K,
    sys::GGML_TYPE_Q6_K,
    sys::GGML_TYPE_TQ1_0,
    sys::GGML_TYPE_TQ2_0,
    sys::GGML_TYPE_IQ2_XXS,
    sys::GGML_TYPE_IQ2_XS,
    sys::GGML_TYPE_IQ3_XXS,
    sys::GGML_TYPE_IQ3_S,
    sys::GGML_TYPE_IQ2_S,
    sys::GGML_TYPE_IQ1_S,
    sys::GGML_TYPE_IQ1_M,
    sys::GGML_TYPE_IQ4_NL,
    sys::GGML_TYPE_IQ4_XS,
    sys::GGML_TYPE_F16,
    sys::GGML_TYPE_BF16,
];

/// The quantizers llama-quantize runs (`ggml_quantize_chunk`, with an importance matrix and,
/// where the type allows, without one) give stock's bytes, and `ggml_validate_row_data`
/// stock's verdict on them: the code paths of `ggml-quants.c` besides the reference
/// quantizers and dequantizers, which the flag of `build/gcc.rs` compiles differently too.
#[test]
fn every_quantizer_with_and_without_an_importance_matrix_matches_stock() {
    let stock = Lib::open(&stock_lib());
    let ours = Lib::open(&our_lib());
    // 8 rows of 256 (the IQ quantizers search grids: a few rows keep this test short):
    // random values in [-4, 4), one row of zeros, one with an outlier
    let n_per_row = 256usize;
    let n = 8 * n_per_row;
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let mut x: Vec<f32> = (0..n).map(|_| rng.float()).collect();
    x[..n_per_row].fill(0.0);
    x[n_per_row + 17] = 40.0;
    let nrows = (n / n_per_row) as i64;
    let imatrix: Vec<f32> = (0..n_per_row)
        .map(|_| (rng.float() + 4.0) * 0.25 + 0.01)
        .collect();
    let mut runs = 0;
    for &t in CHUNK_TYPES {
        let tr = stock.traits(t);
        let bytes = n / tr.blck_size as usize * tr.type_size;
        // SAFETY: ggml.h functions of the two libraries with a valid type.
        let needs = unsafe { ((stock.needs_imatrix)(t), (ours.needs_imatrix)(t)) };
        assert_eq!(needs.0, needs.1, "type {t}: requires_imatrix");
        let mats: &[Option<&[f32]>] = if needs.0 {
            &[Some(&imatrix)]
        } else {
            &[None, Some(&imatrix)]
        };
        for m in mats {
            let im = m.map_or(std::ptr::null(), |m| m.as_ptr());
            let quantize = |lib: &Lib| {
                let mut q = vec![0u8; bytes];
                // SAFETY: the library's own initialisation; `x` holds nrows * n_per_row
                // floats, `q` `bytes`, the imatrix (when given) n_per_row weights.
                let n = unsafe {
                    (lib.quantize_init)(t);
                    (lib.quantize_chunk)(
                        t,
                        x.as_ptr(),
                        q.as_mut_ptr().cast(),
                        0,
                        nrows,
                        n_per_row as i64,
                        im,
                    )
                };
                (q, n)
            };
            let ((qa, na), (qb, nb)) = (quantize(&stock), quantize(&ours));
            // SAFETY: `qa` holds `bytes` of rows of type `t`.
            let (va, vb) = unsafe {
                (
                    (stock.validate)(t, qa.as_ptr().cast(), bytes),
                    (ours.validate)(t, qa.as_ptr().cast(), bytes),
                )
            };
            let with = if m.is_some() { "with" } else { "without" };
            assert_eq!(
                (na, nb),
                (bytes, bytes),
                "type {t} {with} imatrix: bytes written"
            );
            assert!(
                qa == qb,
                "type {t} {with} imatrix: quantized bytes differ from stock's"
            );
            assert!(va && vb, "type {t} {with} imatrix: rows found invalid");
            runs += 1;
        }
    }
    // 27 types, 22 of which may also go without an importance matrix
    assert!(runs >= 40, "only {runs} quantizer runs");
}
