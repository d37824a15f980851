#!/usr/bin/env python3
"""Run real PyTorch FSDP2 (fully_shard) on a Llama-3-shaped model and record
each policy's step in this project's results schema (data/README.md), with
source = "pytorch", so that `./sim --compare` can rebuild its configuration
and predict it.

    torchrun --nproc-per-node N experiments/pytorch/fsdp_bench.py --out runs.h5 [--grid quick|full]

One process per GPU (or, on a machine without one, per CPU rank with gloo).
Per policy: warm-up steps, then N measured steps (their median, 10th and
90th percentiles), torch.cuda.max_memory_allocated / max_memory_reserved,
and a PyTorch-profiler table of kernel times of one step (dataset
`profile`), with, on a GPU, the time its kernels left the GPU idle and
the longest such gaps (timeline.py: summary profile_span_s and
profile_busy_s, dataset gpu_gaps). The model is torchtitan's Llama 3 block written out here
(attention with RoPE through complex multiplication, repeat_kv, SDPA;
RMSNorm; SwiGLU), as many layers as fit.
"""
import argparse, datetime, gc, math, os, socket, statistics, sys, time, traceback

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
except ImportError:  # older releases
    from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from timeline import gpu_gaps  # the script's folder is first on the path


# ---- the model -------------------------------------------------------------

def rope_freqs(head_dim, seq, theta=500000.0):
    f = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    return torch.polar(torch.ones(seq, head_dim // 2), torch.outer(torch.arange(seq).float(), f))


def apply_rope(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).type_as(x)


class Block(nn.Module):
    def __init__(self, d, f, h, kv):
        super().__init__()
        self.h, self.kv, self.q = h, kv, d // h
        self.attention_norm, self.ffn_norm = nn.RMSNorm(d), nn.RMSNorm(d)
        self.wq = nn.Linear(d, h * self.q, bias=False)
        self.wk = nn.Linear(d, kv * self.q, bias=False)
        self.wv = nn.Linear(d, kv * self.q, bias=False)
        self.wo = nn.Linear(h * self.q, d, bias=False)
        self.w1 = nn.Linear(d, f, bias=False)
        self.w3 = nn.Linear(d, f, bias=False)
        self.w2 = nn.Linear(f, d, bias=False)

    def forward(self, x, freqs):
        b, t, _ = x.shape
        xn = self.attention_norm(x)
        q = self.wq(xn).view(b, t, self.h, self.q)
        k = self.wk(xn).view(b, t, self.kv, self.q)
        v = self.wv(xn).view(b, t, self.kv, self.q)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        r = self.h // self.kv
        k = k.unsqueeze(3).expand(b, t, self.kv, r, self.q).reshape(b, t, self.h, self.q)
        v = v.unsqueeze(3).expand(b, t, self.kv, r, self.q).reshape(b, t, self.h, self.q)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        h = x + self.wo(o.transpose(1, 2).contiguous().view(b, t, -1))
        hn = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(hn)) * self.w3(hn))


