#!/usr/bin/env python3
"""Microbenchmarks of the eager kernels core/recipe.c lists, written as a
calibration session (data/README.md, "Calibration files") that
`./sim --calibration FILE --runtime pytorch` prices steps with.

    python experiments/pytorch/microbench.py --out data/calibration/<hardware>-pytorch.h5 [--quick]

Measures, with CUDA events (or the wall clock on a CPU), the median of
repeated runs, each from a cold L2 cache (L2_FLUSH bytes written before
it), of: GEMMs over a grid of (M, N, K) crossing tile and wave boundaries
(dataset `gemm`) and at the model's shapes by their recipe names
(`kernels`); SDPA forward and backward; every element-wise kernel of an
eager block and the loss, forward and backward, under the names and bytes
`./sim --kernels` gives them (--sim); memory passes over sizes (`passes`,
the schema's `dst += src`); foreach and fused AdamW per element;
an empty op's cost (dispatch); on a GPU, how many kernels one stream holds
launched and not yet run before a launch blocks (`launch_queue`), and, with
NVML, the SM clock its measurements ran at and the one seconds of GEMMs
back to back hold. No run is timed end to end here.
"""
import argparse, datetime, os, re, socket, statistics, subprocess, time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from fsdp_bench import is_kernel, shape_args  # the script's folder is first on the path

K_GEMM, K_ATTN, K_EW = 0, 1, 2


HOLD = 1_000_000  # cycles (about half a millisecond) the GPU sleeps while the host queues a measurement, at least
HOLD_PER_S = 2e9  # torch.cuda._sleep's cycles a second (clock64 at about 2 GHz): a longer hold where the host needs it


L2_FLUSH = 256 << 20  # bytes written before each measured run: several times any GPU's L2 (H100: 50 MB)


