//! RoPE angles shared by the layers of a forward pass.
//!
//! Every layer rotates its queries and keys by the same angles: those of the batch's positions
//! under the layer's RoPE parameters (gemma3 alternates two bases). Computing them in f64 once
//! per row and per tensor cost a few percent of a prompt's time, so the backend keeps the
//! angles of the last few (parameters, positions) it saw and reuses them.

use std::sync::{Arc, Mutex};

use plumb_model::Rope;

/// Parameter sets kept: gemma3 needs two per forward pass.
const KEPT: usize = 4;

/// `(sin θ, cos θ)` of every pair of every row, `[row][pair]`, rounded to f32.
pub type Angles = Arc<[(f32, f32)]>;

#[derive(Default)]
pub struct RopeAngles {
    tables: Mutex<Vec<Table>>,
}

struct Table {
    rope: Rope,
    positions: Vec<usize>,
    angles: Angles,
}

impl RopeAngles {
    /// The angles of `positions` under `rope`, computed now unless they are kept.
    pub fn get(&self, rope: &Rope, positions: &[usize]) -> Angles {
        let mut tables = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = tables
            .iter()
            .position(|t| t.rope == *rope && t.positions == positions)
        {
            // Most recently used last, so that the oldest is the one replaced.
            let table = tables.remove(i);
            let angles = Arc::clone(&table.angles);
            tables.push(table);
            return angles;
        }
        let n_pairs = rope.n_rot / 2;
        let angles: Angles = positions
            .iter()
            .flat_map(|&pos| {
                (0..n_pairs).map(move |i| {
                    let (sin, cos) = rope.sin_cos(pos, i);
                    (sin as f32, cos as f32)
                })
            })
            .collect();
        if tables.len() == KEPT {
            tables.remove(0);
        }
        tables.push(Table {
            rope: rope.clone(),
            positions: positions.to_vec(),
            angles: Arc::clone(&angles),
        });
        angles
    }
}
