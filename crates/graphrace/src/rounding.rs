//! How PyTorch rounds a request before it looks for a block (`round_size`), with
//! `roundup_power2_divisions` (`PYTORCH_CUDA_ALLOC_CONF`): off by default, a request is rounded
//! to 512 B; with N divisions for its power-of-two interval, a request larger than 512·N B is
//! rounded up to the next of N equal steps between the powers of two around it, so requests
//! of nearby sizes share blocks.

use crate::pool::MIN_BLOCK;

/// `roundup_power2_divisions`: a number of divisions for each power-of-two interval of
/// request sizes, `[1 MiB·2^k, 1 MiB·2^(k+1))` for k = 0..15 (the first also holds everything
/// under 2 MiB, the last everything from 32 GiB). 0 or 1: no rounding beyond 512 B.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Divisions(pub [u64; 16]);

impl Divisions {
    /// `roundup_power2_divisions:N`: N for every interval.
    pub fn all(n: u64) -> Divisions {
        Divisions([n; 16])
    }

    /// The divisions for a request of `size` bytes (`roundup_power2_divisions(size)`).
    fn of(&self, size: u64) -> u64 {
        let log = 63 - size.leading_zeros() as usize;
        self.0[log.saturating_sub(20).min(15)]
    }

    /// `size` as `round_size` rounds it: at least 512 B, a multiple of 512 B, and with
    /// divisions set and `size` above 512 B times them, up to the next division.
    pub fn round(&self, size: u64) -> u64 {
        if size < MIN_BLOCK {
            return MIN_BLOCK;
        }
        let divisions = self.of(size);
        if divisions > 1 && size > MIN_BLOCK * divisions {
            next_division(size, divisions)
        } else {
            size.next_multiple_of(MIN_BLOCK)
        }
    }
}

/// `roundup_power2_next_division`: `size` rounded up to the next of `divisions` equal steps
/// between the power of two below it and the one above.
fn next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let down = size & !(step - 1);
    if down == size { size } else { down + step }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn without_divisions_a_request_rounds_to_512_bytes() {
        let off = Divisions::default();
        assert_eq!(off.round(0), 512);
        assert_eq!(off.round(513), 1024);
        assert_eq!(off.round(5 * MIB + 1), 5 * MIB + 512);
    }

    #[test]
    fn four_divisions_round_up_to_quarter_steps_between_powers_of_two() {
        let four = Divisions::all(4);
        // 5 MiB + 1 B lies in [4, 8) MiB: steps of 1 MiB, so 6 MiB.
        assert_eq!(four.round(5 * MIB + 1), 6 * MIB);
        assert_eq!(four.round(6 * MIB), 6 * MIB);
        assert_eq!(four.round(8 * MIB), 8 * MIB, "a power of two stays");
        // 1200 B is not above 512 B x 4: rounded to 512 B only (the doc's example).
        assert_eq!(four.round(1200), 1536);
        // 3000 B: above 2048, in [2048, 4096), steps of 512: 3072.
        assert_eq!(four.round(3000), 3072);
    }

    #[test]
    fn each_interval_has_its_own_divisions() {
        // `[256:1,>:4]`: intervals 0..=8 (below 512 MiB) 1, from 9 on 4.
        let mut d = [1; 16];
        d[9..].fill(4);
        let d = Divisions(d);
        assert_eq!(d.round(300 * MIB + 1), 300 * MIB + 512);
        assert_eq!(d.round(600 * MIB + 1), 640 * MIB, "the doc's example");
    }
}
