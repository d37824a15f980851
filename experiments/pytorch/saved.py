#!/usr/bin/env python3
"""What a block and the loss keep for their backward, what the backward runs
again, per runtime and checkpointing mode, and what the optimizer step
holds beside its states, taken from PyTorch and set against ./sim's
recipes (core/recipe.c).

    python3 experiments/pytorch/saved.py [--sim ./sim] [--hidden 256 --ffn 768 --heads 8 --kv-heads 2 --seq 128 --batch 2 --vocab 1000]

The block is fsdp_bench.py's (torchtitan's Llama 3 block), in bf16; the
loss is torchtitan's cross-entropy of the bf16 logits cast to fp32.

Compiled (`--runtime pytorch-compile`; modes none, per-op as torchtitan's
policy, selective as every matmul's output and attention's, full; and the
loss): the block goes through AOTAutograd with Inductor's decompositions
and its min-cut partitioner, as torch.compile does. Its forward graph
returns, after the block's output, what the backward reads. When the
block runs, those tensors are counted once per storage, leaving out the
parameters and the RoPE table (the backward is given them anyway). Left
out as well, and given in a column of their own: tensors of two values
at most (the loss's count of targets: 4 bytes; on a GPU, attention's
random seed and offset: 16), which the recipes do not count, and the
CPU generator's state (under compile, full checkpointing runs attention,
an op with a random seed, in run_and_save_rng_state, and its recompute
with that state, even with preserve_rng_state=False: 5,056 bytes; on a
GPU the generator is an input of the graphs instead, and nothing is
saved).

Eager (`--runtime pytorch`; per-op, selective, full): every storage an op
makes in the forward is followed by a weak reference; the ones still alive
after it, less the output, are checkpointing's cache, and the block's
input, which checkpointing saves, is added. Eager without checkpointing,
and the eager loss: what autograd saves (saved_tensors_hooks). Eager
without checkpointing is compared on a GPU only (`--device cuda`, which
the GPU session runs): on a CPU, RMSNorm is a chain of kernels that save
more than the GPU's fused kernel does.

The optimizer (`adamw foreach`, `adamw fused`: torchtitan's AdamW, weight
decay 0.1, over a one-block model's fp32 parameters): the most bytes the
second step's ops hold at once beside the parameters, gradients and
states (the first makes the states), against the optimizer op's
`+transient:` bytes (foreach: the square roots of the second moments, a
list of new tensors, torch/optim/adam.py _multi_tensor_adam; fused:
none).

On a GPU (`--device cuda`) a table follows the rows: how many kernels a
block's forward and backward launch (the profiler's device events;
eager and compiled, without checkpointing and under per-op and full)
against the recipe's counts, with the names of the eager block's. It is
a list to read, for the recipes' kernel lists: the exit status does not
depend on it.

Each sum is set against the bytes `./sim --kernels` gives the block's
forward (`+acts:`) for the same shape and mode; the loss's against the
head's, less the final norm's input, rstd and output (the output GEMM's
input), which the recipes keep as the block's norms. What the backward
runs again is set against the recompute's kernels in the same listing:
the backward's matmul FLOPs beyond twice the forward's (each matmul's
data and weight gradients) against the recompute's GEMM FLOPs, and the
attention forwards in the backward against the recompute's. Exit status
0 when every row agrees, 1 when one does not, 2 on bad arguments. It runs on a CPU:
the partitioner's choice and checkpointing's cache do not depend on the
device, and the CPU's flash attention saves what the GPU's does (query,
key, value, output, logsumexp).
"""
import argparse, functools, gc, os, re, subprocess, sys, weakref

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fsdp_bench import Block, Llama, op_sac_policy, optimizer, rope_freqs, shape_args  # noqa: E402

MODES = ("none", "per-op", "selective", "full")


def left_out(t):
    """A tensor of two values at most (the loss's count of targets; on a GPU, attention's random seed and
    offset), or a generator's state, which compiled checkpointing saves."""
    state = torch.cuda.get_rng_state() if t.is_cuda else torch.get_rng_state()
    return t.numel() <= 2 or (t.dtype == state.dtype and t.shape == state.shape)


