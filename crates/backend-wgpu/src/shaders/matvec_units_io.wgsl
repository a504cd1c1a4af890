// The parameters of the unit kernels (`matvec_units.wgsl`, `matvec_units_gated.wgsl`) and
// their activations. The weights (`w0`, `w1`, … as vec4<u32>) and outputs (`y0`, …) are bound
// after them, as many as the kernel has, with `weight(s, i)`, vec4 i of weight s, and
// `store(s, i, v)`, output s's value i: the host writes those (`kernels.rs`).

// One product of a dispatch: a chunk of a weight's rows, and the output it writes.
struct Product {
    // Rows of the chunk.
    n_rows: u32,
    // 16-byte units of a row.
    row_vec4s: u32,
    // The product's first workgroup: a dispatch's products take consecutive workgroups.
    first_workgroup: u32,
    // The chunk's first row: the first output column it writes.
    first_row: u32,
    // The output's width: all rows of the weight.
    m: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct Params {
    // Units per row (row length / UNIT_VALUES): every product of a dispatch takes the same x.
    n_units: u32,
    // Row length / 4.
    k4: u32,
    _pad0: u32,
    _pad1: u32,
    products: array<Product, 3>,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
