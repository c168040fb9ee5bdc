//! The backend layer's dispatch and bounds, pinned to stock ggml-backend.cpp / ggml-alloc.c
//! (written by a review of 2026-12-06 that tried to break it): tensor data access plain,
//! strided and queued, copies between buffers, views of views, `ggml_backend_tensor_alloc`'s
//! bounds, context allocation split at `max_size`, multi-buffers, `ggml_backend_graph_copy`,
//! events, the optional callbacks' defaults, and the C gallocr API. The one difference it found
//! (`ggml_backend_reg_get_proc_address` with a NULL name on a registration without a lookup:
//! stock returns NULL, ours aborted) is fixed and checked here.
//!
//! A "device" buffer type is defined here: host memory behind it, but it says it is not host
//! memory and records every data callback, so the layer's dispatch can be observed. Abort paths
//! run in a child process (the test binary re-executed with `LAYER_ABORT_CASE`).

use std::cell::{Cell, RefCell};
use std::os::raw::{c_char, c_void};
use std::ptr::{null, null_mut};

#[path = "common/tensors.rs"]
mod tensors;
use tensors::*;
#[path = "common/abort.rs"]
mod abort;

use ggml_base::backend::*;
use ggml_base::buffer::*;
use ggml_base::buffer_type::*;
use ggml_base::cpu_buffer::*;
use ggml_base::device::*;
use ggml_base::event::*;
use ggml_base::graph_copy::*;
use ggml_base::multi_buffer::*;
use ggml_base::tensor::*;
use ggml_sys as sys;
use ggml_sys::{ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_tensor};

// ---- a recording, non-host "device" buffer type -----------------------------------------

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    // Whether the test device's `cpy_tensor` and `cpy_tensor_async` accept a copy. Per thread,
    // as the log is: the layer calls them on the test's own thread, and two tests set them
    // (a shared static was a data race between test threads).
    static CPY_ACCEPTS: Cell<bool> = const { Cell::new(false) };
    static CPY_ASYNC_ACCEPTS: Cell<bool> = const { Cell::new(false) };
}

fn log(s: String) {
    LOG.with(|l| l.borrow_mut().push(s));
}

fn take_log() -> Vec<String> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// Context of a device buffer: host memory, 64-aligned.
struct DevMem {
    mem: Vec<u64>,
}

unsafe extern "C" fn dev_buf_free(b: ggml_backend_buffer_t) {
    // SAFETY: made by Box in dev_buft_alloc.
    drop(unsafe { Box::from_raw((*b).context.cast::<DevMem>()) });
}
unsafe extern "C" fn dev_buf_base(b: ggml_backend_buffer_t) -> *mut c_void {
    // SAFETY: live DevMem.
    unsafe { (*(*b).context.cast::<DevMem>()).mem.as_mut_ptr().cast() }
}
unsafe extern "C" fn dev_buf_memset(
    _: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    v: u8,
    off: usize,
    size: usize,
) {
    log(format!("memset {off} {size}"));
    // SAFETY: the layer checked the range.
    unsafe { std::ptr::write_bytes((*t).data.cast::<u8>().add(off), v, size) }
}
unsafe extern "C" fn dev_buf_set(
    _: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    d: *const c_void,
    off: usize,
    size: usize,
) {
    log(format!("set {off} {size}"));
    // SAFETY: the layer checked the range.
    unsafe { std::ptr::copy(d.cast::<u8>(), (*t).data.cast::<u8>().add(off), size) }
}
unsafe extern "C" fn dev_buf_get(
    _: ggml_backend_buffer_t,
    t: *const ggml_tensor,
    d: *mut c_void,
    off: usize,
    size: usize,
) {
    log(format!("get {off} {size}"));
    // SAFETY: the layer checked the range.
    unsafe { std::ptr::copy((*t).data.cast::<u8>().add(off), d.cast::<u8>(), size) }
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn dev_buf_set_2d(
    _: ggml_backend_buffer_t,
    t: *mut ggml_tensor,
    d: *const c_void,
    off: usize,
    size: usize,
    n: usize,
    st: usize,
    sd: usize,
) {
    log(format!("set_2d {off} {size} {n} {st} {sd}"));
    for i in 0..n {
        // SAFETY: the layer checked the rows.
        unsafe {
            std::ptr::copy(
                d.cast::<u8>().add(i * sd),
                (*t).data.cast::<u8>().add(off + i * st),
                size,
            )
        }
    }
}
unsafe extern "C" fn dev_buf_cpy(
    _: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    let accept = CPY_ACCEPTS.get();
    log(format!("cpy {accept}"));
    if accept {
        // SAFETY: host memory behind both.
        unsafe {
            std::ptr::copy(
                (*src).data.cast::<u8>(),
                (*dst).data.cast::<u8>(),
                sys::ggml_nbytes(src),
            )
        }
    }
    accept
}
unsafe extern "C" fn dev_buf_clear(b: ggml_backend_buffer_t, v: u8) {
    // SAFETY: live buffer.
    unsafe { std::ptr::write_bytes(dev_buf_base(b).cast::<u8>(), v, (*b).size) }
}

unsafe extern "C" fn dev_buft_name(_: ggml_backend_buffer_type_t) -> *const c_char {
    c"DEV".as_ptr()
}
unsafe extern "C" fn dev_buft_alloc(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let ctx = Box::into_raw(Box::new(DevMem {
        mem: vec![0u64; size.div_ceil(8)],
    }));
    let iface = sys::ggml_backend_buffer_i {
        free_buffer: Some(dev_buf_free),
        get_base: Some(dev_buf_base),
        memset_tensor: Some(dev_buf_memset),
        set_tensor: Some(dev_buf_set),
        get_tensor: Some(dev_buf_get),
        set_tensor_2d: Some(dev_buf_set_2d),
        cpy_tensor: Some(dev_buf_cpy),
        clear: Some(dev_buf_clear),
        ..Default::default()
    };
    // SAFETY: exported API.
    unsafe { ggml_backend_buffer_init(buft, iface, ctx.cast(), size) }
}
unsafe extern "C" fn dev_buft_align(_: ggml_backend_buffer_type_t) -> usize {
    8
}
unsafe extern "C" fn dev_buft_max(_: ggml_backend_buffer_type_t) -> usize {
    128
}

static mut DEV_BUFT: sys::ggml_backend_buffer_type = sys::ggml_backend_buffer_type {
    iface: sys::ggml_backend_buffer_type_i {
        get_name: Some(dev_buft_name),
        alloc_buffer: Some(dev_buft_alloc),
        get_alignment: Some(dev_buft_align),
        get_max_size: Some(dev_buft_max),
        get_alloc_size: None,
        is_host: None,
    },
    device: null_mut(),
    context: null_mut(),
};

fn dev_buft() -> ggml_backend_buffer_type_t {
    &raw mut DEV_BUFT
}

/// A tensor of `n` floats placed at the start of a new device buffer of `n * 4` bytes.
fn dev_tensor(ctx: *mut sys::ggml_context, n: i64) -> (*mut ggml_tensor, ggml_backend_buffer_t) {
    // SAFETY: exported API with valid arguments.
    unsafe {
        let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, n);
        let buf = ggml_backend_buft_alloc_buffer(dev_buft(), n as usize * 4);
        assert_eq!(
            ggml_backend_tensor_alloc(buf, t, ggml_backend_buffer_get_base(buf)),
            sys::GGML_STATUS_SUCCESS
        );
        (t, buf)
    }
}

