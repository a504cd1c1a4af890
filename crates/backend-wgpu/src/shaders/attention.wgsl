// Causal attention of one query head of one token over the paged f16 cache, with the
// layer's sliding window: a workgroup walks the token's visible positions THREADS at a time
// (each thread scores one position, reading its slot through the sequence's block table),
// and keeps a running maximum and sum of the softmax (the online softmax) so that no
// position's score needs to be kept. Each thread accumulates up to two pairs of the output's
// dimensions, one packed word of V each.

struct Params {
    n_tokens: u32,
    n_head: u32,
    // Query heads per KV head.
    group: u32,
    head_dim_k: u32,
    head_dim_v: u32,
    // 0: no window; else a token sees itself and the window − 1 positions before it.
    window: u32,
    // log2 of the block size.
    block_shift: u32,
    // Entries per sequence in `tables`.
    table_stride: u32,
    // Words of one slot: K and V row widths / 2.
    k_words: u32,
    v_words: u32,
    scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k_cache: array<u32>;
@group(0) @binding(3) var<storage, read> v_cache: array<u32>;
// Per token: sequence and position.
@group(0) @binding(4) var<storage, read> places: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read> tables: array<u32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

const THREADS: u32 = 64u;
const MAX_HEAD_DIM: u32 = 256u;
const WORDS_PER_THREAD: u32 = 2u; // MAX_HEAD_DIM / 2 / THREADS
// Below every score; a stand-in for −inf, which WGSL has no literal for.
const LOWEST: f32 = -3.0e38;

var<workgroup> q_head: array<f32, 256>;
var<workgroup> scores: array<f32, 64>;
// exp(score − the running maximum), each computed once, by the thread that scored it.
var<workgroup> weights: array<f32, 64>;
var<workgroup> score_slots: array<u32, 64>;
// The visible positions [start, end), shared so that every thread sees them as uniform.
var<workgroup> visible: vec2<u32>;

// Query values d..d + 3 of the head.
fn q4(d: u32) -> vec4<f32> {
    return vec4<f32>(q_head[d], q_head[d + 1u], q_head[d + 2u], q_head[d + 3u]);
}

fn slot_of(seq: u32, pos: u32) -> u32 {
    let block = tables[seq * p.table_stride + (pos >> p.block_shift)];
    return (block << p.block_shift) | (pos & ((1u << p.block_shift) - 1u));
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let index = wid.x + wid.y * nwg.x;
    let valid = index < p.n_tokens * p.n_head;
    let t = min(index / p.n_head, p.n_tokens - 1u);
    let h = index % p.n_head;
    let kv_head = h / p.group;
    let place = places[t];
    if (lid == 0u) {
        var start = 0u;
        if (p.window > 0u && place.y + 1u > p.window) {
            start = place.y + 1u - p.window;
        }
        var end = place.y + 1u;
        if (!valid) {
            end = start;
        }
        visible = vec2<u32>(start, end);
    }
    for (var d = lid; d < p.head_dim_k; d += THREADS) {
        q_head[d] = q[(t * p.n_head + h) * p.head_dim_k + d];
    }
    let range = workgroupUniformLoad(&visible);

    let k_base = kv_head * p.head_dim_k / 2u;
    let v_base = kv_head * p.head_dim_v / 2u;
    var running_max = LOWEST;
    var sum = 0.0;
    var acc: array<vec2<f32>, 2>;
    let v_words = p.head_dim_v / 2u;
    for (var p0 = range.x; p0 < range.y; p0 += THREADS) {
        let pos = p0 + lid;
        var score = LOWEST;
        if (pos < range.y) {
            let slot = slot_of(place.x, pos);
            score_slots[lid] = slot;
            let kb = slot * p.k_words + k_base;
            var s = 0.0;
            let words = p.head_dim_k / 2u;
            var j = 0u;
            // Four words a step, loaded together: one at a time, each load waited for the
            // one before (25 µs a decode step's layer on the H200 through Vulkan).
            for (; j + 4u <= words; j += 4u) {
                let k01 = vec4<f32>(
                    unpack2x16float(k_cache[kb + j]),
                    unpack2x16float(k_cache[kb + j + 1u]),
                );
                let k23 = vec4<f32>(
                    unpack2x16float(k_cache[kb + j + 2u]),
                    unpack2x16float(k_cache[kb + j + 3u]),
                );
                s += dot(q4(2u * j), k01) + dot(q4(2u * j + 4u), k23);
            }
            for (; j < words; j++) {
                let kk = unpack2x16float(k_cache[kb + j]);
                s += q_head[2u * j] * kk.x + q_head[2u * j + 1u] * kk.y;
            }
            score = s * p.scale;
        }
        scores[lid] = score;
        workgroupBarrier();

        let n = min(THREADS, range.y - p0);
        var tile_max = running_max;
        for (var i = 0u; i < n; i++) {
            tile_max = max(tile_max, scores[i]);
        }
        weights[lid] = exp(score - tile_max);
        let correction = exp(running_max - tile_max);
        sum *= correction;
        for (var j = 0u; j < WORDS_PER_THREAD; j++) {
            acc[j] *= correction;
        }
        workgroupBarrier();
        // Four positions a step, their values loaded together.
        var i = 0u;
        for (; i + 4u <= n; i += 4u) {
            let wt = vec4<f32>(weights[i], weights[i + 1u], weights[i + 2u], weights[i + 3u]);
            sum += wt.x + wt.y + wt.z + wt.w;
            let vb = vec4<u32>(
                score_slots[i],
                score_slots[i + 1u],
                score_slots[i + 2u],
                score_slots[i + 3u],
            ) * p.v_words + v_base;
            for (var j = 0u; j < WORDS_PER_THREAD; j++) {
                let word = lid + j * THREADS;
                if (word < v_words) {
                    let v0 = unpack2x16float(v_cache[vb.x + word]);
                    let v1 = unpack2x16float(v_cache[vb.y + word]);
                    let v2 = unpack2x16float(v_cache[vb.z + word]);
                    let v3 = unpack2x16float(v_cache[vb.w + word]);
                    acc[j] += wt.x * v0 + wt.y * v1 + wt.z * v2 + wt.w * v3;
                }
            }
        }
        for (; i < n; i++) {
            let weight = weights[i];
            sum += weight;
            let vb = score_slots[i] * p.v_words + v_base;
            for (var j = 0u; j < WORDS_PER_THREAD; j++) {
                let word = lid + j * THREADS;
                if (word < v_words) {
                    acc[j] += weight * unpack2x16float(v_cache[vb + word]);
                }
            }
        }
        running_max = tile_max;
        workgroupBarrier();
    }

    if (valid) {
        let o = (t * p.n_head + h) * p.head_dim_v;
        for (var j = 0u; j < WORDS_PER_THREAD; j++) {
            let word = lid + j * THREADS;
            if (word < v_words) {
                out[o + 2u * word] = acc[j].x / sum;
                out[o + 2u * word + 1u] = acc[j].y / sum;
            }
        }
    }
}