class Llama(nn.Module):
    def __init__(self, layers, d, f, h, kv, vocab, seq):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, f, h, kv) for _ in range(layers))
        self.norm = nn.RMSNorm(d)
        self.output = nn.Linear(d, vocab, bias=False)
        self.register_buffer("freqs", rope_freqs(d // h, seq), persistent=False)

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        for blk in self.layers:
            x = blk(x, self.freqs)
        return self.output(self.norm(x))


# ---- policies ----------------------------------------------------------------

def op_sac_policy(every_mm=False):
    """torchtitan's per-op selective checkpointing: keep attention's outputs and every other matmul's
    (every_mm: every matmul's, this project's `selective`)."""
    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_efficient_attention.default}
    for name in ("_scaled_dot_product_cudnn_attention",  # first on sm90 in 2.11
                 "_scaled_dot_product_flash_attention_for_cpu"):  # a CPU's (saved.py, gloo runs)
        op = getattr(torch.ops.aten, name, None)
        if op is not None:
            save.add(op.default)

    def context():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if func == torch.ops.aten.mm.default:
                count[mode] += 1
            keep = func in save and (every_mm or not (func == torch.ops.aten.mm.default and count[mode] % 2 == 0))
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE
        return create_selective_checkpoint_contexts(policy)
    return context


def build(cfg, device, mesh):
    """The model, wrapped and sharded as cfg asks. build = "device": made on the device (initialised in
    milliseconds), then each fully_shard copies its parameters into their shards and frees the originals when it
    returns, which the caching allocator keeps; "meta": made on the meta device, sharded, then each shard
    allocated alone (to_empty) and initialised there, as torchtitan builds."""
    meta = cfg.get("build", "device") == "meta"
    with torch.device("meta" if meta else device):
        m = Llama(cfg["layers"], cfg["hidden"], cfg["ffn"], cfg["heads"], cfg["kv_heads"], cfg["vocab"], cfg["seq"])
    ac = cfg["ac"]
    for i, blk in enumerate(m.layers):
        if ac == "full" or (ac.startswith("per-layer:") and (i + 1) % int(ac.split(":")[1]) == 0):
            m.layers[i] = checkpoint_wrapper(blk, preserve_rng_state=False)
        elif ac == "per-op":
            m.layers[i] = checkpoint_wrapper(blk, preserve_rng_state=False, context_fn=op_sac_policy())
    if cfg["compile"] != "none":  # torchtitan's apply_compile: each block on its own, after checkpointing
        for i, blk in enumerate(m.layers):
            m.layers[i] = torch.compile(blk, fullgraph=True)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if cfg["precision"] == "mixed" else torch.float32,
                              reduce_dtype=torch.float32)
    reshard = cfg["reshard"] == "yes"
    for i, blk in enumerate(m.layers):
        last = i == len(m.layers) - 1
        fully_shard(blk, mesh=mesh, mp_policy=mp,
                    reshard_after_forward=reshard and not (cfg["reshard"] == "all-but-last" and last))
    if cfg["wrap"] == "block+io":
        fully_shard(m.tok_embeddings, mesh=mesh, mp_policy=mp)
        fully_shard([m.norm, m.output], mesh=mesh, mp_policy=mp)
    fully_shard(m, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    if meta:
        m.to_empty(device=device)  # the shards, each allocated once
        with torch.no_grad():
            for mod in m.modules():  # the initialisation the device build's constructors did, on the shards
                if isinstance(mod, (nn.Linear, nn.Embedding, nn.RMSNorm)):
                    mod.reset_parameters()
            m.freqs.copy_(rope_freqs(cfg["hidden"] // cfg["heads"], cfg["seq"]))
    return m


def optimizer(model, cfg):
    """The optimizer, or None with the hooks that step it in backward (to remove: they hold the parameters)."""
    kw = dict(lr=3e-4, weight_decay=0.1)
    if cfg["optim"] == "fused":
        kw["fused"] = True
    elif cfg["optim"] == "foreach":
        kw["foreach"] = True
    else:
        kw["foreach"] = False
    if cfg["optim_in_backward"] == "true":
        opts = {p: torch.optim.AdamW([p], **kw) for p in model.parameters()}
        hooks = [p.register_post_accumulate_grad_hook(lambda q, o=o: (o.step(), o.zero_grad()))
                 for p, o in opts.items()]
        return None, hooks
    return torch.optim.AdamW(model.parameters(), **kw), []


def release(device):
    """What a policy left: FSDP2's modules hold themselves in cycles, which only the collector frees, and the
    cache keeps their memory; without this the next policy's peaks would include the last one's model."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---- one policy ---------------------------------------------------------------

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


# the actions of torch.cuda.memory's trace that ./sim replays (core/alloc.h, enum alloc_event_kind): a block given
# out, a block back in its pool (free_completed: once the streams that used it are done), segments reserved,
# released, mapped and unmapped
TRACE_ACTIONS = {"alloc": 0, "free_completed": 1, "segment_alloc": 2, "segment_free": 3, "segment_map": 4,
                 "segment_unmap": 5}
SIM_STREAMS = {"compute": 0, "allgather": 1, "reduce_scatter": 2, "allreduce": 3, "other": 4}


def alloc_trace_start(args, device):
    """Record the caching allocator's events from the model's build through the warm-up steps (--alloc-trace):
    what it was asked, in order, from an empty cache, for ./sim --compare to serve with its own model."""
    if device.type != "cuda" or not args.alloc_trace:
        return False
    try:  # a private API: where this PyTorch's differs, the run goes on without its trace
        torch.cuda.memory._record_memory_history("all", context=None, stacks="python", clear_history=True,
                                                 skip_actions=["free_requested", "snapshot", "oom"])
    except (TypeError, RuntimeError) as err:
        print("alloc trace: not recorded:", err, file=sys.stderr)
        return False
    return True


def alloc_trace_stop(model, device):
    """The recorded events as rows (action, stream as ./sim names it, bytes, address); recording stops."""
    try:
        snap = torch.cuda.memory._snapshot(device)
        torch.cuda.memory._record_memory_history(None)
        names = stream_names(model, device)
        rows = []
        for e in snap["device_traces"][device.index or 0]:
            a = TRACE_ACTIONS.get(e["action"])
            if a is not None:
                rows.append((a, SIM_STREAMS[names.get(e["stream"], "other")], int(e["size"]), int(e["addr"])))
        return rows
    except (KeyError, IndexError, TypeError, RuntimeError) as err:
        print("alloc trace: not read:", repr(err), file=sys.stderr)
        return []


def measure(cfg, args, device, mesh, rank):
    torch.manual_seed(1234)
    tracing = alloc_trace_start(args, device)
    start = alloc_counts(device)  # the process's counts so far (the policies before this one)
    model = build(cfg, device, mesh)
    opt, hooks = optimizer(model, cfg)
    try:
        return run_steps(model, opt, cfg, args, device, tracing, start)
    finally:  # out of memory too: the hooks hold their parameters and optimizers where the collector cannot
        for h in hooks:
            h.remove()


class Collectives:
    """The collectives issued while it is entered, in issue order: (kind, bytes of the full buffer: an
    all-gather's output, a reduce-scatter's input, an all-reduce's tensor), as ./sim's schedule has them
    (attach_schedule.py sets one against the other). FSDP2 calls them through torch.distributed, by
    position or by keyword (torch.distributed's parameter names)."""
    CALLS = {"all_gather_into_tensor": ("allgather", 0, "output_tensor"),
             "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
             "all_reduce": ("allreduce", 0, "tensor")}

    def __enter__(self):
        self.seen, self.saved = [], {}
        for name, (kind, pos, key) in self.CALLS.items():
            self.saved[name] = call = getattr(dist, name)

            def counted(*args, _call=call, _kind=kind, _pos=pos, _key=key, **kwargs):
                t = args[_pos] if len(args) > _pos else kwargs[_key]
                self.seen.append((_kind, t.numel() * t.element_size()))
                return _call(*args, **kwargs)
            setattr(dist, name, counted)
        return self

    def __exit__(self, *exc):
        for name, call in self.saved.items():
            setattr(dist, name, call)


def cross_entropy(logits, labels):
    """torchtitan's loss: the logits in fp32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def memory_now(device):
    """(allocated, reserved) bytes of the caching allocator now, once the device has drained; None on a CPU."""
    if device.type != "cuda":
        return None
    sync(device)
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


def alloc_counts(device):
    """The caching allocator's cache flushes and OOMs so far (memory_stats' num_alloc_retries: a cudaMalloc
    that failed, the cache released and the allocation tried again; num_ooms); None on a CPU."""
    if device.type != "cuda":
        return None
    st = torch.cuda.memory_stats(device)
    return st.get("num_alloc_retries", 0), st.get("num_ooms", 0)


def run_steps(model, opt, cfg, args, device, tracing=False, start=None):
    """The warm-up and measured steps: their times, the peaks (with the cache's flushes and OOMs since `start`,
    alloc_counts() before the build), the profile, the last step's collectives, the allocator's trace, and the
    memory after the build and after each warm-up step (memory_by_step)."""
    by_step = [memory_now(device)]  # the model and its optimizer built; the optimizer's state comes at its first step
    M, B, T, V = cfg["microbatches"], cfg["batch"], cfg["seq"], cfg["vocab"]
    tokens = torch.randint(0, V, (M, B, T + 1), device=device)
    loss_fn = torch.compile(cross_entropy) if cfg["compile"] == "model+loss" else cross_entropy

    def step():
        for mb in range(M):
            if cfg["accum"] == "no-sync":
                model.set_requires_gradient_sync(mb == M - 1)
            elif cfg["accum"] == "defer-replica":  # hsdp: reduce-scatter each microbatch, all-reduce the last
                model.set_requires_all_reduce(mb == M - 1)
            logits = model(tokens[mb, :, :-1])
            loss = loss_fn(logits, tokens[mb, :, 1:])
            if cfg["hold_logits"] == "false":
                del logits  # torchtitan's train step: "need to free pred before bwd to avoid peaking memory"
            # else the variable holds them (policy.hold_logits): until the next microbatch's forward returns,
            # and the last microbatch's through the optimizer step, until step() returns
            loss.backward()
        if opt is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
        by_step.append(memory_now(device))  # step() returned: its logits and gradients are freed
    sync(device)
    trace = alloc_trace_stop(model, device) if tracing else []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, last = [], None
    for i in range(args.steps):
        sync(device)
        t0 = time.perf_counter()
        if i == args.steps - 1:  # the last step's collectives too (a Python call each: nothing to time)
            last = alloc_counts(device)
            with Collectives() as collectives:
                step()
        else:
            step()
        sync(device)
        times.append(time.perf_counter() - t0)
    # the cache's flushes since the build began (the warm-up and measured steps'), in the last step, and the OOMs
    counts = alloc_counts(device)
    flushes = (counts[0] - start[0], counts[0] - last[0], counts[1] - start[1]) if counts and last and start else None
    prof_rows, idle = [], None
    if args.profile:
        acts = [torch.profiler.ProfilerActivity.CPU] + (
            [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
        with torch.profiler.profile(activities=acts) as p:
            step()
            sync(device)
        for e in p.key_averages():
            dev_us = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0) or 0
            prof_rows.append((e.key[:63], int(e.count), float(e.cpu_time_total), float(dev_us), is_kernel(e)))
        idle = profiled_idle(p) if device.type == "cuda" else None
    peaks = (0, 0, 0, "", None)
    if device.type == "cuda":
        # and the device memory in use outside the caching allocator (the CUDA context, NCCL's buffers): what
        # the GPU's total less what is free holds beyond the allocator's segments
        free, total = torch.cuda.mem_get_info(device)
        peaks = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved(),
                 total - free - torch.cuda.memory_reserved(device), reserved_by_pool(model, device), flushes)
    return times, peaks, prof_rows, collectives.seen, trace, [b for b in by_step if b is not None], idle


def profiled_idle(p):
    """The profiled step's kernels, every stream's, as timeline.gpu_gaps sets them out: (span_us, busy_us, gaps), or
    None where the profiler gave no kernel with its times (a failure here costs these figures only)."""
    try:
        kernels = [(e.name, float(e.time_range.start), float(e.time_range.end)) for e in p.events()
                   if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and
                   not getattr(e, "is_user_annotation", False)]
    except (AttributeError, RuntimeError, TypeError) as err:
        print("profile: kernel times not read:", repr(err), file=sys.stderr)
        return None
    return gpu_gaps(kernels) if kernels else None


def stream_names(model, device):
    """The streams the caching allocator serves, by handle, as ./sim names them: the default stream is compute;
    FSDP2's all-gather copy-in and all-gather streams (the all-gather's buffers are allocated on the first)
    are allgather; its reduce-scatter and all-reduce streams reduce_scatter and allreduce (FSDPCommContext);
    a stream not named here is other."""
    names = {torch.cuda.default_stream(device).cuda_stream: "compute"}
    state = model._get_fsdp_state() if hasattr(model, "_get_fsdp_state") else None
    ctx = getattr(state, "_comm_ctx", None)
    for attr, name in (("all_gather_copy_in_stream", "allgather"), ("all_gather_stream", "allgather"),
                       ("reduce_scatter_stream", "reduce_scatter"), ("all_reduce_stream", "allreduce")):
        stream = getattr(ctx, attr, None)
        if stream is not None:
            names.setdefault(stream.cuda_stream, name)
    return names


def reserved_by_pool(model, device):
    """The caching allocator's segments now (its reserved bytes: its peak, but for flushes), by the stream
    that allocated them (stream_names) and pool, as ./sim names them: "compute/large=BYTES
    allgather/small=BYTES ..."."""
    names = stream_names(model, device)
    pools = {}
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device", device.index or 0) != (device.index or 0):
            continue
        key = "%s/%s" % (names.get(seg["stream"], "other"), "large" if seg["segment_type"] == "large" else "small")
        pools[key] = pools.get(key, 0) + int(seg["total_size"])
    return " ".join("%s=%d" % kv for kv in sorted(pools.items()))


# ---- the allocator ------------------------------------------------------------

def alloc_conf(expandable):
    """PYTORCH_CUDA_ALLOC_CONF with expandable_segments:True when asked (as
    torchtitan's launch script sets it) or already there, set before CUDA's
    caching allocator starts (it reads the variable once); the other options
    are kept. Returns whether expandable segments are on: the run records it
    as policy.expandable_segments, the key ./sim models it with. PyTorch 2.11
    reads PYTORCH_CUDA_ALLOC_CONF where it is set (even empty), else
    PYTORCH_ALLOC_CONF (the name torchtitan's run_train.sh uses): the options
    come from the one it would read, and the setting is written out either
    way, so that the recorded value is the one the allocator uses."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf is None:
        conf = os.environ.get("PYTORCH_ALLOC_CONF", "")
    opts = [o.strip() for o in conf.split(",") if o.strip()]
    on = expandable or any(o.replace(" ", "").lower() == "expandable_segments:true" for o in opts)
    opts = [o for o in opts if not o.replace(" ", "").lower().startswith("expandable_segments:")]
    opts.append("expandable_segments:%s" % on)
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(opts)
    return on


# ---- attention ------------------------------------------------------------------

def sdpa_backend(args, device):
    """The backend scaled_dot_product_attention dispatches the block's causal attention to on this device
    (torch._fused_sdp_choice, over query, key and value laid out as Block.forward passes them), as ./sim's
    policy.sdpa names it: "flash" or "cudnn"; "" for one it does not price (math, memory-efficient, a CPU's),
    which leaves the runtime's."""
    if device.type != "cuda":
        return ""
    dt = torch.float32 if args.precision == "fp32" else torch.bfloat16
    q = torch.empty(args.batch, args.seq, args.heads, args.hidden // args.heads, dtype=dt, device=device)
    choice = int(torch._fused_sdp_choice(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2), None, 0.0, True))
    from torch.nn.attention import SDPBackend as backends
    return {int(backends.FLASH_ATTENTION): "flash", int(backends.CUDNN_ATTENTION): "cudnn"}.get(choice, "")


# ---- results file ------------------------------------------------------------

def config_attrs(cfg, world, hardware):
    """Every key ./sim's parser needs to rebuild the run; the rest keep their defaults."""
    return {
        "model.name": "custom", "model.layers": cfg["layers"], "model.hidden": cfg["hidden"],
        "model.ffn": cfg["ffn"], "model.heads": cfg["heads"], "model.kv_heads": cfg["kv_heads"],
        "model.vocab": cfg["vocab"], "model.seq": cfg["seq"],
        "cluster.gpu": cfg["gpu"], "cluster.nodes": 1, "cluster.gpus_per_node": world,
        "policy.sharding": cfg["sharding"], "policy.shard_group": cfg["shard_group"], "policy.accum": cfg["accum"], "policy.microbatches": cfg["microbatches"],
        "policy.wrap": cfg["wrap"], "policy.reshard": cfg["reshard"], "policy.optim": cfg["optim"],
        "policy.optim_in_backward": cfg["optim_in_backward"], "policy.precision": cfg["precision"],
        "policy.ac": cfg["ac"], "policy.runtime": "pytorch" if cfg["compile"] == "none" else "pytorch-compile",
        **({"policy.compile": cfg["compile"]} if cfg["compile"] != "none" else {}),
        **({"policy.sdpa": cfg["sdpa"]} if cfg.get("sdpa") else {}),
        "policy.hold_logits": cfg["hold_logits"],
        "policy.expandable_segments": "true" if cfg["expandable_segments"] else "false", "run.batch": cfg["batch"],
        "run.steps": cfg["steps"], "run.warmup": cfg["warmup"],
    }


def append(path, cfg, world, hardware, times, peaks, prof, collectives, gpu_bytes, trace=(), by_step=(), idle=None):
    with h5py.File(path, "a") as f:
        runs = f.require_group("runs")
        name = "%06d" % (max([int(k) for k in runs.keys()] + [-1]) + 1)
        g = runs.create_group(name)
        g.attrs["source"] = "pytorch"
        g.attrs["hardware"] = hardware
        g.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        g.attrs["schema_version"] = np.int32(1)
        g.attrs["hostname"] = socket.gethostname()
        g.attrs["experiment"] = ""
        g.attrs["torch"] = str(torch.__version__)
        g.attrs["build"] = cfg["build"]  # where the model was made (./sim --compare says what that leaves cached)
        for k, v in config_attrs(cfg, world, hardware).items():
            g.attrs[k] = str(v)
        s = g.create_group("summary")
        ts = sorted(times)
        med = statistics.median(ts)
        s.attrs["step_time_s"] = med
        s.attrs["step_time_p10_s"] = float(np.percentile(ts, 10))
        s.attrs["step_time_p90_s"] = float(np.percentile(ts, 90))
        s.attrs["steps"] = np.int32(len(ts))
        tok = cfg["batch"] * cfg["seq"] * cfg["microbatches"]
        s.attrs["tokens_per_s_per_gpu"] = tok / med
        s.attrs["peak_alloc_bytes"] = np.uint64(peaks[0])
        s.attrs["peak_reserved_bytes"] = np.uint64(peaks[1])
        s.attrs["gpu_bytes"] = np.uint64(gpu_bytes)
        s.attrs["outside_bytes"] = np.uint64(max(peaks[2], 0))
        if peaks[3]:  # a GPU: the segments by stream and pool (./sim --compare sets them against its own)
            s.attrs["reserved_by_pool"] = peaks[3]
        if peaks[4]:  # a GPU: the cache's flushes over the run and in its last step, and its OOMs
            s.attrs["alloc_retries"] = np.int32(peaks[4][0])
            s.attrs["alloc_retries_step"] = np.int32(peaks[4][1])
            s.attrs["alloc_ooms"] = np.int32(peaks[4][2])
        s.attrs["fits"] = np.int32(1)
        if prof:
            dt = np.dtype([("name", "S64"), ("calls", "<i4"), ("cpu_us", "<f8"), ("device_us", "<f8")])
            g.create_dataset("profile", data=np.array([(n.encode(), c, a, b) for n, c, a, b, _ in prof], dtype=dt))
            # the device's kernels alone (an op's device time is its kernels' again): ./sim --compare
            # sums them by kind of work (NCCL's collectives, the optimizer's, FSDP2's copies, compute)
            kt = np.dtype([("name", "S64"), ("calls", "<i4"), ("device_us", "<f8")])
            g.create_dataset("kernels", data=np.array([(n.encode(), c, b) for n, c, _, b, k in prof if k], dtype=kt))
        if idle:  # the profiled step on a GPU: first kernel to last, the time some kernel ran, the longest gaps
            span, busy, gaps = idle
            s.attrs["profile_span_s"], s.attrs["profile_busy_s"] = span * 1e-6, busy * 1e-6
            gt = np.dtype([("after", "S64"), ("before", "S64"), ("at_s", "<f8"), ("idle_s", "<f8")])
            g.create_dataset("gpu_gaps", data=np.array([(a.encode()[:63], b.encode()[:63], t * 1e-6, d * 1e-6)
                                                        for a, b, t, d in gaps], dtype=gt))
        if by_step:  # allocated and reserved after the build and after each warm-up step (./sim --compare's by step)
            mt = np.dtype([("allocated_bytes", "<u8"), ("reserved_bytes", "<u8")])
            g.create_dataset("memory_by_step", data=np.array(by_step, dtype=mt))
        if trace:  # the allocator's events from the build through the warm-up (./sim --compare replays them)
            at = np.dtype([("action", "u1"), ("stream", "u1"), ("bytes", "<u8"), ("addr", "<u8")])
            g.create_dataset("alloc_trace", data=np.array(trace, dtype=at), compression="gzip", shuffle=True)
        # the last step's collectives in issue order (attach_schedule.py sets them against the schedule's)
        ct = np.dtype([("kind", "S16"), ("bytes", "<u8")])
        g.create_dataset("collectives", data=np.array([(k.encode(), b) for k, b in collectives], dtype=ct))
    return name


# ---- the grid -----------------------------------------------------------------

def grid(kind, base):
    # torchtitan's loop (logits deleted before backward) early: each grid is capped in time (40-pytorch.sh)
    axes = [("reshard", ["yes", "no"]), ("hold_logits", ["true", "false"]), ("ac", ["none", "per-op", "full", "per-layer:2"]),
            ("optim", ["foreach", "fused"]), ("optim_in_backward", ["false", "true"]),
            ("accum", ["sync-each", "no-sync"] + (["defer-replica"] if base["sharding"] == "hsdp" else [])),
            ("wrap", ["block", "block+io"])]
    yield dict(base)
    for key, values in axes:
        for v in values[1:]:
            if kind == "quick" and key in ("optim_in_backward", "wrap"):
                continue
            c = dict(base)
            c[key] = v
            if key == "accum":
                c["microbatches"] = max(2, base["microbatches"])
            yield c


def is_kernel(e):
    """A profiler row that is a kernel on the device: not a host call (cudaLaunchKernel, ...) nor a record_function
    range, which the profiler also times there."""
    return getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA and \
        not getattr(e, "is_user_annotation", False)


def shape_args(ap, **defaults):
    """The model's shape (and the batch) as flags, under ./sim's names: hidden, ffn, heads, kv_heads, vocab,
    seq, batch, tokens, each given its default."""
    for name, value in defaults.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", choices=["one", "quick", "full"], default="quick")
    ap.add_argument("--layers", type=int, default=0, help="0: as many Llama 3 8B blocks as fit")
    shape_args(ap, hidden=4096, ffn=14336, heads=32, kv_heads=8, vocab=128256, seq=8192, batch=1)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--gpu", default="h100-sxm", help="the catalog GPU ./sim prices it on")
    ap.add_argument("--hardware", default="", help="the hardware attribute; default: the device's name")
    ap.add_argument("--precision", default="mixed", choices=["mixed", "fp32"])
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--alloc-trace", action="store_true",
                    help="on a GPU: the caching allocator's events from the build through the warm-up (alloc_trace)")
    ap.add_argument("--sharding", default="fsdp", choices=["fsdp", "hsdp"],
                    help="hsdp: shard groups of --shard-group ranks, replicated across them (FSDP2's 2-D mesh)")
    ap.add_argument("--shard-group", type=int, default=0, help="hsdp: ranks per shard group (default: half the world)")
    ap.add_argument("--compile", default="none", choices=["none", "model", "model+loss"],
                    help="torch.compile each block (model), and the loss (model+loss): policy.compile")
    ap.add_argument("--build", default="device", choices=["device", "meta"],
                    help="where the model is made: on the device, then sharded (each fully_shard copies and frees "
                         "its parameters), or on the meta device, sharded, then allocated shard by shard (torchtitan)")
    ap.add_argument("--expandable-segments", action="store_true",
                    help="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (policy.expandable_segments)")
    args = ap.parse_args()
    expandable = alloc_conf(args.expandable_segments)  # before anything touches CUDA

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    shard = world if args.sharding == "fsdp" else args.shard_group or world // 2
    if args.sharding == "hsdp" and (shard < 1 or shard >= world or world % shard):
        ap.error("--sharding hsdp needs a --shard-group that divides the world size %d and is less" % world)
    # hsdp: FSDP2 on a 2-D mesh, replicas by shard groups (rank r in shard group r // shard)
    mesh = dist.device_mesh.init_device_mesh(device.type, (world,)) if args.sharding == "fsdp" else \
        dist.device_mesh.init_device_mesh(device.type, (world // shard, shard), mesh_dim_names=("replicate", "shard"))
    hardware = args.hardware or (torch.cuda.get_device_name(device).lower().replace(" ", "-") if cuda else "cpu")
    gpu_bytes = torch.cuda.get_device_properties(device).total_memory if cuda else 0
    layers = args.layers
    if layers == 0:  # as many blocks as the memory of the model state allows, leaving room for activations
        per_block = 2 * args.hidden * args.hidden + 2 * args.hidden * args.kv_heads * (args.hidden // args.heads) \
            + 3 * args.hidden * args.ffn
        layers = max(1, min(32, int(0.25 * gpu_bytes * world / (16 * per_block)))) if cuda else 2
    base = dict(layers=layers, hidden=args.hidden, ffn=args.ffn, heads=args.heads, kv_heads=args.kv_heads,
                vocab=args.vocab, seq=args.seq, batch=args.batch, microbatches=args.microbatches,
                steps=args.steps, warmup=args.warmup, gpu=args.gpu, precision=args.precision, reshard="yes",
                ac="none", optim="foreach", optim_in_backward="false", accum="sync-each", wrap="block",
                expandable_segments=expandable, compile=args.compile, sharding=args.sharding, shard_group=shard,
                sdpa=sdpa_backend(args, device), hold_logits="true", build=args.build)
    cfgs = [base] if args.grid == "one" else list(grid(args.grid, base))
    failed = 0
    for cfg in cfgs:
        release(device)  # before the policy, so that its peaks are its own
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            times, peaks, prof, collectives, trace, by_step, idle = measure(cfg, args, device, mesh, rank)
        except Exception as err:  # cuDNN's and NCCL's out of memory are RuntimeErrors
            if isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower():
                if rank == 0:
                    print("out of memory:", cfg, file=sys.stderr)
                continue
            if world > 1:
                raise  # the other ranks may be inside a collective: the job ends
            # one rank: this policy fails, the grid goes on (the exit status says so)
            traceback.print_exc()
            print("FAILED:", cfg, file=sys.stderr)
            failed += 1
            continue
        if rank == 0:
            name = append(args.out, cfg, world, hardware, times, peaks, prof, collectives, gpu_bytes, trace, by_step,
                          idle)
            print("%s: %s step %.4f s, peak %.2f / %.2f GiB" % (name, {k: cfg[k] for k in ("ac", "optim", "reshard", "accum", "wrap", "optim_in_backward", "compile", "hold_logits")},
                  statistics.median(times), peaks[0] / 2**30, peaks[1] / 2**30))
    release(device)
    dist.destroy_process_group()
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
