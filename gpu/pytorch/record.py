"""What every PyTorch record starts with, and the allocator figures both scripts read."""

import datetime
import shlex
import subprocess
import sys


def header(torch):
    """The command that made the record, then when, the GPU, its driver and the versions."""
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
            capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        driver = "unknown"
    return {
        "command": shlex.join(["python3"] + sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def stats(torch):
    """The allocator's counters now (`torch.cuda.memory_stats()`)."""
    s = torch.cuda.memory_stats()
    return {
        "allocated": s.get("allocated_bytes.all.current", 0),
        "reserved": s.get("reserved_bytes.all.current", 0),
        "released": s.get("reserved_bytes.all.freed", 0),
        "retries": s.get("num_alloc_retries", 0),
        "ooms": s.get("num_ooms", 0),
        "segments": s.get("segment.all.current", 0),
        "inactive_split": s.get("inactive_split_bytes.all.current", 0),
        "device_allocs": s.get("num_device_alloc", 0),
        "device_frees": s.get("num_device_free", 0),
    }
