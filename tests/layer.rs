//! The backend layer end to end, in process: CPU buffer types, buffers, tensor data access,
//! views, multi-buffers, and graph copy / compare over a small test backend written here
//! (it computes f32 ADD and the view ops by hand on host memory).
//!
//! Abort paths (preconditions stock aborts on) run in a child process: the test re-executes
//! this binary with `LAYER_ABORT_CASE` set and checks that the child died of SIGABRT after
//! logging the expected message.

use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::*;
#[path = "common/abort.rs"]
mod abort;

use ggml_base::backend::*;
use ggml_base::buffer::*;
use ggml_base::buffer_type::*;
use ggml_base::cpu_buffer::*;
use ggml_base::graph_copy::*;
use ggml_base::multi_buffer::*;
use ggml_base::tensor::meta::same_layout;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor};

/// A ggml context for tensor metadata only (no_alloc).
fn meta_ctx() -> *mut sys::ggml_context {
    ctx_of(64)
}

#[test]
fn cpu_buffer_type_matches_stock() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let buft = ggml_backend_cpu_buffer_type();
        assert_eq!(buft, ggml_backend_cpu_buffer_type(), "one static object");
        assert_eq!(cstr(ggml_backend_buft_name(buft)), "CPU");
        assert_eq!(ggml_backend_buft_get_alignment(buft), 32);
        assert_eq!(ggml_backend_buft_get_max_size(buft), usize::MAX);
        assert!(ggml_backend_buft_is_host(buft));
        assert!(ggml_backend_buft_get_device(buft).is_null());

        let buf = ggml_backend_buft_alloc_buffer(buft, 1000);
        assert!(!buf.is_null());
        assert_eq!(ggml_backend_buffer_get_size(buf), 1000);
        assert_eq!(ggml_backend_buffer_get_type(buf), buft);
        assert_eq!(cstr(ggml_backend_buffer_name(buf)), "CPU");
        assert_eq!(ggml_backend_buffer_get_alignment(buf), 32);
        assert!(ggml_backend_buffer_is_host(buf));
        assert!(!ggml_backend_buffer_is_multi_buffer(buf));
        let base = ggml_backend_buffer_get_base(buf);
        assert_eq!(base as usize % 32, 0);
        assert_eq!(
            ggml_backend_buffer_get_usage(buf),
            sys::GGML_BACKEND_BUFFER_USAGE_ANY
        );
        ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        assert_eq!(
            ggml_backend_buffer_get_usage(buf),
            sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
        );
        ggml_backend_buffer_clear(buf, 0xAB);
        let bytes = std::slice::from_raw_parts(base.cast::<u8>(), 1000);
        assert!(bytes.iter().all(|&b| b == 0xAB));
        ggml_backend_buffer_reset(buf); // no reset in the CPU interface: a no-op
        ggml_backend_buffer_free(buf);
        ggml_backend_buffer_free(null_mut()); // NULL is fine

        // Zero-sized: a dummy buffer with no base; clear is a no-op.
        let empty = ggml_backend_buft_alloc_buffer(buft, 0);
        assert_eq!(ggml_backend_buffer_get_size(empty), 0);
        assert!(ggml_backend_buffer_get_base(empty).is_null());
        ggml_backend_buffer_clear(empty, 1);
        assert_eq!(ggml_backend_buffer_get_type(empty), buft);
        ggml_backend_buffer_free(empty);
    }
}

#[test]
fn cpu_buffer_from_ptr_is_mapped_and_not_freed() {
    let mut storage = vec![0u64; 64]; // 8-byte aligned; take a 32-aligned window
    let start = storage.as_mut_ptr() as usize;
    let aligned = (start + 31) & !31;
    // SAFETY: `aligned .. aligned + 256` lies inside `storage` (512 bytes).
    unsafe {
        let buf = ggml_backend_cpu_buffer_from_ptr(aligned as *mut c_void, 256);
        assert_eq!(cstr(ggml_backend_buffer_name(buf)), "CPU_Mapped");
        assert_eq!(ggml_backend_buffer_get_base(buf) as usize, aligned);
        assert!(ggml_backend_buffer_is_host(buf));
        ggml_backend_buffer_clear(buf, 7);
        ggml_backend_buffer_free(buf);
        // The memory is still ours and holds what clear wrote.
        let bytes = std::slice::from_raw_parts(aligned as *const u8, 256);
        assert!(bytes.iter().all(|&b| b == 7));
    }
    drop(storage);
}

