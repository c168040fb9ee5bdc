//! Warnings about the environment that are decided once per process (a misspelt variable, a
//! refused `GGML_SCHED_DUMP`) are said again through a new logger: llama.cpp's memory fit
//! (`-fit on`, its default) makes its first contexts with a logger that turns warnings into
//! debug lines, and a warning said only there never reached its user.
//!
//! Its own test binary: the environment is read once per process.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use ggml_base::alloc::exports::{ggml_gallocr_free, ggml_gallocr_new};
use ggml_base::cpu_buffer::ggml_backend_cpu_buffer_type;
use ggml_sys as sys;

/// Every warning logged, with the logger (1 or 2) it went through.
static SEEN: Mutex<Vec<(u8, String)>> = Mutex::new(Vec::new());

/// The user data of the two loggers: the logger's number.
static FIRST: u8 = 1;
static SECOND: u8 = 2;

fn user_data(which: &'static u8) -> *mut c_void {
    std::ptr::from_ref(which).cast_mut().cast()
}

unsafe extern "C" fn logger(level: sys::ggml_log_level, text: *const c_char, ud: *mut c_void) {
    if level == sys::GGML_LOG_LEVEL_WARN {
        // SAFETY: ggml passes a NUL-terminated message, live for the call.
        let text = unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: `ud` is one of the two statics above (`user_data`).
        let which = unsafe { *ud.cast::<u8>() };
        SEEN.lock().unwrap().push((which, text));
    }
}

/// Makes and frees a graph allocator (which reads the environment, as a scheduler does).
fn make_an_allocator() {
    // SAFETY: the CPU buffer type is static; the allocator is freed at once.
    unsafe { ggml_gallocr_free(ggml_gallocr_new(ggml_backend_cpu_buffer_type())) };
}

fn said_through(logger: u8, words: &str) -> usize {
    let seen = SEEN.lock().unwrap();
    seen.iter()
        .filter(|(l, t)| *l == logger && t.contains(words))
        .count()
}

#[test]
fn once_per_process_warnings_are_said_again_through_a_new_logger() {
    let file = std::env::temp_dir().join(format!("env-warnings-{}", std::process::id()));
    std::fs::write(&file, b"a file, not a directory").unwrap();
    std::env::set_var("GGML_SCHED_INPLACE_RUEL", "0");
    std::env::set_var("GGML_SCHED_DUMP", &file);
    let misspelt = "GGML_SCHED_INPLACE_RUEL is set but is not a variable this library reads \
                    (did you mean GGML_SCHED_INPLACE_RULE?)";
    let refused = "is not a directory; using no dump";

    // SAFETY: the logger above, with one of its statics as its user data.
    unsafe { sys::ggml_log_set(Some(logger), user_data(&FIRST)) };
    make_an_allocator();
    assert!(ggml_base::sched::record::dir().is_none());
    assert_eq!(said_through(1, misspelt), 1);
    assert_eq!(said_through(1, refused), 1);

    // The same logger: nothing said twice.
    make_an_allocator();
    assert_eq!(said_through(1, misspelt), 1);
    assert_eq!(said_through(1, refused), 1);

    // Another logger (as after llama.cpp's fit): both said once more, through it.
    // SAFETY: as above.
    unsafe { sys::ggml_log_set(Some(logger), user_data(&SECOND)) };
    make_an_allocator();
    make_an_allocator();
    assert_eq!(said_through(2, misspelt), 1);
    assert_eq!(said_through(2, refused), 1);
    assert_eq!(said_through(1, misspelt), 1);

    // SAFETY: back to ggml's default logger.
    unsafe { sys::ggml_log_set(None, std::ptr::null_mut()) };
    std::fs::remove_file(&file).unwrap();
}
