//! The pool's rules, one test each, against the figures PyTorch's source gives.

use super::*;
use crate::usage::Peaks;
use Stream::*;

const KIB: u64 = 1024;

/// The segment a fresh pool takes for one request of `bytes`, and the block it hands out.
fn first(bytes: u64) -> (u64, Range<u64>) {
    let mut pool = Pool::new();
    let block = pool.alloc(bytes, Main);
    (pool.usage().reserved(), block)
}

#[test]
fn segment_sizes_follow_get_allocation_size() {
    // 512 B and 1 MiB are small: a 2 MiB segment, the block cut to the request.
    assert_eq!(first(512), (2 * MIB, 0..512));
    assert_eq!(first(MIB), (2 * MIB, 0..MIB));
    assert_eq!(Request::new(MIB).class, Size::Small);
    // Just over 1 MiB is large: a 20 MiB segment.
    assert_eq!(Request::new(MIB + 1).class, Size::Large);
    assert_eq!(first(MIB + 1).0, 20 * MIB);
    // 4 MiB: a 20 MiB segment, split (16 MiB remain).
    assert_eq!(first(4 * MIB), (20 * MIB, 0..4 * MIB));
    // Under 10 MiB still gets 20 MiB; from 10 MiB on, the request rounded to 2 MiB. The
    // rule reads the rounded size: 10 MiB - 1 B rounds to 10 MiB.
    assert_eq!(first(10 * MIB - 512).0, 20 * MIB);
    assert_eq!(first(10 * MIB - 1).0, 10 * MIB);
    assert_eq!(first(10 * MIB).0, 10 * MIB);
    // 12 MiB: a segment of exactly 12 MiB, the whole of it the block.
    assert_eq!(first(12 * MIB), (12 * MIB, 0..12 * MIB));
    // 12 MiB + 1 B: a 14 MiB segment; 2 MiB - 512 B remain, more than 1 MiB: split.
    assert_eq!(first(12 * MIB + 1), (14 * MIB, 0..12 * MIB + 512));
    // 13.5 MiB: a 14 MiB segment; 512 KiB would remain, not worth a block.
    assert_eq!(first(13 * MIB + 512 * KIB), (14 * MIB, 0..14 * MIB));
}

#[test]
fn requests_round_to_512_bytes() {
    assert_eq!(Request::new(0).rounded, 512);
    assert_eq!(Request::new(1).rounded, 512);
    assert_eq!(Request::new(512).rounded, 512);
    assert_eq!(Request::new(513).rounded, 1024);
    assert_eq!(Request::new(MIB + 1).rounded, MIB + 512);
    // 1 MiB - 1 rounds to 1 MiB: still small.
    assert_eq!(Request::new(MIB - 1).class, Size::Small);
}

#[test]
fn small_blocks_split_at_512_bytes_and_large_ones_above_1_mib() {
    // Small: a 2 MiB segment cut down to 512 B.
    let mut pool = Pool::new();
    let a = pool.alloc(MIB, Side);
    let b = pool.alloc(MIB - 512, Side);
    assert_eq!(b, a.end..SMALL_SEGMENT - 512, "512 B remain: split");
    let c = pool.alloc(300, Side);
    assert_eq!(c, b.end..SMALL_SEGMENT, "the 512 B remainder was a block");
    assert_eq!(pool.usage().reserved(), SMALL_SEGMENT);
    assert!(Request::new(MIB).splits(MIB + 512));
    assert!(!Request::new(MIB).splits(MIB));
    // Large: a remainder of exactly 1 MiB stays with the block; 1 MiB + 512 B is split off.
    let r = Request::new(3 * MIB);
    assert!(!r.splits(4 * MIB));
    assert!(r.splits(4 * MIB + 512));
    let mut pool = Pool::new();
    let big = pool.alloc(19 * MIB, Main);
    assert_eq!(big, 0..20 * MIB, "1 MiB would remain: not split");
    let mut pool = Pool::new();
    let big = pool.alloc(19 * MIB - 512, Main);
    assert_eq!(big, 0..19 * MIB - 512, "1 MiB + 512 B remain: split");
}

#[test]
fn small_and_large_requests_never_share_a_segment() {
    let mut pool = Pool::new();
    let large = pool.alloc(4 * MIB, Main);
    let small = pool.alloc(4 * KIB, Main);
    assert!(
        small.start >= 20 * MIB,
        "16 MiB free in the large segment, unused"
    );
    assert_eq!(pool.usage().reserved(), 20 * MIB + 2 * MIB);
    pool.free(small.start, false);
    pool.free(large.start, false);
    let again = pool.alloc(MIB + 1, Main);
    assert_eq!(
        again.start, large.start,
        "a large request takes a large block"
    );
}

