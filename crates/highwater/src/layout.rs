//! Tensor sizes as CubeCL lays them out on CUDA.
//!
//! burn-cubecl 0.21 allocates every new tensor through `client.empty_tensor` (ops/base.rs),
//! i.e. `MemoryLayoutStrategy::Optimized`, which cubecl-cuda serves with
//! `PitchedMemoryLayoutPolicy` (cubecl-runtime 0.10 `allocator.rs`): each row is padded to
//! `optimal_align(last_dim, elem)` (the row's byte width rounded up to a power of two, clamped to
//! 16..=512), and the whole buffer to the 512-byte alignment.

use serde::{Deserialize, Serialize};

use crate::pool::CUDA_ALIGNMENT;

/// Element type of the float tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 4 bytes.
    F32,
    /// 2 bytes, IEEE half.
    F16,
    /// 2 bytes, bfloat16.
    Bf16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::Bf16 => 2,
        }
    }
}

/// A tensor shape (row-major).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Shape(pub Vec<u64>);

impl Shape {
    /// Elements.
    pub fn numel(&self) -> u64 {
        self.0.iter().product()
    }

    /// Bytes a fresh tensor of this shape reserves from the pool (pitched rows, 512-aligned).
    pub fn bytes(&self, dtype: DType) -> u64 {
        let elem = dtype.size();
        let width = self.0.last().copied().unwrap_or(1);
        let height: u64 = self.0.iter().rev().skip(1).product::<u64>().max(1);
        // cubecl-runtime 0.10 `optimal_align`.
        let align = if width == 1 {
            elem
        } else {
            (width * elem).next_power_of_two().clamp(16, CUDA_ALIGNMENT)
        };
        let pitch = (width * elem).next_multiple_of(align);
        (height * pitch).next_multiple_of(CUDA_ALIGNMENT)
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl<const N: usize> From<[u64; N]> for Shape {
    fn from(dims: [u64; N]) -> Self {
        Shape(dims.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_sizes() {
        assert_eq!(Shape::from([4096, 2048]).bytes(DType::F32), 33_554_432);
        assert_eq!(Shape::from([4096, 4096]).bytes(DType::F32), 67_108_864);
    }

    #[test]
    fn narrow_rows_are_pitched() {
        // 3 f32 = 12 B per row, padded to 16 B; 10 rows = 160 B, then 512 for the buffer.
        assert_eq!(Shape::from([10, 3]).bytes(DType::F32), 512);
        assert_eq!(Shape::from([1000, 3]).bytes(DType::F32), 16_384);
        // A column vector is not padded per row.
        assert_eq!(Shape::from([1000, 1]).bytes(DType::F32), 4_096);
        assert_eq!(Shape::from([1]).bytes(DType::F32), 512);
    }
}
