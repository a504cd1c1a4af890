// The mat-vec kernels' inner step, per weight type: `dot_TYPE(rows, g, xb, acc)` adds, for
// each of ROWS rows whose first bytes are at `rows`, the product of the row's value group
// `g` with the same values of the activation row whose first vec4 is `x[xb]`. A group is
// what shares its scales: 64 values (two sub-blocks) of Q4_K and Q5_K, 64 values (one l-half
// of a 128-value half, four scales) of Q6_K, one 32-value block of the others, and four
// values of the float types. Each reads its scales once per group and each activation vec4
// once for all ROWS rows; the integer parts are summed before they are scaled. The host
// passes the group count of a row (`Quant::matvec_group`).
//
// ROWS and `dq4` are defined by the host in the kernel's prelude.

// The weights, as words: blocks of some types start anywhere in a word (`weight_bytes.wgsl`).
@group(0) @binding(1) var<storage, read> w: array<u32>;

// Groups of four values: any type, through its `dq4` (the float types' only path).
fn dot_dq4(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    let xv = x[xb + g];
    for (var r = 0u; r < ROWS; r++) {
        (*acc)[r] += dot(dq4(rows[r], g), xv);
    }
}

// A 32-value block through `dq4` eight times: Q4_1, Q5_0 and Q5_1, whose one scale is a
// cheap half to reread.
fn dot_dq4_block32(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    for (var i = 0u; i < 8u; i++) {
        let xv = x[xb + 8u * g + i];
        for (var r = 0u; r < ROWS; r++) {
            (*acc)[r] += dot(dq4(rows[r], 8u * g + i), xv);
        }
    }
}

