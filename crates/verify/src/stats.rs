//! Summary statistics of one tensor: the view engine authors otherwise build with prints.

use serde::Serialize;

/// How many leading values [`TensorStats`] keeps.
pub const FIRST_VALUES: usize = 6;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorStats {
    pub count: usize,
    /// Over finite values only; `None` when there are none.
    pub min: Option<f32>,
    pub max: Option<f32>,
    pub mean: Option<f64>,
    pub rms: Option<f64>,
    pub zeros: usize,
    pub nan: usize,
    pub inf: usize,
    pub first: Vec<f32>,
}

impl TensorStats {
    pub fn of(data: &[f32]) -> Self {
        let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
        let (mut sum, mut sum_sq) = (0f64, 0f64);
        let (mut finite, mut zeros, mut nan, mut inf) = (0usize, 0, 0, 0);
        for &v in data {
            if v.is_nan() {
                nan += 1;
                continue;
            }
            if v.is_infinite() {
                inf += 1;
                continue;
            }
            finite += 1;
            zeros += usize::from(v == 0.0);
            min = min.min(v);
            max = max.max(v);
            sum += f64::from(v);
            sum_sq += f64::from(v) * f64::from(v);
        }
        let any = finite > 0;
        let n = finite.max(1) as f64;
        TensorStats {
            count: data.len(),
            min: any.then_some(min),
            max: any.then_some(max),
            mean: any.then_some(sum / n),
            rms: any.then_some((sum_sq / n).sqrt()),
            zeros,
            nan,
            inf,
            first: data.iter().take(FIRST_VALUES).copied().collect(),
        }
    }

    /// Whether the tensor looks broken in the ways that sink engines: non-finite values, or
    /// nothing but zeros.
    pub fn is_suspicious(&self) -> bool {
        self.nan > 0 || self.inf > 0 || (self.count > 0 && self.zeros == self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_moments() {
        let s = TensorStats::of(&[1.0, -3.0, 0.0, f32::NAN, f32::INFINITY, 2.0]);
        assert_eq!((s.count, s.zeros, s.nan, s.inf), (6, 1, 1, 1));
        assert_eq!((s.min, s.max), (Some(-3.0), Some(2.0)));
        assert_eq!(s.mean, Some(0.0));
        assert!((s.rms.unwrap() - 3.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.first.len(), FIRST_VALUES);
        assert!(s.is_suspicious());
    }

    #[test]
    fn all_zero_and_empty() {
        let z = TensorStats::of(&[0.0; 4]);
        assert!(z.is_suspicious());
        assert_eq!(z.rms, Some(0.0));
        let e = TensorStats::of(&[]);
        assert_eq!((e.min, e.mean), (None, None));
        assert!(!e.is_suspicious());
        assert!(!TensorStats::of(&[0.5, 0.0]).is_suspicious());
        assert_eq!(TensorStats::of(&[f32::NAN]).min, None);
    }
}
