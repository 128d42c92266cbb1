//! Cells are code too. A build that lints (strict builds, or `lint = true`) asks `problems`
//! after `resolve` and before the pages: rustfmt's check, the prelude items no cell of their
//! chapter uses, and clippy's lints over the cells that compiled (the plan's cell crate written
//! again without the others), each a problem at its chapter line. Outside a build,
//! `mdbook-cells fmt` ([`fmt_book`]) rewrites every cell as rustfmt would.
//!
//! Formatting never makes a GPU cell's freeze stale: a freeze keys on tokens, so layout is
//! free, but where rustfmt would change the tokens a freeze keys on (a brace, a trailing comma),
//! the chapter's GPU cells and the code they share (prelude, parameters) are left as they are.
//!
//! rustfmt sees each cell's code as the body of a function (a prelude's or parameters cell's
//! items too), formatted `max_width + 4` wide and then taken out of the function, so a cell's
//! lines get the book's width. Lines inside a string literal are never touched.

use crate::compile::CellCrate;
use crate::context::Context;
use crate::error::Error;
use crate::freeze;
use crate::parse::{self, CellBlock, Segment};
use crate::plan::Plan;
use crate::shared;
use crate::types::{Document, Problem};
use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The indentation rustfmt gives a function's body.
const INDENT: usize = 4;

/// The lints' problems in a build, in this order: rustfmt's, unused prelude items, clippy's.
/// `compile_failed` are the modules of the cells that did not compile (clippy skips them).
pub(crate) fn problems(
    ctx: &Context<'_>,
    docs: &[Document],
    plan: &Plan,
    compile_failed: &HashSet<String>,
) -> Vec<Problem> {
    let chapters: Vec<(String, &[Segment])> = (docs.iter())
        .zip(&plan.chapters)
        .map(|(d, segments)| (d.source.clone(), segments.as_slice()))
        .collect();
    let mut problems = fmt_problems(ctx.root, &chapters);
    problems.extend(unused_prelude_problems(&chapters));
    problems.extend(clippy_problems(ctx, docs, plan, compile_failed));
    problems
}

/// The cells of one chapter formatted as rustfmt would: for each cell, `None` when its code is
/// already formatted or rustfmt cannot parse it (a cell that does not compile shows why).
fn formatted(root: &Path, cells: &[&CellBlock]) -> Vec<Option<String>> {
    let width = max_width(root);
    let codes: Vec<&str> = cells.iter().map(|c| c.code.as_str()).collect();
    // One rustfmt for the chapter; where one cell does not parse, one for each.
    let all = rustfmt(root, width, &codes).unwrap_or_else(|| {
        codes
            .iter()
            .map(|code| rustfmt(root, width, &[code]).and_then(|mut one| one.pop()))
            .map(|one| one.unwrap_or_default())
            .collect()
    });
    codes
        .iter()
        .zip(all)
        .map(|(code, new)| {
            let unchanged = new.is_empty() || new.trim_end() == code.trim_end();
            (!unchanged).then_some(new)
        })
        .collect()
}

/// Problems for every cell of `chapters` that rustfmt would write otherwise, at the first line
/// that differs.
fn fmt_problems(root: &Path, chapters: &[(String, &[Segment])]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (source, segments) in chapters {
        for (cell, new) in formattable(root, segments) {
            let Some(new) = new else { continue };
            let first = cell
                .code
                .lines()
                .zip(new.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| cell.code.lines().count().min(new.lines().count()));
            problems.push(Problem {
                file: source.clone(),
                line: cell.code_line + first,
                reason: "rustfmt would write this cell otherwise (from this line on); \
                         `mdbook-cells fmt` rewrites it"
                    .into(),
            });
        }
    }
    problems
}

/// Problems for each prelude item no cell of its chapter uses: a cell's module holds the whole
/// prelude and may leave most of it unused, so the compiler cannot say this.
fn unused_prelude_problems(chapters: &[(String, &[Segment])]) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (source, segments) in chapters {
        let cells: Vec<&CellBlock> = parse::cells(segments).collect();
        let Some(prelude) = cells.iter().find(|c| c.options.prelude) else {
            continue;
        };
        let codes: Vec<&str> = (cells.iter())
            .filter(|c| c.options.shared().is_none())
            .map(|c| c.code.as_str())
            .collect();
        for (line, item) in shared::unused_items(&prelude.code, &codes) {
            let item = item.lines().next().unwrap_or_default();
            problems.push(Problem {
                file: source.clone(),
                line: prelude.code_line + line - 1,
                reason: format!("no cell of this chapter uses this prelude item (`{item}`)"),
            });
        }
    }
    problems
}

