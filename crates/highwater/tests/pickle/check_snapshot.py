"""Checks a memory snapshot against what PyTorch's memory_viz needs, and prints a summary.

The rules are memory_viz's own (torch/utils/viz/MemoryViz.js and torch/cuda/_memory_viz.py):
required keys and types; blocks tile their segment in order (the viewer recomputes block
addresses from the segment's address and the sizes before); every int below 2**53; frees
pair with an earlier alloc at the same address; replaying the trace backwards from the final
segments (as the segment view does) never frees a block that is not there.
Usage: check_snapshot.py FILE.pickle -> JSON summary on stdout, or an assertion error.
"""
import json
import pickle
import sys

snap = pickle.load(open(sys.argv[1], "rb"))
assert isinstance(snap, dict), type(snap)
assert isinstance(snap["segments"], list)
assert isinstance(snap["device_traces"], list)

ints = []


def walk(v):
    if isinstance(v, bool):
        return
    if isinstance(v, int):
        ints.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            walk(x)
    elif isinstance(v, dict):
        for x in v.values():
            walk(x)


walk(snap)
assert all(0 <= i < 2**53 for i in ints), "an int outside 0..2**53"


def check_frames(frames):
    assert isinstance(frames, list)
    for f in frames:
        assert set(f) == {"filename", "line", "name"}, f
        assert isinstance(f["filename"], str) and isinstance(f["name"], str)
        assert isinstance(f["line"], int)
        assert "_start" not in f["name"] and "PyEval_" not in f["name"], f


SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id",
                "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
final_active = {}
for seg in snap["segments"]:
    assert set(seg) == SEGMENT_KEYS, set(seg) ^ SEGMENT_KEYS
    assert seg["device"] == 0 and seg["segment_type"] in ("large", "small")
    assert isinstance(seg["segment_pool_id"], tuple) and len(seg["segment_pool_id"]) == 2
    addr = seg["address"]
    active = 0
    for b in seg["blocks"]:
        assert set(b) == BLOCK_KEYS, b
        assert b["address"] == addr, "blocks must tile the segment in order"
        assert b["size"] > 0
        assert b["state"] in ("active_allocated", "active_pending_free", "inactive")
        check_frames(b["frames"])
        if b["state"] == "active_allocated":
            active += b["size"]
            final_active[b["address"]] = b["size"]
            assert b["requested_size"] <= b["size"]
        addr += b["size"]
    assert addr == seg["address"] + seg["total_size"], "blocks fill the segment"
    assert seg["active_size"] == seg["allocated_size"] == active

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}
assert len(snap["device_traces"]) == 1
trace = snap["device_traces"][0]
counts = {}
live = {}
segments = {}
last_time = -1
pending = None
for e in trace:
    a = e["action"]
    assert a in ACTIONS, a
    counts[a] = counts.get(a, 0) + 1
    check_frames(e["frames"])
    assert e["time_us"] >= last_time
    last_time = e["time_us"]
    if a == "oom":
        assert "device_free" in e and "size" in e
        continue
    addr, size = e["addr"], e["size"]
    if a == "segment_alloc":
        assert all(addr + size <= s or s + z <= addr for s, z in segments.items())
        segments[addr] = size
    elif a == "segment_free":
        assert segments.pop(addr) == size
    elif a == "alloc":
        assert addr not in live, "alloc over a live block"
        assert any(s <= addr and addr + size <= s + z for s, z in segments.items()), \
            "an alloc outside every segment"
        live[addr] = size
    elif a == "free_requested":
        assert live.get(addr) == size, "a free without its alloc"
        pending = addr
    elif a == "free_completed":
        assert pending == addr, "free_completed right after its free_requested"
        del live[addr]
        pending = None

assert live == final_active, "the trace ends where the segments say"
assert {s["address"]: s["total_size"] for s in snap["segments"]} == segments

# The segment view's backward replay from the final state back to the start.
blocks = dict(final_active)
for e in reversed(trace):
    a = e["action"]
    if a == "alloc":
        assert blocks.pop(e["addr"]) == e["size"], "backward replay lost a block"
    elif a == "free_completed":
        assert e["addr"] not in blocks
        blocks[e["addr"]] = e["size"]
assert blocks == {}, "the replay ends empty"

print(json.dumps({"segments": len(snap["segments"]), "events": len(trace),
                  "actions": counts, "live_at_end": len(live),
                  "first_frame": trace[-1]["frames"][0] if trace else None}))