#[test]
fn tensor_data_access_through_the_buffer() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = meta_ctx();
        let t = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 4, 3); // 3 rows of 4 floats
        let buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 256);
        let base = ggml_backend_buffer_get_base(buf);
        assert_eq!(
            ggml_backend_tensor_alloc(buf, t, base.cast::<u8>().add(32).cast()),
            0
        );
        assert_eq!((*t).buffer, buf);
        assert_eq!((*t).data as usize, base as usize + 32);

        let vals: Vec<f32> = (0..12).map(|i| i as f32).collect();
        set_f32s(t, &vals);
        assert_eq!(f32s(t), vals);

        // Partial write at an offset; zero-sized accesses do nothing.
        let two = [100f32, 101.0];
        ggml_backend_tensor_set(t, two.as_ptr().cast(), 8, 8);
        ggml_backend_tensor_set(t, null(), 48, 0);
        let mut got = [0f32; 3];
        ggml_backend_tensor_get(t, got.as_mut_ptr().cast(), 4, 12);
        assert_eq!(got, [1.0, 100.0, 101.0]);

        // memset
        ggml_backend_tensor_memset(t, 0, 0, 16);
        assert_eq!(&f32s(t)[..5], &[0.0, 0.0, 0.0, 0.0, 4.0]);

        // 2d: column 1 of every row (3 copies of 4 bytes, tensor stride 16, data stride 4).
        let col = [7f32, 8.0, 9.0];
        ggml_backend_tensor_set_2d(t, col.as_ptr().cast(), 4, 4, 3, 16, 4);
        let mut back = [0f32; 3];
        ggml_backend_tensor_get_2d(t, back.as_mut_ptr().cast(), 4, 4, 3, 16, 4);
        assert_eq!(back, col);
        let all = f32s(t);
        assert_eq!((all[1], all[5], all[9]), (7.0, 8.0, 9.0));

        // A view shares its source's storage.
        let v = sys::ggml_view_1d(ctx, t, 4, 16); // row 1
        assert_eq!(ggml_backend_view_init(v), 0);
        assert_eq!((*v).buffer, buf);
        assert_eq!((*v).data as usize, (*t).data as usize + 16);
        assert_eq!(f32s(v), vec![4.0, 8.0, 6.0, 7.0]);
        set_f32s(v, &[-1.0, -2.0, -3.0, -4.0]);
        assert_eq!(&f32s(t)[4..8], &[-1.0, -2.0, -3.0, -4.0]);

        // Copy into another buffer, and with src == dst.
        let u = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 4, 3);
        let buf2 = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
        assert_eq!(
            ggml_backend_tensor_alloc(buf2, u, ggml_backend_buffer_get_base(buf2)),
            0
        );
        ggml_backend_tensor_copy(t, u);
        assert_eq!(f32s(u), f32s(t));
        ggml_backend_tensor_copy(u, u);
        assert!(
            ggml_backend_buffer_copy_tensor(t, u),
            "CPU cpy_tensor accepts a host source"
        );

        ggml_backend_buffer_free(buf2);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn multi_buffer_owns_its_parts() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let buft = ggml_backend_cpu_buffer_type();
        let mut parts = [
            ggml_backend_buft_alloc_buffer(buft, 100),
            ggml_backend_buft_alloc_buffer(buft, 200),
        ];
        let multi = ggml_backend_multi_buffer_alloc_buffer(parts.as_mut_ptr(), 2);
        assert!(ggml_backend_buffer_is_multi_buffer(multi));
        assert_eq!(ggml_backend_buffer_get_size(multi), 300);
        assert_eq!(ggml_backend_buffer_get_type(multi), buft);
        assert!(
            ggml_backend_buffer_get_base(multi).is_null(),
            "no base of its own"
        );
        ggml_backend_buffer_set_usage(multi, sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE);
        for &p in &parts {
            assert_eq!(
                ggml_backend_buffer_get_usage(p),
                sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE
            );
        }
        ggml_backend_buffer_clear(multi, 0x5A);
        for &p in &parts {
            let n = ggml_backend_buffer_get_size(p);
            let bytes = std::slice::from_raw_parts(ggml_backend_buffer_get_base(p).cast::<u8>(), n);
            assert!(bytes.iter().all(|&b| b == 0x5A));
        }
        ggml_backend_buffer_free(multi); // frees the parts too
    }
}