#[test]
fn a_freed_block_goes_to_the_next_fitting_request_on_its_stream() {
    let mut pool = Pool::new();
    let a = pool.alloc(30 * MIB, Main);
    pool.free(a.start, false);
    let other_stream = pool.alloc(20 * MIB, Side);
    assert!(other_stream.start >= a.end, "side never gets main's block");
    let b = pool.alloc(20 * MIB, Main);
    assert_eq!(b.start, a.start, "main reuses its freed block");
    assert_eq!(pool.usage().reserved(), 30 * MIB + 20 * MIB);
}

#[test]
fn the_remainder_of_a_segment_keeps_the_segments_stream() {
    let mut pool = Pool::new();
    let a = pool.alloc(2 * MIB, Side);
    let b = pool.alloc(2 * MIB, Main);
    assert!(
        b.start >= 20 * MIB,
        "main never gets the side segment's 18 MiB"
    );
    let c = pool.alloc(2 * MIB, Side);
    assert_eq!(c.start, a.end, "side does");
}

#[test]
fn best_fit_takes_the_smallest_block_then_the_lowest_address() {
    let mut pool = Pool::new();
    // Three 12 MiB segments (exact), then free the first and third, and a 20 MiB segment
    // with a 6 MiB hole.
    let s1 = pool.alloc(12 * MIB, Main);
    let s2 = pool.alloc(12 * MIB, Main);
    let s3 = pool.alloc(12 * MIB, Main);
    pool.free(s3.start, false);
    pool.free(s1.start, false);
    let x = pool.alloc(11 * MIB + 512 * KIB, Main);
    assert_eq!(x, s1, "equal sizes: the lower address");
    let _ = s2;
    let y = pool.alloc(6 * MIB, Main);
    assert_eq!(y.start, s3.start, "the only free block that fits");
    assert_eq!(y.end, s3.start + 6 * MIB, "split: 6 MiB remain");
    let z = pool.alloc(5 * MIB, Main);
    assert_eq!(
        z.start, y.end,
        "the 6 MiB remainder, smaller than any new segment"
    );
}

#[test]
fn best_fit_splits_and_merges_back() {
    let mut pool = Pool::new();
    let seg = pool.alloc(12 * MIB, Main);
    pool.free(seg.start, false);
    let a = pool.alloc(3 * MIB, Main);
    assert_eq!(a, 0..3 * MIB, "split: 9 MiB remain");
    let b = pool.alloc(8 * MIB + 512 * KIB, Main);
    assert_eq!(b, a.end..seg.end, "512 KiB would remain: not split");
    pool.free(a.start, false);
    pool.free(b.start, false);
    assert_eq!(pool.alloc(12 * MIB, Main), seg, "the halves merged back");
    assert_eq!(pool.usage().reserved(), 12 * MIB);
}

#[test]
fn blocks_of_different_segments_never_merge() {
    let mut pool = Pool::new();
    let a = pool.alloc(12 * MIB, Main);
    let b = pool.alloc(12 * MIB, Main);
    assert_eq!(a.end, b.start, "adjacent segments");
    pool.free(a.start, false);
    pool.free(b.start, false);
    let c = pool.alloc(24 * MIB, Main);
    assert!(
        c.start >= b.end,
        "two free neighbours of different segments stay apart"
    );
}

#[test]
fn the_older_rules_round_every_large_segment_to_2_mib() {
    let mut pool = Pool::with_rules(Rules::Rounded2MiB);
    pool.alloc(4 * MIB + 1, Main);
    assert_eq!(pool.usage().reserved(), 6 * MIB);
    pool.alloc(512, Main);
    assert_eq!(pool.usage().reserved(), 8 * MIB, "small segments as before");
}

#[test]
fn a_recorded_free_is_held_until_the_capture_ends() {
    let mut pool = Pool::new();
    let a = pool.alloc(30 * MIB, Main);
    pool.free(a.start, true);
    let b = pool.alloc(20 * MIB, Main);
    assert!(b.start >= a.end);
    pool.end_capture();
    let c = pool.alloc(20 * MIB, Main);
    assert_eq!(c.start, a.start);
}

#[test]
fn a_deferred_block_does_not_merge_until_the_capture_ends() {
    let mut pool = Pool::new();
    let a = pool.alloc(4 * MIB, Main);
    pool.free(a.start, true);
    // The segment's 16 MiB remainder is free; the deferred 4 MiB does not join it.
    let b = pool.alloc(18 * MIB, Main);
    assert!(b.start >= 20 * MIB, "the held block did not merge");
    pool.end_capture();
    pool.free(b.start, false);
    assert_eq!(pool.alloc(20 * MIB, Main), 0..20 * MIB, "now it has");
}

#[test]
fn allocated_counts_whole_blocks_and_peaks_restart_on_reset() {
    let mut pool = Pool::new();
    // 19 MiB takes the whole 20 MiB segment (1 MiB would remain): 20 MiB allocated.
    let a = pool.alloc(19 * MIB, Main);
    let b = pool.alloc(300, Main);
    assert_eq!(pool.usage().allocated(), 20 * MIB + 512);
    pool.free(a.start, false);
    assert_eq!(pool.usage().allocated(), 512);
    assert_eq!(
        pool.usage().peaks(),
        Peaks {
            allocated: 20 * MIB + 512,
            reserved: 22 * MIB
        }
    );
    pool.reset_peaks();
    assert_eq!(pool.usage().peaks().allocated, 512);
    pool.free(b.start, true);
    assert_eq!(
        pool.usage().allocated(),
        0,
        "a recorded free counts at once"
    );
}