/// clippy's warnings in the book's cells (and their chapters' shared code), at chapter lines.
/// The crate is the build's, less the cells that do not compile (their errors are shown
/// already; with them clippy would stop before linting).
fn clippy_problems(
    ctx: &Context<'_>,
    docs: &[Document],
    plan: &Plan,
    compile_failed: &HashSet<String>,
) -> Vec<Problem> {
    let sources = plan.cell_sources(docs, |f| !compile_failed.contains(&f.module));
    let found = CellCrate::write(ctx, &sources)
        .map_err(|e| e.to_string())
        .and_then(|krate| krate.lint());
    match found {
        Ok(found) => found
            .into_iter()
            .map(|(chapter, d)| Problem {
                file: chapter,
                line: d.line,
                reason: format!("clippy: {}", d.rendered.lines().next().unwrap_or_default()),
            })
            .collect(),
        Err(why) => vec![Problem {
            file: "book.toml".into(),
            line: 0,
            reason: format!("the cells could not be linted: {why}"),
        }],
    }
}

/// The cells of a chapter that formatting may rewrite, each with rustfmt's code for it (`None`
/// where rustfmt leaves it as it is or cannot parse it): all, unless that would change what a
/// GPU cell's freeze keys on ([`freeze::chapter_sources`]: tokens, so layout never does; a
/// rewrite that did would leave the freeze stale until its next GPU run). Then all but the GPU
/// cells and the code they share (prelude, parameters). rustfmt runs once.
fn formattable<'a>(root: &Path, segments: &'a [Segment]) -> Vec<(&'a CellBlock, Option<String>)> {
    let cells: Vec<&CellBlock> = parse::cells(segments).collect();
    let new = formatted(root, &cells);
    let gpu = cells.iter().any(|c| c.options.gpu);
    let keeps_freezes = !gpu || {
        let mut new_code = new.iter();
        let after: Vec<Segment> = (segments.iter())
            .map(|s| match s {
                Segment::Cell(c) => match new_code.next() {
                    Some(Some(code)) => Segment::Cell(CellBlock {
                        code: code.clone(),
                        ..c.clone()
                    }),
                    _ => s.clone(),
                },
                Segment::Prose(_) => s.clone(),
            })
            .collect();
        freeze::chapter_sources(&after) == freeze::chapter_sources(segments)
    };
    (cells.into_iter().zip(new))
        .filter(|(c, _)| keeps_freezes || !(c.options.gpu || c.options.shared().is_some()))
        .collect()
}

/// What `mdbook-cells fmt` did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Formatted {
    /// Chapters rewritten.
    pub files: Vec<PathBuf>,
    /// Cells rewritten.
    pub cells: usize,
}

/// Rewrites every cell of every chapter under `src` (relative to `root`) as rustfmt would;
/// a cell rustfmt cannot parse is left as it is.
pub fn fmt_book(root: &Path, src: &Path) -> Result<Formatted, Error> {
    let mut done = Formatted::default();
    let mut chapters = Vec::new();
    collect_markdown(&root.join(src), &mut chapters)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", root.join(src).display())))?;
    chapters.sort();
    for path in chapters {
        let io = |e: std::io::Error| Error::Crate {
            path: path.clone(),
            source: e,
        };
        let original = std::fs::read_to_string(&path).map_err(io)?;
        let mut markdown = original.clone();
        let mut rewritten = 0;
        // rustfmt does not always reach its fixed point in one pass (a long closure argument
        // can be laid out anew on the second): format until nothing changes.
        for _ in 0..PASSES {
            let (next, cells) = format_chapter(root, &markdown);
            if cells == 0 {
                break;
            }
            rewritten = rewritten.max(cells);
            markdown = next;
        }
        if markdown != original {
            std::fs::write(&path, &markdown).map_err(io)?;
            done.files.push(path.clone());
            done.cells += rewritten;
        }
    }
    Ok(done)
}