// Q4_0: d, then 16 bytes whose low nibbles are values 0..15 and high nibbles 16..31;
// Σ (q − 8)·d·x = d·(Σ q·x − 8·Σ x).
fn dot_q4_0(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    var qx: array<f32, ROWS>;
    var sx = 0.0;
    for (var i = 0u; i < 4u; i++) {
        let lo_x = x[xb + 8u * g + i];
        let hi_x = x[xb + 8u * g + 4u + i];
        sx += dot(lo_x + hi_x, vec4<f32>(1.0));
        for (var r = 0u; r < ROWS; r++) {
            let q = word_at(rows[r] + g * 18u + 2u + 4u * i);
            qx[r] += dot(vec4<f32>(bytes4(q) & vec4<u32>(15u)), lo_x)
                + dot(vec4<f32>(bytes4(q >> 4u) & vec4<u32>(15u)), hi_x);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        (*acc)[r] += f16_at(rows[r] + g * 18u) * (qx[r] - 8.0 * sx);
    }
}

// Q8_0: d, then 32 signed bytes.
fn dot_q8_0(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    var qx: array<f32, ROWS>;
    for (var i = 0u; i < 8u; i++) {
        let xv = x[xb + 8u * g + i];
        for (var r = 0u; r < ROWS; r++) {
            qx[r] += dot(signed_bytes4(word_at(rows[r] + g * 34u + 2u + 4u * i)), xv);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        (*acc)[r] += f16_at(rows[r] + g * 34u) * qx[r];
    }
}

// Q4_K and Q5_K: group g is sub-blocks 2p and 2p + 1 (p = g % 4) of super-block g / 4, the
// low and the high nibbles of the same 32 bytes. A sub-block's values are d·sc·q − dmin·m:
// its sum is d·sc·Σ q·x − dmin·m·Σ x. `qs` and `qh` are the offsets of the nibbles and the
// fifth bits in a super-block of `block` bytes (Q4_K has no fifth bits: qh = 0).
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
    let sb = (g >> 2u) * block;
    var lo_qx: array<f32, ROWS>;
    var hi_qx: array<f32, ROWS>;
    var lo_sx = 0.0;
    var hi_sx = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let lo_x = x[xb + 16u * g + i];
        let hi_x = x[xb + 16u * g + 8u + i];
        lo_sx += dot(lo_x, vec4<f32>(1.0));
        hi_sx += dot(hi_x, vec4<f32>(1.0));
        for (var r = 0u; r < ROWS; r++) {
            let b = rows[r] + sb;
            let q = word_at(b + qs + 32u * p + 4u * i);
            var lo = bytes4(q) & vec4<u32>(15u);
            var hi = bytes4(q >> 4u) & vec4<u32>(15u);
            if (qh != 0u) {
                let h = word_at(b + qh + 4u * i) >> (2u * p);
                lo |= (bytes4(h) & vec4<u32>(1u)) << vec4<u32>(4u);
                hi |= (bytes4(h >> 1u) & vec4<u32>(1u)) << vec4<u32>(4u);
            }
            lo_qx[r] += dot(vec4<f32>(lo), lo_x);
            hi_qx[r] += dot(vec4<f32>(hi), hi_x);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let b = rows[r] + sb;
        let dm = unpack2x16float(word_at(b));
        let lo_sm = vec2<f32>(scale_min_k4(b + 4u, 2u * p));
        let hi_sm = vec2<f32>(scale_min_k4(b + 4u, 2u * p + 1u));
        (*acc)[r] += dm.x * (lo_sm.x * lo_qx[r] + hi_sm.x * hi_qx[r])
            - dm.y * (lo_sm.y * lo_sx + hi_sm.y * hi_sx);
    }
}

fn dot_q4_k(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    dot_k_quant(rows, g, xb, acc, 144u, 16u, 0u);
}

fn dot_q5_k(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    dot_k_quant(rows, g, xb, acc, 176u, 48u, 16u);
}

// Q6_K: group g is half h = (g / 2) % 2 of super-block g / 4, byte range l = 16j..16j + 15
// (j = g % 2) of it, for all four k: values 128h + 32k + 16j + i (i = 0..15). Their low
// nibbles are in bytes 64h + 16j + i (k = 0, 2) and 64h + 32 + 16j + i (k = 1, 3), their
// high bit pairs at bits 2k of byte 128 + 32h + 16j + i, their scales at 192 + 8h + j + 2k.
fn dot_q6_k(rows: array<u32, ROWS>, g: u32, xb: u32, acc: ptr<function, array<f32, ROWS>>) {
    let h = (g >> 1u) & 1u;
    let j = g & 1u;
    let sb = (g >> 2u) * 210u;
    let xv = xb + (g >> 2u) * 64u + 32u * h + 4u * j;
    var qx: array<vec4<f32>, ROWS>;
    for (var i = 0u; i < 4u; i++) {
        let x0 = x[xv + i];
        let x1 = x[xv + 8u + i];
        let x2 = x[xv + 16u + i];
        let x3 = x[xv + 24u + i];
        for (var r = 0u; r < ROWS; r++) {
            let b = rows[r] + sb;
            let a = word_at(b + 64u * h + 16u * j + 4u * i);
            let c = word_at(b + 64u * h + 32u + 16u * j + 4u * i);
            let hb = word_at(b + 128u + 32u * h + 16u * j + 4u * i);
            let q0 = (bytes4(a) & vec4<u32>(15u)) | ((bytes4(hb) & vec4<u32>(3u)) << vec4<u32>(4u));
            let q1 = (bytes4(c) & vec4<u32>(15u)) | ((bytes4(hb >> 2u) & vec4<u32>(3u)) << vec4<u32>(4u));
            let q2 = (bytes4(a >> 4u) & vec4<u32>(15u)) | ((bytes4(hb >> 4u) & vec4<u32>(3u)) << vec4<u32>(4u));
            let q3 = (bytes4(c >> 4u) & vec4<u32>(15u)) | ((bytes4(hb >> 6u) & vec4<u32>(3u)) << vec4<u32>(4u));
            qx[r] += vec4<f32>(
                dot(vec4<f32>(q0) - 32.0, x0),
                dot(vec4<f32>(q1) - 32.0, x1),
                dot(vec4<f32>(q2) - 32.0, x2),
                dot(vec4<f32>(q3) - 32.0, x3),
            );
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let b = rows[r] + sb;
        let s = b + 192u + 8u * h + j;
        let s01 = word_at(s);
        let s23 = word_at(s + 4u);
        let sc = vec4<f32>(vec4<i32>(
            signed_byte(s01),
            signed_byte(s01 >> 16u),
            signed_byte(s23),
            signed_byte(s23 >> 16u),
        ));
        (*acc)[r] += f16_at(b + 208u) * dot(sc, qx[r]);
    }
}
