//! Finding cells in a chapter's markdown and reading their `//| key: value` options.

use crate::outcome::SharedPart;
use crate::types::MAX_TIMEOUT_S;
use std::fmt;

/// A chapter split into prose and cells, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// Markdown between cells, as written.
    Prose(String),
    /// A cell.
    Cell(CellBlock),
}

impl Segment {
    /// The cell, if this segment is one.
    pub fn cell(&self) -> Option<&CellBlock> {
        match self {
            Segment::Cell(c) => Some(c),
            Segment::Prose(_) => None,
        }
    }
}

/// The cells of a chapter's `segments`, in order.
pub fn cells(segments: &[Segment]) -> impl Iterator<Item = &CellBlock> {
    segments.iter().filter_map(Segment::cell)
}

/// One ```` ```cell ```` block as written.
#[derive(Debug, Clone, PartialEq)]
pub struct CellBlock {
    /// 1-based line of the opening fence in the chapter.
    pub fence_line: usize,
    /// Its `//| key: value` options.
    pub options: CellOptions,
    /// The code without option lines.
    pub code: String,
    /// 1-based chapter line of the first line of `code`.
    pub code_line: usize,
    /// Problems with the options; the cell is not run when there are any.
    pub option_errors: Vec<OptionError>,
}

/// The per-cell options, from `//| key: value` lines at the top of a cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CellOptions {
    /// The page shows the output only.
    pub hide_code: bool,
    /// Show the code folded under the output, not above it; unset: folded when the code is
    /// longer than the book's `fold-code-over` lines.
    pub fold_code: Option<bool>,
    /// The page shows the code only (the cell still runs: a later cell may read what it wrote).
    pub hide_output: bool,
    /// The figure's or table's caption.
    pub caption: Option<String>,
    /// `fig-…` (numbered "Figure N") or `tbl-…` (numbered "Table N").
    pub id: Option<String>,
    /// Seconds of work (see `config::Config::timeout`); the book's default when absent.
    pub timeout: Option<u64>,
    /// The cell's failure is its content: it must fail, and its error is shown.
    pub expect_fail: bool,
    /// Runs only in GPU runs.
    pub gpu: bool,
    /// Items (uses, helpers) shared by every cell of the chapter; not run itself.
    pub prelude: bool,
    /// The chapter's parameters: `const` items a build may set (see `MDBOOK_CELLS_PARAM_…`),
    /// shared by every cell of the chapter like the prelude; shown as the values used.
    pub parameters: bool,
    /// Files or folders (relative to the book root) whose contents the output depends on.
    pub reads: Vec<String>,
    /// What the figure or table rests on, shown beside its caption.
    pub evidence: Vec<Evidence>,
    /// Why its output legitimately differs from run to run (a replay that depends on host
    /// timing): a build that verifies the output store then holds it by its asserts (it must
    /// run and succeed) instead of byte for byte.
    pub varies: Option<String>,
}

/// What a figure or table rests on, named at the point of use so a reader can weigh it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// Measured on a GPU.
    Gpu,
    /// Predicted by the dry run: the framework's own code over a runtime that never computes.
    Dry,
    /// Simulated by a model with calibrated parameters.
    Simulated,
    /// Taken from the incident report.
    Incident,
    /// Computed from code or configuration, with nothing run on a device.
    Derived,
    /// Describes a tool or the book; no claim about a run.
    Reference,
}

impl Evidence {
    /// Every kind, as the option spells it.
    pub const ALL: [(&'static str, Evidence); 6] = [
        ("gpu", Evidence::Gpu),
        ("dry", Evidence::Dry),
        ("simulated", Evidence::Simulated),
        ("incident", Evidence::Incident),
        ("derived", Evidence::Derived),
        ("reference", Evidence::Reference),
    ];

    /// The option's spelling (also the page's `data-evidence`).
    pub fn name(self) -> &'static str {
        Evidence::ALL.iter().find(|(_, e)| *e == self).unwrap().0
    }