// ---- tests ---------------------------------------------------------------------------------

#[test]
fn strided_access_dispatch_and_bounds_match_stock() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let (t, buf) = dev_tensor(ctx, 16); // 64 bytes
        take_log();
        // 4 rows of 4 bytes, 20 apart: last row ends at 3*20 + 4 = 64 == nbytes: valid.
        let rows = [1f32, 2.0, 3.0, 4.0];
        ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 0, 4, 4, 20, 4);
        assert_eq!(take_log(), vec!["set_2d 0 4 4 20 4"]);
        let all = f32s(t);
        assert_eq!((all[0], all[5], all[10], all[15]), (1.0, 2.0, 3.0, 4.0));
        take_log();
        // One row: stock goes through set_tensor, not set_tensor_2d.
        ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 60, 4, 1, 1000, 0);
        assert_eq!(take_log(), vec!["set 60 4"]);
        // Zero rows: nothing at all.
        ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 9999, 4, 0, 0, 0);
        assert!(take_log().is_empty());
        // Zero size with several rows and a strided callback: nothing, not even a range check.
        ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 9999, 0, 3, 9999, 0);
        assert!(take_log().is_empty());
        // No get_tensor_2d: row by row through get_tensor.
        let mut back = [0f32; 4];
        ggml_backend_tensor_get_2d(t, back.as_mut_ptr().cast(), 0, 4, 4, 20, 4);
        assert_eq!(
            back,
            [1.0, 2.0, 3.0, 1.0],
            "row 3 was overwritten by the one-row write"
        );
        assert_eq!(
            take_log(),
            vec!["get 0 4", "get 20 4", "get 40 4", "get 60 4"]
        );
        // Zero-size plain accesses: no callback even at the very end or past it.
        ggml_backend_tensor_set(t, null(), 64, 0);
        ggml_backend_tensor_get(t, null_mut(), 1 << 40, 0);
        ggml_backend_tensor_memset(t, 0, 1 << 40, 0);
        assert!(take_log().is_empty());
        // memset through the buffer's memset_tensor, range inside.
        ggml_backend_tensor_memset(t, 0, 60, 4);
        assert_eq!(take_log(), vec!["memset 60 4"]);
        assert_eq!(f32s(t)[15], 0.0);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn copy_between_device_buffers_uses_cpy_tensor_then_falls_back() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let (a, ba) = dev_tensor(ctx, 4);
        let (b, bb) = dev_tensor(ctx, 4);
        set_f32s(a, &[1.0, 2.0, 3.0, 4.0]);
        take_log();
        CPY_ACCEPTS.set(false);
        ggml_backend_tensor_copy(a, b);
        // Neither is host: cpy_tensor of dst's buffer, declined, then get + set via host memory.
        assert_eq!(take_log(), vec!["cpy false", "get 0 16", "set 0 16"]);
        assert_eq!(f32s(b), vec![1.0, 2.0, 3.0, 4.0]);
        take_log();
        // Host destination: read straight into dst->data.
        let h = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
        let hb = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 16);
        ggml_backend_tensor_alloc(hb, h, ggml_backend_buffer_get_base(hb));
        ggml_backend_tensor_copy(a, h);
        assert_eq!(take_log(), vec!["get 0 16"]);
        // Host source: written through dst's set_tensor.
        set_f32s(h, &[9.0, 8.0, 7.0, 6.0]);
        ggml_backend_tensor_copy(h, b);
        assert_eq!(take_log(), vec!["set 0 16"]);
        assert_eq!(f32s(b), vec![9.0, 8.0, 7.0, 6.0]);
        // buffer_copy_tensor goes to the destination's storage buffer (a view's source's).
        let v = sys::ggml_view_1d(ctx, b, 4, 0);
        ggml_backend_view_init(v);
        take_log();
        assert!(!ggml_backend_buffer_copy_tensor(a, v));
        assert_eq!(take_log(), vec!["cpy false"]);
        ggml_backend_buffer_free(hb);
        ggml_backend_buffer_free(ba);
        ggml_backend_buffer_free(bb);
        sys::ggml_free(ctx);
    }
}

