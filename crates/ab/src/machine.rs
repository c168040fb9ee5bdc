//! The processor a run happens on, named in the output of every step whose results can
//! depend on it: ggml's CPU backend picks its kernels (and so the rounding of its results)
//! by CPU feature, so a text or a figure from one machine is not expected on another.

/// CPU flags that change which kernels ggml's CPU backend runs, as `/proc/cpuinfo` spells
/// them (x86 `flags`, Arm `Features`), with the names llama.cpp's `system_info` prints.
const KERNEL_FLAGS: &[(&str, &str)] = &[
    ("avx", "AVX"),
    ("avx2", "AVX2"),
    ("fma", "FMA"),
    ("f16c", "F16C"),
    ("avx_vnni", "AVX_VNNI"),
    ("avx512f", "AVX512"),
    ("avx512bw", "AVX512_BW"),
    ("avx512vbmi", "AVX512_VBMI"),
    ("avx512_vnni", "AVX512_VNNI"),
    ("avx512_bf16", "AVX512_BF16"),
    ("amx_tile", "AMX"),
    ("asimd", "NEON"),
    ("asimddp", "DOTPROD"),
    ("i8mm", "MATMUL_INT8"),
    ("sve", "SVE"),
];

/// One line naming the CPU model, the cores this process may use and its kernel-relevant
/// features, from the text of `/proc/cpuinfo` (`cpuinfo`). Items it cannot find read `?`;
/// an empty feature list reads `none of AVX, AVX2, ...`.
pub fn describe(cpuinfo: &str, cores: usize) -> String {
    let field = |keys: &[&str]| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            keys.contains(&k.trim()).then(|| v.trim().to_string())
        })
    };
    let model = field(&["model name", "Model name", "CPU part"]).unwrap_or_else(|| "?".into());
    let flags = field(&["flags", "Features"]).unwrap_or_default();
    let have: Vec<&str> = flags.split_whitespace().collect();
    let features: Vec<&str> = KERNEL_FLAGS
        .iter()
        .filter(|(flag, _)| have.contains(flag))
        .map(|(_, name)| *name)
        .collect();
    let features = if features.is_empty() {
        "none of the SIMD features ggml's CPU kernels use".to_string()
    } else {
        features.join(" ")
    };
    format!("{model}, {cores} cores, CPU features: {features}")
}

/// [`describe`] for this machine.
pub fn this_machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    describe(&cpuinfo, cores)
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn avx2_only_machine() {
        let info =
            "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma f16c\n";
        assert_eq!(
            describe(info, 2),
            "AMD EPYC 7B13, 2 cores, CPU features: AVX AVX2 FMA F16C"
        );
    }

    #[test]
    fn avx512_machine_lists_its_extensions_in_a_fixed_order() {
        let info = "model name : Xeon\nflags : avx512_vnni avx2 avx512f avx fma avx512bw\n";
        assert_eq!(
            describe(info, 8),
            "Xeon, 8 cores, CPU features: AVX AVX2 FMA AVX512 AVX512_BW AVX512_VNNI"
        );
    }

    #[test]
    fn arm_machine() {
        let info = "processor : 0\nFeatures : fp asimd asimddp i8mm sve\nCPU part : 0xd0c\n";
        assert_eq!(
            describe(info, 4),
            "0xd0c, 4 cores, CPU features: NEON DOTPROD MATMUL_INT8 SVE"
        );
    }

    #[test]
    fn unknown_machine() {
        assert_eq!(
            describe("", 1),
            "?, 1 cores, CPU features: none of the SIMD features ggml's CPU kernels use"
        );
    }
}
