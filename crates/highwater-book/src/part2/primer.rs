//! *A primer: caching allocators, graph pools and streams* (`src/part-2/primer.md`): what its
//! cells compute.
//!
//! The chapter's cells call `graphrace`'s pool and check directly: those calls stay on the
//! page. What lives here is what they share (the hazard program and its kernel cost) and the
//! formatting of the rows they fill.

use std::ops::Range;

use graphrace::pool::{Pool, Request};
use graphrace::program::{Cost, TensorId};
use graphrace::{Program, Stream, capture, check};

use crate::BookError;
use crate::bytes;

/// One mebibyte, the unit the chapter's requests are sized in.
pub const MIB: u64 = 1 << 20;

/// A kernel of negligible cost: the examples are about order, not time.
pub const QUICK: Cost = Cost {
    fixed_us: 5.0,
    per_session_us: 0.0,
};

/// Main allocates a transient, the side stream reads it, main frees it and allocates a new
/// tensor of the same size that it then writes. `join`: main waits for the side before the
/// free; `record`: the side's use is recorded with `record_stream`.
pub fn hazard(join: bool, record: bool) -> Program {
    let mut p = Program::new(1);
    let input = p.fixed("input", 4 * MIB);
    let t = p.alloc("transient", Stream::Main, 4 * MIB);
    p.launch("produce", Stream::Main, QUICK, &[input], &[t]);
    p.wait(Stream::Side, Stream::Main);
    p.launch("side_read", Stream::Side, QUICK, &[t], &[]);
    if record {
        p.record_stream(t, Stream::Side);
    }
    if join {
        p.wait(Stream::Main, Stream::Side);
    }
    p.free(t);
    let u = p.alloc("next", Stream::Main, 4 * MIB);
    p.launch("overwrite", Stream::Main, QUICK, &[input], &[u]);
    p.free(u);
    p
}

/// A block's address range, in hex as the allocator's addresses are usually read.
fn at(range: &Range<u64>) -> String {
    format!("{:#x}–{:#x}", range.start, range.end)
}

/// A size as [`bytes::show`] writes it, except near a whole MiB, where it is written as that
/// MiB plus or minus the bytes: exact where a byte matters (`1 MiB + 1 B`).
pub fn to_the_byte(b: u64) -> String {
    let near = (b + MIB / 2) / MIB * MIB;
    match b {
        _ if b < MIB || b.is_multiple_of(MIB / 2) => bytes::show(b),
        _ if b > near => format!("{} + {}", bytes::show(near), bytes::show(b - near)),
        _ => format!("{} − {}", bytes::show(near), bytes::show(near - b)),
    }
}

/// One row of the rules table: a request of `request` bytes, what the rules `r` make of it,
/// and, once served from an empty pool that then holds `reserved` bytes, the `block` handed
/// out and what stays free of its segment.
pub fn rules_row(request: u64, r: &Request, block: &Range<u64>, reserved: u64) -> [String; 6] {
    let size = block.end - block.start;
    [
        to_the_byte(request),
        to_the_byte(r.rounded),
        r.class.name().to_string(),
        bytes::show(reserved),
        to_the_byte(size),
        to_the_byte(reserved - size),
    ]
}

/// One row of the reuse table: the event, the block it handed out (if any) and the segments
/// `pool` holds after it.
pub fn reuse_event(event: &str, block: Option<&Range<u64>>, pool: &Pool) -> [String; 3] {
    [
        event.to_string(),
        block.map(at).unwrap_or_default(),
        bytes::show(pool.usage().reserved()),
    ]
}

/// The races the check finds in the exercise's program once `fix` has added its line, where
/// the exercise leaves room for it (after the side's read, before the free).
pub fn exercise_races(fix: &dyn Fn(&mut Program, TensorId)) -> Result<usize, BookError> {
    let mut p = Program::new(1);
    let input = p.fixed("input", 4 * MIB);
    let t = p.alloc("transient", Stream::Main, 4 * MIB);
    p.launch("produce", Stream::Main, QUICK, &[input], &[t]);
    p.wait(Stream::Side, Stream::Main);
    p.launch("side_read", Stream::Side, QUICK, &[t], &[]);
    fix(&mut p, t);
    p.free(t);
    let u = p.alloc("next", Stream::Main, 4 * MIB);
    p.launch("overwrite", Stream::Main, QUICK, &[input], &[u]);
    Ok(check(&capture(&p)?).races().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_follows_the_rules_the_chapter_lists() {
        let row = |request: u64| {
            let mut pool = Pool::new();
            let block = pool.alloc(request, Stream::Main);
            rules_row(
                request,
                &Request::new(request),
                &block,
                pool.usage().reserved(),
            )
        };
        // Small requests round to 512 B and come from a 2 MiB segment.
        assert_eq!(
            row(1000),
            [
                "1000 B",
                "1 KiB",
                "small",
                "2 MiB",
                "1 KiB",
                "2 MiB − 1 KiB"
            ]
        );
        // One byte over 1 MiB is large; under 10 MiB a large request gets 20 MiB.
        let over = row(MIB + 1);
        assert_eq!(over[0], "1 MiB + 1 B");
        assert_eq!((over[2].as_str(), over[3].as_str()), ("large", "20 MiB"));
        // From 10 MiB up the segment is the request rounded to 2 MiB, and nothing stays free.
        assert_eq!(row(12 * MIB)[3], "12 MiB");
        assert_eq!(row(13 * MIB + MIB / 2)[3], "14 MiB");
        assert_eq!(to_the_byte(2 * MIB - 512), "2 MiB − 512 B");
    }

    #[test]
    fn a_freed_block_goes_to_the_next_request_on_its_stream_only() {
        let mut pool = Pool::new();
        let a = pool.alloc(4 * MIB, Stream::Main);
        pool.free(a.start, false);
        assert_eq!(reuse_event("free it", None, &pool)[1], "");
        let b = pool.alloc(4 * MIB, Stream::Main);
        let c = pool.alloc(4 * MIB, Stream::Side);
        assert_eq!(a, b);
        assert!(c.start >= b.end);
        let row = reuse_event("alloc 4 MiB on side", Some(&c), &pool);
        assert_eq!(row[1], format!("{:#x}–{:#x}", c.start, c.end));
        assert_eq!(row[2], "40 MiB");
    }

    #[test]
    fn a_join_or_record_stream_removes_the_hazard_and_the_exercise_race() {
        let races = |join, record| {
            check(&capture(&hazard(join, record)).unwrap())
                .races()
                .count()
        };
        assert!(races(false, false) > 0);
        assert_eq!((races(true, false), races(false, true)), (0, 0));
        assert!(exercise_races(&|_, _| {}).unwrap() > 0);
        let join = exercise_races(&|p, _| p.wait(Stream::Main, Stream::Side));
        assert_eq!(join.unwrap(), 0);
        let record = exercise_races(&|p, t| p.record_stream(t, Stream::Side));
        assert_eq!(record.unwrap(), 0);
    }
}
