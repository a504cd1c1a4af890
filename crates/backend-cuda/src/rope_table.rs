//! The per-pair inverse frequencies of each RoPE the model uses, on the device: computed once
//! on the host in f64, as [`Rope::theta`] does, so that the kernel's angle is one product.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream};
use plumb_model::{Result, Rope};

use crate::error::{error, failed};

/// A model has one or two RoPEs (gemma3: local and global layers), so a short list.
#[derive(Default)]
pub(crate) struct RopeTables {
    tables: Mutex<Vec<(Rope, Arc<CudaSlice<f64>>)>>,
}

impl RopeTables {
    /// `inv_freq[i]`: pair `i` turns by `pos · inv_freq[i]` radians at position `pos`.
    pub fn get(&self, stream: &Arc<CudaStream>, rope: &Rope) -> Result<Arc<CudaSlice<f64>>> {
        let mut tables = self
            .tables
            .lock()
            .map_err(|_| error("rope", "the RoPE table cache was poisoned by a panic"))?;
        if let Some((_, table)) = tables.iter().find(|(r, _)| r == rope) {
            return Ok(Arc::clone(table));
        }
        // The kernels rotate by unit vectors; YaRN's and attn_factor's magnitude is not there.
        if rope.magnitude() != 1.0 {
            return Err(error(
                "rope",
                format!(
                    "a RoPE that scales the rotation by {} (YaRN, rope.scaling.attn_factor) is \
                     not implemented on CUDA yet",
                    rope.magnitude()
                ),
            ));
        }
        // theta(1, i): the angle is proportional to the position, YaRN or not. The caller
        // rotates at least one pair, so the table is never empty.
        let inv_freq: Vec<f64> = (0..rope.n_rot / 2).map(|i| rope.theta(1, i)).collect();
        let table = Arc::new(stream.clone_htod(&inv_freq).map_err(failed("rope"))?);
        tables.push((rope.clone(), Arc::clone(&table)));
        Ok(table)
    }
}
