//! What the project's pure crates (`highwater`, `graphrace`, `situ`) share, with no dependencies
//! of their own: a seeded generator whose draws are the same on every machine, and the line of a
//! byte offset for error messages.
//!
//! The recorded results depend on the generator's exact draws (the simulator's jitter, the
//! wall's sequence lengths, graphrace's replays, the models' initial weights): the tests below
//! pin them.
//!
//! Beside them, what the CLIs and the book write alike: [`bytes`], the one way to write a byte
//! count, and [`text_table`], the one plain-text table; and how both CLIs end, [`cli`].

pub mod bytes;
pub mod cli;
pub mod text_table;

/// SplitMix64's increment: 2^64/φ, odd, so the state visits every value once.
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 (Steele, Lea and Flood, 2014): small, seedable, and the same on every platform —
/// no `rand` dependency whose streams may change between versions.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose first draw is [`mix`]`(seed)`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        finalize(self.0)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n` > 0), by multiply-shift rather than `%`: no modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// SplitMix64's draw for state `z` (the first draw of `SplitMix64::new(z)`): a bijective mix of
/// 64 bits, for turning a key into a draw without keeping a generator.
pub fn mix(z: u64) -> u64 {
    finalize(z.wrapping_add(GAMMA))
}

/// SplitMix64's output function (Stafford's Mix13).
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 1-based line of byte offset `at` in `text`; an offset past the end is on the last line.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_splitmix64s() {
        // The reference implementation's stream for seed 1234567 (splitmix64.c).
        let mut r = SplitMix64::new(1_234_567);
        let drawn: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            drawn,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423
            ]
        );
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(mix(7), SplitMix64::new(7).next_u64());
    }

    #[test]
    fn unit_and_below_are_pinned() {
        let mut r = SplitMix64::new(5);
        assert_eq!(r.unit().to_bits(), 4600639013628994160);
        assert_eq!([r.below(7), r.below(1 << 40)], [5, 255866433552]);
    }

    #[test]
    fn lines_count_newlines_before_the_offset() {
        let text = "a = 1\nb = 2\n";
        assert_eq!(line_of(text, 0), 1);
        assert_eq!(line_of(text, 5), 1, "the newline ends line 1");
        assert_eq!(line_of(text, 6), 2);
        assert_eq!(line_of(text, 999), 3);
        assert_eq!(line_of("", 0), 1);
    }
}
