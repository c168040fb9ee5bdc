//! `GGML_HRX_PROFILE=1` (read by the registry, passed to [`super::CudaDevice::new`]): where a CUDA device's time goes. Every launch and GEMM issued on its own is bracketed
//! by CUDA events, and so is every launch of a captured graph, as a whole (`graph replay`;
//! the launches inside a graph are not timed one by one: `GGML_HRX_CUDA_GRAPHS=0` for that); the device time per kernel, the host time spent issuing work and the
//! time spent waiting for the stream are summed and printed to stderr when the process exits. Off by default: the events cost a little per launch.

use std::collections::HashMap;
use std::sync::{Arc, Once};
use std::time::Duration;

use cudarc::driver::{result as cu, sys};
use parking_lot::Mutex;

/// What a device has measured since the process started.
#[derive(Default)]
pub struct Totals {
    /// The device's label (`HRX0`).
    pub label: String,
    /// kernel -> (calls, device ms)
    kernels: HashMap<&'static str, (u64, f64)>,
    /// Host time issuing work (execute calls).
    pub issue: Duration,
    /// The part of `issue` spent handing a job's recorded launch list over: compared with the
    /// captured graphs, then launched as one graph or launch by launch (the rest is walking
    /// the nodes: sources resolved, launches built).
    pub submit: Duration,
    /// Host time waiting in synchronize.
    pub wait: Duration,
    /// Nodes run.
    pub nodes: u64,
    /// Host tensors staged through pinned memory, and bytes.
    pub staged: u64,
    /// Bytes staged.
    pub staged_bytes: u64,
    /// Synchronizations.
    pub syncs: u64,
}

static ALL: Mutex<Vec<Arc<Mutex<Totals>>>> = Mutex::new(Vec::new());

extern "C" fn print_all() {
    // at exit: no panic may leave this function, and stderr is written with write(2)
    let _ = std::panic::catch_unwind(|| {
        for t in ALL.lock().iter() {
            let line = t.lock().summary() + "\n";
            // SAFETY: writing an owned buffer to fd 2.
            unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
        }
    });
}

impl Totals {
    fn summary(&self) -> String {
        let mut rows: Vec<_> = self.kernels.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let device: f64 = rows.iter().map(|r| r.1 .1).sum();
        let mut text = format!(
            "{} profile: {} nodes, {} syncs, {} host tensors staged ({} KiB); host issuing {:.1} ms ({:.1} of it submitting launch lists), waiting {:.1} ms; device {:.1} ms:",
            self.label,
            self.nodes,
            self.syncs,
            self.staged,
            self.staged_bytes >> 10,
            self.issue.as_secs_f64() * 1e3,
            self.submit.as_secs_f64() * 1e3,
            self.wait.as_secs_f64() * 1e3,
            device
        );
        for (name, (n, ms)) in rows {
            text += &format!(" {name} {n}x {ms:.1} ms;");
        }
        text
    }
}

/// Per-device profile state (inside the GPU's mutex).
pub struct Profile {
    pool: Vec<sys::CUevent>,
    pending: Vec<(&'static str, sys::CUevent, sys::CUevent)>,
    /// The sums, also printed when the process exits.
    pub totals: Arc<Mutex<Totals>>,
}

impl Profile {
    /// A profile for the device labelled `label` (`HRX0`); its summary is printed at exit.
    pub fn new(label: &str) -> Profile {
        let totals = Arc::new(Mutex::new(Totals {
            label: label.to_string(),
            ..Totals::default()
        }));
        ALL.lock().push(totals.clone());
        static AT_EXIT: Once = Once::new();
        // SAFETY: registering a plain extern "C" function that only reads locked state.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(print_all);
        });
        Profile {
            pool: Vec::new(),
            pending: Vec::new(),
            totals,
        }
    }

    fn event(&mut self) -> Option<sys::CUevent> {
        self.pool
            .pop()
            .or_else(|| cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).ok())
    }

    /// Records an event on `stream` before work named `name`; `finish` records after it.
    pub fn start(&mut self, stream: sys::CUstream) -> Option<sys::CUevent> {
        let e = self.event()?;
        // SAFETY: a live event and stream.
        unsafe { cu::event::record(e, stream) }.ok()?;
        Some(e)
    }

    /// Records the end of `name` begun with `start`.
    pub fn finish(
        &mut self,
        name: &'static str,
        start: Option<sys::CUevent>,
        stream: sys::CUstream,
    ) {
        let Some(s) = start else {
            return;
        };
        let Some(e) = self.event() else {
            return;
        };
        // SAFETY: a live event and stream.
        if unsafe { cu::event::record(e, stream) }.is_ok() {
            self.pending.push((name, s, e));
        }
    }

    /// After the stream is idle: folds the pending pairs into the totals.
    pub fn settle(&mut self, waited: Duration) {
        let mut t = self.totals.lock();
        t.wait += waited;
        t.syncs += 1;
        for (name, s, e) in std::mem::take(&mut self.pending) {
            // SAFETY: both events were recorded and the stream is idle.
            let ms = unsafe { cu::event::elapsed(s, e) }.unwrap_or(0.0) as f64;
            let k = t.kernels.entry(name).or_default();
            k.0 += 1;
            k.1 += ms;
            self.pool.push(s);
            self.pool.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_splits_issuing_and_sorts_kernels_by_device_time() {
        let mut t = Totals {
            label: "HRX0".into(),
            issue: Duration::from_micros(2900),
            submit: Duration::from_micros(400),
            wait: Duration::from_micros(1300),
            nodes: 358,
            syncs: 3,
            ..Totals::default()
        };
        t.kernels.insert("hrx_norm", (33, 0.2));
        t.kernels.insert("graph replay", (127, 196.9));
        let s = t.summary();
        assert!(
            s.starts_with(
                "HRX0 profile: 358 nodes, 3 syncs, 0 host tensors staged (0 KiB); host issuing 2.9 ms (0.4 of it submitting launch lists), waiting 1.3 ms; device 197.1 ms:"
            ),
            "{s}"
        );
        assert!(
            s.ends_with(" graph replay 127x 196.9 ms; hrx_norm 33x 0.2 ms;"),
            "{s}"
        );
    }
}
