#!/usr/bin/env python3
"""Write torchtitan's published FSDP2 measurements as measured runs of this
project's results schema (data/README.md), source = "published", so that
`./sim --compare` predicts each one from its configuration and says how far
it was. Nothing here sets a constant of the simulator: these are runs to be
judged on, never fitted to.

    experiments/published/torchtitan.py OUT.h5
    experiments/pytorch/attach_schedule.py OUT.h5      # each run's ops, from ./sim --schedule
    ./sim --compare OUT.h5

The figures are torchtitan's docs/performance.md, as two versions of that
page give them (each row names its version below): tokens per second per GPU
("TPS/GPU" or "WPS"), which torchtitan logs as the tokens of its last 10
iterations over their wall-clock time, data loading included; and, where
the page gives it, "Memory(GiB)", which torchtitan's log line prints as
torch.cuda.max_memory_reserved (torchtitan/metrics.py, "memory:
{max_reserved_gib}"). A run's step time is its tokens per GPU per step
(local batch x sequence) over that rate; its allocated peak is not
published (0: not measured).

Each run's configuration is torchtitan's as those versions ran it
(torchtitan/parallelisms/parallelize_llama.py, apply_fsdp; its train
configs): fully_shard on every transformer block with
reshard_after_forward for all but the last, the root holding the
embedding, final norm and output (FSDP2 keeps the root's parameters after
forward), bf16 parameters with fp32 gradient reduction, per-op selective
checkpointing ("selective op"), every second block checkpointed
("selective layer": selective_ac_option 2) or every block ("full"),
torch.compile per block for the compiled rows, the loss left eager
(policy.compile = model: that version's train.py has it commented out,
"TODO: compiling loss function causes CUDA errors, turning off for now";
torchtitan compiles the loss since 2025). The optimizer is AdamW,
fused (torchtitan's default from late 2024) for the H100 rows, foreach
(the default of the mid-2024 releases) for the A100 rows.

Hardware: the H100 rows ran on Grand Teton hosts, each 8 H100 SXM with
96 GB HBM2e at 2.4 TB/s under the default 500 W limit, NVLink within the
host and 400 Gb/s RDMA per GPU between hosts (the page says so): the
catalog's h100-96g with 50 GB/s per NIC, one per GPU. The A100 rows ran on
64 A100 80GB; the page gives no network, so the catalog's a100-80g (a DGX
A100's 8 x 200 Gb/s HDR) stands for it.
"""
import argparse, datetime

import h5py
import numpy as np

PAGE = "https://github.com/pytorch/torchtitan/blob/%s/docs/performance.md"
H100_PAGE = PAGE % "eaea6f6a2fa940f03a10906be1df3489cf30af85"
A100_PAGE = PAGE % "041336434916bdc0f88c1f89fda176fd3c2092e4"
H100_VERSIONS = "torch 1963fc8 (2024-12-23), torchao eab345c (2024-12-23), torchtitan 9dec370 (2024-12-26)"

LLAMA2_13B = {"model.name": "custom", "model.layers": 40, "model.hidden": 5120, "model.ffn": 13824,
              "model.heads": 40, "model.kv_heads": 40, "model.vocab": 32000, "model.seq": 4096}
LLAMA2_70B = {"model.name": "custom", "model.layers": 80, "model.hidden": 8192, "model.ffn": 28672,
              "model.heads": 64, "model.kv_heads": 8, "model.vocab": 32000, "model.seq": 4096}
GRAND_TETON = {"cluster.gpu": "h100-96g", "cluster.gpus_per_node": 8, "cluster.nics_per_node": 8,
               "cluster.nic_gbps": 50}
A100 = {"cluster.gpu": "a100-80g", "cluster.gpus_per_node": 8}

