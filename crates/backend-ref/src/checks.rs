//! The argument checks every backend makes before an op, so that a bad shape gives an
//! error naming the backend, the op and the problem instead of a panic inside a kernel.

use plumb_ggml::KernelError;
use plumb_model::{
    Activations, AttentionStep, BlockCopy, BlockTables, LayerKv, ModelError, PassInputs, Result,
    Rope, TokenPos,
};

/// Checks on behalf of one backend, whose name goes into every error.
#[derive(Debug, Clone, Copy)]
pub struct Checks {
    pub backend: &'static str,
}

impl Checks {
    pub fn error(&self, op: &'static str, message: impl Into<String>) -> ModelError {
        ModelError::Backend {
            backend: self.backend,
            op,
            message: message.into(),
        }
    }

    pub fn kernel_error(&self, op: &'static str) -> impl Fn(KernelError) -> ModelError + '_ {
        move |e| self.error(op, e.to_string())
    }

    /// Fails unless `x` is `expected` wide.
    pub fn width(
        &self,
        op: &'static str,
        x: &impl Activations,
        expected: usize,
        what: &str,
    ) -> Result<()> {
        if x.width() != expected {
            return Err(self.error(
                op,
                format!("input is {} wide, {what} needs {expected}", x.width()),
            ));
        }
        Ok(())
    }

    pub fn same_shape(
        &self,
        op: &'static str,
        a: &impl Activations,
        b: &impl Activations,
    ) -> Result<()> {
        if (a.n_tokens(), a.width()) != (b.n_tokens(), b.width()) {
            return Err(self.error(
                op,
                format!(
                    "shapes differ: [{} × {}] and [{} × {}]",
                    a.n_tokens(),
                    a.width(),
                    b.n_tokens(),
                    b.width()
                ),
            ));
        }
        Ok(())
    }

    pub fn embed_ids(&self, table: &str, n_rows: usize, tokens: &[u32]) -> Result<()> {
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= n_rows) {
            return Err(self.error("embed", format!("token {bad} is not a row of {table:?}")));
        }
        Ok(())
    }

    /// Checks that host values fill a `[n_tokens × width]` tensor.
    pub fn host_values(&self, n_tokens: usize, width: usize, values: &[f32]) -> Result<()> {
        if n_tokens.checked_mul(width) != Some(values.len()) {
            return Err(self.error(
                "upload",
                format!("{} values for [{n_tokens} × {width}]", values.len()),
            ));
        }
        Ok(())
    }

    pub fn norm_groups(&self, x: &impl Activations, weight_len: usize) -> Result<()> {
        if weight_len == 0 || !x.width().is_multiple_of(weight_len) {
            return Err(self.error(
                "rms_norm",
                format!(
                    "rows of {} do not split into groups of {weight_len}",
                    x.width()
                ),
            ));
        }
        Ok(())
    }

    pub fn rope(
        &self,
        x: &impl Activations,
        head_dim: usize,
        positions: &[usize],
        rope: &Rope,
    ) -> Result<()> {
        if head_dim == 0 || !x.width().is_multiple_of(head_dim) || rope.n_rot > head_dim {
            return Err(self.error(
                "rope",
                format!(
                    "rows of {} are not whole heads of {head_dim} with {} rotated dimensions",
                    x.width(),
                    rope.n_rot
                ),
            ));
        }
        if positions.len() != x.n_tokens() {
            return Err(self.error(
                "rope",
                format!("{} positions for {} tokens", positions.len(), x.n_tokens()),
            ));
        }
        Ok(())
    }

