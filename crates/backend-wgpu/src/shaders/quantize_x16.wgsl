// Activations as the unit kernels multiply them: each block of 16 consecutive values, from
// the row's start, as 16 signed bytes q = round(v · 127 / amax) (ties to even), amax the
// block's largest magnitude, and their scale d = amax / 127. Products of weights held as small
// integers by q are then integer dot products of four bytes (`dot4I8Packed`: one instruction
// on GPUs that have it), with no conversion of each weight to a float.

struct X16 {
    // The 16 values' bytes, four to a word, in order.
    q: vec4<u32>,
    d: f32,
    // d · Σ q: the block's sum, for the weights' offsets (Q4_K's mins).
    s: f32,
}

// 1.5 · 2^23: a float of that size has a unit in its last place of 1, so adding it rounds to
// an integer (ties to even), and for |v| ≤ 2^22 the sum's low byte is that integer's, as an i8.
const ROUND_TO_INT: f32 = 12582912.0;

fn pack_i8(v: vec4<f32>, inv: f32) -> u32 {
    return pack4xU8(bitcast<vec4<u32>>(fma(v, vec4<f32>(inv), vec4<f32>(ROUND_TO_INT))));
}

fn quantize_x16(a: vec4<f32>, b: vec4<f32>, c: vec4<f32>, e: vec4<f32>) -> X16 {
    let m = max(max(abs(a), abs(b)), max(abs(c), abs(e)));
    let amax = max(max(m.x, m.y), max(m.z, m.w));
    let inv = select(0.0, 127.0 / amax, amax > 0.0);
    let q = vec4<u32>(pack_i8(a, inv), pack_i8(b, inv), pack_i8(c, inv), pack_i8(e, inv));
    let ones = 0x01010101u;
    let sum = dot4I8Packed(q.x, ones) + dot4I8Packed(q.y, ones) + dot4I8Packed(q.z, ones)
        + dot4I8Packed(q.w, ones);
    let d = amax / 127.0;
    return X16(q, d, d * f32(sum));
}
