//! Plain aligned text tables for the terminal.

use highwater_plot::format_bytes;

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// `headers` over `rows`, columns padded to their widest cell, two spaces apart, a dashed
/// rule under the header. Widths count characters, not bytes (`×`, `≥`).
pub(crate) fn render(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let width = |s: &str| s.chars().count();
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(headers)
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
    let mut out = vec![line(headers.iter().map(|(h, _)| *h).collect())];
    out.push(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  "),
    );
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

/// Bytes for the summary: GiB with two decimals (pools sit within a few MiB of a card's
/// edge, so `14 GiB` would hide what matters), smaller sizes in the house style.
pub(crate) fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else {
        format_bytes(bytes)
    }
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
        );
        assert_eq!(t, "a      n\n----  --\n×1    10\nlong   2");
    }
}