#[test]
fn views_of_views_and_post_alloc_views_reach_the_root_storage() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let (t, buf) = dev_tensor(ctx, 16);
        set_f32s(t, &(0..16).map(|i| i as f32).collect::<Vec<_>>());
        // ggml_view of an allocated tensor: data is set by ggml, buffer stays NULL.
        let v = sys::ggml_view_1d(ctx, t, 8, 16);
        assert!((*v).buffer.is_null());
        assert_eq!((*v).data as usize, (*t).data as usize + 16);
        assert_eq!(f32s(v), (4..12).map(|i| i as f32).collect::<Vec<_>>());
        // A view of the view: ggml points view_src at the root with summed offsets.
        let vv = sys::ggml_view_1d(ctx, v, 2, 8);
        assert_eq!((*vv).view_src, t);
        assert_eq!((*vv).view_offs, 24);
        take_log();
        set_f32s(vv, &[-1.0, -2.0]);
        assert_eq!(take_log(), vec!["set 0 8"], "through the root's buffer");
        assert_eq!(&f32s(t)[6..8], &[-1.0, -2.0]);
        assert_eq!(ggml_backend_view_init(vv), sys::GGML_STATUS_SUCCESS);
        assert_eq!((*vv).buffer, buf);
        assert_eq!((*vv).data as usize, (*t).data as usize + 24);
        // A 0-sized view: nbytes 0; a zero-size access at offset 0 is fine.
        let z = sys::ggml_view_1d(ctx, t, 0, 64);
        assert_eq!(sys::ggml_nbytes(z), 0);
        ggml_backend_tensor_set(z, null(), 0, 0);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn tensor_alloc_accepts_a_tensor_ending_exactly_at_the_buffer_end() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 100);
        let base = ggml_backend_buffer_get_base(buf).cast::<u8>();
        let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
        assert_eq!(ggml_backend_tensor_alloc(buf, t, base.add(84).cast()), 0);
        let z = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 0);
        assert_eq!(ggml_backend_tensor_alloc(buf, z, base.add(100).cast()), 0);
        assert_eq!((*z).buffer, buf);
        set_f32s(t, &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(f32s(t), vec![1.0, 2.0, 3.0, 4.0]);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn ctx_tensors_split_at_max_size_into_a_multi_buffer() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(16);
        // DEV: alignment 8, max size 128.
        let t1 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 27); // 108 -> 112
        let t2 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 5); // 20 -> 24 (112 + 24 > 128: split)
        let t3 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 0); // 0
        let t4 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 3); // 12 -> 16
        let v1 = sys::ggml_view_1d(ctx, t1, 2, 8); // a view of t1, placed in the 2nd range
        let t5 = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 30); // 120 (split)
        assert_eq!(
            sys::ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, dev_buft()),
            112 + 40 + 120
        );
        assert!((*t1).data.is_null(), "the size query allocates nothing");
        let buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, dev_buft());
        assert!(!buf.is_null());
        assert!(ggml_backend_buffer_is_multi_buffer(buf));
        assert_eq!(ggml_backend_buffer_get_size(buf), 112 + 40 + 120);
        assert_eq!(ggml_backend_buffer_get_type(buf), dev_buft());
        assert!(ggml_backend_buffer_get_base(buf).is_null());
        let (b1, b2, b3) = ((*t1).buffer, (*t2).buffer, (*t5).buffer);
        assert!(b1 != b2 && b2 != b3 && b1 != b3);
        assert_eq!(
            (
                ggml_backend_buffer_get_size(b1),
                ggml_backend_buffer_get_size(b2),
                ggml_backend_buffer_get_size(b3)
            ),
            (112, 40, 120)
        );
        assert_eq!((*t1).data, ggml_backend_buffer_get_base(b1));
        assert_eq!((*t2).data, ggml_backend_buffer_get_base(b2));
        assert_eq!((*t3).buffer, b2);
        assert_eq!((*t3).data as usize, (*t2).data as usize + 24);
        assert_eq!((*t4).data as usize, (*t2).data as usize + 24);
        assert_eq!((*v1).buffer, b1, "a view takes its source's buffer");
        assert_eq!((*v1).data as usize, (*t1).data as usize + 8);
        // Usage goes to every part.
        ggml_backend_buffer_set_usage(buf, sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        for b in [b1, b2, b3] {
            assert_eq!(
                ggml_backend_buffer_get_usage(b),
                sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
            );
        }
        // Clear goes to every part.
        ggml_backend_buffer_clear(buf, 0);
        set_f32s(t5, &[5.0; 30]);
        ggml_backend_buffer_clear(buf, 0);
        assert_eq!(f32s(t5), vec![0.0; 30]);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn ctx_with_only_empty_or_allocated_tensors_gets_no_buffer() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(4);
        let z = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 0);
        assert_eq!(
            sys::ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, ggml_backend_cpu_buffer_type()),
            0
        );
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        assert!(buf.is_null());
        assert!((*z).data.is_null() && (*z).buffer.is_null());
        sys::ggml_free(ctx);
    }
}

#[test]
fn nested_multi_buffer_usage_reaches_leaves() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let buft = ggml_backend_cpu_buffer_type();
        let mut inner = [
            ggml_backend_buft_alloc_buffer(buft, 64),
            ggml_backend_buft_alloc_buffer(buft, 0),
        ];
        let leaves = inner;
        let m1 = ggml_backend_multi_buffer_alloc_buffer(inner.as_mut_ptr(), 2);
        let mut outer = [m1, ggml_backend_buft_alloc_buffer(buft, 32)];
        let m2 = ggml_backend_multi_buffer_alloc_buffer(outer.as_mut_ptr(), 2);
        assert_eq!(ggml_backend_buffer_get_size(m2), 96);
        assert!(ggml_backend_buffer_is_host(m2));
        ggml_backend_buffer_set_usage(m2, sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE);
        for b in [m1, outer[1], leaves[0], leaves[1]] {
            assert_eq!(
                ggml_backend_buffer_get_usage(b),
                sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE
            );
        }
        ggml_backend_buffer_clear(m2, 3); // the 0-sized part has no clear: skipped
        let p = ggml_backend_buffer_get_base(leaves[0]).cast::<u8>();
        assert_eq!(*p.add(63), 3);
        ggml_backend_buffer_free(m2);
    }
}

