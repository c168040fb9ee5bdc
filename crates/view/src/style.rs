//! Colours and sizes shared by the layouts and the page.

use std::collections::BTreeMap;

/// One colour per backend name, the same on both sides of an A/B page: the CPU light blue,
/// the others from a fixed list in order of first appearance.
#[derive(Default, Debug, Clone)]
pub struct Palette {
    colors: BTreeMap<String, &'static str>,
    next: usize,
}

const DEVICE_COLORS: &[&str] = &[
    "#ffb74d", "#aed581", "#ce93d8", "#fff176", "#80cbc4", "#f48fb1",
];
const CPU_COLOR: &str = "#90caf9";
const UNKNOWN_COLOR: &str = "#e0e0e0";

impl Palette {
    /// Gives every backend of `names` (name, is the CPU) a colour, keeping earlier ones.
    pub fn add<'a>(&mut self, names: impl IntoIterator<Item = (&'a str, bool)>) {
        for (n, cpu) in names {
            if self.colors.contains_key(n) {
                continue;
            }
            let c = if cpu {
                CPU_COLOR
            } else {
                let c = DEVICE_COLORS[self.next % DEVICE_COLORS.len()];
                self.next += 1;
                c
            };
            self.colors.insert(n.to_string(), c);
        }
    }

    /// The colour of backend `name` (grey when unknown).
    pub fn color(&self, name: &str) -> &'static str {
        self.colors.get(name).copied().unwrap_or(UNKNOWN_COLOR)
    }

    /// Every (name, colour).
    pub fn all(&self) -> &BTreeMap<String, &'static str> {
        &self.colors
    }
}

/// `512 B`, `4.0 KiB`, `1.5 MiB`, `2.25 GiB`.
pub fn fmt_bytes(b: u64) -> String {
    const K: f64 = 1024.0;
    let f = b as f64;
    if f < K {
        format!("{b} B")
    } else if f < K * K {
        format!("{:.1} KiB", f / K)
    } else if f < K * K * K {
        format!("{:.1} MiB", f / K / K)
    } else {
        format!("{:.2} GiB", f / K / K / K)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_colors() {
        assert_eq!(fmt_bytes(16), "16 B");
        assert_eq!(fmt_bytes(4096), "4.0 KiB");
        assert_eq!(fmt_bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
        let mut p = Palette::default();
        p.add([("HRX0", false), ("CPU", true)]);
        p.add([("CPU", true), ("HRX1", false)]);
        assert_eq!(p.color("CPU"), CPU_COLOR);
        assert_eq!(p.color("HRX0"), DEVICE_COLORS[0]);
        assert_eq!(p.color("HRX1"), DEVICE_COLORS[1]);
        assert_eq!(p.color("nope"), UNKNOWN_COLOR);
    }
}
