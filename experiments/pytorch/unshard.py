#!/usr/bin/env python3
"""FSDP2 over a shard group of one (world size 1): the copies it runs
instead of collectives, taken from PyTorch and set against ./sim's
schedule (core/schedule.h, local_shards).

    python3 experiments/pytorch/unshard.py [--sim ./sim] [--precision mixed|fp32] [--reshard yes|no] [--layers 2 --hidden 64 ...]

One process (gloo on a CPU; NCCL with --device cuda) wraps fsdp_bench.py's
model as fsdp_bench.py does (each block, then the root; reshard after
forward or not, --reshard; reduce dtype fp32), runs one step to warm up, then records a
second step with a TorchDispatchMode, marking the time spent inside
FSDPParamGroup.wait_for_unshard (the unshard: at world size 1 a cast of
each shard to the compute dtype and a copy into the unsharded storage)
and inside foreach_reduce (the reduction: the copy-in, then a copy of the
reduce-scatter input into its output). Per phase it counts the phases and
the operators, and sums the bytes each operator reads and writes (its
tensor arguments: those it writes, and its results, are written; the rest
read; views move nothing), and, in the unshard, the most bytes alive at
once of the tensors it makes and drops (the cast shards, freed as the
next one is made).

Against ./sim --schedule of the same shape and policy on one rank with
the pytorch runtime: the unshards are its COPYOUT ops (their count, their
bytes, their +transient: bytes, the largest one's), the reductions its
COPYIN and COPY ops, and the collectives PyTorch issued (none) its
all-gathers, reduce-scatters and all-reduces. Exit status 0 when every
row agrees, 1 when one does not, 2 on bad arguments.
"""
import argparse, os, re, subprocess, sys, weakref

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fsdp_bench  # noqa: E402  the model, its wrapping and the shape flags

import torch.distributed.fsdp._fully_shard._fsdp_param_group as fsdp_group  # noqa: E402


class Phases(TorchDispatchMode):
    """Operators, bytes read and written, by phase; the peak of the unshard's own tensors alive."""

    def __init__(self):
        super().__init__()
        self.phase = None
        self.fresh = False # the phase entered has run no operator yet
        self.count = {}    # phase: times entered and running an operator
        self.ops = {}      # phase: operators run
        self.bytes = {}    # phase: bytes read and written
        self.alive = 0     # bytes of the unshard's tensors alive now
        self.peak = {}     # phase entry number: most bytes alive at once in it

    def enter(self, phase):
        self.phase = phase
        self.fresh = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if self.phase is None or func.is_view or not inputs:  # views, and allocations (torch.empty)
            return out
        if self.fresh:  # an entry that does nothing (wait_for_unshard with no unshard pending) is not counted
            self.count[self.phase] = self.count.get(self.phase, 0) + 1
            self.fresh = False
        schema = func._schema
        moved = 0
        for i, a in enumerate(schema.arguments):
            v = kwargs.get(a.name, args[i] if i < len(args) and not a.kwarg_only else None)
            for t in tree_flatten(v)[0]:
                if isinstance(t, torch.Tensor):
                    moved += t.nbytes  # read, or written (an out= or in-place argument)
        written_in_place = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        if not written_in_place:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    moved += t.nbytes
                    if self.phase == "unshard":
                        self.alive += t.nbytes
                        n = self.count["unshard"]
                        self.peak[n] = max(self.peak.get(n, 0), self.alive)
                        weakref.finalize(t.untyped_storage(), self.dropped, t.nbytes)
        self.ops[self.phase] = self.ops.get(self.phase, 0) + 1
        self.bytes[self.phase] = self.bytes.get(self.phase, 0) + moved
        return out

    def dropped(self, nbytes):
        self.alive -= nbytes


def marked(mode, phase, fn):
    def wrapper(*a, **k):
        outer = mode.phase
        mode.enter(phase)
        try:
            return fn(*a, **k)
        finally:
            mode.phase = outer
    return wrapper