def storages(tensors, skip):
    """The distinct storages among tensors, less those in skip: {data_ptr: bytes}, and the bytes left out."""
    seen, out = {}, 0
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if left_out(t):
                out += s.nbytes()
            elif s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()
    return seen, out


def block(args):
    """The block in bf16, its RoPE table, an input, and the storages the backward is given anyway."""
    torch.manual_seed(0)
    blk = Block(args.hidden, args.ffn, args.heads, args.kv_heads).to(args.device, torch.bfloat16)
    freqs = rope_freqs(args.hidden // args.heads, args.seq).to(args.device)
    x = torch.randn(args.batch, args.seq, args.hidden, dtype=torch.bfloat16, device=args.device, requires_grad=True)
    skip = {p.untyped_storage().data_ptr() for p in blk.parameters()} | {freqs.untyped_storage().data_ptr()}
    return blk, freqs, x, skip


class Outputs(TorchDispatchMode):
    """Every storage an op makes, by weak reference, and whether its tensor is left out (left_out): after
    the forward the live ones are what it kept."""

    def __init__(self):
        super().__init__()
        self.refs = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.refs.append((weakref.ref(t.untyped_storage()), left_out(t)))
        return out


ATTENTION = {getattr(torch.ops.aten, n).default for n in (
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu") if hasattr(torch.ops.aten, n)}


def mm_flops(a, b):
    """FLOPs of (m x k) by (k x n)."""
    return 2 * a[0] * a[1] * b[1]


class Matmuls(TorchDispatchMode):
    """The FLOPs of the matmuls an eager pass runs and the attention forwards it runs."""

    def __init__(self):
        super().__init__()
        self.flops = self.attention = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func == torch.ops.aten.mm.default:
            self.flops += mm_flops(args[0].shape, args[1].shape)
        self.attention += func in ATTENTION
        return func(*args, **(kwargs or {}))


def graph_matmuls(gm):
    """The same, counted in a graph's nodes (an op with a random seed, as attention is, runs inside
    run_and_save_rng_state or run_with_rng_state, which name it as an argument)."""
    flops = attention = 0
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target == torch.ops.aten.mm.default:
            flops += mm_flops(n.args[0].meta["val"].shape, n.args[1].meta["val"].shape)
        attention += any(op in ATTENTION for op in (n.target, *n.args) if isinstance(op, torch._ops.OpOverload))
    return flops, attention


def rerun(fwd, bwd):
    """What the backward runs again: its matmul FLOPs beyond the two of each forward matmul (data and
    weight gradients), and its attention forwards."""
    return bwd[0] - 2 * fwd[0], bwd[1]


def autograd_saved(fn, inputs, skip):
    """Bytes autograd saves in fn's forward (saved_tensors_hooks), once per storage, and the bytes left out."""
    packed = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t), Matmuls() as fwd:
        y = fn(*inputs)
    with Matmuls() as bwd:
        y.float().sum().backward()
    seen, out = storages(packed, skip)
    return sum(seen.values()), out, rerun((fwd.flops, fwd.attention), (bwd.flops, bwd.attention))


def eager_kept_bytes(args, mode):
    """Bytes an eager block keeps after its forward under mode (checkpointing's cache and its input)."""
    blk, freqs, x, skip = block(args)
    if mode == "none":
        return autograd_saved(blk, (x, freqs), skip)
    run = under(blk, mode)
    with Outputs() as made, Matmuls() as fwd:
        y = run(x, freqs)
    gc.collect()
    skip |= {y.untyped_storage().data_ptr()}
    live, out = {}, {}  # kept, and left out (on a GPU, attention's random seed and offset: 16 bytes)
    for ref, small in made.refs:
        s = ref()
        if s is not None and s.data_ptr() not in skip:
            (out if small else live)[s.data_ptr()] = s.nbytes()
    with Matmuls() as bwd:
        y.float().sum().backward()
    # the input, which checkpointing saves
    return sum(live.values()) + x.untyped_storage().nbytes(), sum(out.values()), rerun(
        (fwd.flops, fwd.attention), (bwd.flops, bwd.attention))


def compiled_saved(fn, inputs, skip):
    """Bytes fn's compiled forward returns for its backward, the bytes left out (left_out), and what its
    backward graph runs again (rerun)."""
    saved, rng, graphs = {}, [0], {}

    def forward_compiler(gm, example):
        graphs["forward"] = graph_matmuls(gm)
        run = make_boxed_func(gm)

        def counted(graph_inputs):
            outs = run(graph_inputs)
            seen, rng[0] = storages(outs[1:], skip)  # outs[0]: fn's output
            saved.update(seen)
            return outs
        counted._boxed_call = True
        return counted

    def backward_compiler(gm):
        graphs["backward"] = graph_matmuls(gm)
        return make_boxed_func(gm)

    def backend(gm, example):
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler,
                                     bw_compiler=lambda gm, example: backward_compiler(gm),
                                     decompositions=select_decomp_table(),
                                     partition_fn=functools.partial(min_cut_rematerialization_partition,
                                                                    compiler="inductor"))

    torch._dynamo.reset()
    y = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    y.float().sum().backward()  # the backward runs on what was kept
    return sum(saved.values()), rng[0], rerun(graphs["forward"], graphs["backward"])


def under(blk, mode):
    """The block's forward under checkpointing mode, as torchtitan wraps it (no RNG state kept)."""
    context = op_sac_policy(every_mm=mode == "selective")  # made outside any traced function, as torchtitan does

    def run(x, freqs):
        if mode == "none":
            return blk(x, freqs)
        if mode == "full":
            return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False)
        return checkpoint(blk, x, freqs, use_reentrant=False, preserve_rng_state=False, context_fn=context)
    return run


