//! Kernels compiled at run time with NVRTC, for the device's own compute capability, and
//! cached on disk so that only the first start on a machine pays for the compilation.
//!
//! The cache holds device code (CUBIN), not PTX: loading it needs no JIT, and it stays valid
//! when NVRTC is newer than the driver (PTX of a newer ISA would be refused). An entry is keyed
//! by a hash of everything that changes the code: the source, the options, the target and
//! NVRTC's version. A missing, unreadable or rejected entry is compiled again; a cache that
//! cannot be written only costs the next start the same compilation.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::sys;
use cudarc::nvrtc::Ptx;
use plumb_model::{ModelError, Result};
use sha2::{Digest, Sha256};

use crate::error::{error, failed};

const OP: &str = "load_module";

/// Environment variable that overrides the kernel cache directory.
pub const KERNELS_ENV: &str = "PLUMB_KERNELS";

/// Loads kernel source `source` (a `.cu` file; `name` names it in messages and cache files)
/// into `ctx`, compiled for its device.
pub(crate) fn load_module(
    ctx: &Arc<CudaContext>,
    name: &str,
    source: &str,
) -> Result<Arc<CudaModule>> {
    let (major, minor) = ctx.compute_capability().map_err(failed(OP))?;
    let arch = target_arch(major, minor);
    let version = nvrtc_version()?;
    let options = options(&arch);
    let path = cache_dir().map(|dir| dir.join(cache_file(name, source, &options, version)));

    if let Some(cubin) = path.as_deref().and_then(|p| std::fs::read(p).ok()) {
        match ctx.load_module(Ptx::from_binary(cubin)) {
            Ok(module) => return Ok(module),
            Err(e) => tracing::warn!(kernel = name, "cached kernel rejected, recompiling: {e}"),
        }
    }
    let cubin = compile(name, source, &options)?;
    if let Some(path) = &path {
        if let Err(e) = store(path, &cubin) {
            tracing::warn!(kernel = name, path = %path.display(), "cannot cache kernel: {e}");
        }
    }
    ctx.load_module(Ptx::from_binary(cubin))
        .map_err(|e| error(OP, format!("kernel {name}: {e}")))
}

/// The real architecture of a device of compute capability `major.minor`. Hopper (9.0) and
/// later full-size chips get their arch-specific variant (`sm_90a`), whose instructions
/// (wgmma, setmaxnreg) exist on that exact chip only, which is the one we compile for.
fn target_arch(major: i32, minor: i32) -> String {
    let specific = matches!((major, minor), (9, 0) | (10, 0) | (10, 3) | (12, 0));
    format!("sm_{major}{minor}{}", if specific { "a" } else { "" })
}

/// No fast math: the kernels are compared with the f32 reference, and `expf`, division and
/// square roots stay IEEE-correct.
fn options(arch: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()]
}

/// The kernel cache directory: `$PLUMB_KERNELS`, else `plumb/kernels` under the platform cache
/// directory (`$XDG_CACHE_HOME` or `~/.cache` on Linux); none if neither is known.
fn cache_dir() -> Option<PathBuf> {
    kernels_env_dir().or_else(|| dirs::cache_dir().map(|d| d.join("plumb").join("kernels")))
}

/// `$PLUMB_KERNELS`, where it is set and not empty.
fn kernels_env_dir() -> Option<PathBuf> {
    std::env::var_os(KERNELS_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

fn cache_file(name: &str, source: &str, options: &[String], nvrtc: (c_int, c_int)) -> String {
    let mut hash = Sha256::new();
    for part in [source.as_bytes(), &[0]]
        .into_iter()
        .chain(options.iter().flat_map(|o| [o.as_bytes(), &[0]]))
    {
        hash.update(part);
    }
    hash.update(format!("nvrtc {}.{}", nvrtc.0, nvrtc.1));
    let digest: String = hash.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{name}-{digest}.cubin")
}

/// Writes through a temporary file and a rename, so that a concurrent start never reads half
/// a kernel.
fn store(path: &Path, cubin: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, cubin)?;
    std::fs::rename(&tmp, path)
}

/// Fails with a clear message where the NVRTC library cannot be loaded, instead of letting
/// the first call into it panic.
fn require_nvrtc() -> Result<()> {
    // SAFETY: only tries to open the library.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(error(
            OP,
            "the NVRTC library (libnvrtc.so) cannot be loaded: install CUDA's NVRTC and put its \
             directory on LD_LIBRARY_PATH",
        ))
    }
}

fn nvrtc_version() -> Result<(c_int, c_int)> {
    require_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the two pointers are valid for writes.
    check(
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) },
        "version",
    )?;
    Ok((major, minor))
}