def schedule(args):
    """./sim's ops for the same configuration: (label, bytes, +transient bytes)."""
    cmd = [args.sim, "--model", "llama3-8b", "--layers", str(args.layers), "--hidden", str(args.hidden),
           "--ffn", str(args.ffn), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads),
           "--seq", str(args.seq), "--batch", str(args.batch), "--vocab", str(args.vocab),
           "--nodes", "1", "--gpus-per-node", "1", "--runtime", "pytorch", "--precision", args.precision,
           "--reduce-dtype", "fp32", "--reshard", args.reshard, "--wrap", "block", "--microbatches", "1",
           "--schedule"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"unshard.py: {' '.join(cmd)}: exit status {out.returncode}: {out.stderr.strip()}")
    ops = []
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) > 5 and f[0].isdigit():
            ops.append((f[1], int(f[5]), [int(b) for b in re.findall(r"\+transient:(\d+)", line)]))
    return ops


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="./sim")
    p.add_argument("--layers", type=int, default=2)
    fsdp_bench.shape_args(p, hidden=64, ffn=192, heads=4, kv_heads=2, seq=32, batch=2, vocab=256)
    p.add_argument("--precision", choices=("mixed", "fp32"), default="mixed")
    p.add_argument("--reshard", choices=("yes", "no"), default="yes")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this PyTorch sees no GPU")
    if not os.access(args.sim, os.X_OK):
        p.error(f"--sim {args.sim}: not an executable (make sim)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    device = torch.device(args.device)
    if args.device == "cuda":
        torch.cuda.set_device(0)  # before the process group: NCCL's communicator is made on this device
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)
    cfg = dict(layers=args.layers, hidden=args.hidden, ffn=args.ffn, heads=args.heads, kv_heads=args.kv_heads,
               vocab=args.vocab, seq=args.seq, ac="none", compile="none", precision=args.precision, reshard=args.reshard,
               wrap="block")
    torch.manual_seed(1234)
    model = fsdp_bench.build(cfg, device, None)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    model(tokens).float().sum().backward()  # the first step makes what later steps reuse
    for prm in model.parameters():  # as the optimizer's zero_grad leaves them: the next reduction assigns
        prm.grad = None

    mode = Phases()
    collectives = []
    saved = (fsdp_group.FSDPParamGroup.wait_for_unshard, fsdp_group.foreach_reduce)
    issued = {n: getattr(dist, n) for n in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")}
    fsdp_group.FSDPParamGroup.wait_for_unshard = marked(mode, "unshard", saved[0])
    fsdp_group.foreach_reduce = marked(mode, "reduce", saved[1])
    for n, fn in issued.items():
        setattr(dist, n, lambda *a, n=n, fn=fn, **k: (collectives.append(n), fn(*a, **k))[1])
    try:
        with mode:
            model(tokens).float().sum().backward()
    finally:
        fsdp_group.FSDPParamGroup.wait_for_unshard, fsdp_group.foreach_reduce = saved
        for n, fn in issued.items():
            setattr(dist, n, fn)
    dist.destroy_process_group()

    ops = schedule(args)
    copy_out = [o for o in ops if o[0] == "COPYOUT"]
    reduce = [o for o in ops if o[0] in ("COPYIN", "COPY")]
    sim_collectives = [o for o in ops if o[0] in ("AG", "RS", "AR")]
    rows = [
        ("unshards", mode.count.get("unshard", 0), len(copy_out)),
        ("unshard bytes", mode.bytes.get("unshard", 0), sum(o[1] for o in copy_out)),
        ("unshard casts alive at once, the most", max(mode.peak.values(), default=0),
         max((sum(o[2]) for o in copy_out), default=0)),
        ("reductions", mode.count.get("reduce", 0), sum(o[0] == "COPY" for o in reduce)),
        ("reduction bytes (copy-in and copy)", mode.bytes.get("reduce", 0), sum(o[1] for o in reduce)),
        ("collectives", len(collectives), len(sim_collectives)),
    ]
    print(f"PyTorch {torch.__version__} on {args.device}, one rank; {args.layers} layers, hidden {args.hidden}, "
          f"ffn {args.ffn}, heads {args.heads}, kv heads {args.kv_heads}, vocab {args.vocab}, {args.precision}, "
          f"reshard {args.reshard}; "
          f"operators: {mode.ops.get('unshard', 0)} in unshards, {mode.ops.get('reduce', 0)} in reductions")
    print(f"{'what':40} {'PyTorch':>12} {'./sim':>12}")
    bad = 0
    for what, got, want in rows:
        bad += got != want
        print(f"{what:40} {got:12d} {want:12d}{'  differ' if got != want else ''}")
    print("every row agrees" if not bad else f"{bad} of {len(rows)} rows differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