#[test]
fn a_full_device_gives_back_whole_free_segments_then_retries() {
    let mut pool = Pool::with_limit(50 * MIB);
    let a = pool.alloc(30 * MIB, Main);
    let b = pool.alloc(12 * MIB, Main);
    pool.free(a.start, false);
    // 36 MiB do not fit the free 30 MiB segment, and 42 + 36 > 50: the free 30 MiB
    // segment goes back to the device, then 12 + 36 fits.
    let c = pool.try_alloc(36 * MIB, Main).unwrap();
    assert_eq!(pool.usage().reserved(), 48 * MIB);
    assert_eq!(pool.usage().released(), 30 * MIB);
    assert!(c.start >= b.end, "a new segment, at a new address");
    // A segment with a block in use is never given back: 48 + 4 > 50 after the retry.
    let err = pool.try_alloc(4 * MIB, Side).unwrap_err();
    assert_eq!(
        err,
        OutOfMemory {
            tried: 20 * MIB,
            requested: 4 * MIB,
            allocated: 48 * MIB,
            reserved: 48 * MIB,
            limit: 50 * MIB,
            released: 0,
        }
    );
    assert_eq!(
        pool.usage().reserved(),
        48 * MIB,
        "nothing lost by the refusal"
    );
}

#[test]
fn a_split_segment_with_a_free_remainder_stays_cached() {
    // 4 MiB in a 20 MiB segment: the 16 MiB remainder is free but its segment is in use.
    let mut pool = Pool::with_limit(30 * MIB);
    let _a = pool.alloc(4 * MIB, Main);
    let err = pool.try_alloc(18 * MIB, Main).unwrap_err();
    assert_eq!(
        (err.tried, err.reserved, err.allocated),
        (18 * MIB, 20 * MIB, 4 * MIB)
    );
    assert_eq!(pool.release_cached(), 0);
}

#[test]
fn with_max_split_an_oversize_block_is_kept_whole_for_requests_near_its_size() {
    let mut pool = Pool::new().with_max_split(64 * MIB);
    let big = pool.alloc(100 * MIB, Main);
    pool.free(big.start, false);
    // 30 MiB is not oversize: it never takes the 100 MiB block, and gets a segment of its own.
    let small = pool.alloc(30 * MIB, Main);
    assert_ne!(small.start, big.start);
    // 70 MiB is oversize, but 100 MiB is 20 MiB or more over it: a segment of its own too.
    let near = pool.alloc(70 * MIB, Main);
    assert_ne!(near.start, big.start);
    // 90 MiB takes it, whole: oversize blocks are never split.
    let whole = pool.alloc(90 * MIB, Main);
    assert_eq!(whole, big.start..big.start + 100 * MIB);
}

#[test]
fn with_max_split_a_full_device_gives_back_one_oversize_segment_before_all_of_them() {
    let mut pool = Pool::with_limit(250 * MIB).with_max_split(64 * MIB);
    let a = pool.alloc(150 * MIB, Main);
    let c = pool.alloc(4 * MIB, Main);
    pool.free(a.start, false);
    pool.free(c.start, false);
    // 100 MiB: a's 150 MiB block is 20 MiB or more over it, and 170 + 100 passes the limit.
    // The smallest cached block of at least 100 MiB (a's) is given back, and that makes
    // room; the 20 MiB segment, which giving back every cached segment would free too, stays.
    pool.alloc(100 * MIB, Main);
    assert_eq!(pool.usage().released(), 150 * MIB);
    assert_eq!(pool.usage().reserved(), 20 * MIB + 100 * MIB);
}

#[test]
fn garbage_collection_gives_back_the_segments_unused_longest_above_the_threshold() {
    let mut pool = Pool::with_limit(100 * MIB).with_gc_threshold(0.5);
    let a = pool.alloc(20 * MIB, Main);
    let b = pool.alloc(20 * MIB, Main);
    let mut x = pool.alloc(12 * MIB, Main);
    pool.free(a.start, false); // free since the large half's third lookup
    for _ in 0..2 {
        pool.free(x.start, false);
        x = pool.alloc(12 * MIB, Main); // lookups that find x's block
    }
    pool.free(b.start, false); // free since the fifth
    // 30 MiB fits no free block: with 52 MiB held, over half the limit, the whole free
    // segments whose age (lookups since they became free: a 3, b 1) is at least the mean (2)
    // are given back: a's. That is enough; b's stays.
    pool.alloc(30 * MIB, Main);
    assert_eq!(pool.usage().released(), 20 * MIB);
    assert_eq!(pool.usage().reserved(), 20 * MIB + 12 * MIB + 30 * MIB);
}
