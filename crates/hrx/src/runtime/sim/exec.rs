//! Runs claimed nodes with ggml's CPU kernels on shadow tensors that point into the
//! simulator's private memory.

use std::ffi::c_void;

use ggml_sys::{ggml_backend_t, ggml_cgraph, ggml_tensor, GGML_STATUS_SUCCESS};

use super::cpu::cpu;
use crate::runtime::hash_set::OwnedHashSet;
use crate::runtime::{ExecJob, Loc};

/// The worker's execution state: a CPU backend created on first use.
#[derive(Default)]
pub struct Executor {
    cpu: Option<ggml_backend_t>,
    threads: usize,
}

impl Drop for Executor {
    fn drop(&mut self) {
        if let Some(b) = self.cpu.take() {
            // SAFETY: `b` came from ggml_backend_cpu_init and is freed once, through its own
            // interface (no libggml-base call needed).
            unsafe {
                if let Some(free) = (*b).iface.free {
                    free(b)
                }
            }
        }
    }
}

impl Executor {
    fn backend(&mut self, threads: usize) -> Result<ggml_backend_t, String> {
        let cpu = cpu().ok_or("libggml-cpu is not loaded in this process")?;
        let b = match self.cpu {
            Some(b) => b,
            None => {
                // SAFETY: plain constructor call.
                let b = unsafe { (cpu.init)() };
                if b.is_null() {
                    return Err("ggml_backend_cpu_init failed".into());
                }
                self.cpu = Some(b);
                b
            }
        };
        if self.threads != threads {
            // SAFETY: `b` is a live CPU backend.
            unsafe { (cpu.set_n_threads)(b, threads as i32) };
            self.threads = threads;
        }
        Ok(b)
    }

    /// Runs `job`: points every shadow tensor at its bytes (`translate` maps a device range
    /// to private memory), wires sources, and computes the nodes as one CPU graph.
    pub fn run(
        &mut self,
        mut job: ExecJob,
        threads: usize,
        translate: &dyn Fn(usize, usize) -> *mut u8,
    ) -> Result<(), String> {
        let backend = self.backend(threads)?;
        let mut node_ptrs: Vec<*mut ggml_tensor> = Vec::with_capacity(job.nodes.len());
        for nj in job.nodes.iter_mut() {
            for k in 0..nj.tensors.len() {
                let data: *mut c_void = match nj.locs[k] {
                    Loc::Device(a) => translate(a, nj.sizes[k]).cast(),
                    Loc::Host(p) => p.0,
                };
                let t = &mut nj.tensors[k];
                t.data = data;
                t.buffer = std::ptr::null_mut();
                t.view_src = std::ptr::null_mut();
                t.view_offs = 0;
                t.extra = std::ptr::null_mut();
                t.src = [std::ptr::null_mut(); 10];
            }
            let base = nj.tensors.as_mut_ptr();
            for &(i, k) in &nj.srcs {
                // SAFETY: k < tensors.len() (built so by the layer above); the vector is not
                // resized from here on, so the pointers stay valid.
                unsafe { (*base).src[i] = base.add(k) };
            }
            node_ptrs.push(base);
        }
        for (j, nj) in job.nodes.iter().enumerate() {
            for &(i, other) in &nj.node_srcs {
                if other >= j {
                    return Err(format!("{}: bad source link", job.label));
                }
                // SAFETY: both indices are in range; the node shadows live in `job`.
                unsafe { (*node_ptrs[j]).src[i] = node_ptrs[other] };
            }
        }
        let entries: Vec<(*mut ggml_tensor, i32)> = job
            .nodes
            .iter()
            .zip(&node_ptrs)
            .map(|(nj, &p)| (p, nj.use_count.unwrap_or(-1)))
            .collect();
        let mut set = OwnedHashSet::new(&entries);
        let (hs, counts) = set.raw();
        let mut graph = ggml_cgraph {
            size: node_ptrs.len() as i32,
            n_nodes: node_ptrs.len() as i32,
            n_leafs: 0,
            nodes: node_ptrs.as_mut_ptr(),
            use_counts: counts,
            visited_hash_set: hs,
            ..Default::default()
        };
        // SAFETY: `backend` is a live CPU backend; the graph and every tensor it reaches live
        // until the call returns; tensor data points at memory of the right size.
        let status = unsafe {
            let compute = (*backend)
                .iface
                .graph_compute
                .ok_or("CPU backend has no graph_compute")?;
            compute(backend, &mut graph)
        };
        if status != GGML_STATUS_SUCCESS {
            return Err(format!(
                "{}: CPU kernels returned status {status}",
                job.label
            ));
        }
        Ok(())
    }
}
