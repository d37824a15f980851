#!/usr/bin/env python3
"""oracle.py - gpu_run's training, rebuilt in plain PyTorch: an independent oracle.

    venv-torch/bin/python experiments/pytorch/oracle.py experiments/tiny.ini [--set section.key=value ...]

takes the arguments of a CPU-backend gpu_run run (`mpirun -np N ./gpu_run
EXPERIMENT.ini --set ...`) and trains the same model on the CPU with torch's
own modules, autograd and torch.optim.AdamW, in float64 by default (the exact
value that gpu_run's fp32 reference kernels approximate), then prints what
gpu_run prints: `step N loss X time 0.000 ms` per step (warm-up steps too:
they are optimizer steps) and `params sum S sumsq Q`.

What it shares with gpu_run is only the problem, never the arithmetic:
  - the model: a Llama 3 decoder as Meta's reference and Hugging Face's
    LlamaForCausalLM define it (pre-norm RMSNorm, eps 1e-5; rotary embedding,
    rotate-half convention, the model's base (model.rope_theta); causal attention with grouped-query
    heads, query head h reading KV head h // (H / KV), scale 1/sqrt(head dim);
    SwiGLU MLP; final RMSNorm; an untied output projection; the mean
    cross-entropy of the next token), written with nn.Embedding, nn.Linear,
    nn.RMSNorm, F.scaled_dot_product_attention and F.cross_entropy;
  - the shape: core/catalog.ini's [model NAME], overridden by the model.*
    keys the experiment or --set give (as core/config_resolve.c does);
  - the initial weights: gpu/run/layout.c's layout_shard_init, element k of
    the whole model (embedding | blocks, each attn_norm wq wk wv wo mlp_norm
    w_gate w_up w_down | final norm | output, core/model.c's order) is
    init_mean + init_std * z(seed, k), z from splitmix64 hashes; norms 1, the
    embedding N(0, 1), every other weight N(0, 1/fan_in) (layout.c's
    init_rule), computed here in numpy's uint64 and float32 arithmetic;
  - the data: gpu/run/data.c's data_batch, the sequence seeds from splitmix64,
    then GSL's mt19937 (numpy's MT19937 with the classic init_genrand
    seeding) and gsl_rng_uniform_int's rejection rule;
  - the step: rank r's microbatch m is sample r * M + m (gpu/run/exec.c);
    each microbatch's gradient is scaled by 1/M before the optimizer
    (exec.c's grad_scale) and averaged over the ranks (comm.c's mean
    reduce-scatter / all-reduce), so the step's gradient is that of the mean
    loss over the world * M microbatches, which is also the loss printed
    (main.c); AdamW with betas (0.9, 0.95) (exec.c), run.eps, run.lr and
    run.weight_decay on every parameter, bias correction at step t = 1, 2, ...
    counting the warm-up steps; hyper-parameters rounded to fp32 as gpu_run
    holds them.

--beta1 / --beta2 change the optimizer's betas (a control that must make the
oracle disagree); --dtype float32 trains in fp32 instead; --verbose prints the
initial weights' sum and the first batch's tokens. Exit 2 on bad input.
"""
import argparse
import configparser
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# Llama 3's RMSNorm epsilon (Meta's params.json: norm_eps); RoPE's base is the model's (model.rope_theta)
RMS_EPS = 1e-5
# core/model.h MODEL_ROPE_THETA_DEFAULT: a custom model's base unless the experiment sets one
CUSTOM_ROPE_THETA = 500000.0
# gpu/run/exec.c: ADAM_BETA1, ADAM_BETA2
BETAS = (0.9, 0.95)
# gpu/run/data.c
DATA_ALPHABET, DATA_STRIDE, DATA_NOISE_ONE_IN = 32, 7, 8
# gpu/run/layout.c: sqrt(3) / 65536, a float literal
INIT_UNIT = np.float32(2.6428998e-05)

MODEL_DIMS = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq")


def die(msg):
    print("oracle.py: " + msg, file=sys.stderr)
    sys.exit(2)


# ---- the experiment: inih's syntax, the catalog's shape, --set overrides -----------------------------------------


def read_ini(path):
    """{section: {key: value}} of an inih file (';' and '#' comment lines, ';' after white space ends a value)."""
    p = configparser.ConfigParser(comment_prefixes=(";", "#"), inline_comment_prefixes=(";",), interpolation=None,
                                  strict=False)
    p.optionxform = str
    try:
        with open(path, encoding="utf-8") as f:
            p.read_file(f)
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    except configparser.Error as e:
        die("%s: %s" % (path, str(e).splitlines()[0]))
    return {sec: dict(p[sec]) for sec in p.sections()}


