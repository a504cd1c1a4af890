// Reads of the weight words `w` (a GGUF tensor's bytes as stored, little-endian, padded to
// whole words) at any byte offset: blocks of 18, 22, 34 or 210 bytes start anywhere in a
// word. Every field of every block type starts at an even offset, so a half never straddles
// two words.

fn byte_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 3u) * 8u)) & 0xffu;
}

fn half_at(off: u32) -> u32 {
    return (w[off >> 2u] >> ((off & 2u) * 8u)) & 0xffffu;
}

fn f16_at(off: u32) -> f32 {
    return unpack2x16float(half_at(off)).x;
}

// The four bytes at `off`, as one little-endian word.
fn word_at(off: u32) -> u32 {
    let shift = (off & 3u) * 8u;
    let lo = w[off >> 2u];
    if (shift == 0u) {
        return lo;
    }
    return (lo >> shift) | (w[(off >> 2u) + 1u] << (32u - shift));
}

// The four bytes of a word, unsigned, lowest first.
fn bytes4(v: u32) -> vec4<u32> {
    return vec4<u32>(v & 0xffu, (v >> 8u) & 0xffu, (v >> 16u) & 0xffu, v >> 24u);
}

// The four bytes of a word as signed 8-bit integers, lowest first.
fn signed_bytes4(v: u32) -> vec4<f32> {
    let shifted = vec4<u32>(v << 24u, v << 16u, v << 8u, v);
    return vec4<f32>(bitcast<vec4<i32>>(shifted) >> vec4<u32>(24u));
}

fn signed_byte(v: u32) -> i32 {
    return bitcast<i32>(v << 24u) >> 24u;
}
