//! `graphrace timeline`: the kernels of the first replay in which something collided, and what
//! collided.

use std::io::Write;

use anyhow::Result;

use crate::args::OneArgs;
use crate::{captured, load, print_table};

pub(crate) fn timeline(args: &OneArgs) -> Result<()> {
    let config = load(&args.config)?;
    let captured = captured(&config, args.sessions)?;
    let Some((draw, replay)) =
        captured.first_racing_replay(args.load.timing(), args.load.workload())
    else {
        if args.json {
            say!("null")?;
        } else {
            say!(
                "{} at {} sessions: no replay collided in {} trials × {} replays",
                config.name,
                args.sessions,
                args.load.trials,
                args.load.replays
            )?;
        }
        return Ok(());
    };
    if args.json {
        say!("{}", serde_json::json!({"draw": draw, "replay": replay}))?;
        return Ok(());
    }
    let g = &captured.graph;
    say!(
        "{} at {} sessions: trial {}, replay {}",
        config.name,
        args.sessions,
        draw.trial,
        draw.replay
    )?;
    let rows: Vec<Vec<String>> = replay
        .spans
        .iter()
        .map(|s| {
            let k = &g.nodes[s.node].kernel;
            vec![
                k.name.clone(),
                k.stream.name().to_string(),
                format!("{:.1}", s.start_us),
                format!("{:.1}", s.end_us),
            ]
        })
        .collect();
    print_table(
        &["kernel", "stream", "start µs", "end µs"].map(String::from),
        &rows,
    )?;
    for c in &replay.collisions {
        say!(
            "collision: {} {} `{}` while {} writes `{}` ({:.1}–{:.1} µs): sessions {}..{}",
            g.nodes[c.victim_node].kernel.name,
            if c.victim.write { "writes" } else { "reads" },
            g.tensor_name(c.victim.tensor),
            g.nodes[c.writer_node].kernel.name,
            g.tensor_name(c.writer.tensor),
            c.window_us.start,
            c.window_us.end,
            c.sessions.start,
            c.sessions.end
        )?;
    }
    Ok(())
}
