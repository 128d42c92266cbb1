//! *A Heisenbug in the graph pool* (`src/part-2/heisenbug.md`): what its cells compute.

use std::collections::BTreeSet;

use cell_output::Table;

use crate::BookError;
use crate::load::Book;

/// The model's configurations and the experiment each stands for: one row per configuration
/// an experiment of the hunt names (the first that names it), then `record_stream`, which the
/// incident never tried. Its columns are the switches the next chapters turn.
pub fn configurations_table(book: &Book) -> Result<Table, BookError> {
    let mut t = Table::new([
        "experiment",
        "configuration",
        "index keys",
        "mode",
        "overlap",
        "logits cached",
        "clone",
        "record_stream",
    ]);
    // The experiments' configurations, each once, then the one the incident never tried.
    let mut seen = BTreeSet::new();
    let mut rows = Vec::new();
    for e in book.experiments()? {
        let Some(name) = e.model else { continue };
        if seen.insert(name.clone()) {
            rows.push((e.name, name));
        }
    }
    rows.push(("(not tried in the incident)".into(), "record-stream".into()));
    for (experiment, name) in rows {
        let c = book.graphrace_config(&name)?;
        t.push([
            experiment,
            format!("repro/graphrace/{name}.toml"),
            format!("{:?}", c.index_keys).to_lowercase(),
            format!("{:?}", c.mode).to_lowercase(),
            c.overlap.to_string(),
            c.logits_cached.to_string(),
            c.perturbing_clone.to_string(),
            c.record_stream.to_string(),
        ]);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_once_and_record_stream_last() {
        let book = Book::repository();
        let t = configurations_table(&book).unwrap();
        let files: Vec<&str> = t.rows().iter().map(|r| r[1].as_str()).collect();
        let unique: BTreeSet<&str> = files.iter().copied().collect();
        assert_eq!(unique.len(), files.len(), "{files:?}");
        assert!(
            files.contains(&"repro/graphrace/incident.toml"),
            "{files:?}"
        );
        let last = t.rows().last().unwrap();
        assert_eq!(last[0], "(not tried in the incident)");
        assert_eq!(last[7], "true", "{last:?}");
        // The incident's own configuration overlaps and does not record the side's use.
        let incident = t
            .rows()
            .iter()
            .find(|r| r[1].ends_with("/incident.toml"))
            .unwrap();
        assert_eq!(
            (incident[4].as_str(), incident[7].as_str()),
            ("true", "false")
        );
    }
}
