pub(crate) mod cpu;
pub(crate) mod gpu;
