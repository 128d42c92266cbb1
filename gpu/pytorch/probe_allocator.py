"""Prints what PyTorch's CUDA caching allocator does at its edges, for checking a model of it
against the installed version: the OOM messages under a per-process fraction (a request past the
cap, on a new stream), a snapshot's key order, trace entries and segments, `memory_stats()` and
`allocator_settings`. Run with PYTORCH_CUDA_ALLOC_CONF set to each setting of interest:

    python3 gpu/pytorch/probe_allocator.py main > probe.txt     # snap_main.pickle into $OUT
"""
import os, sys, json, pickle, subprocess
import torch
MODE = sys.argv[1] if len(sys.argv) > 1 else "main"
OUT = os.environ.get("OUT", "/tmp")
MB = 2**20
def show(tag, v):
    print(f"## {tag}: {v}", flush=True)

def trace_summary(s, base=None):
    rows = []
    for dev_tr in s["device_traces"]:
        for te in dev_tr:
            r = {k: te[k] for k in te if k not in ("frames", "forward_frames")}
            r["_keys"] = list(te.keys())
            r["_nframes"] = len(te.get("frames", []))
            rows.append(r)
    return rows

def seg_summary(s):
    out = []
    for seg in s["segments"]:
        d = {k: seg[k] for k in seg if k not in ("frames", "blocks")}
        d["_keys"] = list(seg.keys())
        d["blocks"] = [{k: b[k] for k in b if k != "frames"} | {"_keys": list(b.keys())} for b in seg["blocks"]]
        out.append(d)
    return out

def oom(nbytes, stream=None):
    try:
        if stream is None:
            torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        else:
            with torch.cuda.stream(stream):
                torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        return "NO OOM"
    except torch.OutOfMemoryError as e:
        return str(e)

torch.cuda.init()
show("version", (torch.__version__, torch.version.git_version, sys.version, pickle.DEFAULT_PROTOCOL))
show("props.total_memory", torch.cuda.get_device_properties(0).total_memory)
show("mem_get_info", torch.cuda.mem_get_info())
show("env", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
torch.cuda.memory._record_memory_history(max_entries=100000)
keep = []
keep.append(torch.empty(1000, dtype=torch.uint8, device="cuda"))
b = torch.empty(5 * MB, dtype=torch.uint8, device="cuda")
keep.append(torch.empty(30 * MB, dtype=torch.uint8, device="cuda"))
keep.append(torch.empty(1200, dtype=torch.uint8, device="cuda"))
keep.append(torch.empty(600 * MB + 1, dtype=torch.uint8, device="cuda"))
del b
torch.cuda.memory._set_memory_metadata("meta1")
keep.append(torch.empty(700, dtype=torch.uint8, device="cuda"))
torch.cuda.memory._set_memory_metadata("")
with torch.autograd.profiler.record_function("myrange"):
    keep.append(torch.empty(3000, dtype=torch.uint8, device="cuda"))
x = torch.randn(1000, 1000, device="cuda", requires_grad=True)
(x * x).sum().backward()
s = torch.cuda.memory._snapshot()
show("top_keys", list(s.keys()))
show("allocator_settings", list(s["allocator_settings"].items()))
show("external_annotations", s["external_annotations"])
for sg in seg_summary(s):
    show("segment", sg)
for r in trace_summary(s):
    show("trace", r)
ff = [te for tr in s["device_traces"] for te in tr if "forward_frames" in te]
show("n_forward_frames_entries", len(ff))
if s["device_traces"][0]:
    te = [t for t in s["device_traces"][0] if t.get("frames")]
    if te:
        show("frame0", te[0]["frames"][0])
pb = pickle.dumps(s)
show("pickle_head", pb[:2])
with open(os.path.join(OUT, f"snap_{MODE}.pickle"), "wb") as f:
    pickle.dump(s, f)
st = torch.cuda.memory_stats()
show("stats", json.dumps(st))
# OOM tests
torch.cuda.set_per_process_memory_fraction(0.05)
show("fraction", torch.cuda.get_per_process_memory_fraction())
show("oom_big", oom(20 * 2**30))
torch.cuda.set_per_process_memory_fraction(0.0)
show("oom_small_newstream", oom(1, torch.cuda.Stream()))
show("oom_mid_newstream", oom(3 * MB, torch.cuda.Stream()))
torch.cuda.set_per_process_memory_fraction(1.0)
show("oom_nofrac", oom(10**15))
s2 = torch.cuda.memory._snapshot()
for r in trace_summary(s2)[-8:]:
    show("trace_tail", r)
st = torch.cuda.memory_stats()
show("stats_after_oom", {k: st[k] for k in st if k.startswith("num_") or k.startswith("reserved_bytes.all")})
torch.cuda.empty_cache()
st = torch.cuda.memory_stats()
show("stats_after_empty", {k: st[k] for k in st if k.startswith("num_") or k.startswith("reserved_bytes.all") or k.startswith("segment.all")})
s3 = torch.cuda.memory._snapshot()
for r in trace_summary(s3)[-6:]:
    show("trace_after_empty", r)
show("memory_snapshot_no_traces_len", len(torch.cuda.memory.memory_snapshot(include_traces=False)))
