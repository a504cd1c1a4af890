//! Q6_K weights in the layout the CUDA kernels read them in.
//!
//! A GGUF Q6_K block is 210 bytes, `[ql 128][qh 64][scales 16][d 2]`, so the blocks of a
//! row lie only 2-byte aligned, and a kernel has to build every word of them out of two
//! aligned loads: the decoding mat-vec took 13 load instructions per 32 weights (Q4_K's
//! 144-byte blocks take 2) and read DRAM at 36 – 48% of its peak against Q4_K's 50 – 59%
//! (docs/benchmarks.md). On upload each block's first 208 bytes keep their order and lie one
//! after another, 16-byte aligned (208 = 13 × 16), and the blocks' f16 scales `d` follow the
//! last block in a plane of their own, in the same block order: as many bytes as the file's,
//! with no padding. Row r's blocks then start at `r · 208 · (k / 256)` and its scales at
//! `m · 208 · (k / 256) + r · 2 · (k / 256)` (`Row` in `kernels/weight_row.cuh`).

use plumb_gguf::GgmlType;

/// Bytes of a GGUF Q6_K block.
const BLOCK_BYTES: usize = 210;
/// Bytes of a block on the device: its quants and sub-block scales, without `d`.
pub(crate) const QUANT_BYTES: usize = 208;

const _: () = assert!(QUANT_BYTES.is_multiple_of(16));

/// The device layout of `blocks`, the GGUF bytes of a Q6_K tensor; an error naming the
/// problem unless they are whole blocks.
pub(crate) fn to_device_layout(blocks: &[u8]) -> Result<Vec<u8>, String> {
    debug_assert_eq!(GgmlType::Q6_K.block_bytes(), BLOCK_BYTES);
    if !blocks.len().is_multiple_of(BLOCK_BYTES) {
        return Err(format!(
            "{} bytes of Q6_K data are no whole number of {BLOCK_BYTES}-byte blocks",
            blocks.len()
        ));
    }
    let n = blocks.len() / BLOCK_BYTES;
    let mut out = vec![0u8; blocks.len()];
    let (quants, scales) = out.split_at_mut(n * QUANT_BYTES);
    for ((block, q), d) in blocks
        .chunks_exact(BLOCK_BYTES)
        .zip(quants.chunks_exact_mut(QUANT_BYTES))
        .zip(scales.chunks_exact_mut(2))
    {
        q.copy_from_slice(&block[..QUANT_BYTES]);
        d.copy_from_slice(&block[QUANT_BYTES..]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GGUF blocks back from the device layout.
    fn to_gguf_layout(device: &[u8]) -> Vec<u8> {
        let n = device.len() / BLOCK_BYTES;
        let (quants, scales) = device.split_at(n * QUANT_BYTES);
        quants
            .chunks_exact(QUANT_BYTES)
            .zip(scales.chunks_exact(2))
            .flat_map(|(q, d)| q.iter().chain(d).copied())
            .collect()
    }

    #[test]
    fn quantized_rows_round_trip_and_keep_their_bytes() {
        // 3 rows of 3 super-blocks, from the quantizer, so that every field holds real data.
        let values: Vec<f32> = (0..9 * 256)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 97.0)
            .collect();
        let gguf = plumb_ggml::quantize_row_to_vec(GgmlType::Q6_K, &values).unwrap();
        assert_eq!(gguf.len(), 9 * BLOCK_BYTES);
        let device = to_device_layout(&gguf).unwrap();
        assert_eq!(device.len(), gguf.len());
        assert_eq!(to_gguf_layout(&device), gguf);
        for b in 0..9 {
            let block = &gguf[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
            // ql, qh and the scales at 208 b, 16-byte aligned; d in the plane after all blocks.
            assert_eq!(&device[b * 208..b * 208 + 208], &block[..208], "block {b}");
            assert_eq!(&device[9 * 208 + 2 * b..9 * 208 + 2 * b + 2], &block[208..]);
        }
    }

    #[test]
    fn each_byte_lands_where_the_kernels_read_it() {
        // Block b's byte i holds a value of its own (mod 251, which no block size divides).
        let n = 5;
        let gguf: Vec<u8> = (0..n * BLOCK_BYTES).map(|i| (i % 251) as u8).collect();
        let device = to_device_layout(&gguf).unwrap();
        for b in 0..n {
            for i in 0..BLOCK_BYTES {
                let at = match i < QUANT_BYTES {
                    true => b * QUANT_BYTES + i,
                    false => n * QUANT_BYTES + 2 * b + (i - QUANT_BYTES),
                };
                assert_eq!(device[at], gguf[b * BLOCK_BYTES + i], "block {b}, byte {i}");
            }
        }
    }

    #[test]
    fn no_blocks_make_no_bytes() {
        assert_eq!(to_device_layout(&[]).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn a_partial_block_is_an_error() {
        let e = to_device_layout(&[0u8; 2 * BLOCK_BYTES + 4]).unwrap_err();
        assert!(e.contains("424 bytes") && e.contains("210-byte"), "{e}");
    }
}