    /// What the page says.
    pub fn label(self) -> &'static str {
        match self {
            Evidence::Gpu => "measured on a GPU",
            Evidence::Dry => "predicted dry",
            Evidence::Simulated => "simulated, calibrated",
            Evidence::Incident => "from the incident report",
            Evidence::Derived => "derived from code",
            Evidence::Reference => "reference",
        }
    }
}

/// Every option a cell may set, for suggestions when one is misspelt.
pub const OPTION_NAMES: &[&str] = &[
    "hide-code",
    "fold-code",
    "hide-output",
    "caption",
    "id",
    "timeout",
    "expect-fail",
    "gpu",
    "prelude",
    "parameters",
    "reads",
    "evidence",
    "varies",
];

/// Something wrong with a cell found while parsing, at its chapter line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    /// 1-based chapter line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// A chapter split into prose and cells, and the cells it holds where they cannot run.
#[derive(Debug, Clone, PartialEq)]
pub struct Chapter {
    /// Prose and cells, in order.
    pub segments: Vec<Segment>,
    /// A ```` ```cell ```` block inside a blockquote, a list item or a footnote: left as prose
    /// (mdbook shows it as code), not run, and a problem at its line.
    pub misplaced: Vec<OptionError>,
}

/// Splits markdown into prose and cells, reading blocks as mdbook does (pulldown-cmark with
/// mdbook's extensions), so that what runs is exactly what the page shows as a top-level fenced
/// block. Other fenced blocks (a ```` ```rust ```` example showing cell syntax, say) are prose;
/// so is a cell inside an HTML comment or another HTML block (commented out: not run).
pub fn split(markdown: &str) -> Chapter {
    use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_DEFINITION_LIST
        | Options::ENABLE_GFM;
    let line_of = |offset: usize| markdown[..offset].matches('\n').count() + 1;
    let mut segments = Vec::new();
    let mut misplaced = Vec::new();
    let mut containers = 0usize;
    let mut prose_from = 0;
    // Inside a raw HTML block: whether it is a comment (a cell there is commented out).
    let mut html: Option<bool> = None;
    for (event, range) in Parser::new_ext(markdown, options).into_offset_iter() {
        match event {
            Event::Start(
                Tag::BlockQuote(_)
                | Tag::List(_)
                | Tag::Item
                | Tag::FootnoteDefinition(_)
                | Tag::DefinitionList
                | Tag::DefinitionListTitle
                | Tag::DefinitionListDefinition,
            ) => containers += 1,
            Event::End(
                TagEnd::BlockQuote(_)
                | TagEnd::List(_)
                | TagEnd::Item
                | TagEnd::FootnoteDefinition
                | TagEnd::DefinitionList
                | TagEnd::DefinitionListTitle
                | TagEnd::DefinitionListDefinition,
            ) => containers = containers.saturating_sub(1),
            Event::Start(Tag::HtmlBlock) => html = Some(false),
            Event::End(TagEnd::HtmlBlock) => html = None,
            Event::Html(text) if html.is_some() => {
                let comment = *html.get_or_insert(false) || text.trim_start().starts_with("<!--");
                html = Some(comment);
                // Markdown inside raw HTML is not parsed: a fence there is text on the page.
                let fence = text.lines().any(|l| {
                    let l = l.trim_start();
                    (l.starts_with("```") || l.starts_with("~~~"))
                        && is_cell(l.trim_start_matches(['`', '~']).trim())
                });
                if fence && !comment {
                    misplaced.push(OptionError {
                        line: line_of(range.start),
                        message: "a cell inside an HTML block is not run (markdown inside raw \
                                  HTML is not read); leave a blank line between the HTML tag \
                                  and the cell"
                            .into(),
                    });
                }
            }
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if is_cell(&info) => {
                if containers > 0 {
                    misplaced.push(OptionError {
                        line: line_of(range.start),
                        message: "a cell inside a blockquote, list item or footnote is not run; \
                                  move it to the top level of the chapter (no `>` or list indent)"
                            .into(),
                    });
                    continue;
                }
                // Whole lines: from the fence's line to the end of the closing fence's line.
                let start = markdown[..range.start].rfind('\n').map_or(0, |i| i + 1);
                let end = if markdown[..range.end].ends_with('\n') {
                    range.end
                } else {
                    markdown[range.end..]
                        .find('\n')
                        .map_or(markdown.len(), |i| range.end + i + 1)
                };
                let Some(cell) = CellBlock::from_block(line_of(start), &markdown[start..end])
                else {
                    continue;
                };
                if prose_from < start {
                    segments.push(Segment::Prose(markdown[prose_from..start].to_string()));
                }
                segments.push(Segment::Cell(cell));
                prose_from = end;
            }
            _ => {}
        }
    }
    if prose_from < markdown.len() {
        segments.push(Segment::Prose(markdown[prose_from..].to_string()));
    }
    Chapter {
        segments,
        misplaced,
    }
}

