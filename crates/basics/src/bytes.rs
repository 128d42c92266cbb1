//! Byte counts as the project writes them: one precision policy, [`show`], with the variants a
//! place needs ([`in_unit`], [`signed`], [`exact`]), and one named exception, [`axis`], for a
//! figure's axis labels.
//!
//! The policy, [`show`]: **binary units (KiB = 2¹⁰ bytes, MiB = 2²⁰, GiB = 2³⁰, …); the largest
//! unit in which the count is at least 1; to the hundredth of that unit (ties to even), trailing
//! zeros dropped; under 1 KiB, whole bytes** — `512 B`, `32 MiB`, `34.95 MiB`, `1.19 GiB`,
//! `14.75 GiB`. Hundredths of the unit rather than a count of significant digits because the
//! sizes that matter sit within a few hundred MiB of a card's edge and prose adds them up: a
//! 16 GiB card less a desktop's 1.25 GiB is a cap of 14.75 GiB, which three digits would show
//! as 14.8. Whole sizes come back whole (`32 MiB`, `16 GiB`), so they match what logs print.
//!
//! The book (`highwater_book::bytes`, a re-export of this module) and the `highwater` CLI write
//! sizes this way; the figures (`highwater_plot`: axes, bar labels, legends, tooltips) use
//! [`axis`], their room being short.

/// A binary unit: B, KiB (2¹⁰ bytes), MiB (2²⁰), GiB (2³⁰), TiB (2⁴⁰), PiB (2⁵⁰).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unit {
    /// Bytes, written whole.
    B,
    /// 2¹⁰ bytes.
    KiB,
    /// 2²⁰ bytes.
    MiB,
    /// 2³⁰ bytes.
    GiB,
    /// 2⁴⁰ bytes.
    TiB,
    /// 2⁵⁰ bytes.
    PiB,
}

impl Unit {
    const ALL: [Unit; 6] = [
        Unit::B,
        Unit::KiB,
        Unit::MiB,
        Unit::GiB,
        Unit::TiB,
        Unit::PiB,
    ];

    /// The largest unit in which `bytes` is at least 1 (`B` for 0).
    pub fn of(bytes: u64) -> Unit {
        *Unit::ALL
            .iter()
            .rev()
            .find(|u| bytes >= u.size())
            .unwrap_or(&Unit::B)
    }

    /// Bytes in one unit.
    pub fn size(self) -> u64 {
        1 << (10 * self as u32)
    }

    /// `bytes` in this unit, as a float: exact below 2⁵³ bytes, units being powers of two.
    /// For plotting a whole axis in one unit.
    pub fn scale(self, bytes: u64) -> f64 {
        bytes as f64 / self.size() as f64
    }

    /// `KiB`, `MiB`, …
    pub fn name(self) -> &'static str {
        match self {
            Unit::B => "B",
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::TiB => "TiB",
            Unit::PiB => "PiB",
        }
    }
}

/// A byte count in the largest binary unit in which it is at least 1, to the hundredth of that
/// unit, trailing zeros dropped: `0 B`, `512 B`, `32 MiB`, `34.95 MiB`, `1.19 GiB`,
/// `14.75 GiB`. Rounded to the nearest hundredth, an exact tie to the even one (1.125 GiB
/// shows as `1.12 GiB`), as Rust's `{:.2}` does; the quotient is exact, units being powers of
/// two. The project's policy (see the module docs).
pub fn show(bytes: u64) -> String {
    in_unit(bytes, Unit::of(bytes))
}

/// A byte count in a unit the caller fixes, to the hundredth of it (bytes whole), for the terms
/// of one sum or one column that must share a unit: `0.38 GiB`, `3378 MiB`.
pub fn in_unit(bytes: u64, unit: Unit) -> String {
    if unit == Unit::B {
        return format!("{bytes} B");
    }
    let value = format!("{:.2}", unit.scale(bytes));
    format!("{} {}", trim_number(&value), unit.name())
}

/// A difference of byte counts, signed: `+1.88 GiB`, `-384 MiB`, `+0 B`.
pub fn signed(difference: i64) -> String {
    let sign = if difference < 0 { '-' } else { '+' };
    format!("{sign}{}", show(difference.unsigned_abs()))
}

/// A byte count readable and exact, for tables where bytes must match to the byte:
/// `32 MiB (33 554 432 B)`, the digits grouped by narrow no-break spaces; under 1 KiB, `512 B`.
pub fn exact(bytes: u64) -> String {
    if bytes < Unit::KiB.size() {
        return format!("{bytes} B");
    }
    let digits = bytes.to_string();
    let mut grouped = String::with_capacity(digits.len() * 2);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push('\u{202f}');
        }
        grouped.push(d);
    }
    format!("{} ({grouped} B)", show(bytes))
}