// ---- graph copy ------------------------------------------------------------------------------

unsafe extern "C" fn be_name(_: sys::ggml_backend_t) -> *const c_char {
    c"REVIEW".as_ptr()
}
unsafe extern "C" fn be_free(b: sys::ggml_backend_t) {
    // SAFETY: made by Box in backend().
    drop(unsafe { Box::from_raw(b) });
}
unsafe extern "C" fn be_compute(
    _: sys::ggml_backend_t,
    _: *mut sys::ggml_cgraph,
) -> sys::ggml_status {
    sys::GGML_STATUS_SUCCESS
}
unsafe extern "C" fn dev_name(_: sys::ggml_backend_dev_t) -> *const c_char {
    c"REVIEWDEV".as_ptr()
}
unsafe extern "C" fn dev_get_buft(_: sys::ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    dev_buft()
}

/// The test device's interface: a name and the recording buffer type, nothing else.
const DEVICE_IFACE: sys::ggml_backend_device_i = sys::ggml_backend_device_i {
    get_name: Some(dev_name),
    get_description: Some(dev_name),
    get_memory: None,
    get_type: None,
    get_props: None,
    init_backend: None,
    get_buffer_type: Some(dev_get_buft),
    get_host_buffer_type: None,
    buffer_from_host_ptr: None,
    supports_op: None,
    supports_buft: None,
    offload_op: None,
    event_new: None,
    event_free: None,
    event_synchronize: None,
};

static mut DEVICE: sys::ggml_backend_device = sys::ggml_backend_device {
    iface: DEVICE_IFACE,
    reg: null_mut(),
    context: null_mut(),
};

fn backend() -> sys::ggml_backend_t {
    Box::into_raw(Box::new(sys::ggml_backend {
        guid: null_mut(),
        iface: sys::ggml_backend_i {
            get_name: Some(be_name),
            free: Some(be_free),
            graph_compute: Some(be_compute),
            ..Default::default()
        },
        device: &raw mut DEVICE,
        context: null_mut(),
    }))
}

#[test]
fn graph_copy_keeps_flags_params_leaf_data_and_post_alloc_views() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(32);
        let a = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 4, 2);
        let b = sys::ggml_new_tensor_2d(ctx, sys::GGML_TYPE_F32, 4, 2);
        sys::ggml_set_name(a, c"a".as_ptr());
        sys::ggml_set_input(a);
        let c = sys::ggml_add(ctx, a, b);
        let buf =
            sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        set_f32s(a, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        set_f32s(b, &[10.0; 8]);
        // Views made after allocation: data set, buffer NULL.
        let t = sys::ggml_transpose(ctx, c);
        assert!((*t).buffer.is_null() && !(*t).data.is_null());
        let r = sys::ggml_view_1d(ctx, a, 2, 8); // a view of a leaf that is no node
        let d = sys::ggml_add(ctx, r, r);
        // d needs memory: give it some by hand.
        let db = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
        ggml_backend_tensor_alloc(db, d, ggml_backend_buffer_get_base(db));
        sys::ggml_set_output(d);
        let graph = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(graph, t);
        sys::ggml_build_forward_expand(graph, d);
        let n = (*graph).n_nodes as usize;
        let orig: Vec<*mut ggml_tensor> = (0..n).map(|i| *(*graph).nodes.add(i)).collect();
        let be = backend();
        let copy = ggml_backend_graph_copy(be, graph);
        assert!(!copy.buffer.is_null());
        assert_eq!(cstr(ggml_backend_buffer_name(copy.buffer)), "DEV");
        let g2 = &*copy.graph;
        assert_eq!(g2.n_nodes as usize, n);
        assert_eq!(g2.n_leafs, 0, "stock's copy lists nodes only");
        for (i, &o) in orig.iter().enumerate() {
            let (o, c2) = (&*o, &**g2.nodes.add(i));
            assert_eq!(
                (o.op, o.flags, o.op_params, o.ne, o.nb),
                (c2.op, c2.flags, c2.op_params, c2.ne, c2.nb)
            );
            assert_eq!(cstr(o.name.as_ptr()), cstr(c2.name.as_ptr()));
            assert_eq!(o.view_src.is_null(), c2.view_src.is_null());
            if !c2.view_src.is_null() {
                assert_eq!(c2.view_offs, o.view_offs);
                assert_eq!(
                    c2.data as usize,
                    (*c2.view_src).data as usize + c2.view_offs
                );
                assert_eq!(c2.buffer, copy.buffer);
            }
        }
        let d2 = *g2.nodes.add(orig.iter().position(|&x| x == d).unwrap());
        // Placement follows stock's duplication order: c, its sources a and b, then d
        // (views live in the unallocated context). DEV aligns to 8.
        let base = ggml_backend_buffer_get_base(copy.buffer) as usize;
        let c2 = *g2.nodes;
        let off = |t: *mut ggml_tensor| (*t).data as usize - base;
        assert_eq!(
            (off(c2), off((*c2).src[0]), off((*c2).src[1]), off(d2)),
            (0, 32, 64, 96)
        );
        assert_eq!(ggml_backend_buffer_get_size(copy.buffer), 104);
        assert_ne!((*d2).flags & sys::GGML_TENSOR_FLAG_OUTPUT as i32, 0);
        // The copied leaf a, reached through the view r, has a's data.
        let r2 = (*d2).src[0];
        let a2 = (*r2).view_src;
        assert_eq!(cstr((*a2).name.as_ptr()), "a");
        assert_ne!((*a2).flags & sys::GGML_TENSOR_FLAG_INPUT as i32, 0);
        assert_eq!(f32s(a2), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        assert_eq!(f32s(r2), vec![3.0, 4.0]);
        ggml_backend_graph_copy_free(copy);
        ggml_backend_free(be);
        ggml_backend_buffer_free(db);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

#[test]
fn events_and_optional_callbacks() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        assert!(ggml_backend_event_new(null_mut()).is_null());
        assert!(
            ggml_backend_event_new(&raw mut DEVICE).is_null(),
            "no event_new"
        );
        ggml_backend_event_free(null_mut());
        assert!(ggml_backend_dev_host_buffer_type(&raw mut DEVICE).is_null());
        assert!(!ggml_backend_dev_offload_op(&raw mut DEVICE, null()));
        assert_eq!(cstr(ggml_backend_name(null_mut())), "NULL");
        assert!(ggml_backend_guid(null_mut()).is_null());
        let be = backend();
        assert_eq!(ggml_backend_get_alignment(be), 8);
        assert_eq!(ggml_backend_get_max_size(be), 128);
        let b = ggml_backend_alloc_buffer(be, 0);
        assert_eq!(ggml_backend_buffer_get_size(b), 0);
        assert_eq!(ggml_backend_buffer_get_type(b), dev_buft());
        ggml_backend_buffer_free(b);
        ggml_backend_synchronize(be); // no synchronize: nothing
        ggml_backend_free(be);
    }
}