#[test]
fn ggml_alloc_allocates_through_our_layer() {
    // ggml-alloc.c (upstream C compiled into this library) on top of our buffer layer.
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = meta_ctx();
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 10);
        let b = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 5);
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        assert!(!buf.is_null());
        let base = ggml_backend_buffer_get_base(buf) as usize;
        assert_eq!((*a).buffer, buf);
        assert_eq!((*a).data as usize, base);
        assert_eq!(
            (*b).data as usize,
            base + 64,
            "40 bytes padded to the 32-byte alignment"
        );
        assert_eq!(ggml_backend_buffer_get_size(buf), 64 + 32);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

// ---- a small test backend --------------------------------------------------------------

static SYNCS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn test_dev_name(_: sys::ggml_backend_dev_t) -> *const c_char {
    c"TEST0".as_ptr()
}
unsafe extern "C" fn test_dev_buft(_: sys::ggml_backend_dev_t) -> sys::ggml_backend_buffer_type_t {
    // SAFETY: static buffer type.
    unsafe { ggml_backend_cpu_buffer_type() }
}
unsafe extern "C" fn test_dev_supports_op(
    _: sys::ggml_backend_dev_t,
    _: *const ggml_tensor,
) -> bool {
    true
}
unsafe extern "C" fn test_backend_name(_: ggml_backend_t) -> *const c_char {
    c"TEST".as_ptr()
}
unsafe extern "C" fn test_backend_sync(_: ggml_backend_t) {
    SYNCS.fetch_add(1, Ordering::SeqCst);
}
unsafe extern "C" fn test_backend_free(b: ggml_backend_t) {
    // SAFETY: made by Box in test_backend().
    drop(unsafe { Box::from_raw(b) });
}

/// Computes f32 ADD of equal, contiguous shapes; view ops and leaves need no work.
unsafe extern "C" fn test_backend_compute(
    _: ggml_backend_t,
    g: *mut ggml_cgraph,
) -> sys::ggml_status {
    // SAFETY: a live graph of allocated host tensors.
    unsafe {
        let g = &*g;
        for i in 0..g.n_nodes as usize {
            let n = &**g.nodes.add(i);
            match n.op {
                sys::GGML_OP_ADD => {
                    let (a, b) = (&*n.src[0], &*n.src[1]);
                    let len = sys::ggml_nelements(n) as usize;
                    for k in 0..len {
                        let x = *a.data.cast::<f32>().add(k) + *b.data.cast::<f32>().add(k);
                        *n.data.cast::<f32>().add(k) = x;
                    }
                }
                sys::GGML_OP_CPY => {
                    // same-type contiguous copy (ggml_cast to the source's own type)
                    let a = &*n.src[0];
                    let len = sys::ggml_nbytes(n);
                    std::ptr::copy(a.data.cast::<u8>(), n.data.cast::<u8>(), len);
                }
                sys::GGML_OP_VIEW | sys::GGML_OP_RESHAPE | sys::GGML_OP_NONE => {}
                _ => return sys::GGML_STATUS_FAILED,
            }
        }
    }
    sys::GGML_STATUS_SUCCESS
}

