#!/usr/bin/env python3
"""The kernels an eager block launches, taken from PyTorch's dispatcher, set
against ./sim's eager recipe (core/recipe.c) kernel by kernel: kind and bytes.

    python3 experiments/pytorch/recipe.py [--sim ./sim] [--hidden 256 --ffn 768 --heads 8 --kv-heads 2 --seq 128 --batch 2]

The block is fsdp_bench.py's (torchtitan's Llama 3 block) in bf16, without
checkpointing. A TorchDispatchMode records every ATen op of its forward and
of its backward; an op that launches a kernel on a GPU is one that is not a
view (the schema's alias annotation) nor an alias made without one
(`_unsafe_view`, `detach`); its bytes are those its tensors read (a
broadcast operand, as RoPE's rotation table or repeat_kv's expanded keys,
its storage once) and write. A matmul is a GEMM, every other op an
element-wise kernel.

Two parts of the block run other kernels on a CPU than on a GPU, and are
left out of both sides: the RMSNorms (a chain of ops on a CPU, one fused
kernel forward and two backward on a GPU in PyTorch 2.11; the ops between
the norm module's hooks, forward and backward) and attention (the CPU's
flash attention, cuDNN's or FlashAttention's on a GPU: the SDPA ops, and the
recipe's attention kernels with the backward's helpers). What is left is
compared, forward then backward: the projections and their data
and weight gradients, RoPE's casts, complex products, their backward and
the conjugated table, repeat_kv's copies and sums, SiLU, the product,
the residual adds, and autograd's adds of the gradients of a tensor read
twice or more; each list in order of kind and bytes, since autograd runs a
backward's independent branches in an order of its own. Exit status 0 when every kernel agrees, 1 when one does not,
2 on bad arguments. Runs on a CPU in seconds.
"""
import argparse, os, re, subprocess, sys

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_bench import Block, rope_freqs, shape_args  # noqa: E402

NO_KERNEL = {"_unsafe_view", "detach", "alias", "lift_fresh"}  # aliases the schema does not mark as views
GEMMS = {"mm", "addmm", "bmm"}


def tensor_bytes(t, read):
    """What an op moves of tensor t: a read of a broadcast view (stride 0) moves its storage once."""
    view = t.numel() * t.element_size()
    return min(view, t.untyped_storage().nbytes()) if read else view


class Kernels(TorchDispatchMode):
    """The ops that would launch kernels, as (kind, bytes, op name), in `phase`'s list, outside the norms."""

    def __init__(self):
        super().__init__()
        self.ops, self.phase, self.skip = {"forward": [], "backward": []}, "forward", 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if self.skip or func.is_view or name in NO_KERNEL or name.startswith("_scaled_dot_product"):
            return out
        ins = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        nbytes = sum(tensor_bytes(t, True) for t in ins) + sum(tensor_bytes(t, False) for t in outs)
        self.ops[self.phase].append(("gemm" if name in GEMMS else "elementwise", nbytes, name))
        return out

    def enter(self, *_):
        self.skip += 1

    def leave(self, *_):
        self.skip -= 1


def pytorch_kernels(a):
    """The block's kernels, forward and backward, the norms' left out: their module's hooks bracket them (the
    full backward hooks, set before the forward, the ops of their backward)."""
    torch.manual_seed(0)
    blk = Block(a.hidden, a.ffn, a.heads, a.kv_heads).to(torch.bfloat16)
    freqs = rope_freqs(a.hidden // a.heads, a.seq)
    x = torch.randn(a.batch, a.seq, a.hidden, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(a.batch, a.seq, a.hidden, dtype=torch.bfloat16)
    rec = Kernels()
    for norm in (blk.attention_norm, blk.ffn_norm):
        norm.register_forward_pre_hook(rec.enter)
        norm.register_forward_hook(rec.leave)
        norm.register_full_backward_pre_hook(rec.enter)
        norm.register_full_backward_hook(rec.leave)
    with rec:
        y = blk(x, freqs)
        rec.phase = "backward"
        y.backward(dy)
    return rec.ops["forward"], rec.ops["backward"]


def recipe_kernels(a):
    """./sim --kernels's block, forward and backward: [(kind, bytes, name)] each, norms and attention left out."""
    cmd = [a.sim, "--model", "llama3-8b", "--layers", "1", "--hidden", str(a.hidden), "--ffn", str(a.ffn),
           "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--seq", str(a.seq), "--batch", str(a.batch),
           "--nodes", "1", "--gpus-per-node", "1", "--runtime", "pytorch", "--kernels"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    lists, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"^\s*\d+ (FWD|BWD) block0 m0 ", line)
        if m:
            cur = lists.setdefault(m.group(1), [])
            continue
        m = re.match(r"^ {10}(\S+)\s+(gemm|elementwise|attention)\s+(\d+)", line)
        if m and cur is not None:
            if "norm" not in m.group(1) and not m.group(1).startswith("attention"):
                cur.append((m.group(2), int(m.group(3)), m.group(1)))
        elif not m:
            cur = None
    return lists.get("FWD", []), lists.get("BWD", [])


def compare(label, got, want):
    """Both lists side by side, each in (kind, bytes) order (autograd's order of a backward is not the
    recipe's); the number of rows that differ."""
    print("%s: PyTorch's %d kernels, the recipe's %d" % (label, len(got), len(want)))
    print("  %-22s %-12s %10s   %-18s %-12s %10s" % ("PyTorch op", "kind", "bytes", "recipe", "kind", "bytes"))
    got, want, bad = sorted(got), sorted(want), 0
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else ("", 0, "-")
        w = want[i] if i < len(want) else ("", 0, "-")
        same = g[:2] == w[:2]
        bad += not same
        print("  %-22s %-12s %10d   %-18s %-12s %10d  %s" % (g[2], g[0], g[1], w[2], w[0], w[1],
                                                           "" if same else "differs"))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", default="./sim")
    shape_args(ap, hidden=256, ffn=768, heads=8, kv_heads=2, seq=128, batch=2)
    a = ap.parse_args()
    if a.hidden % a.heads or a.heads % a.kv_heads:
        ap.error("hidden must be a multiple of heads, heads of kv_heads")
    fwd, bwd = pytorch_kernels(a)
    rfwd, rbwd = recipe_kernels(a)
    bad = compare("forward", fwd, rfwd) + compare("backward", bwd, rbwd)
    print("every kernel agrees" if not bad else "%d kernels differ" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
