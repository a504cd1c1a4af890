//! Decoding products through the unit kernels (`matvec_units.wgsl`, `matvec_units_gated.wgsl`),
//! for the weight types with a unit file (`Quant::matvec_unit`) on devices with subgroup
//! operations: the products that take the same input share dispatches. Q, K and V of one
//! type are one dispatch instead of three, and the gated FFN's gate and up projections one
//! instead of two, with the activation applied as the kernel writes. A decode step waits at
//! a barrier before each dispatch, so each one fewer is a launch and a drain of the GPU fewer.

use plumb_model::Result;

use crate::kernels::Kernel;
use crate::quant::Quant;
use crate::weights::RowMatrix;
use crate::{binding, GpuTensor, WgpuBackend, CHECK, MATVEC_MAX_TOKENS};

/// Products one dispatch of `matvec_units.wgsl` takes at most (its `Params`).
const MAX_PRODUCTS: usize = 3;

/// Rows per workgroup of the unit kernels (128 invocations). On the H200 (Vulkan), with f32
/// activations, their Q4_K products of 7B (64 steps) took 245, 253 and 269 ms in all with 2,
/// 4 and 8 rows, and with 4 rows on 64, 128 and 256 invocations 258, 253 and 291 ms.
const UNIT_ROWS: u32 = 4;

/// Words of the unit kernels' parameters: `Params` of `matvec_units_io.wgsl`.
const PARAMS_WORDS: usize = 4 + 8 * MAX_PRODUCTS;

impl WgpuBackend {
    /// Whether products of `n_tokens` tokens by weights of `quant` take the unit kernels,
    /// and so quantize their activations (`quantize_x16.wgsl`).
    pub(crate) fn takes_units(&self, quant: Quant, n_tokens: usize) -> bool {
        n_tokens <= MATVEC_MAX_TOKENS
            && self.subgroups
            && self.gpu.max_subgroup.is_some()
            && quant.matvec_unit().is_some()
    }

    /// `x · Wᵀ` for each of `matrices`, all of one unit type and row length, which
    /// `takes_units` takes (of their type): chunk j of every matrix in one dispatch.
    pub(crate) fn unit_products(
        &self,
        x: &GpuTensor,
        matrices: &[&RowMatrix],
    ) -> Result<Vec<GpuTensor>> {
        let Some(first) = matrices.first() else {
            return Ok(Vec::new());
        };
        let (quant, k) = (first.quant, first.row_len);
        if let Some(other) = matrices.iter().find(|m| m.quant != quant || m.row_len != k) {
            return Err(CHECK.error(
                "matmul",
                format!(
                    "one dispatch takes products of one type and row length: {:?} of {} and \
                     {:?} of {}",
                    quant, k, other.quant, other.row_len
                ),
            ));
        }
        let outputs = matrices
            .iter()
            .map(|m| self.tensor("matmul", x.n_tokens, m.n_rows))
            .collect::<Result<Vec<_>>>()?;
        let widest = matrices.iter().map(|m| m.n_rows * 4).max().unwrap_or(4);
        let most_chunks = matrices.iter().map(|m| m.chunks.len()).max().unwrap_or(0);
        for window in self.token_windows("matmul", x.n_tokens, &[k * 4, widest])? {
            let n = window.len();
            for j in 0..most_chunks {
                let parts: Vec<_> = matrices
                    .iter()
                    .zip(&outputs)
                    .filter_map(|(m, out)| m.chunks.get(j).map(|chunk| (*m, chunk, out)))
                    .collect();
                for group in parts.chunks(MAX_PRODUCTS) {
                    let mut params = unit_params(first);
                    let mut bindings = vec![binding(&x.buffer, window.start * k * 4, n * k * 4)];
                    let mut workgroups = 0;
                    for (i, (m, chunk, _)) in group.iter().enumerate() {
                        params[4 + 8 * i..9 + 8 * i].copy_from_slice(&[
                            chunk.n_rows as u32,
                            (m.row_bytes / 16) as u32,
                            workgroups as u32,
                            chunk.first_row as u32,
                            m.n_rows as u32,
                        ]);
                        workgroups += chunk.n_rows.div_ceil(UNIT_ROWS as usize);
                        bindings.push(chunk.buffer.as_entire_buffer_binding());
                    }
                    for (m, _, out) in group {
                        let m = m.n_rows;
                        bindings.push(binding(&out.buffer, window.start * m * 4, n * m * 4));
                    }
                    let kernel = Kernel::MatvecUnits {
                        quant,
                        rows: UNIT_ROWS,
                        products: group.len() as u32,
                    };
                    let bytes = group.iter().map(|(_, c, _)| c.buffer.size()).sum();
                    self.dispatch_bound(
                        "matmul",
                        (kernel, bytes),
                        &params,
                        &bindings,
                        workgroups,
                        n,
                    )?;
                }
            }
        }
        Ok(outputs)
    }

    /// The gated FFN's hidden values act(x · Gᵀ) ⊙ (x · Uᵀ), the gate and up projections of
    /// one unit type and shape, which `takes_units` takes: each chunk of both in one dispatch.
    pub(crate) fn gated_unit_products(
        &self,
        x: &GpuTensor,
        gate: &RowMatrix,
        up: &RowMatrix,
        act: u32,
    ) -> Result<GpuTensor> {
        let same_chunks = gate.chunks.len() == up.chunks.len()
            && gate
                .chunks
                .iter()
                .zip(&up.chunks)
                .all(|(g, u)| g.first_row == u.first_row && g.n_rows == u.n_rows);
        if gate.quant != up.quant
            || gate.row_len != up.row_len
            || gate.row_bytes != up.row_bytes
            || !same_chunks
        {
            return Err(CHECK.error(
                "gated_ffn",
                "the gate and up projections of one dispatch are of one type and shape",
            ));
        }
        let (k, m) = (gate.row_len, gate.n_rows);
        let out = self.tensor("gated_ffn", x.n_tokens, m)?;
        for window in self.token_windows("gated_ffn", x.n_tokens, &[k * 4, m * 4])? {
            let n = window.len();
            for (g, u) in gate.chunks.iter().zip(&up.chunks) {
                let mut params = unit_params(gate);
                params[4..9].copy_from_slice(&[
                    g.n_rows as u32,
                    (gate.row_bytes / 16) as u32,
                    0,
                    g.first_row as u32,
                    m as u32,
                ]);
                let bindings = [
                    binding(&x.buffer, window.start * k * 4, n * k * 4),
                    g.buffer.as_entire_buffer_binding(),
                    u.buffer.as_entire_buffer_binding(),
                    binding(&out.buffer, window.start * m * 4, n * m * 4),
                ];
                let kernel = Kernel::MatvecUnitsGated {
                    quant: gate.quant,
                    rows: UNIT_ROWS,
                    act,
                };
                let bytes = g.buffer.size() + u.buffer.size();
                let workgroups = g.n_rows.div_ceil(UNIT_ROWS as usize);
                self.dispatch_bound(
                    "gated_ffn",
                    (kernel, bytes),
                    &params,
                    &bindings,
                    workgroups,
                    n,
                )?;
            }
        }
        Ok(out)
    }
}

/// The unit kernels' parameters for rows like `matrix`'s, its products still to fill in.
fn unit_params(matrix: &RowMatrix) -> Vec<u32> {
    let unit_values = matrix.quant.matvec_unit().map_or(1, |(_, v)| v);
    let mut params = vec![0; PARAMS_WORDS];
    params[0] = (matrix.row_len / unit_values) as u32;
    params[1] = (matrix.row_len / 4) as u32;
    params
}
