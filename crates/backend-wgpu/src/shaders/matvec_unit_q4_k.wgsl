// The Q4_K unit of `matvec_units.wgsl`: 16 bytes of a super-block's nibbles. A super-block
// (144 bytes: d and dmin, 12 bytes of scales, 128 nibble bytes) is nine 16-byte units, its
// header and eight of nibbles, and rows of whole super-blocks start on 16 bytes: `w` is bound
// as vec4<u32>, and unit u of a row is nibble unit u % 8 of super-block u / 8. Nibble unit
// 2c + h holds, in its low nibbles, values 16h..16h + 15 of sub-block 2c, and in its high
// nibbles the same values of sub-block 2c + 1; eight invocations read a super-block's 128
// nibble bytes side by side, and its header (the same 16 bytes for all eight) once each.
// A sub-block's values are d·sc·q − dmin·m: its sum is d·sc·Σ q·x − dmin·m·Σ x.

@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;

// Sub-block j's 6-bit scale and min, from a super-block's header (d and dmin, then the 12
// scale bytes as three words): those of j < 4 are the low six bits of bytes j and j + 4, those
// of j ≥ 4 the nibbles of byte j + 4 with the top two bits of bytes j − 4 and j above them.
fn scale_min_q4_k(header: vec4<u32>, j: u32) -> vec2<f32> {
    let shift = (j & 3u) * 8u;
    let a = (header.y >> shift) & 0xffu;
    let b = (header.z >> shift) & 0xffu;
    let c = (header.w >> shift) & 0xffu;
    let low = vec2<u32>(a & 63u, b & 63u);
    let high = vec2<u32>((c & 15u) | ((a >> 6u) << 4u), (c >> 4u) | ((b >> 6u) << 4u));
    return vec2<f32>(select(low, high, j >= 4u));
}

fn dot_unit(rows: array<u32, ROWS>, u: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    let sb = u >> 3u;
    let n = u & 7u;
    let c = n >> 1u;
    // The activation vec4s of the unit's values: 16(n & 1) into sub-blocks 2c and 2c + 1.
    let lo_at = xb + 64u * sb + 16u * c + 4u * (n & 1u);
    var lo_x: array<vec4<f32>, 4>;
    var hi_x: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i++) {
        lo_x[i] = x[lo_at + i];
        hi_x[i] = x[lo_at + 8u + i];
    }
    let lo_sx = dot(lo_x[0] + lo_x[1] + lo_x[2] + lo_x[3], vec4<f32>(1.0));
    let hi_sx = dot(hi_x[0] + hi_x[1] + hi_x[2] + hi_x[3], vec4<f32>(1.0));
    for (var r = 0u; r < ROWS; r++) {
        let block = (rows[r] >> 4u) + 9u * sb;
        let header = w[block];
        let q = w[block + 1u + n];
        var lo_qx = 0.0;
        var hi_qx = 0.0;
        for (var i = 0u; i < 4u; i++) {
            lo_qx += dot(vec4<f32>(unpack4xU8(q[i] & 0x0f0f0f0fu)), lo_x[i]);
            hi_qx += dot(vec4<f32>(unpack4xU8((q[i] >> 4u) & 0x0f0f0f0fu)), hi_x[i]);
        }
        let dm = unpack2x16float(header.x);
        let lo_sm = scale_min_q4_k(header, 2u * c);
        let hi_sm = scale_min_q4_k(header, 2u * c + 1u);
        (*acc)[r] += dm.x * (lo_sm.x * lo_qx + hi_sm.x * hi_qx)
            - dm.y * (lo_sm.y * lo_sx + hi_sm.y * hi_sx);
    }
}

