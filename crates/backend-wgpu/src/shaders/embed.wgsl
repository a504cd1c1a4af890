// Embedding lookup from one chunk of a table's rows: each thread dequantizes four values of
// one token's row, if the chunk holds that row.

struct Params {
    n_tokens: u32,
    // Row length / 4.
    k4: u32,
    row_bytes: u32,
    first_row: u32,
    // Rows of this chunk.
    n_rows: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> tokens: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (i >= p.n_tokens * p.k4) {
        return;
    }
    let id = tokens[i / p.k4];
    if (id < p.first_row || id - p.first_row >= p.n_rows) {
        return;
    }
    out[i] = dq4((id - p.first_row) * p.row_bytes, i % p.k4);
}
