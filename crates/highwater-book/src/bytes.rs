//! Byte counts as the book writes them: one precision policy (see the crate docs).

/// A binary unit: B, KiB (2¹⁰ bytes), MiB (2²⁰), GiB (2³⁰), TiB (2⁴⁰).
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
}

impl Unit {
    const ALL: [Unit; 5] = [Unit::B, Unit::KiB, Unit::MiB, Unit::GiB, Unit::TiB];

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

    /// `KiB`, `MiB`, …
    pub fn name(self) -> &'static str {
        match self {
            Unit::B => "B",
            Unit::KiB => "KiB",
            Unit::MiB => "MiB",
            Unit::GiB => "GiB",
            Unit::TiB => "TiB",
        }
    }
}

/// A byte count in the largest binary unit in which it is at least 1, to the hundredth of that
/// unit, trailing zeros dropped: `0 B`, `512 B`, `32 MiB`, `34.95 MiB`, `1.19 GiB`,
/// `14.75 GiB`. Rounded to the nearest hundredth, an exact tie to the even one (1.125 GiB
/// shows as `1.12 GiB`), as Rust's `{:.2}` does; the quotient is exact, units being powers of
/// two.
pub fn show(bytes: u64) -> String {
    in_unit(bytes, Unit::of(bytes))
}

/// A byte count in a unit the caller fixes, to the hundredth of it (bytes whole), for the terms
/// of one sum or one column that must share a unit: `0.38 GiB`, `3378 MiB`.
pub fn in_unit(bytes: u64, unit: Unit) -> String {
    if unit == Unit::B {
        return format!("{bytes} B");
    }
    let value = format!("{:.2}", bytes as f64 / unit.size() as f64);
    let value = value.trim_end_matches('0').trim_end_matches('.');
    format!("{value} {}", unit.name())
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
        assert_eq!(Unit::of(u64::MAX), Unit::TiB);
        assert_eq!(Unit::GiB.size(), 1 << 30);
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
        assert_eq!(show(u64::MAX), "16777216 TiB");
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
        assert_eq!(signed(i64::MIN), "-8388608 TiB");
    }

    #[test]
    fn exact_counts_group_their_digits() {
        assert_eq!(exact(1023), "1023 B");
        assert_eq!(exact(1024), "1 KiB (1\u{202f}024 B)");
        assert_eq!(
            exact(13_345_927_680),
            "12.43 GiB (13\u{202f}345\u{202f}927\u{202f}680 B)"
        );
    }
}
