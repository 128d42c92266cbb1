//! The quick path for an edit: a build that needs only a few cells compiles them alone, with
//! rustc called directly, against the dependencies the last full build compiled.
//!
//! Why: after an edit, cargo's check that nothing else changed (hundreds of dependencies)
//! takes about 0.4 s, and relinking the whole book's binary against burn and CubeCL another
//! second or two; the edited cell alone, compiled and linked by rustc, takes tenths of that.
//! How: every full build runs cargo with a recorder as its workspace wrapper, which keeps the
//! exact rustc command cargo gave the cells' binary (its `--extern`s, search paths, flags and
//! `CARGO_*` environment). The recording is kept with the hash of everything the cells depend
//! on; a later build with the same hash may replay it over a crate of just its cells.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The most cells a quick build compiles: beyond an edit or two, the full crate (incremental,
/// every module kept) is the better deal.
pub(crate) const MOST_CELLS: usize = 16;

/// The crate name cargo gives the book's cell binary (`book-cells`).
const CRATE_NAME: &str = "book_cells";

/// The recorder cargo runs instead of rustc for the cell crate: `$1` is rustc, the rest its
/// arguments. It records the call that compiles the cells' binary, then makes it.
const RECORDER: &str = r#"#!/bin/sh
# Written by mdbook-cells: records how cargo compiles the cells' binary (arguments and CARGO_*
# environment, NUL-separated), so that a build needing only a few cells can make the same call.
case " $* " in
*" --crate-name book_cells "*)
    printf '%s\0' "$@" > "$0.args" && env -0 > "$0.env" ;;
esac
exec "$@"
"#;

/// The rustc call that compiled the cells' binary, and what it was compiled against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RustcCall {
    /// The hash of everything the cells depend on besides their own inputs when it was made.
    environment: String,
    /// rustc, then its arguments.
    args: Vec<String>,
    /// The `CARGO_*` variables cargo set for it (`env!` in a cell reads them).
    env: Vec<(String, String)>,
}

/// Writes the recorder into `dir`; the path to give cargo as `RUSTC_WORKSPACE_WRAPPER`.
pub(crate) fn recorder(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("record-rustc");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(RECORDER) {
        std::fs::write(&path, RECORDER)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(path)
}

impl RustcCall {
    /// The call the recorder in `dir` kept, made against `environment`; `None` if it kept none
    /// (the binary was fresh in every build since the recorder came).
    pub(crate) fn recorded(dir: &Path, environment: &str) -> Option<RustcCall> {
        let args = std::fs::read(dir.join("record-rustc.args")).ok()?;
        let env = std::fs::read(dir.join("record-rustc.env")).ok()?;
        let fields = |bytes: &[u8]| -> Vec<String> {
            (bytes.split(|b| *b == 0))
                .filter(|f| !f.is_empty())
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect()
        };
        let args = fields(&args);
        let env = (fields(&env).into_iter())
            .filter_map(|v| {
                let (name, value) = v.split_once('=')?;
                name.starts_with("CARGO")
                    .then(|| (name.to_string(), value.to_string()))
            })
            .collect();
        let names_the_binary = args.windows(2).any(|w| w == ["--crate-name", CRATE_NAME]);
        names_the_binary.then(|| RustcCall {
            environment: environment.to_string(),
            args,
            env,
        })
    }

    /// The call kept in `file`, if it was made against `environment`.
    pub(crate) fn load(file: &Path, environment: &str) -> Option<RustcCall> {
        let call: RustcCall = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        (call.environment == environment && call.args.len() > 1).then_some(call)
    }

    /// Keeps the call in `file` for the builds that follow.
    pub(crate) fn save(&self, file: &Path) -> std::io::Result<()> {
        std::fs::write(file, serde_json::to_vec(self)?)
    }

    /// The same call over the crate in `dir` (its `src/main.rs`), writing the binary into
    /// `dir/out`: no dependency information, no incremental state, diagnostics as plain JSON
    /// on stderr.
    pub(crate) fn command(&self, dir: &Path) -> Command {
        let mut rustc = Command::new(&self.args[0]);
        rustc
            .args(replay_args(&self.args[1..], &dir.join("out")))
            .current_dir(dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        rustc
    }
}

/// cargo's arguments for the cells' binary, rewritten for a quick build into `out_dir`.
fn replay_args(args: &[String], out_dir: &Path) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out-dir" => {
                args.next();
                out.push(arg.clone());
                out.push(out_dir.display().to_string());
            }
            "-C" => match args.next() {
                Some(flag) if flag.starts_with("incremental=") => {}
                Some(flag) => out.extend([arg.clone(), flag.clone()]),
                None => out.push(arg.clone()),
            },
            a if a.starts_with("-Cincremental=") => {}
            a if a.starts_with("--emit=") => out.push("--emit=link".into()),
            // Plain rendered text in the diagnostics; artifacts name the binary.
            a if a.starts_with("--json=") => out.push("--json=artifacts".into()),
            _ => out.push(arg.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_replay_writes_elsewhere_without_incremental_state_or_ansi() {
        let cargo = strings(&[
            "--crate-name",
            "book_cells",
            "--edition=2024",
            "src/main.rs",
            "--error-format=json",
            "--json=diagnostic-rendered-ansi,artifacts,future-incompat",
            "--crate-type",
            "bin",
            "--emit=dep-info,link",
            "-C",
            "embed-bitcode=no",
            "-C",
            "incremental=/t/debug/incremental",
            "--out-dir",
            "/t/debug/deps",
            "-L",
            "dependency=/t/debug/deps",
            "--extern",
            "highwater=/t/debug/deps/libhighwater-1.rlib",
        ]);
        let replay = replay_args(&cargo, Path::new("/q/out"));
        assert_eq!(
            replay,
            strings(&[
                "--crate-name",
                "book_cells",
                "--edition=2024",
                "src/main.rs",
                "--error-format=json",
                "--json=artifacts",
                "--crate-type",
                "bin",
                "--emit=link",
                "-C",
                "embed-bitcode=no",
                "--out-dir",
                "/q/out",
                "-L",
                "dependency=/t/debug/deps",
                "--extern",
                "highwater=/t/debug/deps/libhighwater-1.rlib",
            ])
        );
    }

    #[test]
    fn a_recording_is_read_back_and_kept_only_for_its_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert_eq!(RustcCall::recorded(dir, "e1"), None);
        std::fs::write(
            dir.join("record-rustc.args"),
            "rustc\0--crate-name\0book_cells\0src/main.rs\0",
        )
        .unwrap();
        std::fs::write(
            dir.join("record-rustc.env"),
            "PATH=/bin\0CARGO_PKG_NAME=book-cells\0CARGO_X=a=b\0",
        )
        .unwrap();
        let call = RustcCall::recorded(dir, "e1").unwrap();
        assert_eq!(
            call.args,
            strings(&["rustc", "--crate-name", "book_cells", "src/main.rs"])
        );
        assert_eq!(
            call.env,
            [
                ("CARGO_PKG_NAME".into(), "book-cells".into()),
                ("CARGO_X".into(), "a=b".into())
            ]
        );
        let file = dir.join("quick.json");
        call.save(&file).unwrap();
        assert_eq!(RustcCall::load(&file, "e1"), Some(call));
        assert_eq!(RustcCall::load(&file, "e2"), None, "another environment");
    }
}
