//! The WGSL kernels and their compute pipelines, built on first use. The kernels that read
//! weights are built once per weight type, with that type's dequantization; the mat-vec
//! kernels also once per number of rows a subgroup (or workgroup) takes.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::gpu::Gpu;
use crate::quant::Quant;
use crate::wait::block_on;

/// A kernel: one WGSL file with one entry point, `main`; those that read weights, for one
/// weight type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Matmul(Quant),
    /// The matrix product with subgroup operations, where the device has them.
    MatmulSubgroup(Quant),
    /// The product for a few tokens (decoding): `rows` rows per workgroup; with `gated`
    /// (the activation's code in `activations.wgsl`), the gated FFN's up projection, whose
    /// output is act(gate) ⊙ the product.
    Matvec {
        quant: Quant,
        rows: u32,
        gated: Option<u32>,
    },
    /// The same with subgroup operations: `rows` rows per subgroup.
    MatvecSubgroup {
        quant: Quant,
        rows: u32,
        gated: Option<u32>,
    },
    /// The same, for the types with a unit file (`Quant::matvec_unit`), read in units side
    /// by side, with quantized activations: `products` weight chunks (1 to 3) that take the
    /// same input, each with its own output, `rows` rows per workgroup.
    MatvecUnits {
        quant: Quant,
        rows: u32,
        products: u32,
    },
    /// The gated FFN's gate and up projections in units, and the activation (its code in
    /// `activations.wgsl`) applied: act(gate) ⊙ up.
    MatvecUnitsGated {
        quant: Quant,
        rows: u32,
        act: u32,
    },
    Embed(Quant),
    RmsNorm,
    AddRmsNorm,
    Add,
    AddBias,
    Scale,
    GatedActivation,
    SelectRows,
    Rope,
    StoreKv,
    RopeStoreKv,
    Attention,
    TopK,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Matmul(_) => "matmul",
            Kernel::MatmulSubgroup(_) => "matmul_subgroup",
            Kernel::Matvec { .. } => "matvec",
            Kernel::MatvecSubgroup { .. } => "matvec_subgroup",
            Kernel::MatvecUnits { .. } => "matvec_units",
            Kernel::MatvecUnitsGated { .. } => "matvec_units_gated",
            Kernel::Embed(_) => "embed",
            Kernel::RmsNorm => "rms_norm",
            Kernel::AddRmsNorm => "add_rms_norm",
            Kernel::Add => "add",
            Kernel::AddBias => "add_bias",
            Kernel::Scale => "scale",
            Kernel::GatedActivation => "gated_activation",
            Kernel::SelectRows => "select_rows",
            Kernel::Rope => "rope",
            Kernel::StoreKv => "store_kv",
            Kernel::RopeStoreKv => "rope_store_kv",
            Kernel::Attention => "attention",
            Kernel::TopK => "top_k",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Kernel::Matmul(_) => include_str!("shaders/matmul.wgsl"),
            Kernel::MatmulSubgroup(_) => include_str!("shaders/matmul_subgroup.wgsl"),
            Kernel::Matvec { .. } => include_str!("shaders/matvec.wgsl"),
            Kernel::MatvecSubgroup { .. } => include_str!("shaders/matvec_subgroup.wgsl"),
            Kernel::MatvecUnits { .. } => include_str!("shaders/matvec_units.wgsl"),
            Kernel::MatvecUnitsGated { .. } => include_str!("shaders/matvec_units_gated.wgsl"),
            Kernel::Embed(_) => include_str!("shaders/embed.wgsl"),
            Kernel::RmsNorm => include_str!("shaders/rms_norm.wgsl"),
            Kernel::AddRmsNorm => include_str!("shaders/add_rms_norm.wgsl"),
            Kernel::Add => include_str!("shaders/add.wgsl"),
            Kernel::AddBias => include_str!("shaders/add_bias.wgsl"),
            Kernel::Scale => include_str!("shaders/scale.wgsl"),
            Kernel::GatedActivation => include_str!("shaders/gated_activation.wgsl"),
            Kernel::SelectRows => include_str!("shaders/select_rows.wgsl"),
            Kernel::Rope => include_str!("shaders/rope.wgsl"),
            Kernel::StoreKv => include_str!("shaders/store_kv.wgsl"),
            Kernel::RopeStoreKv => include_str!("shaders/rope_store_kv.wgsl"),
            Kernel::Attention => include_str!("shaders/attention.wgsl"),
            Kernel::TopK => include_str!("shaders/top_k.wgsl"),
        }
    }

    /// The kernel's name, with its weight type and rows: "matvec_subgroup dq4_q4_k × 2".
    pub fn label(self) -> String {
        match self {
            Kernel::MatvecUnits {
                quant,
                rows,
                products,
            } => format!(
                "{} {} × {rows}, {products} product{}",
                self.name(),
                quant.wgsl_fn(),
                if products > 1 { "s" } else { "" }
            ),
            Kernel::MatvecUnitsGated { quant, rows, .. } => {
                format!("{} {} × {rows}", self.name(), quant.wgsl_fn())
            }
            Kernel::Matvec { quant, rows, gated }
            | Kernel::MatvecSubgroup { quant, rows, gated } => format!(
                "{} {} × {rows}{}",
                self.name(),
                quant.wgsl_fn(),
                if gated.is_some() { " gated" } else { "" }
            ),
            _ => match self.quant() {
                Some(q) => format!("{} {}", self.name(), q.wgsl_fn()),
                None => self.name().to_owned(),
            },
        }
    }

    /// The weight type the kernel reads, if it reads weights.
    fn quant(self) -> Option<Quant> {
        match self {
            Kernel::Matmul(q) | Kernel::MatmulSubgroup(q) | Kernel::Embed(q) => Some(q),
            Kernel::Matvec { quant, .. }
            | Kernel::MatvecSubgroup { quant, .. }
            | Kernel::MatvecUnits { quant, .. }
            | Kernel::MatvecUnitsGated { quant, .. } => Some(quant),
            _ => None,
        }
    }

    /// What the kernel's source needs before it: the byte reads and the dequantization of
    /// its weight type; for the products their parameters and
    /// bindings; and for the mat-vec kernels the group products, their row count `ROWS`,
    /// `dot_group`, the product of the type, and `finish`, what they write. The gated
    /// activation's nonlinearities; the RMSNorms' workgroup sum.
    fn prelude(self) -> Option<String> {
        const ACTIVATIONS: &str = include_str!("shaders/activations.wgsl");
        match self {
            Kernel::GatedActivation => return Some(ACTIVATIONS.to_owned()),
            Kernel::RmsNorm | Kernel::AddRmsNorm => {
                return Some(include_str!("shaders/norm_sum.wgsl").to_owned())
            }
            _ => {}
        }
        let quant = self.quant()?;
        let units = |rows: u32, weights: u32, outputs: u32| -> Option<String> {
            let (unit, _) = quant.matvec_unit()?;
            Some(format!(
                "{}\n{}\nconst ROWS: u32 = {rows}u;\n{}\n{unit}\n",
                include_str!("shaders/matvec_units_io.wgsl"),
                units_bindings(weights, outputs),
                include_str!("shaders/quantize_x16.wgsl"),
            ))
        };
        match self {
            Kernel::MatvecUnits { rows, products, .. } => {
                let io = units(rows, products, products)?;
                return Some(format!("{io}\nconst PRODUCTS: u32 = {products}u;\n"));
            }
            Kernel::MatvecUnitsGated { rows, act, .. } => {
                let io = units(rows, 2, 1)?;
                return Some(format!(
                    "{io}\n{}\nconst ACT: u32 = {act}u;\n",
                    include_str!("shaders/activations.wgsl")
                ));
            }
            _ => {}
        }
        let dequant = format!(
            "{}\n{}\nfn dq4(row: u32, g: u32) -> vec4<f32> {{\n    return {}(row, g);\n}}\n",
            include_str!("shaders/weight_bytes.wgsl"),
            include_str!("shaders/dequant.wgsl"),
            quant.wgsl_fn(),
        );
        Some(match self {
            Kernel::Matvec { rows, gated, .. } | Kernel::MatvecSubgroup { rows, gated, .. } => {
                let finish = matvec_finish(gated);
                format!(
                    "{dequant}\n{}\nconst ROWS: u32 = {rows}u;\n{}\n{finish}\n\
                     fn dot_group(rows: array<u32, ROWS>, g: u32, xb: u32, \
                     acc: ptr<function, array<f32, ROWS>>) {{\n    {}(rows, g, xb, acc);\n}}\n",
                    include_str!("shaders/matvec_io.wgsl"),
                    include_str!("shaders/matvec_dot.wgsl"),
                    quant.matvec_dot().0,
                )
            }
            Kernel::Matmul(_) | Kernel::MatmulSubgroup(_) => {
                format!("{dequant}\n{}", include_str!("shaders/matmul_io.wgsl"))
            }
            _ => dequant,
        })
    }
}