def sm_clock_reader():
    """A function giving the GPU's SM clock now, in MHz (NVML, through pynvml where installed), or None."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    except Exception:  # no pynvml, no NVML: the clocks go unrecorded
        return None

    def read():
        try:
            return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        except Exception:  # a reading that fails costs that reading only
            return None
    return read


SM_CLOCKS = []  # the SM clock after each timed run on a GPU (MHz), where NVML can be read
ISSUES = []  # the host's issue time (s) of each op measured behind a hold longer than HOLD (timer)


def timer(device):
    if device.type == "cuda":
        scrub = torch.empty(L2_FLUSH // 4, device=device, dtype=torch.float32)
        clock = sm_clock_reader()

        def run(fn, reps):
            ts = []
            # the host's time to issue fn's work, the GPU idle: the hold below must outlast it, or the events time
            # the host. Most ops take tens of us; chunk_cat (FSDP2's copy-in) builds on the host a 64-bit entry
            # per 2 KiB block of its output and copies the table to the device (ATen's TensorShape.cu,
            # get_chunk_cat_metadata and pack_vecs): milliseconds for a unit of GiBs, which the fixed half
            # millisecond let into the first H200 session's copy_in rows (243 GB/s where the runs' profiles
            # give chunk_cat 1.8 TB/s)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            issue_s = time.perf_counter() - t0
            torch.cuda.synchronize()
            hold = max(HOLD, int(2 * issue_s * HOLD_PER_S))
            if hold > HOLD:
                ISSUES.append(issue_s)
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                # each run from a cold L2, as a training step's kernels find their inputs (written a kernel or
                # more before, by a kernel that wrote more than L2 holds), not from the run before it: a
                # pass over 16 MB ran at 3.6 TB/s on the H100, above its HBM's 3.35 (2026-11-27)
                scrub.zero_()
                # the GPU busy while the host queues the events and the work: they time the device's work,
                # not the Python, dispatch and launch in front of it (dispatch_ns measures those)
                torch.cuda._sleep(hold)
                a.record(); fn(); b.record(); b.synchronize()
                ts.append(a.elapsed_time(b) * 1e6)
                mhz = clock() if clock else None
                if mhz:  # the clock the kernels ran at: a step at the power cap runs lower (gpu/README.md)
                    SM_CLOCKS.append(mhz)
            return statistics.median(ts)
    else:
        def run(fn, reps):
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter(); fn(); ts.append((time.perf_counter() - t0) * 1e9)
            return statistics.median(ts)
    return run


def dispatch_ns(e1, reps, n=16):
    """The host's time to issue one small op (Python, dispatch, launch), on a GPU busy enough that no launch
    waits for it: the median over reps of n ops each."""
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.cuda._sleep(HOLD)
        t0 = time.perf_counter()
        for _ in range(n):
            e1.add_(1)
        ts.append((time.perf_counter() - t0) / n * 1e9)
    torch.cuda.synchronize()
    return statistics.median(ts)


def launch_queue_depth():
    """Kernels a stream holds before cudaLaunchKernel blocks: launch long kernels back to back and find where the
    host's launch time jumps from microseconds to a kernel's length (the queue full, a launch waits for a slot)."""
    torch.cuda.synchronize()
    cycles = 2_000_000  # about a millisecond per kernel: far longer than a launch
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    ts = []
    for _ in range(4096):
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    base = statistics.median(ts[:64])
    for i, d in enumerate(ts):
        if i >= 64 and d > 50 * base and d > 200e-6:
            return i
    return 0  # never blocked within 4096 launches


def sim_listing(sim, a, *flags):
    """What `sim` prints for fsdp_bench.py's model of one block at the shape on one GPU under PyTorch with flags
    (--kernels, --schedule, ...), at the precision measured here (a.precision: mixed on a GPU, fp32 on a CPU, whose
    tensors are fp32 and so are the bytes the rows are labelled with); None without a ./sim that runs."""
    if not sim or not os.access(sim, os.X_OK):
        return None
    cmd = [sim, "--model", "llama3-8b", "--layers", "1", "--hidden", str(a.hidden), "--ffn", str(a.ffn),
           "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--vocab", str(a.vocab), "--seq", str(a.tokens),
           "--batch", "1", "--nodes", "1", "--gpus-per-node", "1", "--runtime", "pytorch",
           "--precision", a.precision] + list(flags)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:  # a ./sim that does not run here
        print("microbench: %s failed (%s)" % (" ".join(cmd), e))
        return None


def sim_kernels(sim, a):
    """The kernels of the eager recipe (core/recipe.c) at the shape, as `sim --kernels` lists them for one block and
    the loss: element-wise [(name, flops, bytes)], GEMMs and attention [(name, m, n, k, flops, bytes)], each once;
    None without a ./sim that runs."""
    out = sim_listing(sim, a, "--kernels")
    if out is None:
        return None
    seen, rows, gemms = set(), [], []
    for line in out.splitlines():
        m = re.match(r"^ {10}(\S+)\s+elementwise\s+(\d+)\s+(\d+)", line)
        if m and (m.group(1), int(m.group(2))) not in seen:
            seen.add((m.group(1), int(m.group(2))))
            rows.append((m.group(1), int(m.group(3)), int(m.group(2))))
        m = re.match(r"^ {10}(\S+)\s+(?:gemm|attention)\s+(\d+)\s+(\d+)\s+(\d+)x(\d+) [kd]=(\d+)", line)
        if m and m.group(0) not in seen:
            seen.add(m.group(0))
            gemms.append((m.group(1), int(m.group(4)), int(m.group(5)), int(m.group(6)), int(m.group(3)),
                          int(m.group(2))))
    return rows, gemms


def sim_copies(sim, a):
    """FSDP2's copies at a shard group of one, as `sim --schedule` lists them for one block and the root (and with
    block+io wrapping, and with no-sync's fp32 gradients): [(op kind name, unit, bytes)], each once; [] without a
    ./sim that runs."""
    kinds = {"COPYOUT": "copy_out", "COPYIN": "copy_in", "COPY": "copy"}
    seen = []
    for extra in ([], ["--wrap", "block+io"], ["--accum", "no-sync", "--microbatches", "2"]):
        out = sim_listing(sim, a, "--schedule", *extra)
        if out is None:
            return []
        for line in out.splitlines():
            m = re.match(r"^\s*\d+ (COPYOUT|COPYIN|COPY) (\S+) m\d+\s+\S+\s+(\d+)", line)
            if m and (kinds[m.group(1)], m.group(2), int(m.group(3))) not in seen:
                seen.append((kinds[m.group(1)], m.group(2), int(m.group(3))))
    return seen


def unit_shapes(unit, D, H, KV, Q, F_, V):
    """The parameters of a unit of fsdp_bench.py's model by ./sim's unit names, in module order."""
    block = [(H * Q, D), (KV * Q, D), (KV * Q, D), (D, H * Q), (F_, D), (D, F_), (F_, D), (D,), (D,)]
    return {"root": [(V, D), (D,), (V, D)], "embed": [(V, D)], "output": [(D,), (V, D)]}.get(
        unit, block if unit.startswith("block") else None)


def fsdp_copy(kind, shapes, nbytes, dev, dt):
    """FSDP2's op behind a copy of the schedule at a shard group of one (2.11): `copy_out`, wait_for_unshard's cast
    of each fp32 shard to the compute dtype and its copy into the unsharded parameter; `copy_in`,
    foreach_reduce's chunk_cat of the unit's gradients (autograd's, or no-sync's fp32 ones) into the fp32
    reduce-scatter input; `copy`, the reduce output's copy of it. None when the bytes are not the op's."""
    elems = sum(int(np.prod(x)) for x in shapes)
    if kind == "copy_out" and nbytes == 10 * elems:
        shards = [torch.randn(*x, device=dev) for x in shapes]
        fulls = [torch.empty(*x, device=dev, dtype=dt) for x in shapes]

        def fn():
            for sh, fu in zip(shards, fulls):
                fu.copy_(sh.to(dt))
        return fn
    if kind == "copy_in" and nbytes in (6 * elems, 8 * elems):
        grads = [torch.randn(*x, device=dev, dtype=dt if nbytes == 6 * elems else torch.float32) for x in shapes]
        out = torch.empty(1, elems, device=dev)
        return lambda: torch.ops.fsdp.chunk_cat(grads, dim=0, num_chunks=1, out=out)
    if kind == "copy" and nbytes == 8 * elems:
        src, dst = torch.randn(elems, device=dev), torch.empty(elems, device=dev)
        return lambda: dst.copy_(src)
    return None


def eager_ops(dev, dt, N, D, H, KV, Q, F_, V):
    """PyTorch's own op behind each element-wise kernel name of the eager recipe: name -> (make, the recipe's names
    it runs), make(bytes) giving the function to time (its tensors made then; bytes, the recipe's, size only the
    gradient adds). Where one op runs several of the recipe's kernels (RMSNorm's backward: the input's gradient and
    the weight's; nll_loss's backward: a zero fill and the scatter), its time is theirs together, shared by their
    bytes. The recipe counts a kernel's bytes its own way (core/recipe.c); the time is the op's as PyTorch runs it."""
    r = H // KV
    ops = {}

    def op(names, make):
        for name in names:
            ops[name] = (lambda nbytes, make=make: make(), names)

    def norm_fwd():
        x, norm = torch.randn(1, N, D, device=dev, dtype=dt), torch.nn.RMSNorm(D, device=dev, dtype=dt)
        return lambda: norm(x)

    def norm_bwd():
        x = torch.randn(1, N, D, device=dev, dtype=dt, requires_grad=True)
        norm = torch.nn.RMSNorm(D, device=dev, dtype=dt)
        y = norm(x)
        dy = torch.randn_like(y)
        return lambda: torch.autograd.grad(y, (x, norm.weight), dy, retain_graph=True)

    def cast(shape, src, dst):
        x = torch.randn(*shape, device=dev, dtype=src)
        return lambda: x.to(dst)

    def freqs():
        return torch.polar(torch.ones(N, Q // 2, device=dev), torch.randn(N, Q // 2, device=dev))

    def rope(heads, conj):
        x = torch.view_as_complex(torch.randn(1, N, heads, Q // 2, 2, device=dev))
        f = freqs()[None, :, None, :]
        f = f.conj().clone() if conj else f
        return lambda: x * f

    def rope_conj():
        f = freqs()
        return lambda: f.conj().clone()

    def repeat():
        x = torch.randn(1, N, KV, Q, device=dev, dtype=dt)
        return lambda: x.unsqueeze(3).expand(1, N, KV, r, Q).reshape(1, N, H, Q)

    def repeat_bwd():
        g = torch.randn(1, N, KV, r, Q, device=dev, dtype=dt)
        return lambda: g.sum(3)

    def binary(numel, fn):
        x, y = torch.randn(numel, device=dev, dtype=dt), torch.randn(numel, device=dev, dtype=dt)
        return lambda: fn(x, y)

    def unary(numel, fn):
        x = torch.randn(numel, device=dev, dtype=dt)
        return lambda: fn(x)

    def silu_bwd():
        g, x = torch.randn(N, F_, device=dev, dtype=dt), torch.randn(N, F_, device=dev, dtype=dt)
        return lambda: torch.ops.aten.silu_backward(g, x)

    def embed(bwd):
        w = torch.randn(V, D, device=dev, dtype=dt, requires_grad=bwd)
        tok = torch.randint(0, V, (1, N), device=dev)
        if not bwd:
            return lambda: F.embedding(tok, w)
        y = F.embedding(tok, w)
        dy = torch.randn_like(y)
        return lambda: torch.autograd.grad(y, w, dy, retain_graph=True)

    def logits(fp32):
        x = torch.randn(N, V, device=dev, dtype=dt)
        return x.float() if fp32 else x

    def log_softmax_fwd():
        x = logits(True)
        return lambda: torch.log_softmax(x, -1)

    def log_softmax_bwd():
        y = torch.log_softmax(logits(True), -1)
        g = torch.randn_like(y)
        return lambda: torch.ops.aten._log_softmax_backward_data(g, y, -1, torch.float32)

    def nll(bwd):
        lsm = torch.log_softmax(logits(True), -1)
        tgt = torch.randint(0, V, (N,), device=dev)
        if not bwd:
            return lambda: F.nll_loss(lsm, tgt)
        g, total = torch.ones((), device=dev), torch.tensor(float(N), device=dev)
        return lambda: torch.ops.aten.nll_loss_backward(g, lsm, tgt, None, 1, -100, total)

    for n in ("attn_norm", "mlp_norm", "final_norm"):
        op([n], norm_fwd)
        op([n + "_bwd0", n + "_bwd1"], norm_bwd)
    for n, heads in (("q", H), ("k", KV)):
        op([n + "_float"], lambda h=heads: cast((1, N, h, Q), dt, torch.float32))
        op([n + "_float_bwd"], lambda h=heads: cast((1, N, h, Q), torch.float32, dt))
        op([n + "_rope"], lambda h=heads: rope(h, False))
        op([n + "_rope_bwd"], lambda h=heads: rope(h, True))
        op([n + "_rope_conj"], rope_conj)
        op([n + "_type_as"], lambda h=heads: cast((1, N, h, Q), torch.float32, dt))
        op([n + "_type_as_bwd"], lambda h=heads: cast((1, N, h, Q), dt, torch.float32))
    for n in ("k_repeat", "v_repeat"):
        op([n], repeat)
        op([n + "_bwd"], repeat_bwd)
    op(["residual1"], lambda: binary(N * D, torch.add))
    op(["residual2"], lambda: binary(N * D, torch.add))
    op(["silu"], lambda: unary(N * F_, F.silu))
    op(["silu_bwd"], silu_bwd)
    op(["mul"], lambda: binary(N * F_, torch.mul))
    op(["mul_bwd0"], lambda: binary(N * F_, torch.mul))  # the gradient times each input (mul_bwd1 the other)
    op(["mul_bwd1"], lambda: binary(N * F_, torch.mul))
    op(["embed"], lambda: embed(False))
    op(["embed_bwd"], lambda: embed(True))
    op(["loss_float"], lambda: (lambda x: (lambda: x.float()))(logits(False)))
    op(["loss_float_bwd"], lambda: (lambda x: (lambda: x.to(dt)))(logits(True)))
    op(["log_softmax"], log_softmax_fwd)
    op(["log_softmax_bwd"], log_softmax_bwd)
    op(["nll_loss"], lambda: nll(False))
    op(["nll_loss_bwd_zero", "nll_loss_bwd"], lambda: nll(True))
    # the gradients autograd adds (grad_addN: tensor N's, two read and one written in bf16, 3 x 2 bytes an element)
    ops["grad_add"] = (lambda nbytes: binary(nbytes // 6, torch.add), ["grad_add"])
    return ops


HELPERS = (("attention_bwd_dot", "dot_do_o"), ("attention_bwd_dq", "convert_dq"))


def helper_shares(fn, cuda=True):
    """The shares of fn's device time that its kernels named like `dot_do_o` and `convert_dq` (cuDNN's and
    FlashAttention's helpers of SDPA's backward) take, by the profiler: {pattern: share}. cuda=False: of its CPU
    time, by the CPU's profiler (what tests/e2e_pytorch.sh runs where no GPU is)."""
    act = torch.profiler.ProfilerActivity
    with torch.profiler.profile(activities=[act.CUDA if cuda else act.CPU]) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    # key_averages() gives FunctionEventAvg rows, named by `key` (no `name`: the H200 session's split failed on it);
    # on the GPU the kernels alone: CUDA API rows (cudaLaunchKernel, ...) carry device time too (the H200's profiles)
    rows = [e for e in prof.key_averages() if not cuda or is_kernel(e)]
    times = [(e.key, e.device_time_total if cuda else e.self_cpu_time_total) for e in rows]
    times = [(n, t) for n, t in times if t > 0]
    total = sum(t for n, t in times if not n.startswith(("Memcpy", "Memset", "aten::", "autograd::")))
    shares = {}
    for _, pattern in HELPERS:
        shares[pattern] = sum(t for n, t in times if pattern in n) / total if total else 0.0
    return shares


