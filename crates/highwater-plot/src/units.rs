//! Binary byte units (KiB, MiB, GiB, …) for labels and axes.

const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

/// A byte count in binary units with three significant digits at most:
/// `0 B`, `512 B`, `1.5 KiB`, `32 MiB`, `14.9 GiB`, `16 GiB`.
///
/// ```
/// use highwater_plot::format_bytes;
/// assert_eq!(format_bytes(32 << 20), "32 MiB");
/// assert_eq!(format_bytes(16_000_000_000), "14.9 GiB");
/// assert_eq!(format_bytes(1536), "1.5 KiB");
/// ```
pub fn format_bytes(bytes: u64) -> String {
    let unit = ByteUnit::for_value(bytes);
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

/// A byte count both readable and exact, for tables where bytes must match to the byte:
/// `32 MiB (33 554 432 B)`, digits grouped by narrow no-break spaces; under 1 KiB, `512 B`.
///
/// ```
/// use highwater_plot::format_bytes_exact;
/// assert_eq!(format_bytes_exact(32 << 20), "32 MiB (33\u{202f}554\u{202f}432 B)");
/// assert_eq!(format_bytes_exact(512), "512 B");
/// ```
pub fn format_bytes_exact(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let digits = bytes.to_string();
    let mut grouped = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push('\u{202f}');
        }
        grouped.push(d);
    }
    format!("{} ({grouped} B)", format_bytes(bytes))
}

/// One binary unit, used for a whole axis so every tick shares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByteUnit(usize);

impl ByteUnit {
    /// The largest unit in which `bytes` is at least 1.
    pub(crate) fn for_value(bytes: u64) -> Self {
        let mut i = 0;
        while i + 1 < UNITS.len() && bytes >> (10 * (i + 1)) > 0 {
            i += 1;
        }
        ByteUnit(i)
    }

    pub(crate) fn factor(self) -> f64 {
        (1u64 << (10 * self.0)) as f64
    }

    pub(crate) fn scale(self, bytes: u64) -> f64 {
        bytes as f64 / self.factor()
    }

    pub(crate) fn name(self) -> &'static str {
        UNITS[self.0]
    }

    /// An axis tick value (already in this unit) as a label: `0`, `2.5 GiB`, `16 GiB`.
    pub(crate) fn tick(self, v: f64) -> String {
        if v.abs() < 1e-9 {
            return "0".to_string();
        }
        format!("{} {}", trim_number(&format!("{v:.3}")), self.name())
    }
}

fn trim_number(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1024), "1 KiB");
        assert_eq!(format_bytes(268_435_456), "256 MiB");
        assert_eq!(format_bytes(16 << 30), "16 GiB");
        assert_eq!(format_bytes(141_000_000_000), "131 GiB");
        assert_eq!(format_bytes(u64::MAX), "16384 PiB");
    }

    #[test]
    fn exact_formats_group_digits() {
        assert_eq!(format_bytes_exact(1023), "1023 B");
        assert_eq!(format_bytes_exact(1024), "1 KiB (1\u{202f}024 B)");
        assert_eq!(
            format_bytes_exact(17_179_869_184),
            "16 GiB (17\u{202f}179\u{202f}869\u{202f}184 B)"
        );
    }

    #[test]
    fn ticks_share_the_unit() {
        let u = ByteUnit::for_value(17 << 30);
        assert_eq!(u.name(), "GiB");
        assert_eq!(u.tick(0.0), "0");
        assert_eq!(u.tick(2.5), "2.5 GiB");
        assert_eq!(u.tick(16.0), "16 GiB");
        assert_eq!(u.tick(0.30000000000000004), "0.3 GiB");
    }
}