def compiled_kept_bytes(args, mode):
    """Bytes the compiled forward returns for the backward of one block under mode, and the bytes left out."""
    blk, freqs, x, skip = block(args)
    return compiled_saved(under(blk, mode), (x, freqs), skip)


def loss_fn(pred, labels):
    """torchtitan's cross-entropy loss (components/loss.py)."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


class Peak(TorchDispatchMode):
    """The most bytes of storages made by ops that were alive at once, less those in skip (in-place ops
    return their operands)."""

    def __init__(self, skip):
        super().__init__()
        self.skip, self.refs, self.peak = skip, {}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.skip:
                self.refs[t.untyped_storage().data_ptr()] = weakref.ref(t.untyped_storage())
        self.peak = max(self.peak, sum(s.nbytes() for s in (r() for r in self.refs.values()) if s is not None))
        return out


def optimizer_temporaries(args, optim):
    """The most bytes an AdamW step (torchtitan's: weight decay 0.1; foreach or fused) holds beside the
    parameters, gradients and states: the step after the first, which made the states."""
    torch.manual_seed(0)
    model = Llama(1, args.hidden, args.ffn, args.heads, args.kv_heads, args.vocab, args.seq).to(args.device)
    opt, _ = optimizer(model, {"optim": optim, "optim_in_backward": "false"})
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    for step in range(2):
        model(tokens).float().sum().backward()
        tensors = [*model.parameters(), *(p.grad for p in model.parameters()),
                   *(v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor))]
        with Peak({t.untyped_storage().data_ptr() for t in tensors}) as peak:
            opt.step()
        opt.zero_grad()
    return peak.peak, 0, (0, 0)


def loss_kept_bytes(args, compiled):
    """Bytes the loss keeps for its backward, eager (what autograd saves) or compiled, and the bytes left out."""
    torch.manual_seed(0)
    pred = torch.randn(args.batch, args.seq, args.vocab, dtype=torch.bfloat16, device=args.device,
                       requires_grad=True)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), device=args.device)
    return (compiled_saved if compiled else autograd_saved)(loss_fn, (pred, labels), set())


def aligned(n):
    """The caching allocator's 512-byte blocks, as the recipes count a tensor."""
    return (n + 511) // 512 * 512


def predicted(args, mode, runtime, segment="block0", *flags):
    """What ./sim's recipe gives the segment's forward: its kept bytes (+acts:), the matmul FLOPs and
    attention forwards of its recompute, and its kernels' names by phase (FWD, RECOMP, BWD: --kernels); for
    segment "optimizer", the optimizer step's temporary bytes (+transient:)."""
    cmd = [args.sim, "--model", "llama3-8b", "--layers", "1", "--hidden", str(args.hidden), "--ffn", str(args.ffn),
           "--heads", str(args.heads), "--kv-heads", str(args.kv_heads), "--seq", str(args.seq),
           "--batch", str(args.batch), "--vocab", str(args.vocab), "--nodes", "1", "--gpus-per-node", "1",
           "--runtime", runtime, "--ac", mode, "--kernels", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"saved.py: {' '.join(cmd)}: exit status {out.returncode}: {out.stderr.strip()}")
    kept, op, flops, attention = None, None, 0, 0
    kernels = {}  # the segment's kernels per phase (FWD, RECOMP, BWD) of microbatch 0
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) > 3 and f[0].isdigit():  # an op: index, kind, unit, microbatch, ...
            op = tuple(f[1:4])
            if op == ("FWD", segment, "m0"):
                # the kept tensors, one +acts: each (one sum before the schedule listed them apart)
                kept = sum(int(b) for b in re.findall(r"\+acts:(\d+)", line))
            elif op[:2] == ("OPTIM", "all") and segment == "optimizer":
                kept = sum(int(b) for b in re.findall(r"\+transient:(\d+)", line))
        elif op and op[1:] == (segment, "m0") and len(f) >= 4 and f[1] in ("gemm", "attention", "elementwise"):
            kernels.setdefault(op[0], []).append(f[0])  # a kernel: name, kind, bytes, flops, shape
            if op[0] == "RECOMP" and f[1] == "gemm":
                flops += int(f[3])
            elif op[0] == "RECOMP" and f[1] == "attention" and not line.rstrip().endswith(" bwd"):
                attention += 1
    if kept is None:
        sys.exit(f"saved.py: {' '.join(cmd)}: no forward of {segment} in its schedule")
    return kept, (flops, attention), kernels