/// What the mat-vec kernels write (`finish`): the product, or the gated FFN's act(gate) ⊙ the
/// product, with the activation's code.
fn matvec_finish(gated: Option<u32>) -> String {
    match gated {
        Some(act) => format!(
            "{}\n{}\nconst ACT: u32 = {act}u;\n",
            include_str!("shaders/activations.wgsl"),
            include_str!("shaders/matvec_gated.wgsl")
        ),
        None => include_str!("shaders/matvec_store.wgsl").to_owned(),
    }
}

/// The unit kernels' weight and output bindings, after their parameters (0) and activations
/// (1): weights `w0`, `w1`, … from binding 2, then outputs `y0`, …, with `weight(s, i)`, vec4 i
/// of weight s, and `store(s, i, v)`, which writes v as value i of output s. A dispatch's
/// products are a uniform choice for each workgroup.
fn units_bindings(weights: u32, outputs: u32) -> String {
    let mut wgsl = String::new();
    for i in 0..weights {
        let _ = writeln!(
            wgsl,
            "@group(0) @binding({}) var<storage, read> w{i}: array<vec4<u32>>;",
            2 + i
        );
    }
    for i in 0..outputs {
        let _ = writeln!(
            wgsl,
            "@group(0) @binding({}) var<storage, read_write> y{i}: array<f32>;",
            2 + weights + i
        );
    }
    let cases = |count: u32, body: &dyn Fn(u32) -> String| -> String {
        (0..count)
            .map(|i| {
                let label = if i + 1 == count {
                    "default".to_owned()
                } else {
                    format!("case {i}u")
                };
                format!("        {label}: {{ {} }}\n", body(i))
            })
            .collect()
    };
    let _ = write!(
        wgsl,
        "fn weight(s: u32, i: u32) -> vec4<u32> {{\n    switch s {{\n{}    }}\n}}\n\
         fn store(s: u32, i: u32, v: f32) {{\n    switch s {{\n{}    }}\n}}\n",
        cases(weights, &|i| format!("return w{i}[i];")),
        cases(outputs, &|i| format!("y{i}[i] = v;")),
    );
    wgsl
}

