//! Device events, as ggml's `ggml_backend_event`: a recording is queued on one device
//! queue ([`super::Runtime::signal`]) and waited on by the host ([`Event::wait_for`]) or by
//! another queue ([`super::Runtime::wait`]). Each recording has a sequence number, so a
//! wait names the recording it waits for even when the event is recorded again.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// A device event, as ggml's `ggml_backend_event`: recorded on a queue, waited on by the
/// host or by another queue.
#[derive(Default)]
pub struct Event {
    state: Mutex<(u64, u64)>,
    cv: Condvar,
}

impl Event {
    /// A new event that counts as already completed.
    pub fn new() -> Arc<Event> {
        Arc::new(Event::default())
    }

    /// Marks a new recording; returns its sequence number (to queue a signal for).
    pub fn begin_record(&self) -> u64 {
        let mut s = self.state.lock();
        s.0 += 1;
        s.0
    }

    /// The latest recording's sequence number.
    pub fn recorded(&self) -> u64 {
        self.state.lock().0
    }

    /// Marks recording `seq` complete.
    pub fn signal(&self, seq: u64) {
        let mut s = self.state.lock();
        if seq > s.1 {
            s.1 = seq;
        }
        self.cv.notify_all();
    }

    /// Blocks until recording `seq` is complete.
    pub fn wait_for(&self, seq: u64) {
        let mut s = self.state.lock();
        while s.1 < seq {
            self.cv.wait(&mut s);
        }
    }

    /// Blocks until recording `seq` is complete or `limit` has passed; whether it completed.
    pub fn wait_timeout(&self, seq: u64, limit: std::time::Duration) -> bool {
        let mut s = self.state.lock();
        if s.1 < seq {
            self.cv.wait_for(&mut s, limit);
        }
        s.1 >= seq
    }

    /// Whether recording `seq` is complete.
    pub fn is_done(&self, seq: u64) -> bool {
        self.state.lock().1 >= seq
    }
}
