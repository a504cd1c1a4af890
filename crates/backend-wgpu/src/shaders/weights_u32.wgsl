// The weights at binding 1, as 4-byte words: any type's rows.

@group(0) @binding(1) var<storage, read> w: array<u32>;

fn w_word(i: u32) -> u32 {
    return w[i];
}