fn is_cell(info: &str) -> bool {
    info.split([',', ' ']).next() == Some("cell")
}

struct Fence {
    marker: char,
    len: usize,
}

impl Fence {
    fn open(line: &str) -> Option<Fence> {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            return None;
        }
        let marker = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
        let len = trimmed.chars().take_while(|c| *c == marker).count();
        if len < 3 {
            return None;
        }
        let info = trimmed[len..].trim();
        if marker == '`' && info.contains('`') {
            return None;
        }
        Some(Fence { marker, len })
    }

    fn closes(&self, line: &str) -> bool {
        let trimmed = line.trim_start_matches(' ');
        if line.len() - trimmed.len() > 3 {
            return false;
        }
        let len = trimmed.chars().take_while(|c| *c == self.marker).count();
        len >= self.len && trimmed[len..].trim().is_empty()
    }
}

impl CellBlock {
    /// A cell from its block's text: the opening fence, the body, the closing fence if any.
    fn from_block(fence_line: usize, block: &str) -> Option<CellBlock> {
        let lines: Vec<&str> = block.split_inclusive('\n').collect();
        let fence = Fence::open(lines.first()?)?;
        let closed = lines.len() > 1 && fence.closes(lines[lines.len() - 1]);
        let body = &lines[1..lines.len() - usize::from(closed)];
        Some(CellBlock::new(fence_line, body))
    }

    fn new(fence_line: usize, body: &[&str]) -> CellBlock {
        let mut options = CellOptions::default();
        let mut option_errors = Vec::new();
        let mut skip = 0;
        for (i, raw) in body.iter().enumerate() {
            let Some(opt) = raw.trim_start().strip_prefix("//|") else {
                break;
            };
            skip = i + 1;
            let line = fence_line + 1 + i;
            if let Err(message) = options.set(opt.trim()) {
                option_errors.push(OptionError { line, message });
            }
        }
        // An option line further down would be a comment the author meant as an option.
        for (i, raw) in body.iter().enumerate().skip(skip) {
            if raw.trim_start().starts_with("//|") {
                option_errors.push(OptionError {
                    line: fence_line + 1 + i,
                    message: "an option line after the cell's code began; options go in the \
                              cell's first lines, before any code or blank line"
                        .into(),
                });
            }
        }
        if !options.evidence.is_empty() && options.caption.is_none() {
            option_errors.push(OptionError {
                line: fence_line,
                message: "`evidence` is shown beside a `caption`: give the cell one".into(),
            });
        }
        if options.id.is_some() && options.caption.is_none() {
            option_errors.push(OptionError {
                line: fence_line,
                message: "`id` needs a `caption` (the text after \"Figure N:\")".into(),
            });
        }
        for (shared, name) in [
            (options.prelude, "prelude"),
            (options.parameters, "parameters"),
        ] {
            if shared && (options.expect_fail || options.gpu) {
                option_errors.push(OptionError {
                    line: fence_line,
                    message: format!("a `{name}` cell is not run: it takes no expect-fail or gpu"),
                });
            }
        }
        // A parameters cell shows a table of the values used, which may be numbered; a prelude
        // shows nothing to number.
        if options.prelude && options.id.is_some() {
            option_errors.push(OptionError {
                line: fence_line,
                message: "a `prelude` cell shows nothing: it takes no id".into(),
            });
        }
        if options.prelude && options.parameters {
            option_errors.push(OptionError {
                line: fence_line,
                message: "a cell is the chapter's `prelude` or its `parameters`, not both".into(),
            });
        }
        CellBlock {
            fence_line,
            options,
            code: body[skip..].concat(),
            code_line: fence_line + 1 + skip,
            option_errors,
        }
    }

