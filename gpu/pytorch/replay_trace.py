"""Replays a highwater trace through real PyTorch: every request a `torch.empty(bytes,
dtype=torch.uint8)`, every free the drop of its tensor, in the trace's order, on a device capped
with `torch.cuda.set_per_process_memory_fraction` to each LIMIT in turn. Writes one JSON record:
per step what `torch.cuda` reports (peaks reset at the step's start), and the first
`OutOfMemoryError` with its message, for each limit.

    python3 gpu/pytorch/replay_trace.py TRACE.jsonl --conf CONF --tenants-mib T[,T...] --out OUT.json

Each limit is the trace's pool capacity (its card less desktop and CUDA context) less a tenant:
another process holding T MiB of the card, as the book's tenant rows put it.

CONF is PYTORCH_CUDA_ALLOC_CONF ("" for the default); it is set before torch loads, since the
allocator reads it once. The trace is `highwater simulate ... --trace TRACE.jsonl`'s JSON lines
(or the same compressed with xz).
"""

import argparse
import json
import lzma
import os
import sys
import time

from record import header as record_header, stats


def read_trace(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        header = json.loads(f.readline())
        if header.get("highwater_trace") != 1:
            sys.exit(f"{path}: line 1 is not a highwater trace header")
        events = [json.loads(line) for line in f]
    return header, events


SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom")


def replay(torch, events, limit, total):
    torch.cuda.empty_cache()
    # Where the device put each segment: best fit breaks ties by address, so the model needs
    # to know how the driver hands addresses out again after a free. Only segment events are
    # kept (no frames), so the ring buffer holds the whole run.
    try:
        torch.cuda.memory._record_memory_history(
            enabled="all", context=None, stacks="python", max_entries=2_000_000,
            skip_actions=["alloc", "free_requested", "free_completed"])
    except TypeError:  # a PyTorch without skip_actions: every event, filtered below
        torch.cuda.memory._record_memory_history(
            enabled="all", context=None, stacks="python", max_entries=2_000_000)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    fraction = limit / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    live = {}
    steps = []
    step = 0

    def close():
        if step > 0:
            row = {"step": step,
                   "max_allocated": torch.cuda.max_memory_allocated(),
                   "max_reserved": torch.cuda.max_memory_reserved()}
            row.update(stats(torch))
            steps.append(row)
        torch.cuda.reset_peak_memory_stats()

    oom = None
    for e in events:
        if e["step"] != step:
            close()
            step = e["step"]
        action = e["action"]
        if action in ("live", "reserve", "out-of-memory"):
            try:
                live[e["alloc"]] = torch.empty(e["bytes"], dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError as err:
                at = stats(torch)
                close()
                oom = {"step": step, "seq": e["seq"], "bytes": e["bytes"], "tensor": e["tensor"],
                       "op": e["op"], "message": str(err), "at": at}
                break
        elif action == "free":
            live.pop(e["alloc"], None)
    else:
        close()
    live.clear()
    torch.cuda.synchronize()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    torch.cuda.memory._record_memory_history(enabled=None)
    segments = [[t["action"], t.get("addr", t.get("device_free")), t["size"]]
                for t in trace if t["action"] in SEGMENT_ACTIONS]
    return {"segments": segments, "limit": limit, "fraction": fraction,
            # c10's setMemoryFraction: allowed = size_t(fraction * total)
            "allowed": int(fraction * total), "steps": steps, "oom": oom}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--conf", default="")
    p.add_argument("--tenants-mib", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = a.conf
    import torch

    header, events = read_trace(a.trace)
    free, total = torch.cuda.mem_get_info()
    runs = []
    for tenant in (int(x) for x in a.tenants_mib.split(",")):
        t0 = time.time()
        runs.append(replay(torch, events, header["capacity"] - (tenant << 20), total))
        runs[-1]["tenant"] = tenant << 20
        runs[-1]["seconds"] = round(time.time() - t0, 2)
    record = {
        **record_header(torch),
        "device_total": total,
        "alloc_conf": a.conf,
        "trace": {k: header[k] for k in ("recipe", "seed", "capacity", "first_step", "last_step")},
        "trace_file": os.path.basename(a.trace),
        "trace_command": "highwater simulate --recipe {} --seed {} --steps {} --trace-steps {}..{} "
                         "--trace TRACE.jsonl".format(header["recipe"], header["seed"],
                                                      header["last_step"], header["first_step"],
                                                      header["last_step"]),
        "events": len(events),
        "runs": runs,
    }
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