// ---- NULL handling vs stock ----------------------------------------------------------------

unsafe extern "C" fn reg_name(_: sys::ggml_backend_reg_t) -> *const c_char {
    c"REVIEWREG".as_ptr()
}

static mut REG: sys::ggml_backend_reg = sys::ggml_backend_reg {
    api_version: 2,
    iface: sys::ggml_backend_reg_i {
        get_name: Some(reg_name),
        get_device_count: None,
        get_device: None,
        get_proc_address: None,
    },
    context: null_mut(),
};

/// Stock ggml-backend.cpp:
/// ```c
/// void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name) {
///     GGML_ASSERT(reg);
///     if (!reg->iface.get_proc_address) {
///         return NULL;
///     }
///     return reg->iface.get_proc_address(reg, name);
/// }
/// ```
/// A registration without `get_proc_address` answers NULL whatever the name, NULL included.
#[test]
fn get_proc_address_without_callback_returns_null_even_for_a_null_name() {
    let out = run_child("proc_address_null_name");
    assert!(
        out.status.success(),
        "stock returns NULL here; ours died: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // SAFETY: a live registration and a name.
    unsafe {
        assert!(
            ggml_base::device::ggml_backend_reg_get_proc_address(&raw mut REG, c"x".as_ptr())
                .is_null()
        );
    }
}

// ---- abort paths -----------------------------------------------------------------------------

/// The child test and variable of `case`: the padded buffer type's cases run in the second.
fn child_of(case: &str) -> (&'static str, &'static str) {
    if matches!(case, "alloc_size_too_large" | "alloc_needs_alloc_size") {
        ("abort_case_child_2", "LAYER_ABORT_CASE2")
    } else {
        ("abort_case_child", "LAYER_ABORT_CASE")
    }
}

fn run_child(case: &str) -> std::process::Output {
    let (test, var) = child_of(case);
    abort::run_case(test, var, case)
}

fn expect_abort(case: &str, needle: &str) {
    let (test, var) = child_of(case);
    let stderr = abort::expect_sigabrt(test, var, case);
    assert!(
        stderr.contains(needle),
        "{case}: wanted {needle:?} in\n{stderr}"
    );
}

#[test]
fn abort_case_child() {
    let Ok(case) = std::env::var("LAYER_ABORT_CASE") else {
        return;
    };
    // SAFETY: deliberately violates preconditions stock checks with GGML_ASSERT.
    unsafe {
        let ctx = ctx_of(8);
        match case.as_str() {
            "proc_address_null_name" => {
                let p = ggml_base::device::ggml_backend_reg_get_proc_address(&raw mut REG, null());
                assert!(p.is_null());
                std::process::exit(0);
            }
            "set_2d_oob" => {
                let (t, _) = dev_tensor(ctx, 16);
                let rows = [0f32; 4];
                // last row ends at 1 + 3*20 + 4 = 65 > 64
                ggml_backend_tensor_set_2d(t, rows.as_ptr().cast(), 1, 4, 4, 20, 4);
            }
            "get_2d_row_oob" => {
                let (t, _) = dev_tensor(ctx, 16);
                let mut rows = [0f32; 4];
                ggml_backend_tensor_get_2d(t, rows.as_mut_ptr().cast(), 0, 4, 4, 21, 4);
            }
            "alloc_past_end" => {
                let buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 100);
                let base = ggml_backend_buffer_get_base(buf).cast::<u8>();
                let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
                ggml_backend_tensor_alloc(buf, t, base.add(85).cast());
            }
            "memset_unallocated" => {
                let t = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
                ggml_backend_tensor_memset(t, 0, 0, 4);
            }
            "async_zero_size_oob" => {
                // stock ggml_backend_tensor_set_async checks offset + size even for size 0
                let (t, _) = dev_tensor(ctx, 4);
                let be = backend();
                ggml_backend_tensor_set_async(be, t, null(), 17, 0);
            }
            "event_record_unsupported" => {
                let be = backend();
                ggml_backend_event_record(null_mut(), be);
            }
            "graph_copy_unallocated" => {
                let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
                let c = sys::ggml_add(ctx, a, a);
                let g = sys::ggml_new_graph(ctx);
                sys::ggml_build_forward_expand(g, c);
                let be = backend();
                ggml_backend_graph_copy(be, g);
            }
            _ => unreachable!(),
        }
    }
    unreachable!("the case should have aborted");
}