def device_kernels(fn):
    """The names of the kernels a GPU runs for fn, in launch order (the profiler's device events, less
    copies and fills of memory)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()  # the profiler reads the device's events when it stops
    events = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and
                     not e.is_user_annotation and not e.name.startswith(("Memcpy", "Memset"))),
                    key=lambda e: e.time_range.start)
    return [e.name for e in events]


def block_kernels(args, runtime, mode):
    """The kernels of one block's forward, and of its backward (recompute included), on the GPU."""
    blk, freqs, x, _ = block(args)
    run = under(blk, mode)
    step = torch.compile(run, fullgraph=True) if runtime == "pytorch-compile" else run
    for _ in range(2):  # the second time: compiled, autotuned, caches warm
        # no gradient to add to, as in training (FSDP2 drops the unsharded gradients after each reduction):
        # autograd's AccumulateGrad then takes the new one, with no kernel
        x.grad = None
        for p in blk.parameters():
            p.grad = None
        y = step(x, freqs)
        dy = torch.ones_like(y)
        if y.is_cuda:
            torch.cuda.synchronize()
        box = {}
        fwd = device_kernels(lambda: box.update(y=step(x, freqs)))
        bwd = device_kernels(lambda: box["y"].backward(dy))
    return fwd, bwd


def kernel_table(args):
    """On a GPU: how many kernels a block launches, from the profiler, against the recipe's (a list to
    read, not a check: the exit status does not depend on it)."""
    print(f"\n{'runtime':16} {'what':10} {'forward kernels, PyTorch':>25} {'./sim':>6} "
          f"{'backward (recompute too), PyTorch':>34} {'./sim':>6}")
    for runtime, mode in (("pytorch", "none"), ("pytorch", "per-op"), ("pytorch", "full"),
                          ("pytorch-compile", "none"), ("pytorch-compile", "per-op")):
        try:
            fwd, bwd = block_kernels(args, runtime, mode)
        except Exception as err:  # a list to read: one that fails says why, the rest go on
            print(f"{runtime:16} {mode:10} failed: {type(err).__name__}: {err}")
            continue
        k = predicted(args, mode, runtime)[2]
        print(f"{runtime:16} {mode:10} {len(fwd):25d} {len(k.get('FWD', [])):6d} "
              f"{len(bwd):34d} {len(k.get('BWD', [])) + len(k.get('RECOMP', [])):6d}")
        if mode == "none":
            print("  forward:  " + ", ".join(n[:48] for n in fwd))
            print("  backward: " + ", ".join(n[:48] for n in bwd))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sim", default="./sim")
    shape_args(p, hidden=256, ffn=768, heads=8, kv_heads=2, seq=128, batch=2, vocab=1000)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: on the GPU, eager without checkpointing compared too")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this PyTorch sees no GPU")
    if args.hidden % args.heads or args.heads % args.kv_heads or (args.hidden // args.heads) % 2:
        p.error("--hidden must be a multiple of --heads, --heads of --kv-heads, and the head dimension even")
    if not os.access(args.sim, os.X_OK):
        p.error(f"--sim {args.sim}: not an executable (make sim)")

    print(f"PyTorch {torch.__version__} on {args.device}; block: hidden {args.hidden}, ffn {args.ffn}, heads {args.heads}, "
          f"kv heads {args.kv_heads}, seq {args.seq}, batch {args.batch}, bf16")
    print(f"{'runtime':16} {'what':10} {'PyTorch bytes':>14} {'./sim bytes':>12} {'N x hidden':>10} {'left out':>8}"
          f"  {'runs again: matmul FLOPs, PyTorch':>34} {'./sim':>12} {'attention':>9} {'./sim':>5}")
    unit = args.batch * args.seq * args.hidden * 2
    rows = [("pytorch-compile", mode, lambda m=mode: compiled_kept_bytes(args, m)) for mode in MODES]
    # eager RMSNorm is the fused kernel on a GPU only: on a CPU its chain of kernels saves more
    eager = MODES if args.device == "cuda" else MODES[1:]
    rows += [("pytorch", mode, lambda m=mode: eager_kept_bytes(args, m)) for mode in eager]
    rows += [(runtime, "loss", lambda c=runtime != "pytorch": loss_kept_bytes(args, c))
             for runtime in ("pytorch-compile", "pytorch")]
    rows += [("pytorch", f"adamw {o}", lambda o=o: optimizer_temporaries(args, o)) for o in ("foreach", "fused")]
    bad = 0
    for runtime, what, measure in rows:
        got, out, again = measure()
        if what == "loss":
            # the head's bytes less the final norm's input and rstd and its output (the output GEMM's input);
            # the head is not checkpointed
            want, want_again, _ = predicted(args, "none", runtime, "head")
            want -= 2 * aligned(unit) + aligned(4 * args.batch * args.seq)
        elif what.startswith("adamw"):
            want, want_again, _ = predicted(args, "none", runtime, "optimizer", "--optim", what.split()[1])
        else:
            want, want_again, _ = predicted(args, what, runtime)
        differ = got != want or again != want_again
        bad += differ
        print(f"{runtime:16} {what:10} {got:14d} {want:12d} {got / unit:10.3f} {out:8d}"
              f"  {again[0]:34d} {want_again[0]:12d} {again[1]:9d} {want_again[1]:5d}{'  differ' if differ else ''}")
    print("every row agrees" if not bad else f"{bad} of {len(rows)} rows differ")
    if args.device == "cuda":
        kernel_table(args)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
