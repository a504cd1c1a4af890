// The mat-vec kernels' inner step for Q4_K and Q5_K (`matvec_dot.wgsl` has the others'), on
// weights bound as 16-byte units (`weights_vec4.wgsl`).

// Q4_K and Q5_K, whose super-blocks are whole 16-byte units (`weights_vec4.wgsl`): group g
// is sub-blocks 2p and 2p + 1 (p = g % 4) of super-block g / 4, the low and the high nibbles
// of the same 32 bytes, two units: unit h holds values 64p + 16h + i (low nibbles) and
// 64p + 32 + 16h + i (high), i = 0..15. A sub-block's values are d·sc·q − dmin·m: its sum is
// d·sc·Σ q·x − dmin·m·Σ x. Every load of a group is issued before any of its arithmetic:
// sixteen activation vec4s, and per row one 16-byte load of the super-block's head (d, dmin,
// the 12 bytes of scales) and two of nibbles (and for Q5_K two of fifth bits, bits 2p and
// 2p + 1 of bytes i). `block`, `qs` and `qh` are the units of a super-block, of its head to
// the nibbles and to the fifth bits (Q4_K has none: qh = 0).
fn dot_k_quant(
    rows: array<u32, ROWS>,
    g: u32,
    xb: u32,
    acc: ptr<function, array<f32, ROWS>>,
    block: u32,
    qs: u32,
    qh: u32,
) {
    let p = g & 3u;
    let sb = g >> 2u;
    let xl = xb + 16u * g;
    // Columns: the activations of units 0 and 1, low and high nibbles.
    let lo0 = mat4x4<f32>(x[xl], x[xl + 1u], x[xl + 2u], x[xl + 3u]);
    let lo1 = mat4x4<f32>(x[xl + 4u], x[xl + 5u], x[xl + 6u], x[xl + 7u]);
    let hi0 = mat4x4<f32>(x[xl + 8u], x[xl + 9u], x[xl + 10u], x[xl + 11u]);
    let hi1 = mat4x4<f32>(x[xl + 12u], x[xl + 13u], x[xl + 14u], x[xl + 15u]);
    let ones = vec4<f32>(1.0);
    let lo_sx = dot((lo0 + lo1) * ones, ones);
    let hi_sx = dot((hi0 + hi1) * ones, ones);
    var heads: array<vec4<u32>, ROWS>;
    var q0: array<vec4<u32>, ROWS>;
    var q1: array<vec4<u32>, ROWS>;
    var h0: array<vec4<u32>, ROWS>;
    var h1: array<vec4<u32>, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        let b = (rows[r] >> 4u) + sb * block;
        heads[r] = w[b];
        q0[r] = w[b + qs + 2u * p];
        q1[r] = w[b + qs + 2u * p + 1u];
        if (qh != 0u) {
            h0[r] = w[b + qh];
            h1[r] = w[b + qh + 1u];
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let lo_qx = nibble_dots(q0[r], h0[r] >> vec4<u32>(2u * p), lo0)
            + nibble_dots(q1[r], h1[r] >> vec4<u32>(2u * p), lo1);
        let hi_qx = nibble_dots(q0[r] >> vec4<u32>(4u), h0[r] >> vec4<u32>(2u * p + 1u), hi0)
            + nibble_dots(q1[r] >> vec4<u32>(4u), h1[r] >> vec4<u32>(2u * p + 1u), hi1);
        let dm = unpack2x16float(heads[r].x);
        let lo_sm = k_scale_min(heads[r].yzw, 2u * p);
        let hi_sm = k_scale_min(heads[r].yzw, 2u * p + 1u);
        (*acc)[r] += dm.x * (lo_sm.x * lo_qx + hi_sm.x * hi_qx)
            - dm.y * (lo_sm.y * lo_sx + hi_sm.y * hi_sx);
    }
}

// Σ over the 16 bytes of `q` of (low nibble + 16 · bit 0 of the same byte of `high`) times
// the activation in the matching place of `xs` (column i: the four bytes of word i).
fn nibble_dots(q: vec4<u32>, high: vec4<u32>, xs: mat4x4<f32>) -> f32 {
    var sum = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let v = (bytes4(q[i]) & vec4<u32>(15u)) | ((bytes4(high[i]) & vec4<u32>(1u)) << vec4<u32>(4u));
        sum += dot(vec4<f32>(v), xs[i]);
    }
    return sum;
}

// Sub-block js's 6-bit scale and min of Q4_K and Q5_K from the 12 scale bytes held in `s`
// (`scale_min_k4` in `dequant.wgsl`, from registers): for js < 4 bytes js and js + 4, low 6
// bits; else the nibbles of byte js + 4 with the top bits of bytes js − 4 and js. Selected
// without a branch: the lanes of a subgroup take different sub-blocks.
fn k_scale_min(s: vec3<u32>, js: u32) -> vec2<f32> {
    let shift = 8u * (js & 3u);
    let a = (s.x >> shift) & 0xffu;
    let b = (s.y >> shift) & 0xffu;
    let c = (s.z >> shift) & 0xffu;
    let low = vec2<u32>(a & 63u, b & 63u);
    let high = vec2<u32>((c & 15u) | ((a >> 6u) << 4u), (c >> 4u) | ((b >> 6u) << 4u));
    return vec2<f32>(select(high, low, js < 4u));
}

fn dot_q4_k(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    dot_k_quant(rows, g, xb, acc, 9u, 1u, 0u);
}

fn dot_q5_k(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    dot_k_quant(rows, g, xb, acc, 11u, 3u, 1u);
}