/// The pipelines built so far.
#[derive(Default)]
pub(crate) struct Kernels {
    built: Mutex<HashMap<Kernel, wgpu::ComputePipeline>>,
}

impl Kernels {
    /// The pipeline of `kernel`, built now unless it was before.
    pub fn get(&self, gpu: &Gpu, kernel: Kernel) -> Result<wgpu::ComputePipeline, String> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pipeline) = built.get(&kernel) {
            return Ok(pipeline.clone());
        }
        let source = match kernel.prelude() {
            Some(prelude) => format!("{prelude}\n{}", kernel.source()),
            None => kernel.source().to_owned(),
        };
        let label = kernel.label();
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        // The runtime checks wgpu adds, but for the bound on every loop's iterations
        // (`force_loop_bounding`, a counter each loop also decrements and tests): with it
        // the mat-vec kernels read 7B's Q4_K weights at 350 (matvec_units) and 440
        // (matvec_subgroup) GB/s on the H200 through Vulkan, without it at 750 and 530, and
        // the prompt's tiled product ran 2.5× as fast. (Why is not known: perhaps the
        // counter keeps NVIDIA's compiler from unrolling the loops over ROWS.) Bounds checks
        // cost nothing measurable there and stay.
        let mut checks = wgpu::ShaderRuntimeChecks::checked();
        checks.force_loop_bounding = false;
        // SAFETY: every loop of every kernel here ends: their bounds are the kernel's
        // parameters and constants, and each iteration moves its index towards them.
        let module = unsafe {
            gpu.device.create_shader_module_trusted(
                wgpu::ShaderModuleDescriptor {
                    label: Some(&label),
                    source: wgpu::ShaderSource::Wgsl(source.into()),
                },
                checks,
            )
        };
        let pipeline = gpu
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&label),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        if let Some(error) = block_on(scope.pop())? {
            return Err(format!("kernel {label} does not build: {error}"));
        }
        built.insert(kernel, pipeline.clone());
        Ok(pipeline)
    }
}
