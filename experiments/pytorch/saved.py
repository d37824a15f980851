#!/usr/bin/env python3
"""What a block keeps for its backward, per runtime and checkpointing mode,
taken from PyTorch and set against ./sim's recipes (core/recipe.c).

    python3 experiments/pytorch/saved.py [--sim ./sim] [--hidden 256 --ffn 768 --heads 8 --kv-heads 2 --seq 128 --batch 2]

The block is fsdp_bench.py's (torchtitan's Llama 3 block), in bf16.

Compiled (`--runtime pytorch-compile`; modes none, per-op as torchtitan's
policy, selective as every matmul's output and attention's, full): the
block goes through AOTAutograd with the min-cut partitioner that
torch.compile's Inductor uses. Its forward graph returns, after the
block's output, what the backward reads. When the block runs, those
tensors are counted once per storage, leaving out the parameters and the
RoPE table (the backward is given them anyway) and the generator's state
(under compile, checkpointing saves it even with preserve_rng_state=False:
a CPU's is 5,056 bytes, a GPU's 16; the table gives it in a column of its
own).

Eager (`--runtime pytorch`; per-op, selective, full): every storage an op
makes in the forward is followed by a weak reference; the ones still alive
after it, less the output, are checkpointing's cache, and the block's
input, which checkpointing saves, is added. Eager without checkpointing
is not compared: on a CPU, RMSNorm is a chain of kernels that save more
than the GPU's fused kernel does.

Each sum is set against the bytes `./sim --schedule` gives the block's
forward (`+acts:`) for the same shape and mode. Exit status 0 when every
row agrees, 1 when one does not, 2 on bad arguments. It runs on a CPU:
the partitioner's choice and checkpointing's cache do not depend on the
device, and the CPU's flash attention saves what the GPU's does (query,
key, value, output, logsumexp).
"""
import argparse, gc, os, re, subprocess, sys, weakref

import torch
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_bench import Block, op_sac_policy, rope_freqs  # noqa: E402

MODES = ("none", "per-op", "selective", "full")


def is_rng_state(t):
    """The CPU generator's state, which compiled checkpointing saves (on a GPU: the CUDA generator's 16 bytes)."""
    state = torch.get_rng_state()
    return t.dtype == state.dtype and t.shape == state.shape


def storages(tensors, skip):
    """The distinct storages among tensors, less those in skip: {data_ptr: bytes}, and the RNG state's bytes."""
    seen, rng = {}, 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if is_rng_state(t):
                rng += s.nbytes()
            elif s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()
    return seen, rng


def block(args):
    """The block in bf16, its RoPE table, an input, and the storages the backward is given anyway."""
    torch.manual_seed(0)
    blk = Block(args.hidden, args.ffn, args.heads, args.kv_heads).to(torch.bfloat16)
    freqs = rope_freqs(args.hidden // args.heads, args.seq)
    x = torch.randn(args.batch, args.seq, args.hidden, dtype=torch.bfloat16, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in blk.parameters()} | {freqs.untyped_storage().data_ptr()}
    return blk, freqs, x, skip


class Outputs(TorchDispatchMode):
    """Every storage an op makes, by weak reference: after the forward the live ones are what it kept."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.refs.append(weakref.ref(t.untyped_storage()))
        return out


def eager_kept_bytes(args, mode):
    """Bytes an eager block still holds after its forward under mode (checkpointing's cache and its input)."""
    blk, freqs, x, skip = block(args)
    context = op_sac_policy(every_mm=mode == "selective")
    with Outputs() as made:
        if mode == "full":
            y = checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False)
        else:
            y = checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False, context_fn=context)
    gc.collect()
    skip |= {y.untyped_storage().data_ptr()}
    live = {s.data_ptr(): s.nbytes() for s in (r() for r in made.refs) if s is not None and s.data_ptr() not in skip}
    y.float().sum().backward()
    return sum(live.values()) + x.untyped_storage().nbytes()  # the input, which checkpointing saves


def compiled_kept_bytes(args, mode):
    """Bytes the compiled forward returns for the backward of one block under mode, and the RNG state's."""
    blk, freqs, x, skip = block(args)
    saved, rng = {}, [0]

    def forward_compiler(gm, example):
        run = make_boxed_func(gm)

        def counted(inputs):
            outs = run(inputs)
            seen, rng[0] = storages(outs[1:], skip)  # outs[0]: the block's output
            saved.update(seen)
            return outs
        counted._boxed_call = True
        return counted

    def backend(gm, example):
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler,
                                     bw_compiler=lambda gm, example: make_boxed_func(gm),
                                     partition_fn=min_cut_rematerialization_partition)

    context = op_sac_policy(every_mm=mode == "selective")  # made outside the traced function, as torchtitan does

    def step(x, freqs):
        if mode == "none":
            return blk(x, freqs)
        if mode == "full":
            return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False)
        return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False, context_fn=context)

    torch._dynamo.reset()
    y = torch.compile(step, backend=backend, fullgraph=True)(x, freqs)
    y.float().sum().backward()  # the backward runs on what was kept
    return sum(saved.values()), rng[0]


def predicted_bytes(args, mode, runtime):
    cmd = [args.sim, "--model", "llama3-8b", "--layers", "1", "--hidden", str(args.hidden), "--ffn", str(args.ffn),
           "--heads", str(args.heads), "--kv-heads", str(args.kv_heads), "--seq", str(args.seq),
           "--batch", str(args.batch), "--nodes", "1", "--gpus-per-node", "1",
           "--runtime", runtime, "--ac", mode, "--schedule"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"saved.py: {' '.join(cmd)}: exit status {out.returncode}: {out.stderr.strip()}")
    for line in out.stdout.splitlines():
        if re.search(r"\bFWD block0 m0\b", line):
            m = re.search(r"\+acts:(\d+)", line)
            return int(m.group(1)) if m else 0
    sys.exit(f"saved.py: {' '.join(cmd)}: no forward of block0 in its schedule")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="./sim")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    if args.hidden % args.heads or args.heads % args.kv_heads or (args.hidden // args.heads) % 2:
        p.error("--hidden must be a multiple of --heads, --heads of --kv-heads, and the head dimension even")
    if not os.access(args.sim, os.X_OK):
        p.error(f"--sim {args.sim}: not an executable (make sim)")

    print(f"PyTorch {torch.__version__}; block: hidden {args.hidden}, ffn {args.ffn}, heads {args.heads}, "
          f"kv heads {args.kv_heads}, seq {args.seq}, batch {args.batch}, bf16")
    print(f"{'runtime':16} {'mode':10} {'PyTorch keeps':>14} {'./sim keeps':>12}  {'N x hidden':>10}  {'and RNG state':>13}")
    unit = args.batch * args.seq * args.hidden * 2
    bad = n = 0
    for runtime, modes in (("pytorch-compile", MODES), ("pytorch", MODES[1:])):
        for mode in modes:
            if runtime == "pytorch":
                got, rng = eager_kept_bytes(args, mode), 0
            else:
                got, rng = compiled_kept_bytes(args, mode)
            want = predicted_bytes(args, mode, runtime)
            bad, n = bad + (got != want), n + 1
            print(f"{runtime:16} {mode:10} {got:14d} {want:12d}  {got / unit:10.3f}  {rng:13d}"
                  f"{'' if got == want else '  differ'}")
    print("every mode agrees" if not bad else f"{bad} of {n} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
