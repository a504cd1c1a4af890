//! The instruction sets plumb's CPU kernels are written for, and the one run-time detection
//! that picks among them. ggml's integer dot products ([`crate::DotKernel`]) and the cpu
//! backend's f32 kernels (attention, norms, activations) all dispatch on this one type, so a
//! machine runs every kernel at the same instruction set.
//!
//! `PLUMB_CPU_ISA` caps that choice at run time (`PLUMB_CPU_ISA=avx2` on an AVX-512 machine
//! runs the AVX2 kernels), so that one machine can measure and test every path it can run.
//! The x86 levels are ordered scalar < avx2 < avx2-vnni < avx512 < avx512-vnni: a cap of
//! `avx2` leaves out AVX-VNNI, as on the AVX2 CPUs before it (Intel before Alder Lake, AMD
//! before Zen 4). The aarch64 levels are ordered scalar < neon < neon-dotprod < neon-i8mm.

use std::sync::OnceLock;

/// The environment variable that caps the instruction set: one of [`Isa::name`]'s names.
pub const ISA_ENV: &str = "PLUMB_CPU_ISA";

/// An instruction set plumb has kernels for. Later variants are preferred when present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Plain Rust: every target.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// [`Isa::Avx2`] with AVX-VNNI, the VEX-encoded `vpdpbusd` on 256-bit registers (Intel
    /// since Alder Lake, AMD since Zen 4): only the integer GEMMs differ from [`Isa::Avx2`]'s.
    Avx2Vnni,
    /// x86-64 with AVX-512 F/BW/VL/DQ (and AVX2, FMA, F16C).
    Avx512,
    /// [`Isa::Avx512`] with AVX-512 VNNI (and BF16 where the CPU has it).
    Avx512Vnni,
    /// aarch64 with NEON.
    Neon,
    /// aarch64 with NEON and the dot-product extension.
    NeonDotprod,
    /// [`Isa::NeonDotprod`] with the 8-bit matrix multiply `smmla` (i8mm: for example Apple
    /// M2 and later, Neoverse V1 and N2, Cortex-A510 and A710): only the integer GEMMs differ.
    NeonI8mm,
    /// WebAssembly with the 128-bit SIMD proposal. A module either is compiled for it
    /// (`-C target-feature=+simd128`) or not: WebAssembly has no run-time detection, and an
    /// engine without SIMD128 refuses the whole module.
    Simd128,
}

impl Isa {
    /// The best instruction set this CPU and OS support. Detection goes through std's
    /// run-time checks, which also ask the OS whether it saves the wider registers: a CPU that
    /// reports a feature the OS has not enabled (such as AMX tiles) never gets it.
    pub fn detect() -> Isa {
        Isa::available().into_iter().max().unwrap_or(Isa::Scalar)
    }

    /// Every instruction set plumb may use on this machine, [`Isa::Scalar`] first: those the
    /// CPU supports, up to the cap `PLUMB_CPU_ISA` sets. An invalid cap caps nothing here;
    /// [`Isa::env_cap`] reports it.
    pub fn available() -> Vec<Isa> {
        let supported = Isa::supported();
        match Isa::env_cap() {
            Ok(Some(cap)) => supported.into_iter().filter(|&isa| isa <= cap).collect(),
            _ => supported,
        }
    }

    /// The cap set by `PLUMB_CPU_ISA`, read once per process: `Ok(None)` when unset, an error
    /// naming the variable when it names no instruction set or one this CPU cannot run.
    /// Backends call this once at start, so that a wrong setting fails loudly instead of
    /// silently running the best kernels.
    pub fn env_cap() -> Result<Option<Isa>, String> {
        static CAP: OnceLock<Result<Option<Isa>, String>> = OnceLock::new();
        CAP.get_or_init(|| match std::env::var(ISA_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(format!("{ISA_ENV} is not UTF-8")),
            Ok(name) => Isa::parse_cap(&name, &Isa::supported()).map(Some),
        })
        .clone()
    }

    /// The instruction set `name` names, if `supported` (this CPU's) includes it.
    pub fn parse_cap(name: &str, supported: &[Isa]) -> Result<Isa, String> {
        let names = || {
            supported
                .iter()
                .map(|isa| isa.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
        let isa = Isa::ALL
            .into_iter()
            .find(|isa| isa.name() == wanted || isa.name().replace('-', "") == wanted)
            .ok_or_else(|| {
                format!(
                    "{ISA_ENV}={name:?} names no instruction set; this CPU can run {}",
                    names()
                )
            })?;
        if !supported.contains(&isa) {
            return Err(format!(
                "{ISA_ENV}={name:?}: this CPU cannot run {}; it can run {}",
                isa.name(),
                names()
            ));
        }
        Ok(isa)
    }

    /// Every variant, in order.
    const ALL: [Isa; 9] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx2Vnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
        Isa::Neon,
        Isa::NeonDotprod,
        Isa::NeonI8mm,
        Isa::Simd128,
    ];

    /// Every instruction set this CPU and OS support, [`Isa::Scalar`] first.
    fn supported() -> Vec<Isa> {
        #[cfg_attr(
            not(any(
                target_arch = "x86_64",
                target_arch = "aarch64",
                all(target_arch = "wasm32", target_feature = "simd128")
            )),
            allow(unused_mut)
        )]
        let mut isas = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                isas.push(Isa::Avx2);
                if has!("avxvnni") {
                    isas.push(Isa::Avx2Vnni);
                }
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
                    if has!("i8mm") {
                        isas.push(Isa::NeonI8mm);
                    }
                }
            }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        isas.push(Isa::Simd128);
        isas
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx2Vnni => "avx2-vnni",
            Isa::Avx512 => "avx512",
            Isa::Avx512Vnni => "avx512-vnni",
            Isa::Neon => "neon",
            Isa::NeonDotprod => "neon-dotprod",
            Isa::NeonI8mm => "neon-i8mm",
            Isa::Simd128 => "simd128",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X86: [Isa; 5] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::Avx2Vnni,
        Isa::Avx512,
        Isa::Avx512Vnni,
    ];

    #[test]
    fn a_cap_names_an_instruction_set_in_any_spelling() {
        assert_eq!(Isa::parse_cap("avx2", &X86), Ok(Isa::Avx2));
        assert_eq!(Isa::parse_cap("AVX2_VNNI", &X86), Ok(Isa::Avx2Vnni));
        assert_eq!(Isa::parse_cap("AVX512VNNI", &X86), Ok(Isa::Avx512Vnni));
        assert_eq!(Isa::parse_cap("avx512_vnni", &X86), Ok(Isa::Avx512Vnni));
        assert_eq!(Isa::parse_cap(" scalar ", &X86), Ok(Isa::Scalar));
    }

    #[test]
    fn a_cap_this_cpu_cannot_run_or_an_unknown_name_is_an_error_naming_the_variable() {
        let no_avx512 = &X86[..2];
        let err = Isa::parse_cap("avx512", no_avx512).unwrap_err();
        assert!(
            err.contains("PLUMB_CPU_ISA") && err.contains("cannot run avx512"),
            "{err}"
        );
        assert!(err.contains("scalar, avx2"), "{err}");
        let err = Isa::parse_cap("sse9", &X86).unwrap_err();
        assert!(err.contains("names no instruction set"), "{err}");
        assert!(Isa::parse_cap("neon", &X86).is_err());
    }

    #[test]
    fn every_name_parses_back_to_its_isa() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse_cap(isa.name(), &Isa::ALL), Ok(isa));
        }
    }
}
