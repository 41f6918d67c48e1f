//! Percentiles for the benchmark drivers. Two definitions are in use, each
//! named in docs/BENCHMARKS.md next to the figures it produced; both take
//! an ascending slice and answer `None` for an empty one.

/// Nearest rank: the smallest value with at least `p` percent of the
/// samples at or below it (`p` in 0..=100).
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// The value at index `round((n - 1) · q)` (`q` in 0..=1).
pub fn rounded_index<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i.min(sorted.len() - 1)).copied()
}

/// `values` in ascending order (NaN last).
pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The arithmetic mean; 0 for no values.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_definitions_on_ten_samples() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 50.0), Some(5.0));
        assert_eq!(nearest_rank(&v, 95.0), Some(10.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(rounded_index(&v, 0.5), Some(6.0));
        assert_eq!(rounded_index(&v, 0.99), Some(10.0));
        assert_eq!(rounded_index(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank::<f64>(&[], 50.0), None);
        assert_eq!(rounded_index::<f64>(&[], 0.5), None);
    }
}
