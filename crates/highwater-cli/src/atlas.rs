//! `highwater atlas SOURCE...`: GPU autotune caches merged into one atlas for the card, with
//! what it covers and how well its miss policy predicts the GPU's picks.

use anyhow::{Context, Result};
use dryrun::Atlas;

use crate::args::AtlasArgs;
use basics::text_table::{Align, Rule, render};

pub(crate) fn atlas(a: AtlasArgs) -> Result<()> {
    let sources: Vec<(String, Atlas)> = a
        .sources
        .iter()
        .map(|dir| {
            let atlas = Atlas::read(dir)
                .with_context(|| format!("cannot read the autotune cache {}", dir.display()))?;
            Ok((dir.display().to_string(), atlas))
        })
        .collect::<Result<_>>()?;
    let atlas = Atlas::merge(sources.iter().map(|(_, a)| a.clone()));
    if let Some(out) = &a.out {
        if out.exists() {
            std::fs::remove_dir_all(out)
                .with_context(|| format!("cannot replace {}", out.display()))?;
        }
        atlas
            .write(out)
            .with_context(|| format!("cannot write the atlas {}", out.display()))?;
    }
    println!("{}", coverage(&sources));
    println!("{}", leave_one_out(&atlas));
    let r = dryrun::atlas::retuned(sources.iter().map(|(_, a)| a));
    println!(
        "the card against itself: {} problems tuned by more than one source, {} of them won by \
         different kernels",
        r.tuned_again, r.won_differently
    );
    if let Some(out) = &a.out {
        println!("wrote {} ({} problems)", out.display(), atlas.entries.len());
    }
    Ok(())
}

/// Per source: its problems, and how many the others hold (the atlas had it never run).
fn coverage(sources: &[(String, Atlas)]) -> String {
    let rows: Vec<Vec<String>> = sources
        .iter()
        .enumerate()
        .map(|(i, (name, own))| {
            let others = Atlas::merge(
                sources
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (_, a))| a.clone()),
            );
            let held = own.entries.iter().filter(|e| others.holds(e)).count();
            vec![
                name.clone(),
                own.entries.len().to_string(),
                format!("{held} of {}", own.entries.len()),
            ]
        })
        .collect();
    render(
        &[
            ("source", Align::Left),
            ("problems", Align::Right),
            ("held by the other sources", Align::Right),
        ],
        &rows,
        Rule::Dashed,
    )
}

/// Per tuner: problems whose GPU pick the miss policy names when that problem is left out.
fn leave_one_out(atlas: &Atlas) -> String {
    let loo = atlas.leave_one_out();
    let mut rows: Vec<Vec<String>> = loo
        .per_tuner
        .iter()
        .map(|(tuner, (right, all))| vec![tuner.clone(), format!("{right} of {all}")])
        .collect();
    let (right, all) = loo.total();
    rows.push(vec!["all".into(), format!("{right} of {all}")]);
    render(
        &[
            ("tuner", Align::Left),
            ("GPU pick predicted, each problem left out", Align::Right),
        ],
        &rows,
        Rule::Dashed,
    )
}
