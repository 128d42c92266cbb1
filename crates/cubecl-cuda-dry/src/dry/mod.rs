//! What the dry runtime has that cubecl-cuda has not: the card it stands for, the books of that
//! card's memory, and the table of devices a process has registered.

pub mod card;
pub mod devices;
pub mod memory;
pub mod throughput;

pub use card::{CardError, CardProfile};
pub use devices::{DeviceOptions, TieBreak, memory, register};
pub use memory::{DeviceMemory, OnRefusal, OutOfMemory};
