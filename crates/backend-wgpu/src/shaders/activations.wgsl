// The gated FFN's nonlinearities: `activate(act, x)` with act SiLU (0) or GELU with the tanh
// approximation (1).

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// tanh(u) as 1 − 2/(e^2u + 1), which saturates to ±1 where e^2u overflows instead of
// giving inf/inf.
fn gelu_tanh(x: f32) -> f32 {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    let t = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
    return 0.5 * x * (1.0 + t);
}

fn activate(act: u32, x: f32) -> f32 {
    if (act == 0u) {
        return silu(x);
    }
    return gelu_tanh(x);
}
