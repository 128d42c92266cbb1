//! burn-fusion networks on burn 0.22, dry, from a build without burn-fusion.
//!
//! burn 0.22 turns fusion on for a whole build (burn-dispatch's `Device::Cuda` is fused or not),
//! so one binary cannot train both backends. `highwater` is built without it; for a network that
//! asks for burn-fusion it runs [`BINARY`], built from this crate with its feature `fusion`
//! beside `highwater` (see [`build_command`]), hands it a [`BandRequest`] on stdin and reads the
//! [`DryBand`] back as JSON from its stdout.

use std::path::{Path, PathBuf};

use cubecl_cuda::dry::{CardError, CardProfile};
use highwater::network::Network;
use highwater::recipe::{Backend, Checkpointing};
use serde::{Deserialize, Serialize};

use crate::dry::{DryBand, DryError, DryPlan, dry_band, dry_network};

/// The fused build's binary (`src/bin/burn022-fused-band.rs`).
pub const BINARY: &str = "burn022-fused-band";

/// The command that builds [`BINARY`] beside a debug `highwater` ([`build_command`] adds
/// `--release` for a release one). It compiles burn 0.22 once more, with fusion: about 10
/// minutes on two cores.
pub const BUILD: &str =
    "cargo build --locked -p burn022 --features fusion --bin burn022-fused-band";

/// [`BUILD`] for the profile whose folder holds `binary` (`target/release/…` or `target/debug/…`).
pub fn build_command(binary: &Path) -> String {
    let release = binary
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|folder| folder == "release");
    if release {
        BUILD.replacen("--locked", "--release --locked", 1)
    } else {
        BUILD.to_string()
    }
}

/// A network to train dry on burn-fusion: the file as written and what the command line changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BandRequest {
    /// The network file's name.
    pub origin: String,
    /// The network file's text.
    pub text: String,
    /// Examples per step.
    pub batch: u64,
    /// burn's checkpoint strategy.
    pub checkpointing: Checkpointing,
    /// The card's profile (its CubeCL 0.11 store is found beside it).
    pub card: PathBuf,
    /// The card's memory, where the command line gave another size than the profile's.
    pub total_bytes: Option<u64>,
    /// How long, and on how much of the card.
    pub plan: DryPlan,
    /// Every policy of the band ([`crate::dry::BAND_POLICIES`]), or only the plan's.
    pub band: bool,
}

impl BandRequest {
    /// The request that replays `record` (made by `burn022-rerun`) on the card profiled at
    /// `profile`, `card`: the record's network file, batch, checkpointing, seed and steps, the
    /// prediction's policy only.
    pub fn replaying(
        record: &highwater::conform::NetworkRecord,
        profile: &Path,
        card: &CardProfile,
    ) -> Self {
        Self {
            origin: record.model_path.clone(),
            text: record.model_toml.clone(),
            batch: record.batch,
            checkpointing: record.checkpointing,
            card: profile.to_path_buf(),
            total_bytes: None,
            plan: DryPlan {
                seed: record.seed,
                ..DryPlan::on(card, record.steps_asked)
            },
            band: false,
        }
    }
}

/// Why a fused network got no band.
#[derive(Debug, thiserror::Error)]
pub enum FusedError {
    /// The fused build is not beside this one.
    #[error(
        "{network}: burn-fusion on burn 0.22 needs a build of its own (burn 0.22 switches fusion \
         on for a whole build), and {} is not there: build it with `{}`", binary.display(),
        build_command(binary)
    )]
    NotBuilt {
        /// The network file.
        network: String,
        /// Where the binary was looked for.
        binary: PathBuf,
    },
    /// The fused build could not be run or talked to.
    #[error("{}: {source}", binary.display())]
    Io {
        /// The binary.
        binary: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The fused build ran and failed.
    #[error("{}: {message}", binary.display())]
    Failed {
        /// The binary.
        binary: PathBuf,
        /// Its error, as it printed it.
        message: String,
    },
    /// A request or an answer that is not the other side's JSON.
    #[error("a band request or answer: {0}")]
    Json(#[from] serde_json::Error),
    /// The network file, in the fused build.
    #[error("{0}")]
    Network(String),
    /// The card, in the fused build.
    #[error(transparent)]
    Card(#[from] CardError),
    /// What the dry run refuses.
    #[error(transparent)]
    Dry(#[from] DryError),
}

/// The band the fused build answers `request` with: runs `binary` (normally [`BINARY`] beside
/// the running executable) and reads its answer.
///
/// # Errors
///
/// [`FusedError::NotBuilt`] with the command that builds it; whatever the fused build reports.
pub fn band_from(binary: &Path, request: &BandRequest) -> Result<DryBand, FusedError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    if !binary.is_file() {
        return Err(FusedError::NotBuilt {
            network: request.origin.clone(),
            binary: binary.to_path_buf(),
        });
    }
    let io = |source| FusedError::Io {
        binary: binary.to_path_buf(),
        source,
    };
    let mut child = Command::new(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io)?;
    let written = serde_json::to_vec(request)?;
    child
        .stdin
        .take()
        .expect("stdin was piped")
        .write_all(&written)
        .map_err(io)?;
    let output = child.wait_with_output().map_err(io)?;
    if !output.status.success() {
        return Err(FusedError::Failed {
            binary: binary.to_path_buf(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// Answers `request` in this build, which must be the fused one (the body of [`BINARY`]).
///
/// # Errors
///
/// A network file, card or dry run that fails; a build without burn-fusion refuses the network.
pub fn answer(request: &BandRequest) -> Result<DryBand, FusedError> {
    let mut network = Network::parse(&request.origin, &request.text)
        .map_err(|e| FusedError::Network(e.to_string()))?
        .with_batch(request.batch)
        .map_err(FusedError::Network)?;
    network.backend = Backend::Fusion;
    network.checkpointing = request.checkpointing;
    let mut card = CardProfile::read(&request.card)?;
    if let Some(bytes) = request.total_bytes {
        card = card.with_memory(bytes);
    }
    if request.band {
        return Ok(dry_band(&network, &request.plan, &card)?);
    }
    let run = dry_network(&network, &request.plan, card)?;
    Ok(DryBand {
        plan: request.plan.clone(),
        runs: vec![run],
    })
}