    /// The chapter line of the code's last non-blank line (where a cell's value is).
    pub fn last_code_line(&self) -> usize {
        let last = self
            .code
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, _)| i)
            .last()
            .unwrap_or(0);
        self.code_line + last
    }
}

impl CellOptions {
    /// Which of its chapter's shared cells this is, if it is one: code the cells share, not
    /// run by itself.
    pub fn shared(&self) -> Option<SharedPart> {
        if self.prelude {
            Some(SharedPart::Prelude)
        } else if self.parameters {
            Some(SharedPart::Parameters)
        } else {
            None
        }
    }

    fn set(&mut self, option: &str) -> Result<(), String> {
        let (key, value) = match option.split_once(':') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (option.trim(), None),
        };
        let flag = |value: Option<&str>| -> Result<bool, String> {
            match value {
                None | Some("true") => Ok(true),
                Some("false") => Ok(false),
                Some(v) => Err(format!("option `{key}` takes true or false, not `{v}`")),
            }
        };
        let text = |value: Option<&str>| -> Result<String, String> {
            match value {
                Some(v) if !v.is_empty() => Ok(unquote(v).to_string()),
                _ => Err(format!("option `{key}` needs a value: `//| {key}: …`")),
            }
        };
        match key {
            "hide-code" => self.hide_code = flag(value)?,
            "fold-code" => self.fold_code = Some(flag(value)?),
            "hide-output" => self.hide_output = flag(value)?,
            "expect-fail" => self.expect_fail = flag(value)?,
            "gpu" => self.gpu = flag(value)?,
            "prelude" => self.prelude = flag(value)?,
            "parameters" => self.parameters = flag(value)?,
            "caption" => self.caption = Some(text(value)?),
            "id" => {
                let id = text(value)?;
                let valid = id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
                if !(id.starts_with("fig-") || id.starts_with("tbl-")) || !valid || id.len() < 5 {
                    return Err(format!(
                        "id `{id}` must be `fig-…` or `tbl-…` in lowercase letters, digits and `-`"
                    ));
                }
                self.id = Some(id);
            }
            "timeout" => {
                let v = text(value)?;
                let secs = v
                    .trim_end_matches('s')
                    .parse::<u64>()
                    .ok()
                    .filter(|s| (1..=MAX_TIMEOUT_S).contains(s));
                self.timeout = Some(secs.ok_or_else(|| {
                    format!(
                        "option `timeout` takes a whole number of seconds from 1 to at most \
                         {MAX_TIMEOUT_S}, not `{v}`"
                    )
                })?);
            }
            "evidence" => {
                self.evidence = Vec::new();
                for kind in text(value)?.split(',').map(str::trim) {
                    let found = Evidence::ALL.iter().find(|(name, _)| *name == kind);
                    let Some(&(_, e)) = found else {
                        let names: Vec<&str> = Evidence::ALL.iter().map(|(n, _)| *n).collect();
                        return Err(format!(
                            "option `evidence` takes {} (comma-separated), not `{kind}`",
                            names.join(", ")
                        ));
                    };
                    if !self.evidence.contains(&e) {
                        self.evidence.push(e);
                    }
                }
            }
            "varies" => self.varies = Some(text(value)?),
            "reads" => {
                self.reads = text(value)?
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect();
            }
            "" => return Err("empty option line".into()),
            unknown => {
                let hint = closest(unknown, OPTION_NAMES)
                    .map(|s| format!("; did you mean `{s}`?"))
                    .unwrap_or_else(|| format!("; options are: {}", OPTION_NAMES.join(", ")));
                return Err(format!("unknown option `{unknown}`{hint}"));
            }
        }
        Ok(())
    }
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

