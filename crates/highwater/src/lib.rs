//! highwater: the memory pool of a burn 0.21 / CubeCL 0.10 training step, simulated on CPU.

pub mod pool;
