//! What a cell of an `mdbook-cells` book returns, and the harness that runs cells.
//!
//! The value of a cell's last expression is turned into an [`Output`] through [`CellValue`]:
//! `()` shows nothing, strings and numbers show as text, and the wrappers [`Figure`] (inline
//! SVG), [`Table`] (an HTML table), [`Markdown`] and [`Html`] show as themselves. A cell may use
//! `?`: an error ends the cell and is shown, with its causes, in place of the output.
//!
//! This crate is what the generated cell crate links against; it knows nothing of mdbook.

use std::error::Error as StdError;
use std::fmt::{self, Display, Write as _};

pub mod export;
#[cfg(feature = "freeze")]
pub mod freeze;
pub mod harness;

/// The error type a cell's `?` converts into.
pub type CellError = Box<dyn StdError + Send + Sync>;

/// A rendered cell value, as the preprocessor receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The cell's value was `()`: only what it printed is shown.
    Nothing,
    /// Plain text, shown preformatted (HTML-escaped by the preprocessor).
    Text(String),
    /// Markdown, spliced into the chapter.
    Markdown(String),
    /// Raw HTML, spliced into the chapter.
    Html(String),
    /// An SVG document, inlined.
    Figure(String),
    /// An HTML table.
    Table(String),
    /// The cell returned an error; the message holds its cause chain.
    Error(String),
}

impl Output {
    /// The tag used on the wire between the harness and the preprocessor.
    pub fn kind(&self) -> &'static str {
        match self {
            Output::Nothing => "nothing",
            Output::Text(_) => "text",
            Output::Markdown(_) => "markdown",
            Output::Html(_) => "html",
            Output::Figure(_) => "figure",
            Output::Table(_) => "table",
            Output::Error(_) => "error",
        }
    }

    /// The payload: the text, markdown, HTML, SVG or table, or the error's message.
    pub fn body(&self) -> &str {
        match self {
            Output::Nothing => "",
            Output::Text(s)
            | Output::Markdown(s)
            | Output::Html(s)
            | Output::Figure(s)
            | Output::Table(s)
            | Output::Error(s) => s,
        }
    }

    /// Inverse of [`Output::kind`] + [`Output::body`].
    pub fn from_parts(kind: &str, body: String) -> Option<Output> {
        Some(match kind {
            "nothing" => Output::Nothing,
            "text" => Output::Text(body),
            "markdown" => Output::Markdown(body),
            "html" => Output::Html(body),
            "figure" => Output::Figure(body),
            "table" => Output::Table(body),
            "error" => Output::Error(body),
            _ => return None,
        })
    }
}

/// Anything a cell may end with.
pub trait CellValue {
    /// How the value shows on the page.
    fn into_output(self) -> Output;
}

impl CellValue for () {
    fn into_output(self) -> Output {
        Output::Nothing
    }
}

/// `!`, named on stable Rust through a function pointer's return type: a cell whose last
/// statement diverges (`panic!`, `loop {}`, `std::process::exit`) has this type in Rust 2024.
pub type Never = <fn() -> ! as ReturnOf>::Output;

#[doc(hidden)]
pub trait ReturnOf {
    type Output;
}

impl<T> ReturnOf for fn() -> T {
    type Output = T;
}

impl CellValue for Never {
    fn into_output(self) -> Output {
        self
    }
}

impl CellValue for Output {
    fn into_output(self) -> Output {
        self
    }
}

macro_rules! as_text {
    ($($t:ty),*) => {$(
        impl CellValue for $t {
            fn into_output(self) -> Output {
                Output::Text(self.to_string())
            }
        }
    )*};
}
as_text!(
    String, &str, char, bool, u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32,
    f64
);

impl<T: CellValue> CellValue for Option<T> {
    fn into_output(self) -> Output {
        self.map_or(Output::Text("None".into()), CellValue::into_output)
    }
}

impl<T: CellValue, E: Into<CellError>> CellValue for Result<T, E> {
    fn into_output(self) -> Output {
        match self {
            Ok(v) => v.into_output(),
            Err(e) => Output::Error(error_chain(&*e.into())),
        }
    }
}