static mut TEST_DEVICE: sys::ggml_backend_device = sys::ggml_backend_device {
    iface: sys::ggml_backend_device_i {
        get_name: Some(test_dev_name),
        get_description: Some(test_dev_name),
        get_memory: None,
        get_type: None,
        get_props: None,
        init_backend: None,
        get_buffer_type: Some(test_dev_buft),
        get_host_buffer_type: None,
        buffer_from_host_ptr: None,
        supports_op: Some(test_dev_supports_op),
        supports_buft: None,
        offload_op: None,
        event_new: None,
        event_free: None,
        event_synchronize: None,
    },
    reg: null_mut(),
    context: null_mut(),
};

fn test_backend() -> ggml_backend_t {
    Box::into_raw(Box::new(sys::ggml_backend {
        guid: null_mut(),
        iface: sys::ggml_backend_i {
            get_name: Some(test_backend_name),
            free: Some(test_backend_free),
            synchronize: Some(test_backend_sync),
            graph_compute: Some(test_backend_compute),
            ..Default::default()
        },
        device: &raw mut TEST_DEVICE,
        context: null_mut(),
    }))
}

/// a, b (16 floats) -> c = a + b -> v = view of c[4..12] -> d = v + v. Nodes: c, v, d.
struct TestGraph {
    ctx: *mut sys::ggml_context,
    graph: *mut ggml_cgraph,
    buf: sys::ggml_backend_buffer_t,
    nodes: [*mut ggml_tensor; 3],
}

fn test_graph() -> TestGraph {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = meta_ctx();
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 16);
        let b = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 16);
        let c = sys::ggml_add(ctx, a, b);
        let v = sys::ggml_view_1d(ctx, c, 8, 16);
        let d = sys::ggml_add(ctx, v, v);
        sys::ggml_set_name(d, c"d".as_ptr());
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, d);
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        assert!(!buf.is_null());
        assert_eq!((*graph).n_nodes, 3);
        // ggml-alloc leaves views unallocated; give the view its address.
        if (*v).buffer.is_null() {
            ggml_backend_view_init(v);
        }
        set_f32s(a, &(0..16).map(|i| i as f32).collect::<Vec<_>>());
        set_f32s(b, &[0.5; 16]);
        let nodes = [
            *(*graph).nodes,
            *(*graph).nodes.add(1),
            *(*graph).nodes.add(2),
        ];
        TestGraph {
            ctx,
            graph,
            buf,
            nodes,
        }
    }
}

impl Drop for TestGraph {
    fn drop(&mut self) {
        // SAFETY: made in test_graph.
        unsafe {
            ggml_backend_buffer_free(self.buf);
            sys::ggml_free(self.ctx);
        }
    }
}

#[test]
fn graph_copy_duplicates_layout_data_and_views() {
    let tg = test_graph();
    let backend = test_backend();
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        assert_eq!(cstr(ggml_backend_name(backend)), "TEST");
        assert_eq!(
            ggml_backend_get_default_buffer_type(backend),
            ggml_backend_cpu_buffer_type()
        );
        let copy = ggml_backend_graph_copy(backend, tg.graph);
        assert!(!copy.buffer.is_null());
        let g2 = &*copy.graph;
        assert_eq!(g2.n_nodes, 3);
        let n2: Vec<*mut ggml_tensor> = (0..3).map(|i| *g2.nodes.add(i)).collect();
        for (i, (&o, &c)) in tg.nodes.iter().zip(&n2).enumerate() {
            assert_ne!(o, c);
            assert!(same_layout(&*o, &*c), "node {i}");
            assert_eq!((*o).op, (*c).op);
            assert_eq!((*o).name, (*c).name);
        }
        // The view is a view of the copied c, at the same offset, in the copy's buffer.
        assert_eq!((*n2[1]).view_src, n2[0]);
        assert_eq!((*n2[1]).view_offs, 16);
        assert_eq!((*n2[0]).buffer, copy.buffer);
        assert_eq!((*n2[1]).data as usize, (*n2[0]).data as usize + 16);
        // Leaves were copied with their data.
        let a2 = (*n2[0]).src[0];
        assert_eq!(f32s(a2), (0..16).map(|i| i as f32).collect::<Vec<_>>());
        assert_eq!(cstr(ggml_backend_buffer_name(copy.buffer)), "CPU");
        ggml_backend_graph_copy_free(copy);
        ggml_backend_free(backend);
    }
}

