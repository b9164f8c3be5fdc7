//! The one place a ratio is made and printed: speed-ups, slowdowns and the conns
//! tables' "ringmem over FramedRead". A figure over another that is zero, negative or
//! next to nothing is no ratio, and prints as `n/a` rather than as a huge or negative
//! number.

/// The largest quotient [`ratio`] gives. The ratios these tables are for stay well
/// below it; beyond it the denominator is below a thousandth of the numerator, which
/// here means a figure left near zero by subtracting a baseline (a server's address
/// space per connection that grew inside a heap reserved before the baseline), and the
/// quotient would say more about that figure's noise than about either side.
pub const MAX_RATIO: f64 = 1e3;

/// `num / den` where that is a figure worth printing: `None` when either is not
/// finite, `num` is negative, `den` is zero or negative, or the quotient is above
/// [`MAX_RATIO`]. A quotient near zero stays: a numerator of next to nothing (a
/// reader's zero heap allocations) reads right as `0.00×`.
pub fn ratio(num: f64, den: f64) -> Option<f64> {
    if !num.is_finite() || !den.is_finite() || num < 0.0 || den <= 0.0 {
        return None;
    }
    let q = num / den;
    (q <= MAX_RATIO).then_some(q)
}

/// `1.23×`, or `n/a` for no ratio.
pub fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".into(), |x| format!("{x:.2}×"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_of_ordinary_figures_is_their_quotient() {
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(fmt_ratio(ratio(8.0, 10.0)), "0.80×");
        assert_eq!(fmt_ratio(ratio(490.0, 1.0)), "490.00×");
        // Nothing over something is a figure: none of it.
        assert_eq!(fmt_ratio(ratio(0.0, 2.0)), "0.00×");
    }

    #[test]
    fn a_denominator_of_zero_or_below_is_no_ratio() {
        // The idle row: FramedRead's address space per connection came out
        // just below zero after its baseline was subtracted.
        assert_eq!(ratio(65.5, -0.056), None);
        assert_eq!(ratio(65.5, 0.0), None);
        assert_eq!(ratio(65.5, -0.0), None);
        assert_eq!(ratio(0.0, 0.0), None);
        assert_eq!(fmt_ratio(ratio(1024.0, -0.0056)), "n/a");
    }

    #[test]
    fn a_denominator_near_zero_against_its_numerator_is_no_ratio() {
        assert_eq!(ratio(1024.0, 0.0056), None);
        assert_eq!(ratio(1000.0, 1.0), Some(1000.0));
        assert_eq!(ratio(1000.1, 1.0), None);
        assert_eq!(ratio(1.0, f64::MIN_POSITIVE), None);
    }

    #[test]
    fn a_negative_numerator_is_no_ratio() {
        assert_eq!(ratio(-0.5, 20.0), None);
    }

    #[test]
    fn figures_that_are_not_finite_are_no_ratio() {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(ratio(bad, 1.0), None, "{bad}");
            assert_eq!(ratio(1.0, bad), None, "{bad}");
        }
        assert_eq!(fmt_ratio(ratio(f64::NAN, f64::NAN)), "n/a");
    }
}
