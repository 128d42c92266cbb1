pub(crate) mod driver;
pub(crate) mod events;
pub(crate) mod storage;
pub(crate) mod stream;

mod server;

pub use server::*;

/// One unit of work against the device: cubecl-server's shared command, as cubecl-cuda drives
/// it, over the dry driver.
pub(crate) type Command<'a> = cubecl_server::command::Command<'a, driver::Cuda>;