#[test]
fn graph_copy_survives_a_node_that_is_its_own_source() {
    // ggml_cast makes a CPY node whose src[1] is the node itself: a cycle for a naive copy.
    let b1 = test_backend();
    let b2 = test_backend();
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = meta_ctx();
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 8);
        let c = sys::ggml_cast(ctx, a, sys::GGML_TYPE_F32);
        assert_eq!((*c).src[1], c, "ggml_cast is self-referencing");
        let d = sys::ggml_add(ctx, c, a);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, d);
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        set_f32s(a, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);

        let copy = ggml_backend_graph_copy(b2, graph);
        assert!(!copy.buffer.is_null());
        let g2 = &*copy.graph;
        let n2: Vec<*mut ggml_tensor> =
            (0..g2.n_nodes as usize).map(|i| *g2.nodes.add(i)).collect();
        let c2 = n2[0];
        assert_eq!((*c2).op, sys::GGML_OP_CPY);
        assert!(
            (*c2).src[1].is_null(),
            "as stock: the back edge of the copy is NULL"
        );
        assert_eq!((*n2[1]).src[0], c2);
        ggml_backend_graph_copy_free(copy);

        let mut seen = Seen {
            calls: vec![],
            stop_after: usize::MAX,
        };
        assert!(ggml_backend_compare_graph_backend(
            b1,
            b2,
            graph,
            Some(record),
            (&raw mut seen).cast(),
            null(),
            0,
        ));
        assert_eq!(seen.calls.len(), 2);
        assert_eq!(
            seen.calls[1].2,
            vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0]
        );
        assert_eq!(seen.calls[1].2, seen.calls[1].3);

        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
        ggml_backend_free(b1);
        ggml_backend_free(b2);
    }
}

struct Seen {
    calls: Vec<(i32, String, Vec<f32>, Vec<f32>)>,
    stop_after: usize,
}