/// A byte count for a figure's labels, where room is short: the largest binary unit in which it
/// is at least 1, three significant digits at most (whole numbers whole): `0 B`, `512 B`,
/// `1.5 KiB`, `32 MiB`, `14.9 GiB`, `131 GiB`. The exception to [`show`]: an axis or a bar's
/// label has room for a few characters, and the exact value is in the figure's tooltip or the
/// text around it.
pub fn axis(bytes: u64) -> String {
    let unit = Unit::of(bytes);
    let v = unit.scale(bytes);
    let digits = if v >= 100.0 || v.fract() == 0.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{} {}", trim_number(&format!("{v:.digits$}")), unit.name())
}

/// An axis tick, its value already in `unit` (the one unit a whole axis shares), to the
/// thousandth, trailing zeros dropped: `0` (no unit), `2.5 GiB`, `16 GiB`. Part of the [`axis`]
/// variant: the thousandth only keeps a float's noise (`0.30000000000000004`) off the label.
pub fn axis_tick(value: f64, unit: Unit) -> String {
    if value.abs() < 1e-9 {
        return "0".to_string();
    }
    format!("{} {}", trim_number(&format!("{value:.3}")), unit.name())
}

/// `34.950` → `34.95`, `32.00` → `32`; a number without a point unchanged.
fn trim_number(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_the_largest_the_count_fills() {
        assert_eq!(Unit::of(0), Unit::B);
        assert_eq!(Unit::of(1023), Unit::B);
        assert_eq!(Unit::of(1024), Unit::KiB);
        assert_eq!(Unit::of((1 << 30) - 1), Unit::MiB);
        assert_eq!(Unit::of(16 << 30), Unit::GiB);
        assert_eq!(Unit::of(1 << 50), Unit::PiB);
        assert_eq!(Unit::of(u64::MAX), Unit::PiB);
        assert_eq!(Unit::GiB.size(), 1 << 30);
        assert_eq!(Unit::GiB.scale(3 << 29), 1.5);
    }

    #[test]
    fn hundredths_of_the_unit_trailing_zeros_dropped() {
        assert_eq!(show(0), "0 B");
        assert_eq!(show(512), "512 B");
        assert_eq!(show(1536), "1.5 KiB");
        assert_eq!(show(32 << 20), "32 MiB");
        assert_eq!(show(36_647_936), "34.95 MiB");
        assert_eq!(show(1792 << 20), "1.75 GiB");
        assert_eq!(show(17_179_869_184), "16 GiB");
        // The card's edge: 14.75 and 14.36 GiB stay apart, as a sum of them needs.
        assert_eq!(show(15_837_691_904), "14.75 GiB");
        assert_eq!(show(15_418_261_504), "14.36 GiB");
        // Ties to even: 1.125 GiB.
        assert_eq!(show(1152 << 20), "1.12 GiB");
        assert_eq!(show(u64::MAX), "16384 PiB");
    }

    #[test]
    fn a_fixed_unit_keeps_a_column_comparable() {
        assert_eq!(in_unit(384 << 20, Unit::GiB), "0.38 GiB");
        assert_eq!(in_unit(3378 << 20, Unit::MiB), "3378 MiB");
        assert_eq!(in_unit(0, Unit::MiB), "0 MiB");
        assert_eq!(in_unit(12_345, Unit::B), "12345 B");
    }

    #[test]
    fn differences_carry_their_sign() {
        assert_eq!(signed(1920 << 20), "+1.88 GiB");
        assert_eq!(signed(-(384 << 20)), "-384 MiB");
        assert_eq!(signed(0), "+0 B");
        assert_eq!(signed(96), "+96 B");
        assert_eq!(signed(i64::MIN), "-8192 PiB");
    }

    #[test]
    fn exact_counts_group_their_digits() {
        assert_eq!(exact(1023), "1023 B");
        assert_eq!(exact(1024), "1 KiB (1\u{202f}024 B)");
        assert_eq!(
            exact(13_345_927_680),
            "12.43 GiB (13\u{202f}345\u{202f}927\u{202f}680 B)"
        );
        assert_eq!(
            exact(17_179_869_184),
            "16 GiB (17\u{202f}179\u{202f}869\u{202f}184 B)"
        );
    }

    #[test]
    fn axis_labels_keep_three_significant_digits() {
        assert_eq!(axis(0), "0 B");
        assert_eq!(axis(1023), "1023 B");
        assert_eq!(axis(1024), "1 KiB");
        assert_eq!(axis(1536), "1.5 KiB");
        assert_eq!(axis(268_435_456), "256 MiB");
        assert_eq!(axis(36_647_936), "35 MiB");
        assert_eq!(axis(16 << 30), "16 GiB");
        assert_eq!(axis(16_000_000_000), "14.9 GiB");
        assert_eq!(axis(141_000_000_000), "131 GiB");
        assert_eq!(axis(u64::MAX), "16384 PiB");
    }

    #[test]
    fn axis_ticks_share_the_unit() {
        let u = Unit::of(17 << 30);
        assert_eq!(u, Unit::GiB);
        assert_eq!(axis_tick(0.0, u), "0");
        assert_eq!(axis_tick(2.5, u), "2.5 GiB");
        assert_eq!(axis_tick(16.0, u), "16 GiB");
        assert_eq!(axis_tick(0.300_000_000_000_000_04, u), "0.3 GiB");
    }
}
