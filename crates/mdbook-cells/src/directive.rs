//! The engine's directives in prose: `{{#cell ID}}` (a labelled cell's output, placed again)
//! and `{{#cell-report}}` (the execution report). Text in code — between backticks, inline or
//! fenced — is left alone, so a page can show the syntax.

/// A directive found in prose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Directive<'a> {
    /// `{{#cell ID}}`.
    Cell(&'a str),
    /// `{{#cell-report}}`.
    Report,
}

const OPEN: &str = "{{#cell";

/// `prose` with every directive outside code replaced by what `expand` returns for it and the
/// 0-based line of `prose` it is on. A `{{#cell…` that is not a directive is left as written.
pub(crate) fn expand(
    prose: &str,
    mut expand: impl FnMut(Directive<'_>, usize) -> String,
) -> String {
    outside_code(prose, '{', |before, at| {
        let (directive, len) = parse(at)?;
        Some((expand(directive, before.matches('\n').count()), len))
    })
}

/// The one walk over prose that the engine's replacements share (`@fig-…` references,
/// directives): `prose` copied, with `replace` offered every `mark` outside code — between
/// backticks, inline or fenced — as the prose before it and the text from it on. It answers
/// with a replacement and how many bytes of that text it stands for, or `None` to keep the
/// mark as written.
pub(crate) fn outside_code(
    prose: &str,
    mark: char,
    mut replace: impl FnMut(&str, &str) -> Option<(String, usize)>,
) -> String {
    let mut out = String::with_capacity(prose.len());
    let mut in_code = false;
    let mut at = 0;
    while let Some(pos) = prose[at..].find(['`', mark]) {
        let start = at + pos;
        out.push_str(&prose[at..start]);
        let rest = &prose[start..];
        if rest.starts_with('`') {
            let ticks = rest.len() - rest.trim_start_matches('`').len();
            in_code = !in_code;
            out.push_str(&rest[..ticks]);
            at = start + ticks;
            continue;
        }
        match (!in_code).then(|| replace(&prose[..start], rest)).flatten() {
            Some((text, len)) => {
                out.push_str(&text);
                at = start + len.max(1);
            }
            None => {
                out.push(mark);
                at = start + mark.len_utf8();
            }
        }
    }
    out.push_str(&prose[at..]);
    out
}

/// The directive at the start of `text` and its length in bytes.
fn parse(text: &str) -> Option<(Directive<'_>, usize)> {
    let inner = text.strip_prefix(OPEN)?;
    let end = inner.find("}}")?;
    let body = &inner[..end];
    let len = OPEN.len() + end + 2;
    if body == "-report" {
        return Some((Directive::Report, len));
    }
    let id = body.strip_prefix(' ')?.trim();
    let well_formed = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    well_formed.then_some((Directive::Cell(id), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expanded(prose: &str) -> String {
        expand(prose, |d, line| match d {
            Directive::Cell(id) => format!("<{id}@{line}>"),
            Directive::Report => format!("<report@{line}>"),
        })
    }

    #[test]
    fn directives_expand_outside_code_only() {
        assert_eq!(
            expanded("a\n{{#cell fig-x}}\nb {{#cell-report}}"),
            "a\n<fig-x@1>\nb <report@2>"
        );
        assert_eq!(expanded("`{{#cell fig-x}}` {x}"), "`{{#cell fig-x}}` {x}");
        assert_eq!(
            expanded("```md\n{{#cell fig-x}}\n```\n{{#cell tbl-y }}"),
            "```md\n{{#cell fig-x}}\n```\n<tbl-y@3>"
        );
        // Not directives: left as written.
        for text in [
            "{{#cell}}",
            "{{#cell Fig}}",
            "{{#cells x}}",
            "{{#cell fig-x",
            "{{#include a}}",
        ] {
            assert_eq!(expanded(text), text);
        }
    }

    /// Over the book's chapters and the fixtures, mutated: expanding never panics, every
    /// directive found names a well-formed id, and text without `{{#cell` comes back as it was.
    #[test]
    fn fuzz_directives_in_mutated_chapters() {
        use snapshots::fuzz::{self, Budget, Verdict};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seeds = fuzz::seeds_in(&root.join("../../src"), "md");
        seeds.extend(fuzz::seeds_in(&root.join("tests/fixtures"), "md"));
        let tally = fuzz::run("directives", &seeds, Budget::from_env(400), |bytes| {
            let text = String::from_utf8_lossy(bytes);
            let mut found = 0;
            let out = expand(&text, |d, line| {
                found += 1;
                assert!(line <= text.lines().count(), "line {line} past the end");
                if let Directive::Cell(id) = d {
                    assert!(
                        !id.is_empty() && !id.contains(char::is_whitespace),
                        "{id:?}"
                    );
                }
                String::new()
            });
            if !text.contains(OPEN) {
                assert_eq!(out, text);
            }
            if found > 0 {
                Verdict::Accepted
            } else {
                Verdict::Refused
            }
        });
        tally.assert_no_panics();
    }
}
