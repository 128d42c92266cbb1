//! *The simulator's corrections* (`src/reference/simulator-corrections.md`): each correction
//! the H200 runs forced on the simulator, with the figures that justified it read from the
//! records, so the page cannot drift from them.

use cell_output::Table;
use highwater::conform::{RerunRecord, conform};

use crate::BookError;
use crate::{Book, bytes};

/// The figures behind the corrections table, each read from the H200's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrections {
    /// Correction 1: bytes live after forward on CubeBackend beyond burn-fusion (the SiTU
    /// tensor path, no checkpointing), what burn-fusion's fresh buffer saves.
    pub saved: u64,
    /// Expert calls per step of that recipe, over which `saved` is spread.
    pub calls: u64,
    /// Correction 2: the stack's output kept under Balanced, one `[N, d_model]` activation.
    pub output: u64,
    /// Corrections 3 and 4: uncapped CubeBackend runs predicted to the byte at every step
    /// from step 2.
    pub exact: usize,
    /// The uncapped CubeBackend runs.
    pub cube_runs: usize,
    /// Correction 5: bytes reserved at the last step from a cold autotune cache.
    pub cold: u64,
    /// The same with the cache warm, which the simulator matches exactly.
    pub warm: u64,
    /// The Balanced burn-fusion runs the simulator lists as known misses.
    pub known_misses: usize,
}

impl Corrections {
    /// Reads the figures from the GPU records and the simulator's conformance over them; fails
    /// (as the table's claim would) if the warm autotune run is not simulated exactly.
    pub fn of(book: &Book) -> Result<Corrections, BookError> {
        let runs = book.rerun_records()?;
        let record = |name: &str| -> Result<&RerunRecord, BookError> {
            Ok(&runs
                .iter()
                .find(|(n, _)| n == name)
                .ok_or(format!("{name} not recorded"))?
                .1)
        };
        // 1. What burn-fusion's fresh buffer saves: CubeBackend less Fusion, live after forward.
        let (cube, fusion) = (
            record("rerun-wave-stack-situ-tensor-cube-none")?,
            record("rerun-wave-stack-situ-tensor-fusion-none")?,
        );
        let calls = cube.recipe()?.calls();
        let last = |r: &RerunRecord| r.steps.last().map_or(0, |s| s.in_use_after_forward);
        let saved = last(cube) - last(fusion);
        // 2. The stack's output kept under Balanced: one [N, d_model] activation.
        let recipe = cube.recipe()?;
        let output = recipe.tokens() * recipe.d_model * recipe.dtype.size();
        // 3 and 4: CubeBackend runs whose pages the simulator now predicts to the byte from
        // step 2.
        let (mut exact, mut cube_runs) = (0, 0);
        for (_, r) in runs
            .iter()
            .filter(|(_, r)| r.device.cap_bytes.is_none() && r.backend == highwater::Backend::Cube)
        {
            let c = conform(r)?;
            cube_runs += 1;
            exact += usize::from(
                r.steps
                    .iter()
                    .skip(1)
                    .zip(c.simulated.reserved.iter().skip(1))
                    .all(|(m, &s)| m.reserved == s),
            );
        }
        // 5. A cold autotune cache: what the first run reserves beyond a warm one.
        let at = |cache: &str| -> Result<(u64, u64), BookError> {
            let r = book.rerun_record(format!(
                "repro/results/autotune/{cache}/rerun-wave-stack-silu-cube-none.json"
            ))?;
            let c = conform(&r)?;
            Ok((
                r.steps.last().ok_or("no step")?.reserved,
                *c.simulated.reserved.last().ok_or("no step")?,
            ))
        };
        let ((cold, _), (warm, warm_sim)) = (at("cold")?, at("warm")?);
        assert_eq!(warm, warm_sim, "the table: exact with the cache warm");
        Ok(Corrections {
            saved,
            calls,
            output,
            exact,
            cube_runs,
            cold,
            warm,
            known_misses: book.known_misses()?.len(),
        })
    }