#[test]
fn preconditions_abort_as_stock() {
    expect_abort("set_2d_oob", "tensor write out of bounds");
    expect_abort("get_2d_row_oob", "tensor read out of bounds");
    expect_abort("alloc_past_end", "ggml_backend_tensor_alloc");
    expect_abort("memset_unallocated", "tensor buffer not set");
    expect_abort("async_zero_size_oob", "tensor write out of bounds");
    expect_abort("event_record_unsupported", "event_record");
    expect_abort("graph_copy_unallocated", "graph must be allocated");
}

// ---- queued accesses, copies and events ----------------------------------------------------

unsafe extern "C" fn q_sync(_: sys::ggml_backend_t) {
    log("sync".into());
}
unsafe extern "C" fn q_set_async(
    _: sys::ggml_backend_t,
    _: *mut ggml_tensor,
    _: *const c_void,
    off: usize,
    size: usize,
) {
    log(format!("set_async {off} {size}"));
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn q_get_2d_async(
    _: sys::ggml_backend_t,
    _: *const ggml_tensor,
    _: *mut c_void,
    off: usize,
    size: usize,
    n: usize,
    st: usize,
    sd: usize,
) {
    log(format!("get_2d_async {off} {size} {n} {st} {sd}"));
}
unsafe extern "C" fn q_cpy_async(
    _: sys::ggml_backend_t,
    _: sys::ggml_backend_t,
    _: *const ggml_tensor,
    _: *mut ggml_tensor,
) -> bool {
    let a = CPY_ASYNC_ACCEPTS.get();
    log(format!("cpy_async {a}"));
    a
}
unsafe extern "C" fn q_event_record(_: sys::ggml_backend_t, e: sys::ggml_backend_event_t) {
    log(format!("record {}", e as usize));
}
unsafe extern "C" fn q_event_wait(_: sys::ggml_backend_t, e: sys::ggml_backend_event_t) {
    log(format!("wait {}", e as usize));
}

unsafe extern "C" fn ev_new(d: sys::ggml_backend_dev_t) -> sys::ggml_backend_event_t {
    log("event_new".into());
    Box::into_raw(Box::new(sys::ggml_backend_event {
        device: d,
        context: null_mut(),
    }))
}
unsafe extern "C" fn ev_free(_: sys::ggml_backend_dev_t, e: sys::ggml_backend_event_t) {
    log("event_free".into());
    // SAFETY: made by Box in ev_new.
    drop(unsafe { Box::from_raw(e) });
}
unsafe extern "C" fn ev_sync(_: sys::ggml_backend_dev_t, _: sys::ggml_backend_event_t) {
    log("event_sync".into());
}

static mut EV_DEVICE: sys::ggml_backend_device = sys::ggml_backend_device {
    iface: sys::ggml_backend_device_i {
        event_new: Some(ev_new),
        event_free: Some(ev_free),
        event_synchronize: Some(ev_sync),
        ..DEVICE_IFACE
    },
    reg: null_mut(),
    context: null_mut(),
};

fn queue_backend() -> sys::ggml_backend_t {
    Box::into_raw(Box::new(sys::ggml_backend {
        guid: null_mut(),
        iface: sys::ggml_backend_i {
            get_name: Some(be_name),
            free: Some(be_free),
            synchronize: Some(q_sync),
            set_tensor_async: Some(q_set_async),
            get_tensor_2d_async: Some(q_get_2d_async),
            cpy_tensor_async: Some(q_cpy_async),
            graph_compute: Some(be_compute),
            event_record: Some(q_event_record),
            event_wait: Some(q_event_wait),
            ..Default::default()
        },
        device: &raw mut EV_DEVICE,
        context: null_mut(),
    }))
}

#[test]
fn queued_accesses_dispatch_as_stock() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let (t, buf) = dev_tensor(ctx, 16);
        let be = queue_backend();
        take_log();
        let x = [0f32; 4];
        ggml_backend_tensor_set_async(be, t, x.as_ptr().cast(), 48, 16);
        assert_eq!(
            take_log(),
            vec!["set_async 48 16"],
            "the queue's callback, no sync"
        );
        // No get_tensor_async: synchronize, then the buffer's get_tensor.
        let mut y = [0f32; 4];
        ggml_backend_tensor_get_async(be, t, y.as_mut_ptr().cast(), 0, 16);
        assert_eq!(take_log(), vec!["sync", "get 0 16"]);
        // set_2d_async without set_tensor_2d_async: one set_async per row, each checked.
        ggml_backend_tensor_set_2d_async(be, t, x.as_ptr().cast(), 4, 4, 3, 20, 4);
        assert_eq!(
            take_log(),
            vec!["set_async 4 4", "set_async 24 4", "set_async 44 4"]
        );
        // get_2d_async with the strided callback and n_copies > 1.
        ggml_backend_tensor_get_2d_async(be, t, y.as_mut_ptr().cast(), 0, 4, 4, 20, 4);
        assert_eq!(take_log(), vec!["get_2d_async 0 4 4 20 4"]);
        // ... and with one row: through get_tensor_async, absent: sync + get_tensor.
        ggml_backend_tensor_get_2d_async(be, t, y.as_mut_ptr().cast(), 8, 4, 1, 20, 4);
        assert_eq!(take_log(), vec!["sync", "get 8 4"]);
        // zero size with the strided callback: nothing.
        ggml_backend_tensor_get_2d_async(be, t, y.as_mut_ptr().cast(), 9999, 0, 4, 20, 4);
        assert!(take_log().is_empty());

        // Copies: accepted async copy: nothing else; declined: both synchronized, then blocking.
        let (u, ubuf) = dev_tensor(ctx, 16);
        CPY_ASYNC_ACCEPTS.set(true);
        ggml_backend_tensor_copy_async(be, be, t, u);
        assert_eq!(take_log(), vec!["cpy_async true"]);
        CPY_ASYNC_ACCEPTS.set(false);
        CPY_ACCEPTS.set(true);
        ggml_backend_tensor_copy_async(be, be, t, u);
        assert_eq!(
            take_log(),
            vec!["cpy_async false", "sync", "sync", "cpy true"]
        );
        CPY_ACCEPTS.set(false);
        ggml_backend_tensor_copy_async(null_mut(), null_mut(), t, t); // same tensor: nothing
        assert!(take_log().is_empty());

        // Events through the device and the backend.
        let e = ggml_backend_event_new(&raw mut EV_DEVICE);
        assert!(!e.is_null());
        assert_eq!((*e).device, &raw mut EV_DEVICE);
        ggml_backend_event_record(e, be);
        ggml_backend_event_wait(be, e);
        ggml_backend_event_synchronize(e);
        ggml_backend_event_free(e);
        let id = e as usize;
        assert_eq!(
            take_log(),
            vec![
                "event_new".to_string(),
                format!("record {id}"),
                format!("wait {id}"),
                "event_sync".into(),
                "event_free".into()
            ]
        );
        ggml_backend_free(be);
        ggml_backend_buffer_free(ubuf);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
}

