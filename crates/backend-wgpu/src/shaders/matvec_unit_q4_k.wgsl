// The Q4_K unit of the unit kernels (`matvec_units.wgsl`, `matvec_units_gated.wgsl`): 16
// bytes of a super-block's nibbles. A super-block (144 bytes: d and dmin, 12 bytes of scales,
// 128 nibble bytes) is nine 16-byte units, its header and eight of nibbles, and rows of whole
// super-blocks start on 16 bytes: the weights are bound as vec4<u32>, and unit u of a row is
// nibble unit u % 8 of super-block u / 8. Nibble unit 2c + h holds, in its low nibbles, values
// 16h..16h + 15 of sub-block 2c, and in its high nibbles the same values of sub-block 2c + 1;
// eight invocations read a super-block's 128 nibble bytes side by side, and its header (the
// same 16 bytes for all eight) once each.
//
// A sub-block's values are d·sc·q − dmin·m, and the activations are blocks of 16 bytes
// (`quantize_x16.wgsl`): a block's part of a row's sum is d·sc·dx·Σ q·qx − dmin·m·dx·Σ qx.

const UNIT_VALUES: u32 = 32u;

// The activations of a unit, quantized once for all the rows that take it: the 16 values of
// sub-block 2c its low nibbles multiply, and the 16 of sub-block 2c + 1 its high ones do.
struct UnitX {
    lo: X16,
    hi: X16,
}

// Unit u's activations, in the token whose first vec4 is x[xb].
fn unit_x(u: u32, xb: u32) -> UnitX {
    let n = u & 7u;
    let lo = xb + 64u * (u >> 3u) + 16u * (n >> 1u) + 4u * (n & 1u);
    let hi = lo + 8u;
    return UnitX(
        quantize_x16(x[lo], x[lo + 1u], x[lo + 2u], x[lo + 3u]),
        quantize_x16(x[hi], x[hi + 1u], x[hi + 2u], x[hi + 3u]),
    );
}

// Where unit u of the row whose first 16 bytes are vec4 `row` of its weights has its
// super-block's header, and its nibbles.
fn unit_header_at(row: u32, u: u32) -> u32 {
    return row + 9u * (u >> 3u);
}

fn unit_nibbles_at(row: u32, u: u32) -> u32 {
    return row + 9u * (u >> 3u) + 1u + (u & 7u);
}

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

// Unit u of a row, its super-block's `header` and its `nibbles`, times its activations.
fn unit_dot(header: vec4<u32>, nibbles: vec4<u32>, u: u32, ux: UnitX) -> f32 {
    let lo = nibbles & vec4<u32>(0x0f0f0f0fu);
    let hi = (nibbles >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
    let lo_qx = dot4I8Packed(lo.x, ux.lo.q.x) + dot4I8Packed(lo.y, ux.lo.q.y)
        + dot4I8Packed(lo.z, ux.lo.q.z) + dot4I8Packed(lo.w, ux.lo.q.w);
    let hi_qx = dot4I8Packed(hi.x, ux.hi.q.x) + dot4I8Packed(hi.y, ux.hi.q.y)
        + dot4I8Packed(hi.z, ux.hi.q.z) + dot4I8Packed(hi.w, ux.hi.q.w);
    let c = (u & 7u) >> 1u;
    let dm = unpack2x16float(header.x);
    let lo_sm = scale_min_q4_k(header, 2u * c);
    let hi_sm = scale_min_q4_k(header, 2u * c + 1u);
    return dm.x * (lo_sm.x * ux.lo.d * f32(lo_qx) + hi_sm.x * ux.hi.d * f32(hi_qx))
        - dm.y * (lo_sm.y * ux.lo.s + hi_sm.y * ux.hi.s);
}
