//! `graphrace check`: the static happens-before report of the captured step.

use std::io::Write;

use anyhow::Result;

use crate::args::OneArgs;
use crate::{captured, load};

pub(crate) fn check(args: &OneArgs) -> Result<()> {
    let config = load(&args.config)?;
    let captured = captured(&config, args.sessions)?;
    let report = captured.check();
    if args.json {
        say!("{}", serde_json::to_string(&report)?)?;
        return Ok(());
    }
    say!(
        "{} at {} sessions: {} kernels; races: {}, latent hazards: {}",
        config.name,
        args.sessions,
        captured.graph.nodes.len(),
        report.races().count(),
        report.findings.len() - report.races().count()
    )?;
    for f in &report.findings {
        say!("  {f}")?;
    }
    Ok(())
}