unsafe extern "C" fn record(
    i: i32,
    t1: *mut ggml_tensor,
    t2: *mut ggml_tensor,
    ud: *mut c_void,
) -> bool {
    // SAFETY: `ud` is the `Seen` of the calling test.
    let seen = unsafe { &mut *ud.cast::<Seen>() };
    // SAFETY: live tensors with names.
    let name = unsafe { CStr::from_ptr((*t1).name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    seen.calls.push((i, name, f32s(t1), f32s(t2)));
    seen.calls.len() < seen.stop_after
}

#[test]
fn compare_walks_nodes_skipping_views_and_honours_stop() {
    let b1 = test_backend();
    let b2 = test_backend();
    let expect_d: Vec<f32> = (4..12).map(|i| 2.0 * (i as f32 + 0.5)).collect();
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let tg = test_graph();
        let mut seen = Seen {
            calls: vec![],
            stop_after: usize::MAX,
        };
        let ok = ggml_backend_compare_graph_backend(
            b1,
            b2,
            tg.graph,
            Some(record),
            (&raw mut seen).cast(),
            null(),
            0,
        );
        assert!(ok);
        let idx: Vec<i32> = seen.calls.iter().map(|c| c.0).collect();
        assert_eq!(
            idx,
            vec![0, 2],
            "the VIEW node (1) is computed but not compared"
        );
        for (_, _, r1, r2) in &seen.calls {
            assert_eq!(r1, r2);
        }
        assert_eq!(seen.calls[1].2, expect_d);
        assert_eq!(seen.calls[1].1, "d");

        // A callback returning false stops the walk.
        let tg = test_graph();
        let mut seen = Seen {
            calls: vec![],
            stop_after: 1,
        };
        ggml_backend_compare_graph_backend(
            b1,
            b2,
            tg.graph,
            Some(record),
            (&raw mut seen).cast(),
            null(),
            0,
        );
        assert_eq!(seen.calls.len(), 1);

        // test_nodes: whole graphs once, callback only for the listed nodes.
        let tg = test_graph();
        let mut seen = Seen {
            calls: vec![],
            stop_after: 1,
        };
        let wanted = [tg.nodes[2].cast_const()];
        let before = SYNCS.load(Ordering::SeqCst);
        ggml_backend_compare_graph_backend(
            b1,
            b2,
            tg.graph,
            Some(record),
            (&raw mut seen).cast(),
            wanted.as_ptr(),
            1,
        );
        assert!(
            SYNCS.load(Ordering::SeqCst) >= before + 2,
            "graph_compute synchronizes each backend"
        );
        assert_eq!(seen.calls.len(), 1);
        assert_eq!(seen.calls[0].0, 2);
        assert_eq!(seen.calls[0].2, expect_d);
        assert_eq!(seen.calls[0].3, expect_d);

        ggml_backend_free(b1);
        ggml_backend_free(b2);
    }
}

#[test]
fn async_accessors_fall_back_to_synchronize_and_blocking_calls() {
    let be = test_backend();
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = meta_ctx();
        let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 8);
        let u = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 8);
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        let before = SYNCS.load(Ordering::SeqCst);
        let v = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        ggml_backend_tensor_set_async(be, t, v.as_ptr().cast(), 0, 32);
        assert!(
            SYNCS.load(Ordering::SeqCst) > before,
            "no set_tensor_async: synchronize first"
        );
        let mut w = [0f32; 2];
        ggml_backend_tensor_get_2d_async(be, t, w.as_mut_ptr().cast(), 4, 4, 2, 16, 4);
        assert_eq!(w, [2.0, 6.0]);
        ggml_backend_tensor_copy_async(be, be, t, u);
        assert_eq!(f32s(u), v.to_vec());
        ggml_backend_synchronize(be);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
        ggml_backend_free(be);
    }
}

// ---- abort paths ---------------------------------------------------------------------------

/// Runs `case` in a child process and returns its stderr, asserting it died of SIGABRT.
fn run_abort_case(case: &str) -> String {
    abort::expect_sigabrt("abort_case_child", "LAYER_ABORT_CASE", case)
}

/// Not a test of its own: the child side of [`run_abort_case`].
#[test]
fn abort_case_child() {
    let Ok(case) = std::env::var("LAYER_ABORT_CASE") else {
        return;
    };
    // SAFETY: deliberately violates preconditions that the layer checks before any access.
    unsafe {
        let ctx = meta_ctx();
        let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
        match case.as_str() {
            "unallocated" => {
                let x = 0f32;
                ggml_backend_tensor_set(t, (&raw const x).cast(), 0, 4);
            }
            "oob" => {
                sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
                let x = [0f32; 2];
                ggml_backend_tensor_set(t, x.as_ptr().cast(), 12, 8);
            }
            "layout" => {
                let u = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 5);
                ggml_backend_tensor_copy(t, u);
            }
            "misaligned" => {
                ggml_backend_cpu_buffer_from_ptr(8 as *mut c_void, 64);
            }
            _ => unreachable!(),
        }
    }
    unreachable!("the case should have aborted");
}

#[test]
fn preconditions_abort_with_a_message() {
    let s = run_abort_case("unallocated");
    assert!(
        s.contains("ggml_backend_tensor_set: tensor buffer not set"),
        "{s}"
    );
    let s = run_abort_case("oob");
    assert!(s.contains("ggml_backend_tensor_set: tensor write out of bounds: offset 12 + size 8 > ggml_nbytes 16"), "{s}");
    let s = run_abort_case("layout");
    assert!(
        s.contains("ggml_backend_tensor_copy: cannot copy tensors with different layouts"),
        "{s}"
    );
    let s = run_abort_case("misaligned");
    assert!(
        s.contains("ggml_backend_cpu_buffer_from_ptr: buffer pointer must be aligned to 32 bytes"),
        "{s}"
    );
}
