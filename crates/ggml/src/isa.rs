//! The instruction sets plumb's CPU kernels are written for, and the one run-time detection
//! that picks among them. ggml's integer dot products ([`crate::DotKernel`]) and the cpu
//! backend's f32 kernels (attention, norms, activations) all dispatch on this one type, so a
//! machine runs every kernel at the same instruction set.

/// An instruction set plumb has kernels for. Later variants are preferred when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust: every target.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 F/BW/VL/DQ (and AVX2, FMA, F16C).
    Avx512,
    /// [`Isa::Avx512`] with AVX-512 VNNI (and BF16 where the CPU has it).
    Avx512Vnni,
    /// aarch64 with NEON.
    Neon,
    /// aarch64 with NEON and the dot-product extension.
    NeonDotprod,
}

impl Isa {
    /// The best instruction set this CPU and OS support. Detection goes through std's
    /// run-time checks, which also ask the OS whether it saves the wider registers: a CPU that
    /// reports a feature the OS has not enabled (such as AMX tiles) never gets it.
    pub fn detect() -> Isa {
        Isa::available().into_iter().max().unwrap_or(Isa::Scalar)
    }

    /// Every instruction set this machine can run, [`Isa::Scalar`] first.
    pub fn available() -> Vec<Isa> {
        let mut isas = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                isas.push(Isa::Avx2);
                if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq") {
                    isas.push(Isa::Avx512);
                    if has!("avx512vnni") {
                        isas.push(Isa::Avx512Vnni);
                    }
                }
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            use std::arch::is_aarch64_feature_detected as has;
            if has!("neon") {
                isas.push(Isa::Neon);
                if has!("dotprod") {
                    isas.push(Isa::NeonDotprod);
                }
            }
        }
        isas
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon-dotprod",
        }
    }
}