    /// The shape of layer `layer` of the cache, or an error naming the op.
    fn layer<'l>(
        &self,
        op: &'static str,
        layers: &[&'l LayerKv],
        layer: usize,
    ) -> Result<&'l LayerKv> {
        layers.get(layer).copied().ok_or_else(|| {
            self.error(
                op,
                format!("layer {layer} of a {}-layer cache", layers.len()),
            )
        })
    }

    /// Checks K and V rows to store in layer `layer` at the pass's slots.
    pub fn store_kv(
        &self,
        k: &impl Activations,
        v: &impl Activations,
        layers: &[&LayerKv],
        layer: usize,
        pass: &PassInputs<'_>,
    ) -> Result<()> {
        let shape = self.layer("store_kv", layers, layer)?;
        self.width("store_kv", k, shape.k_width(), "K")?;
        self.width("store_kv", v, shape.v_width(), "V")?;
        let n = pass.n_tokens();
        if k.n_tokens() != n || v.n_tokens() != n {
            return Err(self.error(
                "store_kv",
                format!(
                    "K, V and the batch have {}, {} and {n} tokens",
                    k.n_tokens(),
                    v.n_tokens()
                ),
            ));
        }
        let slots = pass.kv.layer(layer).slots;
        if slots.len() != n {
            return Err(self.error("store_kv", format!("{} slots for {n} tokens", slots.len())));
        }
        if let Some(&bad) = slots.iter().find(|&&s| s >= shape.n_slots) {
            return Err(self.error(
                "store_kv",
                format!("slot {bad} of a layer of {}", shape.n_slots),
            ));
        }
        Ok(())
    }

    /// Checks an attention step against the cache's layers and the pass's block tables.
    pub fn attention(
        &self,
        q: &impl Activations,
        layers: &[&LayerKv],
        step: &AttentionStep,
        pass: &PassInputs<'_>,
    ) -> Result<()> {
        let shape = self.layer("attention", layers, step.layer)?;
        if step.n_head == 0 || !step.n_head.is_multiple_of(shape.n_head_kv) {
            return Err(self.error(
                "attention",
                format!(
                    "{} query heads cannot share {} KV heads",
                    step.n_head, shape.n_head_kv
                ),
            ));
        }
        self.width("attention", q, step.n_head * shape.head_dim_k, "Q")?;
        if q.n_tokens() != pass.n_tokens() {
            return Err(self.error(
                "attention",
                format!(
                    "Q and the batch have {} and {} tokens",
                    q.n_tokens(),
                    pass.n_tokens()
                ),
            ));
        }
        self.block_tables(shape, pass.places, pass.kv.layer(step.layer))
    }

    /// Checks that every slot the tokens read through their block tables is in the layer's
    /// storage.
    fn block_tables(
        &self,
        shape: &LayerKv,
        places: &[TokenPos],
        tables: BlockTables<'_>,
    ) -> Result<()> {
        let bs = tables.block_size();
        let n_blocks = shape.n_slots / bs;
        // One check per run of a sequence's tokens, over the union of what they see (a
        // range: their positions are consecutive), not one per token: a prompt chunk's
        // tokens see nearly the same blocks.
        for run in places.chunk_by(|a, b| a.seq == b.seq) {
            let seen = run
                .iter()
                .map(|t| shape.visible(t.pos))
                .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
                .expect("chunks are never empty");
            let seq = run[0].seq;
            let table = tables.of(seq).blocks;
            let blocks = seen.start / bs..seen.end.div_ceil(bs);
            if table.len() < blocks.end || table[blocks].iter().any(|&b| b as usize >= n_blocks) {
                return Err(self.error(
                    "attention",
                    format!(
                        "the block table of sequence {seq} does not hold positions {seen:?} \
                         in a layer of {n_blocks} blocks"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks that block copies stay within the groups' layers.
    pub fn block_copies(&self, layers: &[&LayerKv], copies: &[BlockCopy]) -> Result<()> {
        for c in copies {
            let mut group = layers.iter().filter(|l| l.group == c.group).peekable();
            let end = c.src.max(c.dst) + c.len;
            // Overlapping ranges would make the copy's result depend on its order.
            let overlap = c.src < c.dst + c.len && c.dst < c.src + c.len;
            if group.peek().is_none() || group.any(|l| end > l.n_slots) || overlap {
                return Err(self.error(
                    "copy_kv_blocks",
                    format!(
                        "slots {}..{} to {}..{} of group {} are not two separate ranges in \
                         the cache",
                        c.src,
                        c.src + c.len,
                        c.dst,
                        c.dst + c.len,
                        c.group
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn rows(&self, x: &impl Activations, rows: &[usize]) -> Result<()> {
        if let Some(&bad) = rows.iter().find(|&&r| r >= x.n_tokens()) {
            return Err(self.error("output_rows", format!("row {bad} of {}", x.n_tokens())));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECKS: Checks = Checks { backend: "test" };

    /// Runs the slot checks for `positions` of sequence 0 with `table`, in a layer of two
    /// blocks of 4 slots with a window of `window`.
    fn check(window: Option<usize>, positions: &[usize], table: &[u32]) -> Result<()> {
        let mut shape = LayerKv::new(1, 4, 4, window);
        shape.n_slots = 8;
        let tokens: Vec<TokenPos> = positions
            .iter()
            .map(|&pos| TokenPos { seq: 0, pos })
            .collect();
        let slots = vec![0; tokens.len()];
        let tables = [table.to_vec()];
        CHECKS.block_tables(&shape, &tokens, BlockTables::new(4, &slots, &tables))
    }

    #[test]
    fn block_tables_must_hold_every_position_a_run_of_tokens_sees() {
        assert!(check(None, &[4, 5, 6], &[1, 0]).is_ok());
        // Position 4 needs a second block; block 2 is past the layer's two.
        assert!(check(None, &[2, 3], &[0]).is_ok());
        assert!(check(None, &[2, 3, 4], &[0]).is_err());
        assert!(check(None, &[0, 1], &[2]).is_err());
        // With a window of 2, positions 5..7 see 4..7: block 0 is never read.
        assert!(check(Some(2), &[5, 6, 7], &[9, 1]).is_ok());
        assert!(check(Some(2), &[4, 5], &[9, 9]).is_err());
    }
}