# (what, model, nodes, local batch, ac, runtime, optimizer, hardware, tokens/s per GPU, max reserved GiB, page, where)
ROWS = [
    ("Llama 3.1 8B, 8 GPUs, FSDP", {"model.name": "llama3-8b"}, 1, 2, "per-op", "pytorch", "fused",
     GRAND_TETON, 5762, 82.4, H100_PAGE, "Table 1, FSDP"),
    ("Llama 3.1 8B, 8 GPUs, FSDP + torch.compile", {"model.name": "llama3-8b"}, 1, 2, "per-op",
     "pytorch-compile", "fused", GRAND_TETON, 6667, 77.0, H100_PAGE, "Table 1, FSDP + torch.compile"),
    ("Llama 3.1 8B, 128 GPUs, FSDP", {"model.name": "llama3-8b"}, 16, 2, "per-op", "pytorch", "fused",
     GRAND_TETON, 5605, 67.0, H100_PAGE, "Table 3, FSDP"),
    ("Llama 3.1 8B, 128 GPUs, FSDP + torch.compile", {"model.name": "llama3-8b"}, 16, 2, "per-op",
     "pytorch-compile", "fused", GRAND_TETON, 6514, 62.0, H100_PAGE, "Table 3, FSDP + torch.compile"),
    ("Llama 3 8B, 64 GPUs, selective layer", {"model.name": "llama3-8b"}, 8, 1, "per-layer:2", "pytorch",
     "foreach", A100, 2904, None, A100_PAGE, "Llama 3, 8B, selective layer"),
    ("Llama 3 8B, 64 GPUs, selective op", {"model.name": "llama3-8b"}, 8, 1, "per-op", "pytorch", "foreach",
     A100, 2973, None, A100_PAGE, "Llama 3, 8B, selective op"),
    ("Llama 3 70B, 64 GPUs, full", {"model.name": "llama3-70b"}, 8, 1, "full", "pytorch", "foreach", A100,
     331, None, A100_PAGE, "Llama 3, 70B, full"),
    ("Llama 2 13B, 64 GPUs, no checkpointing", LLAMA2_13B, 8, 2, "none", "pytorch", "foreach", A100, 2162,
     None, A100_PAGE, "Llama 2, 13B, no"),
    ("Llama 2 13B, 64 GPUs, selective layer", LLAMA2_13B, 8, 2, "per-layer:2", "pytorch", "foreach", A100,
     1914, None, A100_PAGE, "Llama 2, 13B, selective layer"),
    ("Llama 2 13B, 64 GPUs, selective op", LLAMA2_13B, 8, 2, "per-op", "pytorch", "foreach", A100, 1904,
     None, A100_PAGE, "Llama 2, 13B, selective op"),
    ("Llama 2 70B, 64 GPUs, selective op", LLAMA2_70B, 8, 1, "per-op", "pytorch", "foreach", A100, 355,
     None, A100_PAGE, "Llama 2, 70B, batch 1, selective op"),
    ("Llama 2 70B, 64 GPUs, full", LLAMA2_70B, 8, 2, "full", "pytorch", "foreach", A100, 353, None,
     A100_PAGE, "Llama 2, 70B, batch 2, full"),
]

SEQ = {"llama3-8b": 8192, "llama3-70b": 8192}
GIB = 1 << 30
GPU_BYTES = {"h100-96g": int(89.4 * GIB), "a100-80g": 80 * GIB}  # the catalog's hbm_gib


def attrs_of(row):
    what, model, nodes, batch, ac, runtime, optim, hw = row[:8]
    a = dict(model)
    a.update(hw)
    a.update({"cluster.nodes": nodes, "policy.sharding": "fsdp", "policy.wrap": "block",
              "policy.reshard": "all-but-last", "policy.optim": optim, "policy.precision": "mixed",
              "policy.reduce_dtype": "fp32", "policy.ac": ac, "policy.runtime": runtime, "run.batch": batch})
    if runtime == "pytorch-compile":
        a["policy.compile"] = "model"
    return a


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="results file (appended to)")
    args = ap.parse_args()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with h5py.File(args.out, "a") as f:
        runs = f.require_group("runs")
        for row in ROWS:
            what, model, nodes, batch, ac, runtime, optim, hw, tps, reserved_gib, page, where = row
            seq = model.get("model.seq") or SEQ[model["model.name"]]
            name = "%06d" % (max([int(k) for k in runs.keys()] + [-1]) + 1)
            g = runs.create_group(name)
            g.attrs["source"] = "published"
            g.attrs["hardware"] = "%s-%s" % (hw["cluster.gpu"], "grand-teton" if hw is GRAND_TETON else "64")
            g.attrs["created"] = now
            g.attrs["schema_version"] = np.int32(1)
            g.attrs["hostname"] = ""  # measured elsewhere: the reference says where
            g.attrs["experiment"] = what
            g.attrs["reference"] = "%s (%s)" % (page, where)
            if page == H100_PAGE:
                g.attrs["versions"] = H100_VERSIONS
            for k, v in attrs_of(row).items():
                g.attrs[k] = str(v)
            s = g.create_group("summary")
            s.attrs["step_time_s"] = batch * seq / tps
            s.attrs["tokens_per_s_per_gpu"] = float(tps)
            s.attrs["peak_alloc_bytes"] = np.uint64(0)
            s.attrs["peak_reserved_bytes"] = np.uint64(round(reserved_gib * GIB) if reserved_gib else 0)
            s.attrs["gpu_bytes"] = np.uint64(GPU_BYTES[hw["cluster.gpu"]])
            s.attrs["fits"] = np.int32(1)
    print("%s: %d published runs appended" % (args.out, len(ROWS)))


if __name__ == "__main__":
    main()