def split_backward(kernels, listed, helpers):
    """SDPA backward's row (attention_bwd) split by helper_shares: a row of its own for each helper the recipe lists
    (`listed`: ./sim's kernels), its share of the whole backward's time, and the rest left to attention_bwd (a
    helper the recipe does not list stays in it)."""
    whole = [i for i, x in enumerate(kernels) if x[0] == b"attention_bwd"][0]
    ns, taken = kernels[whole][7], 0.0
    for name, pattern in HELPERS:
        row = [x for x in listed if x[0] == name]
        if row and helpers.get(pattern):
            kernels.append((name.encode(), K_EW, 0, 0, 0, row[0][1], row[0][2], ns * helpers[pattern], 0.0))
            taken += helpers[pattern]
    kernels[whole] = kernels[whole][:7] + (ns * (1 - taken), 0.0)


def profiled_kernels(fn):
    """The device kernels fn launches, by the profiler: "name xN (us)" of each, the longest first, for the log (which
    of ATen's paths an op took: a fast kernel or a fallback)."""
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        rows = sorted(((e.key, e.count, e.device_time_total) for e in prof.key_averages() if e.device_time_total > 0
                       and is_kernel(e)), key=lambda r: -r[2])
    except Exception as e:  # the log line's kernels only: the measurement stands
        return "kernels not profiled (%s)" % (str(e).splitlines()[0] if str(e) else type(e).__name__)
    return "; ".join("%s x%d (%.0f us)" % (n[:72], c, us) for n, c, us in rows[:6])