/// The known name closest to a misspelling, if it is close enough to be what was meant.
pub fn closest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (strsim::levenshtein(word, n), *n))
        .filter(|(d, n)| *d <= 2.max(n.len() / 4))
        .min()
        .map(|(_, n)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(md: &str) -> Vec<CellBlock> {
        split(md)
            .segments
            .into_iter()
            .filter_map(|s| match s {
                Segment::Cell(c) => Some(c),
                Segment::Prose(_) => None,
            })
            .collect()
    }

    #[test]
    fn finds_cells_and_keeps_other_fences_as_prose() {
        let md = "# T\n\n````markdown\n```cell\nnot a cell\n```\n````\n\n```cell\n//| hide-code\n//| caption: \"Peak\"\n1 + 1\n```\ntail\n";
        let segs = split(md).segments;
        assert_eq!(segs.len(), 3);
        let Segment::Prose(p) = &segs[0] else {
            panic!()
        };
        assert!(p.contains("not a cell"));
        let c = &cells(md)[0];
        assert_eq!(c.fence_line, 9);
        assert_eq!(c.code, "1 + 1\n");
        assert_eq!(c.code_line, 12);
        assert!(c.options.hide_code);
        assert_eq!(c.options.caption.as_deref(), Some("Peak"));
        assert!(c.option_errors.is_empty());
        let Segment::Prose(tail) = &segs[2] else {
            panic!()
        };
        assert_eq!(tail, "tail\n");
    }

    #[test]
    fn misspelt_option_names_line_and_suggestion() {
        let c = &cells("text\n```cell\n//| hide-cod\n//| timeout: soon\n1\n```\n")[0];
        assert_eq!(c.option_errors.len(), 2);
        assert_eq!(c.option_errors[0].line, 3);
        assert!(
            c.option_errors[0]
                .message
                .contains("did you mean `hide-code`?")
        );
        assert_eq!(c.option_errors[1].line, 4);
        assert!(
            c.option_errors[1]
                .message
                .contains("whole number of seconds")
        );
    }

    #[test]
    fn ids_need_a_known_prefix_and_a_caption() {
        let c = &cells("```cell\n//| id: figure-1\n1\n```\n")[0];
        assert!(c.option_errors[0].message.contains("`fig-…` or `tbl-…`"));
        let c = &cells("```cell\n//| id: fig-peak\n1\n```\n")[0];
        assert!(c.option_errors[0].message.contains("needs a `caption`"));
    }

    #[test]
    fn a_parameters_table_may_be_numbered_and_a_prelude_not() {
        let md = "```cell\n//| parameters\n//| id: tbl-p\n//| caption: c\nconst A: u8 = 1;\n```\n";
        assert!(cells(md)[0].option_errors.is_empty());
        let c = &cells("```cell\n//| prelude\n//| id: tbl-p\n//| caption: c\nfn a() {}\n```\n")[0];
        assert!(c.option_errors[0].message.contains("takes no id"));
        let c = &cells("```cell\n//| parameters\n//| gpu\nconst A: u8 = 1;\n```\n")[0];
        assert!(c.option_errors[0].message.contains("no expect-fail or gpu"));
    }

    #[test]
    fn evidence_takes_known_kinds_and_needs_a_caption() {
        let c = &cells("```cell\n//| caption: c\n//| evidence: gpu, dry, gpu\n1\n```\n")[0];
        assert!(c.option_errors.is_empty(), "{:?}", c.option_errors);
        assert_eq!(c.options.evidence, [Evidence::Gpu, Evidence::Dry]);
        let c = &cells("```cell\n//| caption: c\n//| evidence: measured\n1\n```\n")[0];
        let message = &c.option_errors[0].message;
        assert!(message.contains("not `measured`"), "{message}");
        assert!(message.contains("gpu, dry, simulated"), "{message}");
        let c = &cells("```cell\n//| evidence: dry\n1\n```\n")[0];
        assert!(c.option_errors[0].message.contains("beside a `caption`"));
        for (name, e) in Evidence::ALL {
            assert_eq!(e.name(), name);
        }
    }

    #[test]
    fn unclosed_cell_runs_to_the_end_and_reads_list() {
        let c = &cells("```cell\n//| reads: a.toml, dir/\nlet x = 1;\n")[0];
        assert_eq!(c.options.reads, ["a.toml", "dir/"]);
        assert_eq!(c.code, "let x = 1;\n");
    }

    #[test]
    fn only_top_level_cells_run_and_nested_ones_are_flagged() {
        let md = "> ```cell\n> 1\n> ```\n\n- item\n\n  ```cell\n  2\n  ```\n\n\
                  1. one\n   - two\n\n     ```cell\n     3\n     ```\n\n\
                  <!--\n```cell\nstd::fs::remove_dir_all(\"/\").ok()\n```\n-->\n\n\
                  ```cell\n4\n```\n";
        let chapter = split(md);
        let lines: Vec<usize> = chapter.misplaced.iter().map(|m| m.line).collect();
        assert_eq!(lines, [1, 7, 14], "{:?}", chapter.misplaced);
        let cells = cells(md);
        assert_eq!(cells.len(), 1, "only the top-level cell: {cells:?}");
        assert_eq!((cells[0].code.as_str(), cells[0].fence_line), ("4\n", 24));
        // Nothing is lost: prose and cells still add up to the chapter.
        let text: String = chapter
            .segments
            .iter()
            .map(|s| match s {
                Segment::Prose(p) => p.clone(),
                Segment::Cell(c) => format!("```cell\n{}```\n", c.code),
            })
            .collect();
        assert_eq!(text, md);
    }

    #[test]
    fn a_cell_swallowed_by_an_html_block_is_flagged_unless_commented_out() {
        let md = "<details>\n```cell\n1\n```\n</details>\n\n<details>\n\n```cell\n2\n```\n\n\
                  </details>\n\n<!-- old\n```cell\n3\n```\n-->\n";
        let chapter = split(md);
        let lines: Vec<usize> = chapter.misplaced.iter().map(|m| m.line).collect();
        // At the swallowed fence's own line.
        assert_eq!(lines, [2], "{:?}", chapter.misplaced);
        assert!(chapter.misplaced[0].message.contains("blank line"));
        let cells = cells(md);
        assert_eq!(cells.len(), 1);
        assert_eq!(cells[0].code, "2\n");
    }

    #[test]
    fn an_option_line_after_the_code_began_is_an_error() {
        let c = &cells("```cell\n\n//| caption: lost\n1\n```\n")[0];
        assert_eq!(c.options.caption, None);
        assert_eq!(c.option_errors.len(), 1);
        assert_eq!(c.option_errors[0].line, 3);
        assert!(c.option_errors[0].message.contains("cell's first lines"));
    }

    #[test]
    fn timeouts_are_bounded() {
        let c = &cells("```cell\n//| timeout: 18446744073709551615\n1\n```\n")[0];
        assert!(
            c.option_errors[0].message.contains("at most 86400"),
            "{c:?}"
        );
        let c = &cells("```cell\n//| timeout: 0\n1\n```\n")[0];
        assert_eq!(c.option_errors.len(), 1);
        let c = &cells("```cell\n//| timeout: 600s\n1\n```\n")[0];
        assert_eq!(c.options.timeout, Some(600));
    }

    #[test]
    fn last_code_line_skips_trailing_blanks() {
        let c = &cells("```cell\nlet a = 1;\na\n\n```\n")[0];
        assert_eq!(c.last_code_line(), 3);
    }
}