/// How many times `fmt` formats a chapter at most, waiting for rustfmt's fixed point.
const PASSES: usize = 4;

/// `markdown` with its cells formatted once, and how many changed.
fn format_chapter(root: &Path, markdown: &str) -> (String, usize) {
    let parsed = parse::split(markdown);
    let mut lines: Vec<String> = markdown.split_inclusive('\n').map(String::from).collect();
    let mut rewritten = 0;
    // From the last cell up, so that earlier cells' lines stay where they were.
    for (cell, new) in formattable(root, &parsed.segments).into_iter().rev() {
        let Some(new) = new else { continue };
        let from = cell.code_line - 1;
        let to = from + cell.code.lines().count();
        let new: Vec<String> = new.lines().map(|l| format!("{l}\n")).collect();
        lines.splice(from..to, new);
        rewritten += 1;
    }
    (lines.concat(), rewritten)
}

fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_markdown(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    Ok(())
}

/// The book's rustfmt `max_width` (its `rustfmt.toml`, or rustfmt's default).
fn max_width(root: &Path) -> usize {
    ["rustfmt.toml", ".rustfmt.toml"]
        .iter()
        .find_map(|name| {
            let text = std::fs::read_to_string(root.join(name)).ok()?;
            let table: toml::Table = toml::from_str(&text).ok()?;
            usize::try_from(table.get("max_width")?.as_integer()?).ok()
        })
        .unwrap_or(100)
}

/// Each of `codes` as rustfmt writes it as a function's body, taken out again; `None` when
/// rustfmt cannot parse them (or is missing).
fn rustfmt(root: &Path, width: usize, codes: &[&str]) -> Option<Vec<String>> {
    let mut input = String::new();
    for (i, code) in codes.iter().enumerate() {
        input.push_str(&format!("fn __cell_{i}__() {{\n{code}\n}}\n\n"));
    }
    let mut child = Command::new(std::env::var("RUSTFMT").unwrap_or("rustfmt".into()))
        .args(["--edition", "2024", "--emit", "stdout", "--config"])
        .arg(format!("max_width={}", width + INDENT))
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    // A thread writes while this one reads: a large chapter fills both pipes.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().ok()?;
    writer.join().ok()?.ok()?;
    if !output.status.success() {
        return None;
    }
    split_bodies(&String::from_utf8(output.stdout).ok()?, codes.len())
}

/// The bodies of `fn __cell_N__() { … }` in rustfmt's output, un-indented.
fn split_bodies(formatted: &str, n: usize) -> Option<Vec<String>> {
    let in_string = lines_inside_strings(formatted);
    let lines: Vec<&str> = formatted.lines().collect();
    let mut bodies = Vec::with_capacity(n);
    let mut i = 0;
    for k in 0..n {
        let open = format!("fn __cell_{k}__() {{");
        while lines.get(i)? != &open {
            i += 1;
        }
        i += 1;
        let mut body = String::new();
        let inside = |i: usize| in_string.get(i).copied().unwrap_or(false);
        while lines.get(i)? != &"}" || inside(i) {
            let line = lines[i];
            let line = if inside(i) {
                line
            } else {
                line.strip_prefix(&" ".repeat(INDENT))
                    .unwrap_or(line.trim_start())
            };
            body.push_str(line);
            body.push('\n');
            i += 1;
        }
        bodies.push(body);
    }
    Some(bodies)
}