/// Shows any `Debug` value as text: `Dbg(value)`.
pub struct Dbg<T>(pub T);

impl<T: fmt::Debug> CellValue for Dbg<T> {
    fn into_output(self) -> Output {
        Output::Text(format!("{:#?}", self.0))
    }
}

/// An SVG figure, inlined into the page.
pub struct Figure(String);

impl Figure {
    /// Takes a complete `<svg …>` document (an XML declaration, if any, is dropped).
    pub fn svg(svg: impl Into<String>) -> Figure {
        let svg = svg.into();
        let svg = match (svg.starts_with("<?xml"), svg.find("?>")) {
            (true, Some(end)) => svg[end + 2..].trim_start().to_string(),
            _ => svg,
        };
        Figure(svg)
    }
}

impl CellValue for Figure {
    fn into_output(self) -> Output {
        Output::Figure(self.0)
    }
}

/// Markdown spliced into the chapter (headings, lists, emphasis…).
pub struct Markdown(pub String);

impl CellValue for Markdown {
    fn into_output(self) -> Output {
        Output::Markdown(self.0)
    }
}

/// Raw HTML spliced into the chapter. The cell is responsible for escaping.
pub struct Html(pub String);

impl CellValue for Html {
    fn into_output(self) -> Output {
        Output::Html(self.0)
    }
}

/// Column alignment in a [`Table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers, so that their digits line up.
    Right,
}

