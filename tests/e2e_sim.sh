#!/usr/bin/env bash
# End-to-end checks of ./sim: golden summaries and advice (an experiment and its
# expected output), results appended never truncated, a valid trace (each op
# named by its label on its stream's track), the op listing, a configuration
# that does not fit. One line per check, then
# "N passed, N failed". Regenerate the goldens after an intended model
# change with: tests/e2e_sim.sh --update
set -u
cd "$(dirname "$0")/.."
export SIM=${SIM:-./sim} # the binary under test (make asan: build-asan/sim)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

# name|arguments: the golden summaries
goldens=(
	"llama3|experiments/llama3.ini"
	"llama3_hsdp_defer|experiments/llama3.ini --nodes 4 --policy hsdp --microbatches 4 --accum defer-replica"
	"llama3_pytorch_blockio|experiments/llama3.ini --runtime pytorch --wrap block+io --ac selective"
	"tiny|experiments/tiny.ini"
	# the advisor's words: runners-up and what moves, memory, the Pareto front; a resource swept; host copies
	"llama3_advise|experiments/llama3.ini --advise"
	"fabric_advise|--sweep experiments/sweeps/fabric.ini --advise"
	"small_advise|--sweep experiments/sweeps/small.ini --advise"
	"llama3_70b_1node_advise|--model llama3-70b --nodes 1 --advise --top 3"
	# the op graph with each op's kernels (shape, FLOPs, bytes), this project's and eager PyTorch's
	"tiny_kernels|experiments/tiny.ini --kernels"
	"tiny_pytorch_kernels|experiments/tiny.ini --runtime pytorch --kernels"
	# every figure to the nanosecond and byte (--json): the arena at four microbatches; PyTorch's caching
	# allocator with expandable segments at and past the GPU's memory, its large and small pools; a GPU
	# whose side kernels' share of SMs is not a whole number
	"tiny_m4_json|experiments/tiny.ini --microbatches 4 --json"
	"llama3_json|experiments/llama3.ini --json"
	"llama3_pytorch_exp40_json|experiments/llama3.ini --runtime pytorch --hbm-gib 40 --expandable-segments --json"
	"llama3_pytorch_m4_exp60_json|experiments/llama3.ini --runtime pytorch --microbatches 4 --hbm-gib 60 --expandable-segments --json"
	"llama3_70b_pytorch_exp_json|--model llama3-70b --nodes 16 --runtime pytorch --expandable-segments --json"
	"llama3_pytorch_seq1024_json|experiments/llama3.ini --runtime pytorch --seq 1024 --json"
	"llama3_pcie_inbwd_json|experiments/llama3.ini --gpu h100-pcie --runtime pytorch --optim-in-backward --json"
)
# a sweep's last line says how fast it ran: not part of what is compared
golden_run() { "$SIM" "$@" | grep -v '^[0-9]* configurations of [0-9]* candidates in '; }
for g in "${goldens[@]}"; do
	name=${g%%|*} args=${g#*|}
	if [ "${1:-}" = --update ]; then
		golden_run $args > tests/golden/$name.txt
		continue
	fi
	if golden_run $args > "$tmp/$name.txt" && diff -u tests/golden/$name.txt "$tmp/$name.txt" > "$tmp/diff"; then
		ok "golden $name"
	else
		bad "golden $name"; cat "$tmp/diff"
	fi
done
[ "${1:-}" = --update ] && { echo "goldens updated"; exit 0; }

# repeated microbatches: without a timeline ./sim skips them (core/memory.h, memory.skip) and --bench says how many;
# the summary is that of a run that simulates every op (--trace keeps the timeline)
m16=(experiments/llama3.ini --microbatches 16 --runtime pytorch)
skipped=$("$SIM" "${m16[@]}" --bench 1 | sed -n "s/^  allocator: .*, \([0-9.]*\) steps' skipped .*/\1/p")
if awk -v s="$skipped" 'BEGIN { exit !(s > 0) }' &&
	cmp -s <("$SIM" "${m16[@]}") <("$SIM" "${m16[@]}" --trace "$tmp/m16.json"); then
	ok "16 microbatches under pytorch: $skipped steps' ops skipped, the summary of every op simulated"
else
	bad "16 microbatches under pytorch: '$skipped' steps' ops skipped, or the summaries differ"
fi

# --out appends: two runs, then a third after a failed (bad input) one
"$SIM" experiments/llama3.ini --out "$tmp/r.h5" > /dev/null
"$SIM" experiments/llama3.ini --policy hsdp --out "$tmp/r.h5" > /dev/null
"$SIM" experiments/llama3.ini --layers 0 --out "$tmp/r.h5" > /dev/null 2>&1
runs=$(h5ls "$tmp/r.h5/runs" 2>/dev/null | wc -l)
[ "$runs" = 2 ] && ok "--out appends (2 runs, the bad input wrote nothing)" || bad "--out appends: $runs runs"
h5dump -a /runs/000001/policy.sharding "$tmp/r.h5" 2>/dev/null | grep -q '"hsdp"' \
	&& ok "--out records the resolved configuration" || bad "--out configuration attribute"

# --json is one object with the summary fields
if "$SIM" experiments/llama3.ini --json > "$tmp/j.json" && /usr/bin/python3 - "$tmp/j.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
need = ["step_time_s", "tokens_per_s_per_gpu", "mfu", "compute_s", "exposed_comm_s", "comm_bytes_per_gpu",
        "peak_alloc_bytes", "peak_reserved_bytes", "fits", "config"]
missing = [k for k in need if k not in j]
assert not missing, missing
assert j["config"]["model"]["name"] == "llama3-8b" and j["config"]["cluster"]["nodes"] == 2
assert 0 < j["mfu"] < 1 and j["fits"] is True
PY
then ok "--json fields and resolved config"; else bad "--json"; fi

# --trace: valid JSON, one complete event per op, a memory counter
if "$SIM" experiments/llama3.ini --trace "$tmp/t.json" > /dev/null && /usr/bin/python3 - "$tmp/t.json" <<'PY'
import json, os, re, subprocess, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
ops = subprocess.run([os.environ["SIM"], "experiments/llama3.ini", "--schedule"], capture_output=True, text=True).stdout
nops = int(ops.split()[1])
assert sum(e.get("ph") == "X" for e in ev) == nops, nops
assert any(e.get("ph") == "C" and e.get("name") == "memory" for e in ev)
# each op an event named by its label, on the track named by its stream
track = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
rows = [re.match(r" *[0-9]+ (.{22}) (\S+) ", l) for l in ops.splitlines()]
want = sorted((m.group(1).rstrip(), m.group(2)) for m in rows if m)
got = sorted((e["name"], track[e["tid"]]) for e in ev if e.get("ph") == "X")
assert got == want, [x for x in zip(got, want) if x[0] != x[1]][:3]
PY
then ok "--trace is valid with one event per op, named by its label on its stream's track"; else bad "--trace"; fi

# --schedule lists ops in issue order, the first is the root gather
"$SIM" experiments/llama3.ini --schedule | sed -n 3p | grep -q "AG root m0" \
	&& ok "--schedule starts with the root all-gather" || bad "--schedule"

# --kernels: the same ops, each compute op followed by its kernels, whose FLOPs and bytes sum to the op's;
# under eager per-op checkpointing the recompute runs wk, wo and w3 again (the 2nd, 4th and 6th matmuls)
if /usr/bin/python3 - <<'PY'
import os, subprocess
sim = os.environ["SIM"]
base = ["experiments/llama3.ini", "--set", "policy.runtime=pytorch", "--set", "policy.ac=per-op"]
plain = subprocess.run([sim, *base, "--schedule"], capture_output=True, text=True, check=True).stdout.splitlines()
lines = subprocess.run([sim, *base, "--kernels"], capture_output=True, text=True, check=True).stdout.splitlines()
ops, cur, checked = [], None, 0
for line in lines + ["0 end"]:
    f = line.split()
    if f and f[0].isdigit():
        if cur and cur[2]:
            assert sum(k[1] for k in cur[2]) == cur[1] and sum(k[0] for k in cur[2]) == cur[0], cur[3]
            checked += 1
        if f[1] == "end":
            break
        ops.append(line)
        cur = (int(f[5]), int(f[6]), [], line) if len(f) > 6 and f[5].isdigit() else None
        if f[1] == "RECOMP" and f[2] == "block0" and f[3] == "m0":
            recomp = cur
    elif cur is not None and len(f) >= 4 and f[1] in ("gemm", "attention", "elementwise"):
        cur[2].append((int(f[2]), int(f[3]), f[0], f[1]))
assert ops == [l for l in plain if l.split() and l.split()[0].isdigit()], "--kernels lists other ops"
assert checked > 10, checked
assert [k[2] for k in recomp[2] if k[3] == "gemm"] == ["wk", "wo", "w3"], recomp
PY
then ok "--kernels: each op's kernels sum to its FLOPs and bytes; per-op recomputes wk, wo, w3"; else bad "--kernels"; fi

# the catalog's rates of PyTorch's memory-bound kernels, and the two GPUs' hbm_eff, are what the committed
# microbenchmarks give (experiments/pytorch/rates.py: the templates from --kernels' last column, the rates from
# the two GPUs' files)
out=$(/usr/bin/python3 experiments/pytorch/rates.py --sim "$SIM" --check data/pytorch/nvidia-h100-80gb-hbm3-pytorch-cal.h5 \
	data/pytorch/nvidia-h200-pytorch-cal.h5 2>&1); rc=$?
# (the first H100 file's mul, g * g timed under a label of two tensors read, is faster than the HBM: left out)
[ $rc = 0 ] && [ "$(echo "$out" | grep -cE '^(norm|cast-up|gather|broadcast|reduce|optimizer|stream) ')" = 8 ] \
	&& echo "$out" | grep -qE '^nvidia-h100-80gb-hbm3-pytorch-cal\. left out +1 .* mul: faster than the HBM' \
	&& ! echo "$out" | grep -E '^nvidia-h100.* stream ' | grep -qw mul \
	&& ok "[runtime pytorch]'s six rates and the two GPUs' hbm_eff are the microbenchmarks' (rates.py --check; a row faster than the HBM left out)" \
	|| bad "rates.py --check: $(echo "$out" | tail -7 | tr '\n' ' ')"

# not fitting: still simulated, reported with what it needs
out=$("$SIM" experiments/llama3.ini --policy ddp); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q "DOES NOT FIT" && echo "$out" | grep -q "more than the GPU" \
	&& ok "ddp of 8b does not fit and says by how much" || bad "not fitting report"

# --policy all ranks policies and names the fastest that fits; tiny's
# policy space is counted by hand in tests/test_policy.c
out=$("$SIM" experiments/tiny.ini --policy all --top 3)
# (tiny's fastest fits: rank 1)
echo "$out" | grep -q "^   1 " && echo "$out" | grep -q "^fastest that fits: rank 1, " \
	&& ok "--policy all ranking" || bad "--policy all"
# --help's list of a flag per key (after "experiment:") is wrapped to 80 columns
"$SIM" --help 2>&1 | awk '/^experiment:/ { on = 1 } on && length > 79 { print; bad = 1 } END { exit bad }' \
	>"$tmp/help.wide" && ok "--help: the flags per key wrapped to 80 columns" || bad "--help wider than 79"
echo "$out" | head -1 | grep -q ": 1728 policies$" && [ "$(echo "$out" | grep -c '^ *[0-9]')" = 3 ] \
	&& ok "--policy all: 1728 policies for tiny, --top 3 prints 3" || bad "--policy all count: $(echo "$out" | head -1)"
"$SIM" experiments/tiny.ini --policy all --microbatches 1 --json | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert len(r) == 432 and [x["rank"] for x in r] == list(range(1, 433))
assert all(" sync-each x1," in x["policy"] for x in r)
assert all(a["step_time_s"] <= b["step_time_s"] for a, b in zip(r, r[1:]))
' && ok "--policy all --json: 432 sync-each policies for tiny with one microbatch, ranked" \
	|| bad "--policy all --json"

# determinism: the same input gives the same bytes
"$SIM" experiments/llama3.ini --trace "$tmp/a.json" > /dev/null
"$SIM" experiments/llama3.ini --trace "$tmp/b.json" > /dev/null
cmp -s "$tmp/a.json" "$tmp/b.json" && ok "bit-for-bit reproducible trace" || bad "determinism"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