/// For each line of `code`, whether it starts inside a string literal (its leading spaces are
/// the string's, not indentation).
fn lines_inside_strings(code: &str) -> Vec<bool> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Code,
        Str,
        Raw(usize),
        LineComment,
        BlockComment(usize),
    }
    let bytes = code.as_bytes();
    let mut state = State::Code;
    let mut starts = vec![false];
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        if b == b'\n' {
            if state == State::LineComment {
                state = State::Code;
            }
            starts.push(matches!(state, State::Str | State::Raw(_)));
            i += 1;
            continue;
        }
        match state {
            State::Code => match b {
                b'/' if next == Some(b'/') => state = State::LineComment,
                b'/' if next == Some(b'*') => {
                    state = State::BlockComment(1);
                    i += 1;
                }
                b'"' => state = State::Str,
                b'r' if matches!(next, Some(b'"' | b'#')) && !ident_before(bytes, i) => {
                    let hashes = bytes[i + 1..].iter().take_while(|&&c| c == b'#').count();
                    if bytes.get(i + 1 + hashes) == Some(&b'"') {
                        state = State::Raw(hashes);
                        i += 1 + hashes;
                    }
                }
                // A character literal ('"', '\''), not a lifetime.
                b'\'' if next == Some(b'\\') => {
                    i += 2;
                    while i < bytes.len() && !matches!(bytes[i], b'\'' | b'\n') {
                        i += 1;
                    }
                }
                b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
                _ => {}
            },
            State::Str => match b {
                // An escape; a line continuation's newline is still a line's end.
                b'\\' if next != Some(b'\n') => i += 1,
                b'"' => state = State::Code,
                _ => {}
            },
            State::Raw(hashes) => {
                if b == b'"' && bytes[i + 1..].iter().take_while(|&&c| c == b'#').count() >= hashes
                {
                    state = State::Code;
                    i += hashes;
                }
            }
            State::LineComment => {}
            State::BlockComment(depth) => {
                if b == b'*' && next == Some(b'/') {
                    state = if depth == 1 {
                        State::Code
                    } else {
                        State::BlockComment(depth - 1)
                    };
                    i += 1;
                } else if b == b'/' && next == Some(b'*') {
                    state = State::BlockComment(depth + 1);
                    i += 1;
                }
            }
        }
        i += 1;
    }
    starts
}

/// Whether the byte before `i` continues an identifier (`for` in `br"…"` is not a raw string's
/// `r`, but `letter` is not one either).
fn ident_before(bytes: &[u8], i: usize) -> bool {
    i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') && bytes[i - 1] != b'b'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_lines_are_found() {
        let code = "let a = \"x\n    y\";\nlet b = r#\"\n  \"q\"\n\"#;\nlet c = '\"';\n\
                    let d = 1; // \"\nlet e = \"a \\\n    b\";\n";
        assert_eq!(
            lines_inside_strings(code),
            [
                false, true, false, true, true, false, false, false, true, false
            ]
        );
    }

    #[test]
    fn bodies_are_taken_out_with_their_strings_untouched() {
        let out = "fn __cell_0__() {\n    let s = \"a\n    b\";\n    s\n}\n\nfn __cell_1__() {\n    1\n}\n";
        assert_eq!(
            split_bodies(out, 2).unwrap(),
            ["let s = \"a\n    b\";\ns\n", "1\n"]
        );
    }

    #[test]
    fn formatting_never_moves_a_gpu_cells_freeze() {
        let root = std::env::temp_dir();
        let chapter = |gpu_code: &str| {
            format!(
                "```cell\n//| prelude\nfn two()->u32{{2}}\n```\n\n```cell\n//| gpu\n{gpu_code}\n```\n\n\
                 ```cell\nlet x=two();x\n```\n"
            )
        };
        // Layout only: every cell may be rewritten, the GPU cell and the prelude too.
        let layout = parse::split(&chapter("let y=two();y"));
        let all = formattable(&root, &layout.segments);
        if all.iter().all(|(_, new)| new.is_none()) {
            return; // no rustfmt on this machine
        }
        assert_eq!(all.len(), 3, "{all:?}");
        assert!(all.iter().all(|(_, new)| new.is_some()), "{all:?}");
        // A rewrite that changes the GPU cell's tokens (rustfmt drops the braces and comma of
        // `1 => { 2 },`): only the plain cell is rewritten, with rustfmt's code.
        let tokens = parse::split(&chapter("match two() { 1 => { 2 }, _ => 3 }"));
        let kept = formattable(&root, &tokens.segments);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept[0].0.code, "let x=two();x\n");
        assert_eq!(kept[0].1.as_deref(), Some("let x = two();\nx\n"));
    }

    #[test]
    fn rustfmt_formats_cells_at_the_books_width() {
        let root = std::env::temp_dir();
        let Some(out) = rustfmt(&root, 100, &["let x=1;x", "let s = \"a\n  b\";\ns"]) else {
            return; // no rustfmt on this machine
        };
        assert_eq!(out, ["let x = 1;\nx\n", "let s = \"a\n  b\";\ns\n"]);
        assert!(
            rustfmt(&root, 100, &["let = ;"]).is_none(),
            "does not parse"
        );
    }
}
