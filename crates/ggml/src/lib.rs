//! ggml tensor types: block layouts, dequantization, reference quantization and dot products.
