// The mat-vec kernels' inner step for Q4_K and Q5_K (`matvec_dot.wgsl` has the others'), on
// weights bound as 16-byte units (`weights_vec4.wgsl`).

// Q4_K and Q5_K, whose super-blocks are whole 16-byte units (`weights_vec4.wgsl`): group g
// is unit j = g % 8 of super-block g / 8's 128 nibble bytes, bytes 32p + 16h .. 32p + 16h + 15
// (p = j / 2, h = j % 2): their low nibbles are values 64p + 16h + i (i = 0..15) of sub-block
// 2p, their high nibbles values 64p + 32 + 16h + i of sub-block 2p + 1. A sub-block's values
// are d·sc·q − dmin·m: its sum is d·sc·Σ q·x − dmin·m·Σ x. Each row takes one 16-byte load of
// the super-block's head (d, dmin, the 12 bytes of scales) and one of the nibbles (and for
// Q5_K one of the fifth bits, bits 2p and 2p + 1 of bytes 16h + i). `block`, `qs` and `qh` are
// the units of a super-block, of its head to the nibbles and to the fifth bits (Q4_K has
// none: qh = 0).
fn dot_k_quant(
    rows: array<u32, ROWS>,
    g: u32,
    xb: u32,
    acc: ptr<function, array<f32, ROWS>>,
    block: u32,
    qs: u32,
    qh: u32,
) {
    let j = g & 7u;
    let p = j >> 1u;
    let h = j & 1u;
    let sb = g >> 3u;
    let xl = xb + 64u * sb + 16u * p + 4u * h;
    var lo_x: array<vec4<f32>, 4>;
    var hi_x: array<vec4<f32>, 4>;
    var lo_sx = 0.0;
    var hi_sx = 0.0;
    for (var i = 0u; i < 4u; i++) {
        lo_x[i] = x[xl + i];
        hi_x[i] = x[xl + 8u + i];
        lo_sx += dot(lo_x[i], vec4<f32>(1.0));
        hi_sx += dot(hi_x[i], vec4<f32>(1.0));
    }
    for (var r = 0u; r < ROWS; r++) {
        let b = (rows[r] >> 4u) + sb * block;
        let head = w[b];
        let q = w[b + qs + j];
        var high = vec4<u32>(0u);
        if (qh != 0u) {
            high = w[b + qh + h] >> vec4<u32>(2u * p);
        }
        var lo_qx = 0.0;
        var hi_qx = 0.0;
        for (var i = 0u; i < 4u; i++) {
            let lo = (bytes4(q[i]) & vec4<u32>(15u)) | ((bytes4(high[i]) & vec4<u32>(1u)) << vec4<u32>(4u));
            let hi = (bytes4(q[i] >> 4u) & vec4<u32>(15u)) | ((bytes4(high[i] >> 1u) & vec4<u32>(1u)) << vec4<u32>(4u));
            lo_qx += dot(vec4<f32>(lo), lo_x[i]);
            hi_qx += dot(vec4<f32>(hi), hi_x[i]);
        }
        let dm = unpack2x16float(head.x);
        let lo_sm = k_scale_min(head.yzw, 2u * p);
        let hi_sm = k_scale_min(head.yzw, 2u * p + 1u);
        (*acc)[r] += dm.x * (lo_sm.x * lo_qx + hi_sm.x * hi_qx)
            - dm.y * (lo_sm.y * lo_sx + hi_sm.y * hi_sx);
    }
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
