//! The `GGML_HRX_*` environment variables, read with the rule of the `envvar` crate (shared
//! with libggml-base): a value we do not understand is named in a warning and the default is
//! kept; it is never silently mapped to something else (a negative budget to "not a
//! number", `inf` devices to an endless loop, garbage to "off"). Each parser returns what
//! was wrong in words; [`read`] logs it with the variable's name and the value used instead.
//! The parsers only HRX needs (sizes in MiB, addresses) are here.

use std::ops::RangeInclusive;

/// The most devices HRX creates: each simulated device has a queue thread and its own
/// reserved address range, so a count in the thousands would start thousands of threads.
pub(crate) const MAX_DEVICES: usize = 64;

/// The most memory a simulated device may reserve, MiB (1 TiB of address space; the
/// 47-bit user address space holds 128 TiB).
pub(crate) const MAX_SIM_MEMORY_MB: f64 = 1_048_576.0;

/// The most host threads a simulated device may run a node with.
pub(crate) const MAX_SIM_THREADS: usize = 1024;

/// [`envvar::read`] with HRX's logger: the warning goes through ggml's logger as
/// `HRX: NAME='VALUE' what is wrong; using DEFAULT`.
pub fn read<T>(
    name: &str,
    default: T,
    shown: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> T {
    envvar::read(name, default, shown, parse, |m| {
        crate::log::warn(&format!("HRX: {m}\n"))
    })
}

pub use envvar::{count, switch};

/// Which runtime backs the HRX devices (`GGML_HRX_RUNTIME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// CUDA when a CUDA device is present, else the simulator.
    Auto,
    /// CUDA only: no HRX device when there is no CUDA device.
    Cuda,
    /// The simulator.
    Sim,
}

/// `auto`, `cuda` or `sim` (any case).
pub fn runtime_choice(text: &str) -> Result<RuntimeChoice, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(RuntimeChoice::Auto),
        "cuda" => Ok(RuntimeChoice::Cuda),
        "sim" => Ok(RuntimeChoice::Sim),
        _ => Err("is not one of auto, cuda, sim".into()),
    }
}

/// A finite number of MiB in `range` (fractions allowed: `0.5`); `inf`, `nan` and
/// negative values are refused by what they are.
pub fn mib(text: &str, range: RangeInclusive<f64>) -> Result<f64, String> {
    let t = text.trim();
    let x: f64 = t
        .parse()
        .map_err(|_| "is not a number of MiB".to_string())?;
    if !x.is_finite() {
        return Err("is not a finite number of MiB".into());
    }
    if x < 0.0 {
        return Err("is negative: a size in MiB is at least 0".into());
    }
    if !range.contains(&x) {
        return Err(format!(
            "is out of range: {} to {} MiB allowed",
            range.start(),
            range.end()
        ));
    }
    Ok(x)
}

/// A host address: `0x` hex or decimal, not 0 (a buffer base of NULL would read as "no
/// memory" to ggml), and a multiple of 4 KiB (`mmap` takes page-aligned addresses only).
pub fn address(text: &str) -> Result<usize, String> {
    let s = text.trim();
    let a = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => usize::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|_| "is not an address (0x hex or decimal)".to_string())?;
    if a == 0 {
        return Err("is 0: the fake address range cannot start at NULL".into());
    }
    if a % 4096 != 0 {
        return Err("is not a multiple of the 4 KiB page (0x1000)".into());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_choices_are_named_or_refused() {
        assert_eq!(runtime_choice("auto"), Ok(RuntimeChoice::Auto));
        assert_eq!(runtime_choice(" CUDA "), Ok(RuntimeChoice::Cuda));
        assert_eq!(runtime_choice("sim"), Ok(RuntimeChoice::Sim));
        assert_eq!(
            runtime_choice("gpu").unwrap_err(),
            "is not one of auto, cuda, sim"
        );
    }

    #[test]
    fn sizes_in_mib() {
        assert_eq!(mib("0.5", 0.0..=10.0), Ok(0.5));
        assert_eq!(mib(" 40 ", 0.0..=1e9), Ok(40.0));
        assert_eq!(
            mib("-5", 0.0..=1e9),
            Err("is negative: a size in MiB is at least 0".into())
        );
        assert_eq!(
            mib("inf", 0.0..=1e9),
            Err("is not a finite number of MiB".into())
        );
        assert_eq!(
            mib("nan", 0.0..=1e9),
            Err("is not a finite number of MiB".into())
        );
        assert_eq!(mib("lots", 0.0..=1e9), Err("is not a number of MiB".into()));
        assert_eq!(
            mib("2e6", 1.0..=MAX_SIM_MEMORY_MB),
            Err("is out of range: 1 to 1048576 MiB allowed".into())
        );
    }

    #[test]
    fn addresses() {
        assert_eq!(address("0x7f0000000000"), Ok(0x7f00_0000_0000));
        assert_eq!(address(" 0X10000 "), Ok(65536));
        assert_eq!(address("131072"), Ok(131072));
        assert_eq!(
            address("0"),
            Err("is 0: the fake address range cannot start at NULL".into())
        );
        assert_eq!(
            address("0x0"),
            Err("is 0: the fake address range cannot start at NULL".into())
        );
        assert_eq!(address("0x1000"), Ok(4096));
        assert_eq!(
            address("0x1234"),
            Err("is not a multiple of the 4 KiB page (0x1000)".into())
        );
        assert_eq!(
            address("zz"),
            Err("is not an address (0x hex or decimal)".into())
        );
    }
}
