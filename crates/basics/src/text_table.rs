//! Plain-text tables for a terminal: columns padded to their widest cell, two spaces apart,
//! trailing spaces trimmed. Pure (header, alignments and rows in, a `String` out), so the CLIs
//! print it and their tests compare it.

/// Where a column's cells sit within its width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Padded on the right: names, words.
    Left,
    /// Padded on the left: numbers, so their digits line up.
    Right,
}

/// What separates the header from the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A line of dashes as wide as each column (the `highwater` CLI's tables).
    Dashed,
    /// Nothing: the header is the first line (`graphrace`'s tables).
    None,
}

/// `columns` (each a header and its alignment) over `rows`, each column padded to its widest
/// cell, two spaces apart, each line's trailing spaces trimmed, lines joined by `\n` with none
/// after the last. Widths count characters, not bytes (`×`, `≥`, `µs`). A row shorter than the
/// header leaves its last columns empty; cells past the header's are dropped.
pub fn render(columns: &[(&str, Align)], rows: &[Vec<String>], rule: Rule) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(columns)
            .zip(&widths)
            .map(|((c, (_, align)), w)| {
                let pad = " ".repeat(w - width(c));
                match align {
                    Align::Left => format!("{c}{pad}"),
                    Align::Right => format!("{pad}{c}"),
                }
            })
            .collect();
        padded.join("  ").trim_end().to_string()
    };
    let mut out = vec![line(columns.iter().map(|(h, _)| *h).collect())];
    if rule == Rule::Dashed {
        out.push(
            widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join("  "),
        );
    }
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_by_characters() {
        let t = render(
            &[("a", Align::Left), ("n", Align::Right)],
            &[
                vec!["×1".into(), "10".into()],
                vec!["long".into(), "2".into()],
            ],
            Rule::Dashed,
        );
        assert_eq!(t, "a      n\n----  --\n×1    10\nlong   2");
    }

    #[test]
    fn without_a_rule_the_header_is_the_first_line() {
        let t = render(
            &[("", Align::Right), ("start µs", Align::Right)],
            &[
                vec!["flagged".into(), "3".into()],
                vec!["clean".into(), "12.5".into()],
            ],
            Rule::None,
        );
        assert_eq!(t, "         start µs\nflagged         3\n  clean      12.5");
    }

    #[test]
    fn short_rows_leave_cells_empty_and_long_rows_lose_theirs() {
        let t = render(
            &[("a", Align::Left), ("b", Align::Right), ("c", Align::Left)],
            &[
                vec!["x".into()],
                vec!["y".into(), "22".into(), "z".into(), "dropped".into()],
            ],
            Rule::Dashed,
        );
        assert_eq!(t, "a   b  c\n-  --  -\nx\ny  22  z");
    }

    #[test]
    fn no_rows_leave_the_header() {
        let t = render(&[("kernel", Align::Left)], &[], Rule::None);
        assert_eq!(t, "kernel");
    }
}