def experiment(args):
    """The settings the oracle needs, resolved as core/config_*.c resolves them."""
    # core/config_keys.c config_init and core/policy.c policy_default
    cfg = {("model", "name"): "tiny", ("cluster", "nodes"): "1", ("cluster", "gpus_per_node"): "2",
           ("policy", "microbatches"): "1", ("policy", "precision"): "mixed", ("run", "batch"): "1",
           ("run", "steps"): "10", ("run", "warmup"): "2", ("run", "seed"): "1234", ("run", "lr"): "3e-4",
           ("run", "weight_decay"): "0.1", ("run", "eps"): "1e-8", ("run", "device"): "cpu"}
    explicit = {}
    if args.experiment:
        for sec, kv in read_ini(args.experiment).items():
            for k, v in kv.items():
                explicit[(sec, k)] = v
    for a in args.set:
        if "=" not in a or "." not in a.split("=", 1)[0]:
            die("--set wants section.key=value, not '%s'" % a)
        k, v = a.split("=", 1)
        sec, key = k.strip().split(".", 1)
        explicit[(sec, key)] = v.strip()
    for (flag, val) in args.flags:
        explicit[flag] = val
    cfg.update(explicit)
    name = cfg[("model", "name")]
    catalog = read_ini(os.path.join(ROOT, "core", "catalog.ini"))
    shape = {}
    if name != "custom":
        if "model " + name not in catalog:
            die("model.name = %s is not a catalog model" % name)
        shape = {d: int(catalog["model " + name][d]) for d in MODEL_DIMS}
        shape["rope_theta"] = float(catalog["model " + name]["rope_theta"])
    else:
        shape["rope_theta"] = CUSTOM_ROPE_THETA
    for d in MODEL_DIMS:
        if ("model", d) in explicit:
            shape[d] = int(explicit[("model", d)])
    if ("model", "rope_theta") in explicit:
        shape["rope_theta"] = float(explicit[("model", "rope_theta")])
    if name == "custom":
        shape.setdefault("seq", 2048)
        missing = [d for d in MODEL_DIMS if d not in shape]
        if missing:
            die("model.name = custom needs every dimension; not set: %s" % ", ".join(missing))
    if shape["hidden"] % shape["heads"] or shape["heads"] % shape["kv_heads"] or (shape["hidden"] // shape["heads"]) % 2:
        die("an unusable shape: %s" % shape)
    if cfg[("policy", "precision")] != "fp32":
        die("policy.precision = %s: the oracle is of fp32 runs (the CPU backend's)" % cfg[("policy", "precision")])
    num = lambda sec, key: float(cfg[(sec, key)])
    return {
        "name": name, **shape,
        "world": int(cfg[("cluster", "nodes")]) * int(cfg[("cluster", "gpus_per_node")]),
        "micro": int(cfg[("policy", "microbatches")]), "batch": int(cfg[("run", "batch")]),
        "steps": int(cfg[("run", "steps")]), "warmup": int(cfg[("run", "warmup")]),
        "seed": int(cfg[("run", "seed")], 0), "lr": num("run", "lr"), "weight_decay": num("run", "weight_decay"),
        "eps": num("run", "eps"),
    }


# ---- splitmix64, in numpy's wrapping uint64 ----------------------------------------------------------------------


def mix64(x):
    """splitmix64's finaliser of each element of a uint64 array."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mix1(v):
    return int(mix64(np.array([v & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0])


# ---- initial weights -------------------------------------------------------------------------------------------


def model_tensors(s):
    """(name, rows, cols, mean, std) of every tensor in the whole-model order, std as the float32 gpu_run uses."""
    D, F_, H, KV, V = s["hidden"], s["ffn"], s["heads"], s["kv_heads"], s["vocab"]
    Q = D // H
    w = lambda rows, cols: (rows, cols, 0.0, np.float32(1.0) / np.sqrt(np.float32(cols)))
    norm = (1, D, 1.0, np.float32(0.0))
    out = [("embed", V, D, 0.0, np.float32(1.0))]
    for l in range(s["layers"]):
        out += [("layers.%d.attn_norm" % l, *norm), ("layers.%d.wq" % l, *w(H * Q, D)),
                ("layers.%d.wk" % l, *w(KV * Q, D)), ("layers.%d.wv" % l, *w(KV * Q, D)),
                ("layers.%d.wo" % l, *w(D, H * Q)), ("layers.%d.mlp_norm" % l, *norm),
                ("layers.%d.w_gate" % l, *w(F_, D)), ("layers.%d.w_up" % l, *w(F_, D)),
                ("layers.%d.w_down" % l, *w(D, F_))]
    out += [("final_norm", *norm), ("output", *w(V, D))]
    return out


def initial_weights(s, seed):
    """{name: float32 array}: element k of the model is mean + std * z(seed, k)."""
    ts = model_tensors(s)
    total = sum(r * c for _, r, c, _, _ in ts)
    key = mix64(np.array([seed], dtype=np.uint64))[0]
    h = mix64(key ^ mix64(np.arange(total, dtype=np.uint64)))
    m16 = np.uint64(0xFFFF)
    four = ((h & m16).astype(np.int64) + ((h >> np.uint64(16)) & m16).astype(np.int64) +
            ((h >> np.uint64(32)) & m16).astype(np.int64) + (h >> np.uint64(48)).astype(np.int64))
    z = (four - 131070).astype(np.float32) * INIT_UNIT
    out, k = {}, 0
    for name, rows, cols, mean, std in ts:
        n = rows * cols
        if std == 0:
            v = np.full(n, mean, dtype=np.float32)
        else:
            v = np.float32(mean) + std * z[k:k + n]
        out[name] = v.reshape(rows, cols) if rows > 1 else v
        k += n
    assert k == total
    return out


# ---- data -------------------------------------------------------------------------------------------------------


class GslMt19937:
    """GSL's gsl_rng_mt19937: numpy's MT19937 seeded as init_genrand (GSL's mt_set), 32-bit outputs."""

    def __init__(self, seed):
        self.bg = np.random.MT19937()
        self.bg._legacy_seeding(seed if seed else 4357)

    def uniform_int(self, n):
        """gsl_rng_uniform_int(r, n): range 0xffffffff (max - min), scale = range / n, reject k >= n."""
        scale = 0xFFFFFFFF // n
        while True:
            k = int(self.bg.random_raw()) // scale
            if k < n:
                return k


def data_batch(seed, step, sample, B, T, V):
    """(tokens, targets), (B, T) each, of one microbatch: data.c's data_batch."""
    A = min(DATA_ALPHABET, V)
    tokens = np.zeros((B, T), dtype=np.int64)
    targets = np.zeros((B, T), dtype=np.int64)
    for b in range(B):
        k = mix1(mix1(mix1(mix1(seed) ^ step) ^ sample) ^ b)
        r = GslMt19937((k & 0xFFFFFFFF) | 1)
        seq = [r.uniform_int(A)]
        for _ in range(T):
            if r.uniform_int(DATA_NOISE_ONE_IN) == 0:
                seq.append(r.uniform_int(A))
            else:
                seq.append((seq[-1] + DATA_STRIDE) % A)
        tokens[b] = seq[:T]
        targets[b] = seq[1:]
    return torch.from_numpy(tokens), torch.from_numpy(targets)


# ---- the model: a Llama decoder ------------------------------------------------------------------------------------


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        D, F_, H, KV = s["hidden"], s["ffn"], s["heads"], s["kv_heads"]
        self.H, self.KV, self.Q = H, KV, D // H
        self.attn_norm = nn.RMSNorm(D, eps=RMS_EPS)
        self.wq = nn.Linear(D, H * self.Q, bias=False)
        self.wk = nn.Linear(D, KV * self.Q, bias=False)
        self.wv = nn.Linear(D, KV * self.Q, bias=False)
        self.wo = nn.Linear(H * self.Q, D, bias=False)
        self.mlp_norm = nn.RMSNorm(D, eps=RMS_EPS)
        self.w_gate = nn.Linear(D, F_, bias=False)
        self.w_up = nn.Linear(D, F_, bias=False)
        self.w_down = nn.Linear(F_, D, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, self.H, self.Q).transpose(1, 2)
        k = self.wk(h).view(B, T, self.KV, self.Q).transpose(1, 2)
        v = self.wv(h).view(B, T, self.KV, self.Q).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # Hugging Face's repeat_kv: query head h reads KV head h // (H / KV)
        k = k.repeat_interleave(self.H // self.KV, dim=1)
        v = v.repeat_interleave(self.H // self.KV, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(B, T, self.H * self.Q))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed = nn.Embedding(s["vocab"], s["hidden"])
        self.layers = nn.ModuleList(Block(s) for _ in range(s["layers"]))
        self.final_norm = nn.RMSNorm(s["hidden"], eps=RMS_EPS)
        self.output = nn.Linear(s["hidden"], s["vocab"], bias=False)
        self.Q = s["hidden"] // s["heads"]
        self.theta = s["rope_theta"]

    def rope(self, T, dtype):
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.Q, 2, dtype=torch.float64) / self.Q))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        cos, sin = self.rope(tokens.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.output(self.final_norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def load_weights(model, w):
    """Copy the flat model's tensors into the modules' parameters (names from model_tensors)."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, arr in w.items():
            p = params[name + ".weight"]
            assert tuple(p.shape) == arr.shape, (name, p.shape, arr.shape)
            p.copy_(torch.from_numpy(arr))
    assert len(params) == len(w)


def param_sums(model):
    s = q = 0.0
    for p in model.parameters():
        d = p.detach().double()
        s += d.sum().item()
        q += (d * d).sum().item()
    return s, q


# ---- main -------------------------------------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", nargs="?", help="the experiment file gpu_run is given (experiments/tiny.ini)")
    ap.add_argument("--set", action="append", default=[], metavar="section.key=value")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--beta1", type=float, default=BETAS[0], help="a control: not gpu_run's 0.9")
    ap.add_argument("--beta2", type=float, default=BETAS[1], help="a control: not gpu_run's 0.95")
    ap.add_argument("--verbose", action="store_true", help="the initial weights' sums and the first batch's tokens")
    # config's flags for the keys the oracle reads (--layers 3 is --set model.layers=3)
    keys = {"--" + k.replace("_", "-"): (sec, k) for sec, ks in (
        ("model", MODEL_DIMS + ("name", "rope_theta")), ("cluster", ("nodes", "gpus_per_node")), ("policy", ("microbatches", "precision")),
        ("run", ("batch", "steps", "warmup", "seed", "lr", "weight_decay", "eps"))) for k in ks}
    keys["--model"] = ("model", "name")
    rest, flags, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a in keys:
            if i + 1 >= len(argv):
                die("%s wants a value" % a)
            flags.append((keys[a], argv[i + 1]))
            i += 2
            continue
        rest.append(a)
        i += 1
    args = ap.parse_args(rest)
    args.flags = flags
    return args


def main(argv):
    args = parse_args(argv)
    s = experiment(args)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    torch.set_num_threads(1)
    torch.manual_seed(0)  # nothing random is drawn from torch; the weights are loaded below
    W, M, B, T, V = s["world"], s["micro"], s["batch"], s["seq"], s["vocab"]
    total = s["warmup"] + s["steps"]
    f32 = lambda x: float(np.float32(x))  # gpu_run holds the hyper-parameters as floats

    model = Llama(s).to(dtype)
    load_weights(model, initial_weights(s, s["seed"]))
    print("oracle: %s (%d layers, hidden %d, ffn %d, %d heads, %d kv heads, vocab %d, seq %d, rope theta %g) "
          "on %d ranks x %d microbatches x %d sequences, %s, %d warmup + %d steps, seed %d, lr %g, "
          "weight decay %g, eps %g, betas %g %g"
          % (s["name"], s["layers"], s["hidden"], s["ffn"], s["heads"], s["kv_heads"], V, T, s["rope_theta"], W, M,
             B, args.dtype, s["warmup"], s["steps"], s["seed"], s["lr"], s["weight_decay"], s["eps"], args.beta1,
             args.beta2))
    if args.verbose:
        print("init params sum %.9e sumsq %.9e" % param_sums(model))
        tok, tgt = data_batch(s["seed"], 1, 0, B, T, V)
        print("batch step 1 sample 0 tokens", " ".join(map(str, tok.flatten().tolist())))
        print("batch step 1 sample 0 targets", " ".join(map(str, tgt.flatten().tolist())))
    opt = torch.optim.AdamW(model.parameters(), lr=f32(s["lr"]), betas=(f32(args.beta1), f32(args.beta2)),
                            eps=f32(s["eps"]), weight_decay=f32(s["weight_decay"]), foreach=False)
    for step in range(1, total + 1):
        opt.zero_grad(set_to_none=True)
        losses = []
        for rank in range(W):
            for micro in range(M):
                tokens, targets = data_batch(s["seed"], step, rank * M + micro, B, T, V)
                loss = model(tokens, targets)
                # the step's gradient: 1/M of the microbatches' sum (grad_scale), mean over the ranks
                (loss / (W * M)).backward()
                losses.append(loss.item())
        if not all(math.isfinite(l) for l in losses):
            print("oracle.py: step %d: the loss is not finite" % step, file=sys.stderr)
            return 3
        opt.step()
        print("step %d loss %.9f time 0.000 ms%s" % (step, sum(losses) / (W * M), " (warmup)" if step <= s["warmup"] else ""))
    print("params sum %.9e sumsq %.9e" % param_sums(model))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
