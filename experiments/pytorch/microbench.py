#!/usr/bin/env python3
"""Microbenchmarks of the eager kernels core/recipe.c lists, written as a
calibration session (data/README.md, "Calibration files") that
`./sim --calibration FILE --runtime pytorch` prices steps with.

    python experiments/pytorch/microbench.py --out data/calibration/<hardware>-pytorch.h5 [--quick]

Measures, with CUDA events (or the wall clock on a CPU), the median of
repeated runs, each from a cold L2 cache (L2_FLUSH bytes written before it), of: GEMMs over a grid of (M, N, K) crossing tile and wave
boundaries (dataset `gemm`) and at the model's shapes by their recipe names
(`kernels`): SDPA forward and backward, RMSNorm, the RoPE casts and complex
product, repeat_kv, silu, mul, the cross-entropy's cast and log_softmax;
memory passes over sizes (`passes`, the schema's `dst += src`); foreach and fused AdamW per element;
an empty op's cost (dispatch); on a GPU, how many kernels one stream holds
launched and not yet run before a launch blocks (`launch_queue`). No run is
timed end to end here.
"""
import argparse, datetime, socket, statistics, time

import h5py
import numpy as np
import torch
import torch.nn.functional as F

from fsdp_bench import shape_args  # the script's folder is first on the path

K_GEMM, K_ATTN, K_EW = 0, 1, 2


HOLD = 1_000_000  # cycles (about half a millisecond) the GPU sleeps while the host queues a measurement


L2_FLUSH = 256 << 20  # bytes written before each measured run: several times any GPU's L2 (H100: 50 MB)


def timer(device):
    if device.type == "cuda":
        scrub = torch.empty(L2_FLUSH // 4, device=device, dtype=torch.float32)

        def run(fn, reps):
            ts = []
            for _ in range(reps):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                # each run from a cold L2, as a training step's kernels find their inputs (written a kernel or
                # more before, by a kernel that wrote more than L2 holds), not from the run before it: a
                # pass over 16 MB ran at 3.6 TB/s on the H100, above its HBM's 3.35 (2026-11-27)
                scrub.zero_()
                # the GPU busy while the host queues the events and the work: they time the device's work,
                # not the Python, dispatch and launch in front of it (dispatch_ns measures those)
                torch.cuda._sleep(HOLD)
                a.record(); fn(); b.record(); b.synchronize()
                ts.append(a.elapsed_time(b) * 1e6)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    shape_args(ap, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256, tokens=8192)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--hardware", default="")
    a = ap.parse_args()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    dt = torch.bfloat16 if cuda else torch.float32
    el = 2 if cuda else 4
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

    for name, n_out, k_in in (("wq", H * Q, D), ("wk", KV * Q, D), ("wv", KV * Q, D), ("wo", D, H * Q),
                              ("w1", F_, D), ("w3", F_, D), ("w2", D, F_)):
        mm(N, n_out, k_in, name)
    for m in ([1024, 4096] if a.quick else [512, 1024, 2048, 4096, 8192, 8320]):
        for n in ([1024, 4096] if a.quick else [1024, 2048, 4096, 4224, 14336]):
            mm(m, n, D)
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
    g = torch.randn(N, F_, device=dev, dtype=dt)
    k("silu", K_EW, 0, 0, 0, N * F_, 2 * N * F_ * el, lambda: F.silu(g))
    k("mul", K_EW, 0, 0, 0, N * F_, 3 * N * F_ * el, lambda: g * g)
    T = min(N, 8192)
    qa = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    ka = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    va = torch.randn(1, H, T, Q, device=dev, dtype=dt, requires_grad=True)
    fl = 2 * H * T * T * Q
    k("attention", K_ATTN, H, T, Q, fl, 4 * H * T * Q * el,
      lambda: F.scaled_dot_product_attention(qa, ka, va, is_causal=True))
    out = F.scaled_dot_product_attention(qa, ka, va, is_causal=True)
    go = torch.randn_like(out)
    k("attention_bwd", K_ATTN, H, T, Q, 5 * fl // 2, 8 * H * T * Q * el,
      lambda: torch.autograd.grad(out, (qa, ka, va), go, retain_graph=True))
    rows = min(N, 2048 if a.quick else N)
    logits = torch.randn(rows, V, device=dev, dtype=dt)
    k("loss_float", K_EW, 0, 0, 0, 0, rows * V * (el + 4), lambda: logits.float())
    lf = logits.float()
    k("log_softmax", K_EW, 0, 0, 0, 5 * rows * V, 8 * rows * V, lambda: torch.log_softmax(lf, -1))
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
        s.attrs["adamw_fused_ns_per_elem"] = scal["fused"]
        s.attrs["host_adamw_ns_per_elem"] = scal["foreach"]
        s.attrs["launch_queue"] = np.int32(queue)
        s.create_dataset("kernels", data=np.array(kernels, dtype=kt))
        s.create_dataset("gemm", data=np.array(gemms, dtype=kt))
        s.create_dataset("passes", data=np.array(passes, dtype=[("bytes", "<u8"), ("ns", "<f8")]))
        # one process measures no collective: the table is there, empty, as ./sim reads every session's
        s.create_dataset("collectives", data=np.zeros(0, dtype=[("kind", "u1"), ("ranks", "<i4"), ("bytes", "<u8"),
                                                                ("ns", "<f8"), ("ns_busy", "<f8")]))
    print("%s: %d kernels, %d gemms, %d passes; AdamW foreach %.3g, fused %.3g ns/elem; launch queue %d kernels" %
          (a.out, len(kernels), len(gemms), len(passes), scal["foreach"], scal["fused"], queue))


if __name__ == "__main__":
    main()
