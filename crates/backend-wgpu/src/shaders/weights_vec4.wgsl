// The weights at binding 1, as 16-byte units: for the types whose blocks are whole units
// (Q4_K's 144 bytes, Q5_K's 176), which the mat-vec kernels read with one 16-byte load per
// unit instead of four 4-byte ones.

@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;

fn w_word(i: u32) -> u32 {
    return w[i >> 2u][i & 3u];
}