    /// The page's table: each correction, what the GPU showed, and its effect; then what is
    /// still not modelled.
    pub fn table(&self) -> Table {
        let Corrections {
            saved,
            calls,
            output,
            exact,
            cube_runs,
            cold,
            warm,
            known_misses,
        } = *self;
        let mut t = Table::new(["#", "correction", "what the GPU showed", "effect"]);
        t.push([
            "1".to_string(),
            "burn-fusion does not write in place into a strided view".into(),
            format!(
                "SiTU tensor path, no checkpointing: {} less live after forward on burn-fusion \
                 than on CubeBackend, {} per expert call ({calls} calls)",
                bytes::show(saved),
                bytes::show(saved / calls)
            ),
            "on CubeBackend `u/c` overwrites the up half of `mid`, which pins the whole `[N, 2f]` \
             buffer until backward; on burn-fusion the kernel writes a fresh `[N, f]` buffer and \
             `mid` is freed. The ledger knows both."
                .into(),
        ]);
        t.push([
            "2".to_string(),
            "Balanced keeps the stack's output".into(),
            format!(
                "one more `[N, d_model]` activation ({}) after forward on every Balanced run, \
                 none under None",
                bytes::show(output)
            ),
            "the trace keeps the last expert's output until backward starts (a measured fact of \
             burn 0.21, not traced to a line of burn-autodiff)"
                .into(),
        ]);
        t.push([
            "3".to_string(),
            "Adam in burn's order".into(),
            "the Balanced runs on CubeBackend over tolerance in bytes reserved, their live bytes \
             at both phase boundaries exact"
                .into(),
            "the gradient is freed when its square is taken, before Adam's two bias-corrected \
             temporaries; on the first step the moments are created one parameter at a time"
                .into(),
        ]);
        t.push([
            "4".to_string(),
            "Balanced backward, replayed on buffer handles".into(),
            "the same runs".into(),
            format!(
                "the ledger replays burn-autodiff's backward (its order, reference counts and \
                 in-place writes) instead of a fixed cost per op; with 3, CubeBackend runs \
                 predicted to the byte at every step from step 2: {exact} of {cube_runs}"
            ),
        ]);
        t.push([
            "5".to_string(),
            "records made with the autotune cache warm".into(),
            format!(
                "from a cold cache, one arm reserved {} more (tuning runs candidates in the \
                 training's own pool)",
                bytes::show(cold - warm)
            ),
            "every configuration runs two steps before it is recorded; the simulator, which does \
             not model tuning, is exact on the warm run"
                .into(),
        ]);
        t.push([
            "–".to_string(),
            "not corrected: burn-fusion's deferred frees".into(),
            format!(
                "{known_misses} Balanced runs on burn-fusion reserve more than simulated, in \
                 weight-sized and `[N, d_model]` slots"
            ),
            "burn-fusion frees what a queued block of ops consumed only when the block has run; \
             the simulator lists these runs as known misses, the dry run reproduces them"
                .into(),
        ]);
        t
    }
}

/// The page's corrections table, read from the records (see [`Corrections`]).
pub fn corrections_table(book: &Book) -> Result<Table, BookError> {
    Ok(Corrections::of(book)?.table())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corrections_rest_on_the_records() {
        let book = Book::repository();
        let c = Corrections::of(&book).unwrap();
        // burn-fusion saves one `[N, f]` buffer per expert call, so the saving splits evenly.
        assert!(c.saved > 0 && c.saved.is_multiple_of(c.calls), "{c:?}");
        assert!(c.output > 0 && c.cold > c.warm, "{c:?}");
        // The page says CubeBackend runs are predicted to the byte: every one of them.
        assert!(c.cube_runs > 0 && c.exact == c.cube_runs, "{c:?}");
        assert!(c.known_misses > 0, "{c:?}");
        let t = corrections_table(&book).unwrap();
        assert_eq!(t.rows().len(), 6);
        assert!(t.rows()[3][3].ends_with(&format!("{0} of {0}", c.cube_runs)));
    }
}
