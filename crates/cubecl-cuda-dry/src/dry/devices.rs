//! The dry devices a process has registered.
//!
//! CubeCL starts a device's server from its id alone (`DeviceService::init`), so a device's card
//! and books are put in a process-wide table first: [`register`] takes the next free index and
//! returns the `CudaDevice` that names it, each with a server and pools of its own. A device
//! nobody registered (a user's program asking for `CudaDevice::new(0)`) stands for the card
//! `HIGHWATER_CARD` names, or the project's H200, with the whole card for its pools.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use cubecl_server::device::CudaDevice;

use super::card::{CardError, CardProfile};
use super::memory::{DeviceMemory, OnRefusal};

/// How the dry device settles a problem autotune has to time: nothing runs, so a candidate's
/// time is a policy, and the tuner keeps the candidate with the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum TieBreak {
    /// Every candidate takes no time: the tuner keeps the first that launched.
    #[default]
    First,
    /// A nanosecond per byte a candidate reserves (its outputs, workspace and launch metadata):
    /// the leanest wins.
    LeastMemory,
    /// The same cost reversed (2⁴⁰ ns less a nanosecond per byte): the hungriest wins.
    MostMemory,
}

impl TieBreak {
    /// Above any candidate's bytes (a terabyte), so that [`TieBreak::MostMemory`] stays positive.
    const CEILING: u64 = 1 << 40;

    /// The time, in nanoseconds, of a candidate that reserved `bytes`.
    pub(crate) fn nanos(self, bytes: u64) -> u64 {
        match self {
            TieBreak::First => 0,
            TieBreak::LeastMemory => bytes,
            TieBreak::MostMemory => Self::CEILING - bytes.min(Self::CEILING - 1),
        }
    }
}

/// What a dry device is.
#[derive(Debug, Clone)]
pub struct DeviceOptions {
    /// The card it stands for.
    pub card: Arc<CardProfile>,
    /// Bytes its pools may take (the card's free memory, or less for a smaller card).
    pub capacity: u64,
    /// What a page past `capacity` becomes.
    pub on_refusal: OnRefusal,
    /// How autotune settles a problem.
    pub tie_break: TieBreak,
}

impl DeviceOptions {
    /// The whole of `card`, pages past it refused, autotune keeping the first candidate.
    pub fn card(card: CardProfile) -> Self {
        Self {
            capacity: card.free_at_start,
            card: Arc::new(card),
            on_refusal: OnRefusal::Refuse,
            tie_break: TieBreak::First,
        }
    }

    /// The card of an unregistered device: `HIGHWATER_CARD`'s profile, else the H200.
    fn from_environment() -> Result<Self, CardError> {
        let card = match std::env::var_os("HIGHWATER_CARD") {
            Some(path) => CardProfile::read(std::path::Path::new(&path))?,
            None => CardProfile::h200(),
        };
        Ok(Self::card(card))
    }
}

/// A registered device: its options and the memory its pools share.
#[derive(Debug, Clone)]
pub(crate) struct Registered {
    pub(crate) options: DeviceOptions,
    pub(crate) memory: DeviceMemory,
}

fn table() -> MutexGuard<'static, HashMap<u16, Registered>> {
    static TABLE: LazyLock<Mutex<HashMap<u16, Registered>>> = LazyLock::new(Default::default);
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new dry device: the first free index, its own server and pools. Its books are
/// [`memory`]'s.
pub fn register(options: DeviceOptions) -> CudaDevice {
    let memory = DeviceMemory::new(options.capacity, options.on_refusal);
    let mut table = table();
    let index = (0..=u16::MAX)
        .find(|i| !table.contains_key(i))
        .expect("fewer than 65536 dry devices in one process");
    table.insert(index, Registered { options, memory });
    CudaDevice::new(index as usize)
}

/// The books of `device`'s memory: what its pages take, the peak, what the card refused.
///
/// # Panics
///
/// If the device has no server yet and was not registered (its server registers it on start).
pub fn memory(device: &CudaDevice) -> DeviceMemory {
    registered(device.index as u16).memory
}

/// The device `index` names, registered from the environment if nobody registered it.
pub(crate) fn registered(index: u16) -> Registered {
    let mut table = table();
    if let Some(found) = table.get(&index) {
        return found.clone();
    }
    let options = DeviceOptions::from_environment()
        .unwrap_or_else(|err| panic!("the dry CUDA device {index}: {err}"));
    let found = Registered {
        memory: DeviceMemory::new(options.capacity, options.on_refusal),
        options,
    };
    table.insert(index, found.clone());
    found
}