// ---- the C gallocr API -------------------------------------------------------------------------

#[test]
fn gallocr_c_api_sizes_and_shared_buffer_types() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(16);
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 10); // 40 -> 64
        sys::ggml_set_input(a);
        let b = sys::ggml_scale(ctx, a, 2.0); // SCALE is in-place capable: reuses a
        let c = sys::ggml_scale(ctx, b, 3.0);
        sys::ggml_set_output(c);
        let g = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(g, c);
        let cpu = ggml_backend_cpu_buffer_type();
        let mut bufts = [cpu, cpu];
        let ga = sys::ggml_gallocr_new_n(bufts.as_mut_ptr(), 2);
        assert_eq!(
            sys::ggml_gallocr_get_buffer_size(ga, 0),
            0,
            "nothing reserved yet"
        );
        assert_eq!(sys::ggml_gallocr_get_buffer_size(ga, 1), 0);
        let mut sizes = [usize::MAX; 2];
        let ids = [1i32; 3];
        sys::ggml_gallocr_reserve_n_size(ga, g, ids.as_ptr(), ids.as_ptr(), sizes.as_mut_ptr());
        // Stock sums each id's allocator chunks; ids 0 and 1 share one: same number twice.
        assert_eq!(sizes[0], sizes[1]);
        // a (40 bytes, padded to 64) is reused in place by b, and b by c (stock
        // ggml_gallocr_allocate_node: own parent, one child, no views, same layout).
        assert_eq!(sizes, [64, 64]);
        assert!(sys::ggml_gallocr_reserve_n(
            ga,
            g,
            ids.as_ptr(),
            ids.as_ptr()
        ));
        let s0 = sys::ggml_gallocr_get_buffer_size(ga, 0);
        let s1 = sys::ggml_gallocr_get_buffer_size(ga, 1);
        assert_eq!(
            (s0, s1),
            (sizes[0], 0),
            "the shared buffer is counted once, at id 0"
        );
        assert!(sys::ggml_gallocr_alloc_graph(ga, g));
        for t in [a, b, c] {
            assert!(!(*t).data.is_null());
            assert_eq!(
                ggml_backend_buffer_get_usage((*t).buffer),
                sys::GGML_BACKEND_BUFFER_USAGE_COMPUTE
            );
        }
        assert_eq!((*a).data, (*b).data);
        assert_eq!((*b).data, (*c).data);
        sys::ggml_gallocr_free(ga);
        sys::ggml_free(ctx);
    }
}

/// Buffer ids are read where a tensor is placed, as stock reads them: an id out of range given
/// for a view or for a leaf that has memory already is never read, and the graph is planned
/// (ours aborted up front on any such entry, where stock plans the graph; a review's
/// differential of 2026-12-07). An out-of-range id for a tensor that is placed still aborts,
/// naming the entry (`cabi-tests/bad-input`, `gallocr_reserve_n(node buffer id 5 of 1)`).
#[test]
fn gallocr_ids_read_only_for_tensors_it_places() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(16);
        let x = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 16);
        sys::ggml_set_input(x);
        let w = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 16);
        let y = sys::ggml_add(ctx, x, w);
        let v = sys::ggml_view_1d(ctx, y, 8, 0);
        let z = sys::ggml_scale(ctx, v, 2.0);
        sys::ggml_set_output(z);
        let g = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(g, z);
        // w has memory of its own before the plan: a leaf the allocator does not place.
        let wbuf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64);
        assert_eq!(
            ggml_backend_tensor_alloc(wbuf, w, ggml_backend_buffer_get_base(wbuf)),
            sys::GGML_STATUS_SUCCESS
        );
        let nodes: Vec<*mut ggml_tensor> = (0..(*g).n_nodes)
            .map(|i| *(*g).nodes.add(i as usize))
            .collect();
        let leafs: Vec<*mut ggml_tensor> = (0..(*g).n_leafs)
            .map(|i| *(*g).leafs.add(i as usize))
            .collect();
        assert_eq!(nodes, vec![y, v, z]);
        let cpu = ggml_backend_cpu_buffer_type();
        let mut bufts = [cpu, cpu];
        let ga = sys::ggml_gallocr_new_n(bufts.as_mut_ptr(), 2);
        // The view's id (2) and w's (5) are past the two buffer types.
        let node_ids = [1i32, 2, 0];
        let leaf_ids: Vec<i32> = leafs.iter().map(|&l| if l == w { 5 } else { 1 }).collect();
        assert!(sys::ggml_gallocr_reserve_n(
            ga,
            g,
            node_ids.as_ptr(),
            leaf_ids.as_ptr()
        ));
        assert!(sys::ggml_gallocr_alloc_graph(ga, g));
        for t in [x, y, z] {
            assert!(!(*t).data.is_null());
        }
        assert_eq!((*v).data, (*y).data, "the view shares its source's memory");
        assert_eq!((*w).buffer, wbuf, "w keeps its own memory");
        sys::ggml_gallocr_free(ga);
        ggml_backend_buffer_free(wbuf);
        sys::ggml_free(ctx);
    }
}

