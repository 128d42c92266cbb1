//! From the simulator's and the GPU's reports to the figures' series: steps numbered from 1,
//! a run's death marked where it happened.

use cell_output::Figure;
use highwater::RunReport;
use highwater::conform::{Conformance, RerunRecord};
use highwater_plot::{HighWaterChart, Series};

/// Values of steps 1, 2, … as a figure's points.
pub fn per_step(values: &[u64]) -> Vec<(u32, u64)> {
    values.iter().zip(1..).map(|(&v, step)| (step, v)).collect()
}

/// A simulated run's bytes reserved per step, labelled `ARM seed N`, marked at its death.
pub fn run_reserved(arm: &str, run: &RunReport) -> Series {
    Series {
        arm: arm.to_string(),
        label: format!("{arm} seed {}", run.seed),
        points: per_step(&run.reserved),
        died_at: run.died_at.map(step),
    }
}

/// A run's bytes reserved and its peak bytes in use per step, as two series of one arm
/// (`LABEL: reserved`, `LABEL: peak in use`), both marked at its death.
pub fn reserved_and_peak(label: &str, run: &RunReport) -> [Series; 2] {
    [
        ("reserved", &run.reserved),
        ("peak in use", &run.peak_in_use),
    ]
    .map(|(what, values)| Series {
        arm: label.to_string(),
        label: format!("{label}: {what}"),
        points: per_step(values),
        died_at: run.died_at.map(step),
    })
}

/// Which pools of a GPU record a series follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pools {
    /// The training thread's pool (`MemoryUsage::bytes_reserved`).
    Trainer,
    /// The pools of every stream (what the device handed out), or the trainer's where a record
    /// did not read them.
    EveryStream,
}

/// A GPU record's bytes reserved at each step it measured, in `pools`.
pub fn measured_points(record: &RerunRecord, pools: Pools) -> Vec<(u32, u64)> {
    record
        .steps
        .iter()
        .map(|m| {
            let bytes = match pools {
                Pools::Trainer => m.reserved,
                Pools::EveryStream => m.device_reserved.unwrap_or(m.reserved),
            };
            (step(m.step), bytes)
        })
        .collect()
}

/// A GPU record's bytes reserved per step as a series of `arm`, marked at its death.
pub fn measured(arm: &str, label: &str, record: &RerunRecord, pools: Pools) -> Series {
    Series {
        arm: arm.to_string(),
        label: label.to_string(),
        points: measured_points(record, pools),
        died_at: record.died.as_ref().map(|d| step(d.step)),
    }
}

/// The simulator's replay of a record (a [`Conformance`]), bytes reserved per step, marked at
/// the step it predicts the run dies.
pub fn simulated(arm: &str, label: &str, c: &Conformance) -> Series {
    Series {
        arm: arm.to_string(),
        label: label.to_string(),
        points: per_step(&c.simulated.reserved),
        died_at: c.predicted_died_at.map(step),
    }
}

/// The book's high-water figure: `series` against what the card leaves the pool.
pub fn chart(title: &str, capacity: u64, series: Vec<Series>) -> Figure {
    let chart = HighWaterChart {
        title: title.to_string(),
        card_bytes: capacity,
        series,
    };
    Figure::svg(chart.to_svg())
}

/// The same figure as headroom: per step, what the card leaves the pool (`capacity`) minus what
/// the pool holds, on a logarithmic axis, so that a run's walk towards the card's edge shows as
/// its approach to zero ([`HighWaterChart::to_headroom_svg`]).
pub fn headroom_chart(title: &str, capacity: u64, series: Vec<Series>) -> Figure {
    let chart = HighWaterChart {
        title: title.to_string(),
        card_bytes: capacity,
        series,
    };
    Figure::svg(chart.to_headroom_svg())
}

/// A step number as a figure's axis takes it (steps past `u32::MAX` are clamped: no run is
/// that long, `limits::MAX_STEPS` is 100 000).
fn step(s: u64) -> u32 {
    u32::try_from(s).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunReport {
        RunReport {
            recipe: "r.toml".into(),
            seed: 2,
            steps: 3,
            died_at: Some(3),
            peak_in_use: vec![5, 6, 7],
            in_use_after_forward: vec![1, 1, 1],
            in_use_after_backward: vec![1, 1, 1],
            reserved: vec![10, 20, 30],
            pages: vec![1, 2, 3],
            failures: vec![],
            capacity: 40,
            replayed_steps: 3,
            late_steps: 0,
        }
    }

    #[test]
    fn steps_count_from_one() {
        assert_eq!(per_step(&[7, 8]), [(1, 7), (2, 8)]);
        assert_eq!(step(u64::MAX), u32::MAX);
    }

    #[test]
    fn headroom_is_what_the_card_leaves() {
        let run = RunReport {
            reserved: vec![10 << 20, 30 << 20, 40 << 20],
            ..run()
        };
        let figure = headroom_chart("t", 40 << 20, vec![run_reserved("situ", &run)]);
        let cell_output::Output::Figure(svg) = cell_output::CellValue::into_output(figure) else {
            panic!("a figure");
        };
        // Headroom 30 MiB, 10 MiB and zero: ticks from 4 MiB (one below 8 MiB) to 32 MiB.
        for tick in ["headroom (log scale)", "4 MiB", "32 MiB", "s2 †3"] {
            assert!(svg.contains(tick), "{tick} missing");
        }
        assert!(!svg.contains("card capacity"));
    }

    #[test]
    fn a_run_becomes_its_series() {
        let s = run_reserved("situ-tensor", &run());
        assert_eq!(s.label, "situ-tensor seed 2");
        assert_eq!(s.points, [(1, 10), (2, 20), (3, 30)]);
        assert_eq!(s.died_at, Some(3));
        let [reserved, peak] = reserved_and_peak("batch 8", &run());
        assert_eq!(
            (reserved.label.as_str(), peak.label.as_str()),
            ("batch 8: reserved", "batch 8: peak in use")
        );
        assert_eq!(peak.points, [(1, 5), (2, 6), (3, 7)]);
        assert_eq!(peak.arm, "batch 8");
    }
}