fn check(result: sys::nvrtcResult, what: &str) -> Result<()> {
    if result == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(error(OP, format!("NVRTC {what}: {result:?}")))
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

/// Compiles `source` to device code with `options`; a compilation error carries NVRTC's log.
/// cudarc's safe wrapper returns PTX only, hence the direct calls.
fn compile(name: &str, source: &str, options: &[String]) -> Result<Vec<u8>> {
    require_nvrtc()?;
    let nul = |what: &str| error(OP, format!("kernel {name}: {what} contains a NUL byte"));
    let c_source = CString::new(source).map_err(|_| nul("the source"))?;
    let c_name = CString::new(format!("{name}.cu")).map_err(|_| nul("the name"))?;
    let c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| nul("an option")))
        .collect::<Result<Vec<_>>>()?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

    let mut prog = Program(std::ptr::null_mut());
    // SAFETY: the strings outlive the calls; the program handle is written by create and
    // freed by `Program`'s drop; buffers are sized by the matching size queries.
    unsafe {
        check(
            sys::nvrtcCreateProgram(
                &mut prog.0,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
            "create program",
        )?;
        let compiled =
            sys::nvrtcCompileProgram(prog.0, option_ptrs.len() as c_int, option_ptrs.as_ptr());
        if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(compile_error(name, &prog, compiled, options));
        }
        let mut size = 0usize;
        check(sys::nvrtcGetCUBINSize(prog.0, &mut size), "CUBIN size")?;
        let mut cubin = vec![0u8; size];
        check(
            sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()),
            "get CUBIN",
        )?;
        Ok(cubin)
    }
}

/// The error of a failed compilation, with the compiler's log.
///
/// # Safety
/// `prog` must be a program that NVRTC has tried to compile.
unsafe fn compile_error(
    name: &str,
    prog: &Program,
    result: sys::nvrtcResult,
    options: &[String],
) -> ModelError {
    let mut size = 0usize;
    let log = if sys::nvrtcGetProgramLogSize(prog.0, &mut size) == sys::nvrtcResult::NVRTC_SUCCESS {
        let mut buf = vec![0u8; size.max(1)];
        if sys::nvrtcGetProgramLog(prog.0, buf.as_mut_ptr().cast())
            == sys::nvrtcResult::NVRTC_SUCCESS
        {
            CStr::from_bytes_until_nul(&buf)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        }
    } else {
        String::new()
    };
    error(
        OP,
        format!(
            "kernel {name} does not compile ({result:?}, options {}):\n{log}",
            options.join(" ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_gets_its_arch_specific_target() {
        assert_eq!(target_arch(9, 0), "sm_90a");
        assert_eq!(target_arch(8, 9), "sm_89");
        assert_eq!(target_arch(8, 0), "sm_80");
    }

    #[test]
    fn the_cache_key_changes_with_every_input() {
        let opts = options("sm_90a");
        let base = cache_file("k", "src", &opts, (13, 0));
        assert!(base.starts_with("k-") && base.ends_with(".cubin"));
        assert_eq!(base, cache_file("k", "src", &opts, (13, 0)));
        assert_ne!(base, cache_file("k", "src2", &opts, (13, 0)));
        assert_ne!(base, cache_file("k", "src", &options("sm_89"), (13, 0)));
        assert_ne!(base, cache_file("k", "src", &opts, (13, 1)));
    }

    /// Every kernel compiles for Hopper, where NVRTC is installed: no GPU is needed for it.
    /// With `PLUMB_KERNELS` set, they are compiled as `load_module` compiles them and stored
    /// there under the keys a Hopper GPU's start looks for, so that a machine with one can
    /// start from kernels compiled here.
    #[test]
    fn every_kernel_compiles() {
        if let Err(e) = require_nvrtc() {
            plumb_testutil::skip(module_path!(), &format!("no NVRTC ({e})"));
            return;
        }
        let cache = kernels_env_dir();
        // One thread per module: NVRTC compiles separate programs concurrently. Without a
        // cache to fill, load_module's options with fewer optimizations
        // (--Ofast-compile=mid): at full optimization the matmul module alone took 80 s on
        // one core, NVRTC's front end and optimizer about half and ptxas the other half; at
        // mid, 12 s. Every kernel still goes through the whole pipeline to sm_90a device
        // code, so that C++ errors, PTX that ptxas rejects (an instruction or modifier that
        // sm_90a lacks) and static limits (too much shared memory) still fail here; the CUDA
        // tests on a GPU load them fully optimized.
        let mut test_options = options("sm_90a");
        if cache.is_none() {
            test_options.push("--Ofast-compile=mid".into());
        }
        let (test_options, cache) = (&test_options, &cache);
        let sources: Vec<_> = crate::kernels::sources()
            .into_iter()
            .chain(crate::matmul::sources())
            .collect();
        let failures: Vec<String> = std::thread::scope(|scope| {
            let compiles: Vec<_> = sources
                .iter()
                .map(|(name, source)| {
                    scope.spawn(move || {
                        let cubin = compile(name, source, test_options)?;
                        match cache {
                            Some(dir) => store_in(dir, name, source, test_options, &cubin),
                            None => Ok(()),
                        }
                    })
                })
                .collect();
            compiles
                .into_iter()
                .filter_map(|c| c.join().expect("an NVRTC compile panicked").err())
                .map(|e| e.to_string())
                .collect()
        });
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Stores `cubin`, compiled from `source` with `options`, in `dir` where `load_module`
    /// would look for it.
    fn store_in(
        dir: &Path,
        name: &str,
        source: &str,
        options: &[String],
        cubin: &[u8],
    ) -> Result<()> {
        let path = dir.join(cache_file(name, source, options, nvrtc_version()?));
        store(&path, cubin).map_err(|e| error(OP, format!("{}: {e}", path.display())))
    }
}