unsafe extern "C" fn refuse_alloc(
    _: ggml_backend_buffer_type_t,
    _: usize,
) -> ggml_backend_buffer_t {
    null_mut()
}

/// A buffer type whose every allocation fails.
static mut REFUSING_BUFT: sys::ggml_backend_buffer_type = sys::ggml_backend_buffer_type {
    iface: sys::ggml_backend_buffer_type_i {
        get_name: Some(dev_buft_name),
        alloc_buffer: Some(refuse_alloc),
        get_alignment: Some(dev_buft_align),
        get_max_size: None,
        get_alloc_size: None,
        is_host: None,
    },
    device: null_mut(),
    context: null_mut(),
};

/// After a reserve whose buffer could not be allocated, `alloc_graph` tries once more and
/// returns false, leaving every tensor without memory. Stock places the tensors into the buffer
/// it never got (SIGSEGV in a review's differential of 2026-12-07; docs/alloc.md, "Where it
/// differs from stock, on purpose").
#[test]
fn gallocr_alloc_graph_after_a_failed_reserve_returns_false() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let ctx = ctx_of(8);
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 64);
        sys::ggml_set_input(a);
        let b = sys::ggml_scale(ctx, a, 2.0);
        sys::ggml_set_output(b);
        let g = sys::ggml_new_graph(ctx);
        sys::ggml_build_forward_expand(g, b);
        let ga = sys::ggml_gallocr_new(&raw mut REFUSING_BUFT);
        assert!(!sys::ggml_gallocr_reserve(ga, g), "the buffer is refused");
        assert!(!sys::ggml_gallocr_alloc_graph(ga, g), "still no buffer");
        for t in [a, b] {
            assert!((*t).data.is_null() && (*t).buffer.is_null());
        }
        sys::ggml_gallocr_free(ga);
        sys::ggml_free(ctx);
    }
}

// ---- buffer types with a larger alloc size -----------------------------------------------------

unsafe extern "C" fn pad_alloc_size(_: ggml_backend_buffer_type_t, t: *const ggml_tensor) -> usize {
    // SAFETY: live tensor.
    unsafe { sys::ggml_nbytes(t) + 16 }
}

static mut PAD_BUFT: sys::ggml_backend_buffer_type = sys::ggml_backend_buffer_type {
    iface: sys::ggml_backend_buffer_type_i {
        get_name: Some(dev_buft_name),
        alloc_buffer: Some(dev_buft_alloc),
        get_alignment: Some(dev_buft_align),
        get_max_size: None,
        get_alloc_size: Some(pad_alloc_size),
        is_host: None,
    },
    device: null_mut(),
    context: null_mut(),
};

#[test]
fn alloc_size_of_the_type_drives_placement() {
    // SAFETY: exported API with valid arguments throughout.
    unsafe {
        let buft = &raw mut PAD_BUFT;
        let ctx = ctx_of(8);
        let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4); // leaf: 16 + 16 = 32
        let b = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 1); // leaf: 4 + 16 = 20 -> 24
        assert_eq!(ggml_backend_buft_get_alloc_size(buft, a), 32);
        assert_eq!(ggml_backend_buft_get_max_size(buft), usize::MAX);
        assert!(!ggml_backend_buft_is_host(buft));
        assert_eq!(
            sys::ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, buft),
            56
        );
        let buf = sys::ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
        assert_eq!(ggml_backend_buffer_get_size(buf), 56);
        assert_eq!((*b).data as usize - (*a).data as usize, 32);
        assert_eq!(ggml_backend_buffer_get_alloc_size(buf, b), 20);
        ggml_backend_buffer_free(buf);
        sys::ggml_free(ctx);
    }
    expect_abort("alloc_size_too_large", "ggml_backend_buft_get_alloc_size");
    expect_abort("alloc_needs_alloc_size", "ggml_backend_tensor_alloc");
}

#[test]
fn abort_case_child_2() {
    let Ok(case) = std::env::var("LAYER_ABORT_CASE2") else {
        return;
    };
    // SAFETY: deliberately violates preconditions stock checks with GGML_ASSERT.
    unsafe {
        let ctx = ctx_of(8);
        let buft = &raw mut PAD_BUFT;
        match case.as_str() {
            "alloc_size_too_large" => {
                // stock: GGML_ASSERT(size <= ggml_nbytes(tensor) || ggml_op_is_empty(op) || ...)
                let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
                let c = sys::ggml_add(ctx, a, a);
                ggml_backend_buft_get_alloc_size(buft, c);
            }
            "alloc_needs_alloc_size" => {
                // nbytes 16 fits the 24-byte buffer, alloc size 32 does not
                let a = sys::ggml_new_tensor_1d(ctx, sys::GGML_TYPE_F32, 4);
                let buf = ggml_backend_buft_alloc_buffer(buft, 24);
                ggml_backend_tensor_alloc(buf, a, ggml_backend_buffer_get_base(buf));
            }
            _ => unreachable!(),
        }
    }
    unreachable!("the case should have aborted");
}
