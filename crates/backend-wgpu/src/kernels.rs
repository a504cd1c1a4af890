//! The WGSL kernels and their compute pipelines, built on first use. The kernels that read
//! weights are built once per weight type, with that type's dequantization.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::gpu::Gpu;
use crate::quant::Quant;

/// A kernel: one WGSL file with one entry point, `main`; those that read weights, for one
/// weight type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Matmul(Quant),
    /// The matrix product with subgroup operations, where the device has them.
    MatmulSubgroup(Quant),
    Embed(Quant),
    RmsNorm,
    Add,
    AddBias,
    Scale,
    GatedActivation,
    SelectRows,
    Rope,
    StoreKv,
    Attention,
    TopK,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Matmul(_) => "matmul",
            Kernel::MatmulSubgroup(_) => "matmul_subgroup",
            Kernel::Embed(_) => "embed",
            Kernel::RmsNorm => "rms_norm",
            Kernel::Add => "add",
            Kernel::AddBias => "add_bias",
            Kernel::Scale => "scale",
            Kernel::GatedActivation => "gated_activation",
            Kernel::SelectRows => "select_rows",
            Kernel::Rope => "rope",
            Kernel::StoreKv => "store_kv",
            Kernel::Attention => "attention",
            Kernel::TopK => "top_k",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Kernel::Matmul(_) => include_str!("shaders/matmul.wgsl"),
            Kernel::MatmulSubgroup(_) => include_str!("shaders/matmul_subgroup.wgsl"),
            Kernel::Embed(_) => include_str!("shaders/embed.wgsl"),
            Kernel::RmsNorm => include_str!("shaders/rms_norm.wgsl"),
            Kernel::Add => include_str!("shaders/add.wgsl"),
            Kernel::AddBias => include_str!("shaders/add_bias.wgsl"),
            Kernel::Scale => include_str!("shaders/scale.wgsl"),
            Kernel::GatedActivation => include_str!("shaders/gated_activation.wgsl"),
            Kernel::SelectRows => include_str!("shaders/select_rows.wgsl"),
            Kernel::Rope => include_str!("shaders/rope.wgsl"),
            Kernel::StoreKv => include_str!("shaders/store_kv.wgsl"),
            Kernel::Attention => include_str!("shaders/attention.wgsl"),
            Kernel::TopK => include_str!("shaders/top_k.wgsl"),
        }
    }

    /// The weight type the kernel reads, if it reads weights.
    fn quant(self) -> Option<Quant> {
        match self {
            Kernel::Matmul(q) | Kernel::MatmulSubgroup(q) | Kernel::Embed(q) => Some(q),
            _ => None,
        }
    }
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
        let source = match kernel.quant() {
            Some(q) => format!(
                "{}\n{}\nfn dq4(row: u32, g: u32) -> vec4<f32> {{\n    return {}(row, g);\n}}\n{}",
                include_str!("shaders/weight_bytes.wgsl"),
                include_str!("shaders/dequant.wgsl"),
                q.wgsl_fn(),
                kernel.source()
            ),
            None => kernel.source().to_owned(),
        };
        let label = match kernel.quant() {
            Some(q) => format!("{} {}", kernel.name(), q.wgsl_fn()),
            None => kernel.name().to_owned(),
        };
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = gpu
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(&label),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
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
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(format!("kernel {label} does not build: {error}"));
        }
        built.insert(kernel, pipeline.clone());
        Ok(pipeline)
    }
}
