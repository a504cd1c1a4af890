// Dequantization of four consecutive values of a weight row, for every type the backend
// reads: `dq4_TYPE(row, g)` gives values 4g..4g+3 of the row whose first byte is at `row`.
// Each follows ggml's `dequantize_row_*` (crates/ggml) value for value; four consecutive
// values always share their block's scales. The kernel's `dq4` calls the one of its type.

fn dq4_f32(row: u32, g: u32) -> vec4<f32> {
    let i = (row >> 2u) + 4u * g;
    return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}

fn dq4_f16(row: u32, g: u32) -> vec4<f32> {
    let off = row + 8u * g;
    return vec4<f32>(unpack2x16float(word_at(off)), unpack2x16float(word_at(off + 4u)));
}

fn dq4_bf16(row: u32, g: u32) -> vec4<f32> {
    let off = row + 8u * g;
    let a = word_at(off);
    let b = word_at(off + 4u);
    return bitcast<vec4<f32>>(vec4<u32>(a << 16u, a & 0xffff0000u, b << 16u, b & 0xffff0000u));
}

// The nibbles of four consecutive values of a 32-value block whose 16 nibble bytes start at
// `qs`: values 0..15 are the low nibbles, 16..31 the high ones. `i` is the group (0..7).
fn nibbles4(qs: u32, i: u32) -> vec4<u32> {
    return bytes4(word_at(qs + (i & 3u) * 4u) >> ((i >> 2u) * 4u)) & vec4<u32>(15u);
}

// Value 4i+j's fifth bit, bit 4i+j of `qh`, moved to bit 4.
fn fifth_bits4(qh: u32, i: u32) -> vec4<u32> {
    let h = qh >> (4u * i);
    return (vec4<u32>(h, h >> 1u, h >> 2u, h >> 3u) & vec4<u32>(1u)) << vec4<u32>(4u);
}

// Q4_0: 18 bytes per 32 values: d (f16), 16 nibble bytes; value (q − 8)·d.
fn dq4_q4_0(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 3u) * 18u;
    let q = nibbles4(b + 2u, g & 7u);
    return (vec4<f32>(q) - 8.0) * f16_at(b);
}

// Q4_1: 20 bytes per 32 values: d, m (f16), 16 nibble bytes; value q·d + m.
fn dq4_q4_1(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 3u) * 20u;
    let q = nibbles4(b + 4u, g & 7u);
    return vec4<f32>(q) * f16_at(b) + f16_at(b + 2u);
}

// Q5_0: 22 bytes per 32 values: d (f16), the 32 fifth bits, 16 nibble bytes; value (q − 16)·d.
fn dq4_q5_0(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 3u) * 22u;
    let i = g & 7u;
    let q = nibbles4(b + 6u, i) | fifth_bits4(word_at(b + 2u), i);
    return (vec4<f32>(q) - 16.0) * f16_at(b);
}

// Q5_1: 24 bytes per 32 values: d, m (f16), the 32 fifth bits, 16 nibble bytes; q·d + m.
fn dq4_q5_1(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 3u) * 24u;
    let i = g & 7u;
    let q = nibbles4(b + 8u, i) | fifth_bits4(word_at(b + 4u), i);
    return vec4<f32>(q) * f16_at(b) + f16_at(b + 2u);
}

// Q8_0: 34 bytes per 32 values: d (f16), 32 signed bytes; value q·d.
fn dq4_q8_0(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 3u) * 34u;
    return signed_bytes4(word_at(b + 2u + (g & 7u) * 4u)) * f16_at(b);
}

// The 6-bit scale and min of sub-block `j` (0..7) of a Q4_K/Q5_K super-block, packed in the
// 12 bytes at `s` as ggml's `get_scale_min_k4` reads them.
fn scale_min_k4(s: u32, j: u32) -> vec2<u32> {
    if (j < 4u) {
        return vec2<u32>(byte_at(s + j) & 63u, byte_at(s + j + 4u) & 63u);
    }
    let a = byte_at(s + j + 4u);
    return vec2<u32>(
        (a & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u),
        (a >> 4u) | ((byte_at(s + j) >> 6u) << 4u),
    );
}

// Q4_K: 144 bytes per 256 values: d, dmin (f16), 12 bytes of scales, 128 nibble bytes.
// Value 64p + 32n + l is nibble n of byte 32p + l, in sub-block 2p + n: d·sc·q − dmin·m.
fn dq4_q4_k(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 6u) * 144u;
    let e = (g & 63u) * 4u;
    let p = e >> 6u;
    let n = (e >> 5u) & 1u;
    let l = e & 31u;
    let sm = scale_min_k4(b + 4u, 2u * p + n);
    let d = f16_at(b) * f32(sm.x);
    let m = f16_at(b + 2u) * f32(sm.y);
    let q = bytes4(word_at(b + 16u + 32u * p + l) >> (4u * n)) & vec4<u32>(15u);
    return d * vec4<f32>(q) - m;
}

// Q5_K: 176 bytes per 256 values: d, dmin, 12 bytes of scales, 32 bytes of fifth bits, 128
// nibble bytes. As Q4_K, with value 64p + 32n + l's fifth bit at bit 2p + n of byte l.
fn dq4_q5_k(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 6u) * 176u;
    let e = (g & 63u) * 4u;
    let p = e >> 6u;
    let n = (e >> 5u) & 1u;
    let l = e & 31u;
    let sm = scale_min_k4(b + 4u, 2u * p + n);
    let d = f16_at(b) * f32(sm.x);
    let m = f16_at(b + 2u) * f32(sm.y);
    let lo = bytes4(word_at(b + 48u + 32u * p + l) >> (4u * n)) & vec4<u32>(15u);
    let hi = (bytes4(word_at(b + 16u + l) >> (2u * p + n)) & vec4<u32>(1u)) << vec4<u32>(4u);
    return d * vec4<f32>(lo | hi) - m;
}

// Q6_K: 210 bytes per 256 values: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16
// signed 8-bit scales, d (f16). Value 128h + 32k + l (k = 0..3) takes nibble k / 2 of low
// byte 64h + 32(k % 2) + l, bits 2k..2k+1 of high byte 32h + l, and scale 8h + l/16 + 2k:
// d·sc·(q − 32).
fn dq4_q6_k(row: u32, g: u32) -> vec4<f32> {
    let b = row + (g >> 6u) * 210u;
    let e = (g & 63u) * 4u;
    let h = e >> 7u;
    let k = (e >> 5u) & 3u;
    let l = e & 31u;
    let lo = bytes4(word_at(b + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1u))) & vec4<u32>(15u);
    let hi = bytes4(word_at(b + 128u + 32u * h + l) >> (2u * k)) & vec4<u32>(3u);
    let q = vec4<f32>(bitcast<vec4<i32>>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32));
    let sc = f32(signed_byte(byte_at(b + 192u + 8u * h + (l >> 4u) + 2u * k)));
    return f16_at(b + 208u) * sc * q;
}