/// A table of text cells, rendered as an HTML `<table>` with every cell escaped (text between
/// backticks set as code, as markdown would).
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings; numeric-looking columns are right-aligned unless
    /// [`Table::align`] says otherwise.
    pub fn new<S: Display>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(|h| h.to_string()).collect(),
            ..Table::default()
        }
    }

    /// Each column's alignment, left to right, instead of the guess from its contents.
    pub fn align(mut self, align: impl IntoIterator<Item = Align>) -> Table {
        self.align = align.into_iter().collect();
        self
    }

    /// The table with one more row (for building it in one expression).
    pub fn row<S: Display>(mut self, cells: impl IntoIterator<Item = S>) -> Table {
        self.push(cells);
        self
    }

    /// Appends a row (for building it in a loop).
    pub fn push<S: Display>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
    }

    /// The rows so far, without the header.
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    fn column_align(&self, col: usize) -> Align {
        if let Some(a) = self.align.get(col) {
            return *a;
        }
        // A number, optionally signed and followed by a short unit: "33 554 432", "-1.5 GiB".
        let numeric = |s: &str| {
            let s = s.trim().trim_start_matches(['−', '-', '+', '≈', '~']);
            let number = s.trim_end_matches(|c: char| c.is_alphabetic() || c == '%' || c == ' ');
            s.len() - number.len() <= 5
                && number.starts_with(|c: char| c.is_ascii_digit())
                && number
                    .chars()
                    .all(|c| c.is_ascii_digit() || " ,._".contains(c))
        };
        let mut cells = self.rows.iter().filter_map(|r| r.get(col));
        let any = self.rows.iter().any(|r| r.get(col).is_some());
        if any && cells.all(|c| numeric(c) || c.trim().is_empty() || c == "—") {
            Align::Right
        } else {
            Align::Left
        }
    }

    /// The table as HTML, on lines that never leave a blank one (a blank line would end the
    /// raw-HTML block in the surrounding markdown).
    pub fn to_html(&self) -> String {
        let mut out = String::from("<table>\n<thead>\n<tr>");
        let style = |a: Align| match a {
            Align::Left => "",
            Align::Right => " style=\"text-align: right\"",
        };
        let width = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let aligns: Vec<Align> = (0..width).map(|c| self.column_align(c)).collect();
        for (i, h) in self.header.iter().enumerate() {
            let _ = write!(out, "<th{}>{}</th>", style(aligns[i]), escape_inline(h));
        }
        out.push_str("</tr>\n</thead>\n<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for (i, c) in row.iter().enumerate() {
                let _ = write!(out, "<td{}>{}</td>", style(aligns[i]), escape_inline(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>");
        out
    }
}

impl CellValue for Table {
    fn into_output(self) -> Output {
        Output::Table(self.to_html())
    }
}

/// Escapes text for HTML element content, with each span between two backticks set as
/// `<code>`, as markdown sets it: a caption or a table cell that names `mid` shows it as code,
/// not as literal backticks. A backtick without a partner stays as written.
pub fn escape_inline(text: &str) -> String {
    let pieces: Vec<&str> = text.split('`').collect();
    let mut out = String::with_capacity(text.len());
    for (i, piece) in pieces.iter().enumerate() {
        match (i % 2, i + 1 == pieces.len()) {
            (0, _) => out.push_str(&escape(piece)),
            // An opening backtick with no closing one.
            (_, true) => {
                out.push('`');
                out.push_str(&escape(piece));
            }
            _ => {
                out.push_str("<code>");
                out.push_str(&escape(piece));
                out.push_str("</code>");
            }
        }
    }
    out
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `error: cause: cause…`, the whole chain printed once.
pub fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut msg = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some error types repeat their source in their own message; print it once.
        if !msg.ends_with(&cause_text) {
            let _ = write!(msg, "\ncaused by: {cause_text}");
        }
        source = cause.source();
    }
    msg
}

/// Used by the generated cell wrapper: a cell body's `Result` to its output.
pub fn finish<T: CellValue>(result: Result<T, CellError>) -> Output {
    match result {
        Ok(value) => value.into_output(),
        Err(e) => Output::Error(error_chain(&*e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_become_code_and_the_rest_is_escaped() {
        assert_eq!(
            escape_inline("reads `index_k` <on> side"),
            "reads <code>index_k</code> &lt;on&gt; side"
        );
        assert_eq!(escape_inline("`<a>`"), "<code>&lt;a&gt;</code>");
        assert_eq!(escape_inline("one ` alone"), "one ` alone");
        assert_eq!(escape_inline("no code"), "no code");
    }

    #[test]
    fn table_escapes_and_aligns_numbers_right() {
        let t = Table::new(["op", "bytes"])
            .row(["<tanh>", "33 554 432"])
            .row(["a & b", "1.5 GiB"])
            .row(["1 GiB: before step 0", "2"]);
        let html = t.to_html();
        assert!(html.contains("<td>&lt;tanh&gt;</td>"));
        assert!(html.contains("<td style=\"text-align: right\">33 554 432</td>"));
        assert!(html.contains("<td>a &amp; b</td>"));
        // A text column stays left-aligned even when its cells start with digits.
        assert!(html.contains("<td>1 GiB: before step 0</td>"));
        assert!(!html.contains("\n\n"));
    }

    #[test]
    fn error_chain_lists_causes_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl Display for Outer {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("reading recipe")
            }
        }
        impl StdError for Outer {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let e = Outer(std::io::Error::other("no such file"));
        assert_eq!(error_chain(&e), "reading recipe\ncaused by: no such file");
    }

    #[test]
    fn results_and_options_render() {
        let ok: Result<u32, std::io::Error> = Ok(3);
        assert_eq!(ok.into_output(), Output::Text("3".into()));
        let err: Result<u32, std::io::Error> = Err(std::io::Error::other("boom"));
        assert_eq!(err.into_output(), Output::Error("boom".into()));
        assert_eq!(None::<u8>.into_output(), Output::Text("None".into()));
    }

    #[test]
    fn figure_drops_xml_declaration() {
        let f = Figure::svg("<?xml version=\"1.0\"?>\n<svg></svg>");
        assert_eq!(f.into_output(), Output::Figure("<svg></svg>".into()));
    }

    #[test]
    fn wire_format_round_trips() {
        for o in [
            Output::Nothing,
            Output::Text("t".into()),
            Output::Figure("<svg/>".into()),
            Output::Error("e".into()),
        ] {
            assert_eq!(Output::from_parts(o.kind(), o.body().into()), Some(o));
        }
    }
}

/// What every cell sees without a `use`: the output types.
pub mod prelude {
    pub use crate::{Align, CellValue, Dbg, Figure, Html, Markdown, Output, Table};
}
