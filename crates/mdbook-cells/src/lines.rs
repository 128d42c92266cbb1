//! Where a generated module's lines came from in the chapter, and panic locations in both
//! forms: as the cache and store keep them, relative to the cell (or the shared part) they lie
//! in, and as a reader sees them, on the chapter's lines.
//!
//! A kept output must not depend on where its cell sits in the chapter: its key holds the
//! cell's code, not its position, so prose added above a cell reuses the output. A panic's
//! location is therefore kept as `src/ch.md:@cell+3` (the cell's fourth code line) or
//! `src/ch.md:@part1+2` (the second shared part's third line), and put back on the chapter's
//! lines when the build shows it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// Where each part of a generated module came from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LineMap {
    pub(crate) chapter: String,
    /// For each shared part: (first generated line, number of lines, first chapter line)
    pub(crate) prelude: Vec<(usize, usize, usize)>,
    /// The cell's code: (first generated line, number of lines, first chapter line).
    pub(crate) body: (usize, usize, usize),
    /// Chapter line blamed for the wrapper's own lines.
    pub(crate) last_line: usize,
}

/// A generated line's place in what the key covers: a shared part's line, the cell's, or the
/// wrapper's (blamed on the cell's last line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Shared { part: usize, offset: usize },
    Cell(usize),
    Wrapper,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Shared { part, offset } => write!(f, "@part{part}+{offset}"),
            Place::Cell(offset) => write!(f, "@cell+{offset}"),
            Place::Wrapper => f.write_str("@end"),
        }
    }
}

impl Place {
    fn parse(text: &str) -> Option<Place> {
        let text = text.strip_prefix('@')?;
        if text == "end" {
            return Some(Place::Wrapper);
        }
        let (what, offset) = text.split_once('+')?;
        let offset = offset.parse().ok()?;
        match what.strip_prefix("part") {
            Some(part) => Some(Place::Shared {
                part: part.parse().ok()?,
                offset,
            }),
            None => (what == "cell").then_some(Place::Cell(offset)),
        }
    }
}

impl LineMap {
    /// Chapter line of a generated line, and whether it lies in the prelude.
    pub(crate) fn chapter_line(&self, generated: usize) -> (usize, bool) {
        let place = self.place(generated);
        let line = self.line(place).unwrap_or(self.last_line);
        (line, matches!(place, Place::Shared { .. }))
    }

    fn place(&self, generated: usize) -> Place {
        for (part, &(start, len, _)) in self.prelude.iter().enumerate() {
            if (start..start + len).contains(&generated) {
                let offset = generated - start;
                return Place::Shared { part, offset };
            }
        }
        let (start, len, _) = self.body;
        if (start..start + len).contains(&generated) {
            Place::Cell(generated - start)
        } else {
            Place::Wrapper
        }
    }

    fn line(&self, place: Place) -> Option<usize> {
        match place {
            Place::Shared { part, offset } => self.prelude.get(part).map(|p| p.2 + offset),
            Place::Cell(offset) => Some(self.body.2 + offset),
            Place::Wrapper => Some(self.last_line),
        }
    }

    /// `message` with a kept panic location (`at src/ch.md:@cell+3`) on the chapter's lines.
    /// Anything else, and a place this cell does not have, is left as it is.
    pub(crate) fn resolve_panic_location(&self, message: &str) -> String {
        let marker = format!(" at {}:", self.chapter);
        let resolved = message.rfind(&marker).and_then(|at| {
            let rest = &message[at + marker.len()..];
            let line = self.line(Place::parse(rest.trim_end())?)?;
            Some(format!("{}{marker}{line}", &message[..at]))
        });
        resolved.unwrap_or_else(|| message.to_string())
    }
}

/// `message` with a panic location in a generated module (`at src/m.rs:12`) rewritten to be
/// kept: the chapter's file and the place relative to the cell or shared part.
pub(crate) fn keep_panic_location(maps: &BTreeMap<String, LineMap>, message: &str) -> String {
    rewrite_panic_location(maps, message, |map, generated| {
        map.place(generated).to_string()
    })
}

/// `message` with a panic location in a generated module rewritten to the chapter's line.
pub(crate) fn map_panic_location(maps: &BTreeMap<String, LineMap>, message: &str) -> String {
    rewrite_panic_location(maps, message, |map, generated| {
        map.chapter_line(generated).0.to_string()
    })
}

fn rewrite_panic_location(
    maps: &BTreeMap<String, LineMap>,
    message: &str,
    line: impl Fn(&LineMap, usize) -> String,
) -> String {
    let Some(at) = message.rfind(" at src/") else {
        return message.to_string();
    };
    let location = &message[at + 4..];
    let parsed = location.split_once(".rs:").and_then(|(file, generated)| {
        let map = maps.get(file.strip_prefix("src/")?)?;
        // rustc's location is `line:column`; the chapter's is a line.
        let generated: usize = generated.split(':').next()?.trim().parse().ok()?;
        Some(format!("{}:{}", map.chapter, line(map, generated)))
    });
    match parsed {
        Some(loc) => format!("{} at {loc}", &message[..at]),
        None => message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(cell_line: usize, part_line: usize) -> LineMap {
        LineMap {
            chapter: "src/intro.md".into(),
            prelude: vec![(4, 2, part_line)],
            body: (8, 3, cell_line),
            last_line: cell_line + 3,
        }
    }

    #[test]
    fn a_kept_location_follows_its_cell_when_prose_moves_it() {
        let maps = BTreeMap::from([("intro_md_0".to_string(), map(20, 3))]);
        let kept = keep_panic_location(&maps, "boom at src/intro_md_0.rs:9");
        assert_eq!(kept, "boom at src/intro.md:@cell+1");
        assert_eq!(
            map(20, 3).resolve_panic_location(&kept),
            "boom at src/intro.md:21"
        );
        // Three lines of prose above the cell, none above the prelude.
        assert_eq!(
            map(23, 3).resolve_panic_location(&kept),
            "boom at src/intro.md:24"
        );
        assert_eq!(
            map_panic_location(&maps, "boom at src/intro_md_0.rs:9"),
            "boom at src/intro.md:21"
        );
    }

    #[test]
    fn shared_parts_and_the_wrapper_have_places_of_their_own() {
        let maps = BTreeMap::from([("intro_md_0".to_string(), map(20, 3))]);
        let kept = keep_panic_location(&maps, "in helper at src/intro_md_0.rs:5");
        assert_eq!(kept, "in helper at src/intro.md:@part0+1");
        assert_eq!(
            map(30, 3).resolve_panic_location(&kept),
            "in helper at src/intro.md:4"
        );
        let kept = keep_panic_location(&maps, "oops at src/intro_md_0.rs:12");
        assert_eq!(
            map(30, 3).resolve_panic_location(&kept),
            "oops at src/intro.md:33"
        );
    }

    #[test]
    fn anything_else_is_left_as_it_is() {
        let maps = BTreeMap::from([("intro_md_0".to_string(), map(20, 3))]);
        for message in [
            "no location",
            "boom at src/other_md_1.rs:9",
            "boom at src/intro_md_0.rs:nine",
        ] {
            assert_eq!(keep_panic_location(&maps, message), message);
        }
        for message in [
            "boom at src/intro.md:21",
            "boom at src/intro.md:@part7+1",
            "boom at src/intro.md:@cell+x",
        ] {
            assert_eq!(map(20, 3).resolve_panic_location(message), message);
        }
    }
}
