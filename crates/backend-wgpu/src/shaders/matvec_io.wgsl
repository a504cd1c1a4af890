// The parameters and bindings of the mat-vec products (matvec.wgsl, matvec_subgroup.wgsl,
// matvec_units.wgsl), but for the weights `w` at binding 1, which each kernel's weight reads
// declare as they read them (`matvec_dot.wgsl`: words; `matvec_unit_q4_k.wgsl`: 16-byte units).

struct Params {
    // Rows of this chunk.
    n_rows: u32,
    // Value groups (for matvec_units.wgsl: units) per row.
    n_groups: u32,
    // Row length / 4.
    k4: u32,
    row_bytes: u32,
    // The chunk's first row: the first output column it writes.
    first_row: u32,
    // The output's width: all rows of the weight.
    m: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
// `finish(i, v)`, the value written as output i when the row's product is v: v itself
// (`matvec_store.wgsl`), or the gated FFN's act(gate) ⊙ v (`matvec_gated.wgsl`).
