"""Three small PyTorch training programs, for holding `highwater replay` to real PyTorch:
`gpt` (a GPT-style decoder, AdamW), `cnn` (a residual convnet, SGD with momentum) and `varlen`
(a transformer encoder on batches padded to their longest sequence, lengths drawn per step).
Each is deterministic for its seed: the same requests in the same order on every run.

    python3 gpu/pytorch/train_programs.py PROGRAM --steps N --out OUT.json
        [--conf PYTORCH_CUDA_ALLOC_CONF] [--limit BYTES] [--snapshot OUT.pickle]

Writes per step what `torch.cuda` reports (peaks reset at the step's start). With --limit the
process is capped by `set_per_process_memory_fraction` to LIMIT bytes; the first
`OutOfMemoryError` ends the run and is recorded (step, phase, message). With --snapshot the
allocator's history is recorded from the start (`_record_memory_history`, a ring buffer large
enough for the whole run) and dumped at the end, or where the error was raised, as a user is told
to do.
"""

import argparse
import json
import os
import sys
import time

from record import header, stats


def build(torch, program, seed):
    nn = torch.nn
    torch.manual_seed(seed)
    if program == "gpt":
        vocab, d, layers, heads, seq, batch = 8192, 512, 6, 8, 256, 16

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

            def forward(self, x, mask):
                h = self.ln1(x)
                x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
                return x + self.mlp(self.ln2(x))

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
                self.blocks = nn.ModuleList(Block() for _ in range(layers))
                self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

            def forward(self, idx):
                t = idx.shape[1]
                mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
                x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
                for b in self.blocks:
                    x = b(x, mask)
                return self.head(self.ln(x))

        model = GPT().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        g = torch.Generator().manual_seed(seed)

        def batch_at(step):
            idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
            return idx[:, :-1].cuda(), idx[:, 1:].cuda()

        def loss_of(x, y):
            return nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())

    elif program == "cnn":
        batch, size, classes = 64, 96, 100

        def res(cin, cout, stride):
            body = nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            skip = (nn.Identity() if stride == 1 and cin == cout else
                    nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

            class Res(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.body, self.skip = body, skip

                def forward(self, x):
                    return torch.relu(self.body(x) + self.skip(x))
            return Res()

        model = nn.Sequential(
            nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            res(64, 64, 1), res(64, 128, 2), res(128, 128, 1), res(128, 256, 2),
            res(256, 256, 1), res(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(512, classes)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(seed)

        def batch_at(step):
            x = torch.randn(batch, 3, size, size, generator=g)
            return x.cuda(), torch.randint(0, classes, (batch,), generator=g).cuda()

        def loss_of(x, y):
            return nn.functional.cross_entropy(model(x), y)

    elif program == "varlen":
        vocab, d, layers, heads, batch, classes = 16000, 384, 4, 6, 32, 10
        emb = nn.Embedding(vocab, d, padding_idx=0)
        enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True), layers,
            enable_nested_tensor=False)
        head = nn.Linear(d, classes)
        model = nn.ModuleList([emb, enc, head]).cuda()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(seed)

        def batch_at(step):
            lengths = torch.randint(16, 513, (batch,), generator=g)
            longest = int(lengths.max())
            idx = torch.randint(1, vocab, (batch, longest), generator=g)
            pad = torch.arange(longest)[None, :] >= lengths[:, None]
            idx[pad] = 0
            return (idx.cuda(), pad.cuda()), torch.randint(0, classes, (batch,), generator=g).cuda()

        def loss_of(x, y):
            idx, pad = x
            h = enc(emb(idx), src_key_padding_mask=pad)
            h = h.masked_fill(pad[..., None], 0).sum(1) / (~pad).sum(1, keepdim=True)
            return nn.functional.cross_entropy(head(h), y)
    else:
        sys.exit(f"unknown program {program!r}: gpt, cnn or varlen")
    return model, opt, batch_at, loss_of


def main():
    p = argparse.ArgumentParser()
    p.add_argument("program")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--conf", default="")
    p.add_argument("--limit", type=int)
    p.add_argument("--snapshot")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = a.conf
    import torch

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    free, total = torch.cuda.mem_get_info()
    fraction = None
    if a.limit:
        fraction = a.limit / total
        torch.cuda.set_per_process_memory_fraction(fraction)
    if a.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    steps, oom, phase, step = [], None, "init", 0
    t0 = time.time()
    try:
        model, opt, batch_at, loss_of = build(torch, a.program, a.seed)
        for step in range(1, a.steps + 1):
            torch.cuda.reset_peak_memory_stats()
            phase = "data"
            x, y = batch_at(step)
            phase = "forward"
            loss = loss_of(x, y)
            phase = "backward"
            loss.backward()
            phase = "optimizer"
            opt.step()
            opt.zero_grad(set_to_none=True)
            del x, y
            phase = "loss read"
            value = loss.item()
            del loss
            steps.append({
                "step": step, "loss": value,
                "max_allocated": torch.cuda.max_memory_allocated(),
                "max_reserved": torch.cuda.max_memory_reserved(),
                **stats(torch),
            })
    except torch.OutOfMemoryError as err:
        oom = {"step": step, "phase": phase, "message": str(err), **stats(torch)}
    if a.snapshot:
        torch.cuda.memory._dump_snapshot(a.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    record = {
        **header(torch),
        "cudnn": torch.backends.cudnn.version(),
        "device_total": total,
        "program": a.program, "seed": a.seed, "alloc_conf": a.conf,
        "limit": a.limit, "fraction": fraction,
        "allowed": int(fraction * total) if fraction else None,
        "snapshot": os.path.basename(a.snapshot) if a.snapshot else None,
        "seconds": round(time.time() - t0, 2),
        "steps": steps, "oom": oom,
    }
    with open(a.out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