def sustained_clock(dev, dt, N, D, F_, seconds=3.0):
    """The SM clock (MHz) a GPU holds under a sustained load of a block's largest GEMM back to back for `seconds`
    (the power cap reached), the median of NVML's readings over its last second; None without NVML."""
    clock = sm_clock_reader()
    if clock is None:
        return None
    x, w = torch.randn(N, D, device=dev, dtype=dt), torch.randn(F_, D, device=dev, dtype=dt)
    seen, t0 = [], time.time()
    while time.time() - t0 < seconds:
        for _ in range(8):
            x @ w.t()
        torch.cuda.synchronize()
        mhz = clock() if time.time() - t0 > seconds - 1 else None
        if mhz:
            seen.append(mhz)
    del x, w
    mhz = statistics.median(seen) if seen else None
    print("microbench: SM clock %s MHz under %.0f s of back-to-back GEMMs; %s MHz at the median of the measurements"
          % (mhz, seconds, statistics.median(SM_CLOCKS) if SM_CLOCKS else "not read"))
    return mhz


def hand_elementwise(k, dev, dt, el, N, D, H, KV, Q, F_):
    """Without a ./sim: the forward's element-wise kernels, labelled with the recipe's bytes as written here."""
    x = torch.randn(1, N, D, device=dev, dtype=dt)
    norm = torch.nn.RMSNorm(D, device=dev, dtype=dt)
    k("attn_norm", K_EW, 0, 0, 0, 4 * N * D, 2 * N * D * el + 4 * N, lambda: norm(x))
    q = torch.randn(1, N, H, Q, device=dev, dtype=dt)
    kk = torch.randn(1, N, KV, Q, device=dev, dtype=dt)
    freqs = torch.polar(torch.ones(N, Q // 2, device=dev), torch.randn(N, Q // 2, device=dev))
    qf = q.float()
    qc = torch.view_as_complex(qf.reshape(1, N, H, -1, 2))
    k("q_float", K_EW, 0, 0, 0, 0, N * H * Q * (el + 4), lambda: q.float())
    k("q_rope", K_EW, 0, 0, 0, N * H * Q, N * H * Q * 8, lambda: qc * freqs[None, :, None, :])
    k("q_type_as", K_EW, 0, 0, 0, 0, N * H * Q * (4 + el), lambda: qf.type_as(q))
    r = H // KV
    k("k_repeat", K_EW, 0, 0, 0, 0, N * (KV + H) * Q * el,
      lambda: kk.unsqueeze(3).expand(1, N, KV, r, Q).reshape(1, N, H, Q))
    g, u = torch.randn(N, F_, device=dev, dtype=dt), torch.randn(N, F_, device=dev, dtype=dt)
    k("silu", K_EW, 0, 0, 0, N * F_, 2 * N * F_ * el, lambda: F.silu(g))
    # two tensors read, as SwiGLU's mul reads silu's output and w3's (g * g reads one: the first H100 file's
    # row, faster than the HBM by its label)
    k("mul", K_EW, 0, 0, 0, N * F_, 3 * N * F_ * el, lambda: g * u)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    shape_args(ap, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256, tokens=8192)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hardware", default="")
    ap.add_argument("--sim", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sim"),
                    help="the ./sim whose recipe names and bytes label the element-wise kernels (without one: the "
                         "forward's few, labelled here)")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    dt = torch.bfloat16 if cuda else torch.float32
    el = 2 if cuda else 4
    a.precision = "mixed" if cuda else "fp32"  # the recipe ./sim labels the rows from: its bytes are el's
    reps = 5 if a.quick else 20
    t = timer(dev)
    N, D, F_, H, KV, V = a.tokens, a.hidden, a.ffn, a.heads, a.kv_heads, a.vocab
    Q = D // H
    kernels, gemms = [], []

    def k(name, kind, m, n, kk, flops, nbytes, fn):
        fn()
        kernels.append((name.encode()[:23], kind, m, n, kk, flops, nbytes, t(fn, reps), 0.0))

    def mm(m, n, kk, name=None):
        x, w = torch.randn(m, kk, device=dev, dtype=dt), torch.randn(n, kk, device=dev, dtype=dt)
        fn = lambda: x @ w.t()
        fn()
        row = ((name or "gemm").encode()[:23], K_GEMM, m, n, kk, 2 * m * n * kk, el * (m * kk + kk * n + m * n),
               t(fn, reps), 0.0)
        (kernels if name else gemms).append(row)

    recipe = sim_kernels(a.sim, a)
    listed = recipe[0] if recipe else None
    if recipe:
        # every GEMM of a block and the head, forward and backward, as the recipe names and counts it: a
        # projection's x @ w.t(), its input's gradient dy @ w, its weight's dy.t() @ x
        for name, m, n, kk, flops, nbytes in recipe[1]:
            if name.startswith("attention"):
                continue  # SDPA's, below
            if name.endswith("_wgrad"):
                x, y = torch.randn(kk, m, device=dev, dtype=dt), torch.randn(kk, n, device=dev, dtype=dt)
                fn = lambda x=x, y=y: x.t() @ y
            elif name.endswith("_dgrad"):
                x, y = torch.randn(m, kk, device=dev, dtype=dt), torch.randn(kk, n, device=dev, dtype=dt)
                fn = lambda x=x, y=y: x @ y
            else:
                x, y = torch.randn(m, kk, device=dev, dtype=dt), torch.randn(n, kk, device=dev, dtype=dt)
                fn = lambda x=x, y=y: x @ y.t()
            try:
                fn()
                kernels.append((name.encode()[:23], K_GEMM, m, n, kk, flops, nbytes, t(fn, reps), 0.0))
            except RuntimeError as e:  # priced from the grid instead
                print("microbench: %s not measured: %s" % (name, str(e).splitlines()[0] if str(e) else e))
            del x, y, fn
    else:
        for name, n_out, k_in in (("wq", H * Q, D), ("wk", KV * Q, D), ("wv", KV * Q, D), ("wo", D, H * Q),
                                  ("w1", F_, D), ("w3", F_, D), ("w2", D, F_)):
            mm(N, n_out, k_in, name)
    for m in ([1024, 4096] if a.quick else [512, 1024, 2048, 4096, 8192, 8320]):
        for n in ([1024, 4096] if a.quick else [1024, 2048, 4096, 4224, 14336]):
            mm(m, n, D)
    if listed is None:
        print("microbench: no labels from %s: the forward's element-wise kernels only, labelled here" % a.sim)
        hand_elementwise(k, dev, dt, el, N, D, H, KV, Q, F_)
    else:
        ops, done, unnamed = eager_ops(dev, dt, N, D, H, KV, Q, F_, V), {}, []
        for name, flops, nbytes in listed:
            key = "grad_add" if re.fullmatch(r"grad_add\d+", name) else name
            if key not in ops:
                unnamed.append(name)
                continue
            make, group = ops[key]
            # an op measured once: a group's for all its names, a lone name's for each size
            at = (tuple(group), nbytes if len(group) == 1 else 0)
            if at not in done:
                try:
                    fn = make(nbytes)
                    fn()
                    done[at] = t(fn, reps)
                    del fn
                except (RuntimeError, TypeError, ValueError) as e:  # one op that fails costs its row, not the file
                    print("microbench: %s not measured: %s" % (name, str(e).splitlines()[0] if str(e) else e))
                    done[at] = None
            ns = done[at]
            if ns is None:
                unnamed.append(name)
                continue
            if len(group) > 1:  # an op that runs several of the recipe's kernels: its time shared by their bytes
                ns *= nbytes / sum(b for g, _, b in listed if g in group)
            kernels.append((name.encode()[:23], K_EW, 0, 0, 0, flops, nbytes, ns, 0.0))
        print("microbench: %d of the recipe's %d element-wise kernels measured by name%s" %
              (len(listed) - len(unnamed), len(listed),
               "; priced from the passes: " + ", ".join(unnamed) if unnamed else ""))
    # FSDP2's copies at a shard group of one, by the schedule's op kinds (./sim prices a copy of no kernel list by
    # the row of its kind and bytes)
    copies = sim_copies(a.sim, a) if listed is not None else []
    measured = 0
    for kind, unit, nbytes in copies:
        shapes = unit_shapes(unit, D, H, KV, Q, F_, V)
        try:
            fn = fsdp_copy(kind, shapes, nbytes, dev, dt) if shapes else None
            if fn is None:
                print("microbench: %s of %s (%d bytes) not measured: not an op written here" % (kind, unit, nbytes))
                continue
            fn()
            held = len(ISSUES)
            ns = t(fn, reps)
            kernels.append((kind.encode(), K_EW, 0, 0, 0, 0, nbytes, ns, 0.0))
            measured += 1
            if cuda:  # what ran, to set against the kernels a step's profile names (chunk_cat, Memcpy DtoD)
                print("microbench: %s of %s, %d bytes, %.1f us (%.0f GB/s)%s: %s" %
                      (kind, unit, nbytes, ns / 1e3, nbytes / ns,
                       ", the host %.1f ms to issue it" % (1e3 * ISSUES[-1]) if len(ISSUES) > held else "",
                       profiled_kernels(fn)))
            del fn
        except (RuntimeError, TypeError, ValueError) as e:
            print("microbench: %s of %s not measured: %s" % (kind, unit, str(e).splitlines()[0] if str(e) else e))
    if copies:
        print("microbench: %d of FSDP2's %d copies measured" % (measured, len(copies)))
    T = min(N, 8192)
    qa = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    ka = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    va = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    fl = 2 * H * T * T * Q
    # labelled as the recipe has them where ./sim says (its FLOPs and bytes), else as written here
    label = {x[0]: x[4:] for x in recipe[1] if x[0].startswith("attention") and x[1:4] == (H, T, Q)} if recipe else {}
    k("attention", K_ATTN, H, T, Q, *label.get("attention", (fl, 4 * H * T * Q * el)),
      lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=True))
    out = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    go = torch.randn_like(out)
    bwd = lambda: torch.autograd.grad(out, (qa, ka, va), go, retain_graph=True)
    k("attention_bwd", K_ATTN, H, T, Q, *label.get("attention_bwd", (5 * fl // 2, 8 * H * T * Q * el)), bwd)
    if cuda and listed:
        # SDPA's backward runs dO . O per row and the fp32 dq back to bf16 as kernels of their own, which the
        # recipe lists apart (attention_bwd_dot, attention_bwd_dq): their shares of it, from the profiler
        try:
            helpers = helper_shares(bwd)
        except Exception as e:  # the profiler is a convenience here: without it the helpers are priced as passes
            print("microbench: SDPA backward's helpers not split (%s)" % e)
            helpers = {}
        split_backward(kernels, listed, helpers)
    if listed is None:
        rows = min(N, 2048 if a.quick else N)
        logits = torch.randn(rows, V, device=dev, dtype=dt)
        k("loss_float", K_EW, 0, 0, 0, 0, rows * V * (el + 4), lambda: logits.float())
        lf = logits.float()
        k("log_softmax", K_EW, 0, 0, 0, 5 * rows * V, 8 * rows * V, lambda: torch.log_softmax(lf, -1))
        del logits, lf
    # the schema's pass (data/README.md, `passes`): dst += src over e fp32 elements each, labelled by the bytes of
    # both (8 e), which it moves 1.5 times (reads src and dst, writes dst), as gpu_run --calibrate's
    passes = []
    for e in [1 << s for s in range(10, 27 if not a.quick else 22, 2)]:
        dst, src = torch.zeros(e, device=dev, dtype=torch.float32), torch.ones(e, device=dev, dtype=torch.float32)
        passes.append((8 * e, t(lambda: dst.add_(src), reps)))
        del dst, src
    ps = [torch.randn(1 << 20, device=dev) for _ in range(16)]
    for p in ps:
        p.grad = torch.randn_like(p)
    scal = {}
    for name, kw in (("foreach", {"foreach": True}), ("fused", {"fused": True})):
        try:
            opt = torch.optim.AdamW(ps, lr=1e-4, **kw)
            opt.step()
            scal[name] = t(opt.step, reps) / (16 << 20)
        except RuntimeError:
            scal[name] = float("nan")
    e1 = torch.empty(1, device=dev)
    dispatch = dispatch_ns(e1, reps) if cuda else t(lambda: e1.add_(1), reps)
    sustained = sustained_clock(dev, dt, N, D, F_) if cuda and not a.quick else None
    queue = launch_queue_depth() if cuda else 0
    hw = a.hardware or (torch.cuda.get_device_name().lower().replace(" ", "-") if cuda else "cpu")
    kt = np.dtype([("name", "S24"), ("kind", "u1"), ("m", "<i8"), ("n", "<i8"), ("k", "<i8"), ("flops", "<u8"),
                   ("bytes", "<u8"), ("ns", "<f8"), ("ns_comm", "<f8")])
    with h5py.File(a.out, "a") as f:
        cal = f.require_group("calibration")
        s = cal.create_group("%06d" % (max([int(x) for x in cal.keys()] + [-1]) + 1))
        s.attrs["hardware"] = hw
        s.attrs["backend"] = "pytorch"
        s.attrs["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        s.attrs["versions"] = "torch %s on %s" % (torch.__version__, socket.gethostname())
        s.attrs["ranks"] = np.int32(1)
        s.attrs["dispatch_ns"] = dispatch
        s.attrs["issue_ns"] = dispatch
        s.attrs["wake_ns"] = 0.0
        s.attrs["adamw_ns_per_elem"] = scal["foreach"]
        if scal["fused"] == scal["fused"]:  # measured (not NaN)
            s.attrs["adamw_fused_ns_per_elem"] = scal["fused"]
        s.attrs["host_adamw_ns_per_elem"] = scal["foreach"]
        s.attrs["launch_queue"] = np.int32(queue)
        if SM_CLOCKS:  # read by no ./sim yet: what the measurements ran at, against a step's clocks
            s.attrs["sm_clock_mhz"] = float(statistics.median(SM_CLOCKS))
        if sustained:
            s.attrs["sm_clock_sustained_mhz"] = float(sustained)
        s.create_dataset("kernels", data=np.array(kernels, dtype=kt))
        s.create_dataset("gemm", data=np.array(gemms, dtype=kt))
        s.create_dataset("passes", data=np.array(passes, dtype=[("bytes", "<u8"), ("ns", "<f8")]))
        # one process measures no collective: the table is there, empty, as ./sim reads every session's
        s.create_dataset("collectives", data=np.zeros(0, dtype=[("kind", "u1"), ("ranks", "<i4"), ("bytes", "<u8"),
                                                                ("ns", "<f8"), ("ns_busy", "<f8")]))
    if ISSUES:
        print("microbench: %d ops took the host over %.2f ms to issue (up to %.1f ms): the GPU was held that long "
              "and more before each of their runs" % (len(ISSUES), 0.5 * HOLD / HOLD_PER_S * 1e3, 1e3 * max(ISSUES)))
    print("%s: %d kernels, %d gemms, %d passes; AdamW foreach %.3g, fused %.3g ns/elem; launch queue %d kernels" %
          (a.out, len(kernels), len(gemms), len(passes), scal["foreach"], scal["fused"], queue))


if __name__ == "__main__":
    main()
