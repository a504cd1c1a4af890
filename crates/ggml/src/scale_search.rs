//! The scale searches that ggml's k-quant reference quantizers share (`make_qx_quants`,
//! `make_q3_quants`, `make_qkx2_quants` in `ggml-quants.c`).
//!
//! Byte-exact output needs the same f32 arithmetic in the same order: each expression below is
//! evaluated left to right exactly as the C one, with one rounding per operation (ggml's
//! reference build does not contract `a*b + c` into a fused multiply-add, and neither does Rust).

/// Groups whose largest magnitude is below this are all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// Round to nearest, ties to even, as ggml's `nearest_int`: adding 1.5·2^23 leaves the rounded
/// integer in the low mantissa bits. Valid for |x| ≤ 2^22 − 1, as in ggml.
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// The value of largest magnitude, with its sign (the first on ties), and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// `make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL)`: symmetric quantization of `x` to
/// levels −nmax..nmax−1 (stored biased by nmax in `levels`), weighting each element by x², and
/// trying 18 scales around nmax/max. Returns the scale.
pub(crate) fn symmetric_x2_weighted(x: &[f32], nmax: i32, levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let quantize = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);

    let mut iscale = -(nmax as f32) / max;
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (&v, lv) in x.iter().zip(levels.iter_mut()) {
        let l = quantize(iscale, v);
        *lv = (l + nmax) as u8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = quantize(iscale, v);
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (&v, lv) in x.iter().zip(levels.iter_mut()) {
                *lv = (quantize(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants(n, nmax, x, L, do_rmse = true)`: symmetric quantization to −nmax..nmax−1
/// (stored biased by nmax), then up to five passes that move single elements to the level
/// that most improves the x²-weighted fit. Returns the scale.
pub(crate) fn symmetric_refined(x: &[f32], nmax: i32, levels: &mut [u8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let mut l_signed = [0i32; 16];
    let l_signed = &mut l_signed[..x.len()];
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (&v, lv) in x.iter().zip(l_signed.iter_mut()) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *lv = l;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (&v, lv) in x.iter().zip(l_signed.iter_mut()) {
            let w = v * v;
            let mut slx = sumlx - w * v * *lv as f32;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * *lv as f32 * *lv as f32;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *lv {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *lv = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for (lv, &l) in levels.iter_mut().zip(l_signed.iter()) {
        *lv = (l + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// How `asymmetric_weighted` searches: `nstep + 1` inverse scales
/// (rmin + rdelta·is + nmax)/(max − min), scoring by absolute or squared error.
pub(crate) struct AsymmetricSearch {
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    pub use_mad: bool,
}

/// `make_qkx2_quants`: quantization of `x` to levels 0..=nmax as scale·l − min (min ≥ 0 is
/// returned separately), by weighted least squares over a range of candidate scales.
/// Returns (scale, min).
pub(crate) fn asymmetric_weighted(
    x: &[f32],
    weights: &[f32],
    nmax: i32,
    search: &AsymmetricSearch,
    levels: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| {
        if search.use_mad {
            diff.abs()
        } else {
            diff * diff
        }
    };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        levels[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * error(diff);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=search.nstep {
        // `min` may have moved in an earlier step: ggml measures from the best fit so far.
        iscale = (search.rmin + search.rdelta * is as f32 + nmax as f32) / (max - min);
        let mut sum_l = 0.0f32;
        let mut sum_l2 = 0.0f32;
        let mut sum_xl = 0.0f32;
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let w = weights[i];
            sum_l += w * l as f32;
            sum_l2 += w * l as f32 * l as f32;
            sum_xl += w * l as f32 * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

#[cfg(test)]
mod tests {
    use super::nearest_int;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        assert_eq!(nearest_int(-4_194_303.0), -4_194_303);
    }
}
