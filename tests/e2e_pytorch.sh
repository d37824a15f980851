#!/usr/bin/env bash
# e2e_pytorch.sh - experiments/pytorch/ run against real PyTorch on this CPU
# (gloo ranks, a model of two small blocks), where a Python with torch and
# h5py is given (PYTORCH_PYTHON, else venv-torch/'s, which `make
# pytorch-check` makes, else python3): the
# commands the GPU session's hook (gpu/device_steps.d/40-pytorch.sh) runs,
# with its flags, so that a GPU session does not spend its minutes on a
# script that fails, and the checks of the schedule's structure that need
# PyTorch itself:
#
#   1. saved.py: what a block, the loss and AdamW keep for backward, byte
#      for byte against ./sim's recipes (exit 1 when a row differs);
#   2. unshard.py: FSDP2's copies at world size 1 against ./sim's schedule;
#      recipe.py: the kernels an eager block launches (PyTorch's dispatcher)
#      against the recipe's, kind and bytes, with GQA and without;
#   3. fsdp_bench.py's quick grid on 1 and 2 ranks (FSDP) and on 4 ranks
#      (HSDP, two replicas of shard groups of 2): every policy a run in the
#      file with source = pytorch and a step time; then attach_schedule.py:
#      no collective at one rank, and on 2 and 4 ranks the collectives FSDP2
#      issued are the schedule's, kind, bytes and order, in every run; ./sim
#      --compare predicts every run (--json: a finite prediction each);
#   4. the hook's other runs (--grid one): expandable segments, a meta
#      build, compiled (model+loss: Inductor's CPU code), each appended;
#   5. microbench.py --quick at the runs' shape: a row of its own for each
#      GEMM and attention the recipe lists at the precision it measures
#      (fp32 here), and a file that ./sim --compare prices the one-rank
#      runs with;
#   6. microbench.py's split of SDPA's backward into its helper kernels (on
#      a GPU by the profiler): the profiler's rows read as PyTorch names
#      them, each helper a share of the whole backward;
#   7. oracle.py, gpu_run's training against a Llama written in plain
#      PyTorch (float64, autograd, torch.optim.AdamW) from the same
#      arguments: ./gpu_run (the CPU backend's fp32 reference kernels on
#      MPI ranks) and oracle.py agree on every step's loss within 1e-6
#      relative and the final parameters' sum and sum of squares within
#      1e-5, for fsdp on 2 ranks x 2 microbatches, 3 layers on 4 ranks,
#      and ddp with a warm-up step and other hyper-parameters; at
#      run.lr = 0 the losses (the forward alone) within 1e-7 and the
#      parameter sums (the initial weights) within 2e-9; and the oracle
#      told another run.seed, beta1 or beta2 disagrees (the check can fail).
# Without such a Python it says so and checks nothing (0 passed). One line
# per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
passed=0
failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1: $2"; failed=$((failed + 1)); }
SIM=${SIM:-./sim}
PY=${PYTORCH_PYTHON:-python3}
[ -n "${PYTORCH_PYTHON:-}" ] || [ ! -x venv-torch/bin/python ] || PY=venv-torch/bin/python
if ! "$PY" -c 'import torch, h5py' 2>/dev/null; then
	echo "e2e_pytorch: $PY has no torch with h5py (PYTORCH_PYTHON names one; make pytorch-check installs them); nothing checked"
	echo "$passed passed, $failed failed"
	exit 0
fi
echo "e2e_pytorch: $("$PY" -c 'import torch; print("torch", torch.__version__)')"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the 40-pytorch hook's launcher, and a model small enough for a CPU
RUN=(-m torch.distributed.run --standalone --local-addr 127.0.0.1)
SHAPE=(--layers 2 --hidden 128 --ffn 256 --heads 4 --kv-heads 2 --vocab 512 --seq 64 --batch 1 --precision fp32)
export OMP_NUM_THREADS=1

# 1, 2. the structure against PyTorch's own
for script in saved unshard; do
	if "$PY" experiments/pytorch/$script.py --sim "$SIM" >"$tmp/$script.log" 2>&1 &&
		grep -q "every row agrees" "$tmp/$script.log"; then
		ok "$script.py: every row agrees with ./sim"
	else
		bad "$script.py" "$(tail -8 "$tmp/$script.log")"
	fi
done

for shape in "" "--hidden 256 --heads 4 --kv-heads 4 --ffn 640 --seq 64 --batch 1"; do
	# shellcheck disable=SC2086
	if "$PY" experiments/pytorch/recipe.py --sim "$SIM" $shape >"$tmp/recipe.log" 2>&1 &&
		grep -q "every kernel agrees" "$tmp/recipe.log"; then
		ok "recipe.py ${shape:-(GQA)}: $(grep -c '^  ' "$tmp/recipe.log") rows, every kernel the recipe's"
	else
		bad "recipe.py ${shape:-(GQA)}" "$(grep -E 'differs|kernels|Error' "$tmp/recipe.log" | head -8)"
	fi
done

# runs FILE: "MEASURED OTHERS AGREE": the measured runs in FILE (source pytorch, a step time), the other
# runs (the simulated ones ./sim --compare appends), and the measured runs whose collectives are the schedule's
cat >"$tmp/runs.py" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    g = f["runs"]
    attr = lambda r, k: (lambda v: v.decode() if isinstance(v, bytes) else str(v))(g[r].attrs.get(k, ""))
    meas = [r for r in g if attr(r, "source") == "pytorch" and "summary" in g[r] and
            g[r]["summary"].attrs.get("step_time_s", 0) > 0]
    checks = [attr(r, "collectives_check") for r in meas]
    print(len(meas), len(g) - len(meas), sum(c.startswith("the schedule's") and "in its order" in c for c in checks))
EOF
runs() { "$PY" "$tmp/runs.py" "$1"; }

# 3. the grids: FSDP on 1 and 2 ranks, HSDP on 4 (2 x 2)
bench() { # NAME RANKS ARGS...: fsdp_bench.py into $tmp/NAME.h5
	local name=$1 w=$2
	shift 2
	timeout 600 "$PY" "${RUN[@]}" --nproc-per-node "$w" experiments/pytorch/fsdp_bench.py --steps 2 --warmup 1 \
		"${SHAPE[@]}" --out "$tmp/$name.h5" "$@" >>"$tmp/$name.log" 2>&1
}
for c in "w1 1 --grid quick --profile --alloc-trace" "w2 2 --grid quick --profile" \
	"hsdp 4 --grid quick --sharding hsdp --shard-group 2"; do
	read -r name w args <<<"$c"
	# shellcheck disable=SC2086
	if ! bench "$name" "$w" $args; then
		bad "fsdp_bench.py $args on $w rank(s)" "$(tail -5 "$tmp/$name.log")"
		continue
	fi
	n=$(grep -c '^[0-9]\{6\}: {' "$tmp/$name.log")
	read -r meas others _ <<<"$(runs "$tmp/$name.h5")"
	if [ "$n" -ge 8 ] && [ "$meas" = "$n" ] && [ "$others" = 0 ]; then
		ok "fsdp_bench.py $args on $w rank(s): $n policies, each a run with its step time"
	else
		bad "fsdp_bench.py $args on $w rank(s)" "$n policies logged, $meas measured runs, $others others"
		continue
	fi
	if ! "$PY" experiments/pytorch/attach_schedule.py --sim "$SIM" "$tmp/$name.h5" >"$tmp/$name.attach" 2>&1; then
		bad "attach_schedule.py ($name)" "$(tail -3 "$tmp/$name.attach")"
		continue
	fi
	read -r meas _ agree <<<"$(runs "$tmp/$name.h5")"
	ncoll=$(sed -n "s/.*run 000000: collectives: the schedule's \([0-9]*\) collectives.*/\1/p" "$tmp/$name.attach")
	if [ "$w" = 1 ] && [ "$agree" = "$meas" ] && [ "$ncoll" = 0 ]; then
		ok "attach_schedule.py ($name): no collective at one rank, as the schedule has it"
	elif [ "$w" -gt 1 ] && [ "$agree" = "$meas" ] && [ "${ncoll:-0}" -gt 0 ]; then
		ok "attach_schedule.py ($name): the collectives FSDP2 issued are the schedule's in all $meas runs ($ncoll in the first)"
	else
		bad "attach_schedule.py ($name)" "$agree of $meas agree: $(grep -v "in its order" "$tmp/$name.attach" | head -3)"
	fi
	if "$SIM" --compare "$tmp/$name.h5" --json >"$tmp/$name.json" 2>"$tmp/$name.err" &&
		"$PY" -c 'import json, math, sys
d = json.load(open(sys.argv[1]))
ok = len(d["runs"]) == int(sys.argv[2]) and all(math.isfinite(r["predicted_step_s"]) and r["predicted_step_s"] > 0 and
                                                r["measured_step_s"] > 0 for r in d["runs"])
sys.exit(0 if ok else 1)' "$tmp/$name.json" "$meas"; then
		ok "./sim --compare ($name): a finite prediction for each of its $meas runs"
	else
		bad "./sim --compare ($name)" "$(head -c 300 "$tmp/$name.err")"
	fi
done

# 4. the hook's runs of the base policy alone, appended to the one-rank file
before=$(runs "$tmp/w1.h5" 2>/dev/null | cut -d' ' -f1)
for args in "--expandable-segments --alloc-trace" "--build meta --alloc-trace" "--compile model+loss --alloc-trace"; do
	# shellcheck disable=SC2086
	if bench w1 1 --grid one $args; then
		ok "fsdp_bench.py --grid one $args"
	else
		bad "fsdp_bench.py --grid one $args" "$(tail -5 "$tmp/w1.log")"
	fi
done
after=$(runs "$tmp/w1.h5" 2>/dev/null | cut -d' ' -f1)
if [ -n "$before" ] && [ "$after" = $((before + 3)) ]; then ok "the three appended to the file ($before runs, then $after)"; else
	bad "appended" "$before runs, then $after"
fi

# 5. a calibration session of the eager kernels at the runs' shape: every GEMM and attention of a block
# and the head, as ./sim lists them at the precision measured (fp32 on a CPU), has a row of its own (name,
# shape and bytes: ./sim prices each by its own measurement); the one-rank runs priced by it
cat >"$tmp/rows.py" <<'EOF'
import re, sys, h5py
want = set()
for line in open(sys.argv[1]):
    m = re.match(r"^ {10}(\S+)\s+(?:gemm|attention)\s+(\d+)\s+\d+\s+(\d+)x(\d+) [kd]=(\d+)", line)
    if m:
        want.add((m.group(1), int(m.group(3)), int(m.group(4)), int(m.group(5)), int(m.group(2))))
with h5py.File(sys.argv[2], "r") as f:
    ks = f["calibration"][sorted(f["calibration"])[-1]]["kernels"][()]
have = {(r["name"].decode(), int(r["m"]), int(r["n"]), int(r["k"]), int(r["bytes"])) for r in ks}
print(len(want), " ".join("%s:%dx%dx%d:%d" % w for w in sorted(want - have)))
EOF
"$PY" experiments/pytorch/attach_schedule.py --sim "$SIM" "$tmp/w1.h5" >"$tmp/w1.attach" 2>&1
if "$PY" experiments/pytorch/microbench.py --quick --sim "$SIM" --hidden 128 --ffn 256 --heads 4 --kv-heads 2 \
	--vocab 512 --tokens 64 --out "$tmp/cal.h5" >"$tmp/cal.log" 2>&1 &&
	grep -q "of the recipe's .* element-wise kernels measured by name" "$tmp/cal.log"; then
	"$SIM" --model llama3-8b --layers 1 --hidden 128 --ffn 256 --heads 4 --kv-heads 2 --vocab 512 --seq 64 \
		--batch 1 --nodes 1 --gpus-per-node 1 --runtime pytorch --precision fp32 --kernels >"$tmp/kernels.txt"
	read -r nwant absent <<<"$("$PY" "$tmp/rows.py" "$tmp/kernels.txt" "$tmp/cal.h5")"
	if [ "${nwant:-0}" -gt 10 ] && [ -z "$absent" ]; then
		ok "microbench.py: a row of its own for each of the recipe's $nwant GEMMs and attentions, at fp32's bytes"
	else
		bad "microbench.py's rows" "of ${nwant:-?} GEMMs and attentions, no row for: $absent"
	fi
	if "$SIM" --compare "$tmp/w1.h5" --calibration "$tmp/cal.h5" >"$tmp/cal.txt" 2>&1 &&
		grep -q "calibration .*cal.h5@" "$tmp/cal.txt"; then
		ok "./sim --compare --calibration: the one-rank runs priced by microbench.py's file"
	else
		bad "./sim --compare --calibration" "$(tail -3 "$tmp/cal.txt")"
	fi
else
	bad "microbench.py" "$(tail -3 "$tmp/cal.log")"
fi

# 6. SDPA backward's helper kernels split off its row (on a GPU, by its profile; here the CPU's profiler and
# made-up shares): the profiler's rows read as PyTorch names them, each helper a share of the whole backward
cat >"$tmp/split.py" <<'EOF'
import sys
sys.path.insert(0, "experiments/pytorch")
import torch
import microbench as mb
q = torch.randn(1, 2, 16, 8, requires_grad=True)
o = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
shares = mb.helper_shares(lambda: torch.autograd.grad(o.sum(), q, retain_graph=True), cuda=False)
assert set(shares) == {"dot_do_o", "convert_dq"} and all(0 <= v <= 1 for v in shares.values()), shares
rows = [(b"attention_bwd", mb.K_ATTN, 2, 16, 8, 1, 1, 1000.0, 0.0)]
listed = [("attention_bwd_dot", 11, 12), ("attention_bwd_dq", 21, 22)]
mb.split_backward(rows, listed, {"dot_do_o": 0.05, "convert_dq": 0.10})
got = {r[0].decode(): round(r[7], 6) for r in rows}
assert got == {"attention_bwd": 850.0, "attention_bwd_dot": 50.0, "attention_bwd_dq": 100.0}, got
assert [r[5:7] for r in rows[1:]] == [(11, 12), (21, 22)], rows
rows = [(b"attention_bwd", mb.K_ATTN, 2, 16, 8, 1, 1, 1000.0, 0.0)]  # a helper the recipe does not list stays
mb.split_backward(rows, listed[:1], {"dot_do_o": 0.05, "convert_dq": 0.10})
assert [(r[0], round(r[7], 6)) for r in rows] == [(b"attention_bwd", 950.0), (b"attention_bwd_dot", 50.0)], rows
print("1000 ns as", ", ".join("%s %g" % kv for kv in got.items()))
EOF
if "$PY" "$tmp/split.py" >"$tmp/split.log" 2>&1; then
	ok "microbench.py: SDPA backward's helpers split off, each a share of the whole ($(tail -1 "$tmp/split.log"))"
else
	bad "microbench.py's split of SDPA backward" "$(tail -3 "$tmp/split.log")"
fi

# 7. gpu_run's training against oracle.py, a Llama in plain PyTorch, float64, from the same arguments: per-step
# losses and the final parameters' sum and sum of squares. gpu_run computes in fp32 (a fixed summation order),
# the oracle in float64, so they differ by fp32's rounding: 1e-8 to 1e-7 relative over 3 to 21 steps in every
# configuration tried (2026-12-02, torch 2.11), as much as the oracle in float32 differs from itself in float64.
# ORACLE_TOL, on the losses, is ten times that. The parameters' sum has more room, SUM_TOL: AdamW's first update
# is lr times g / (|g| + eps), so a gradient that fp32's error (1e-9 typical, 2e-8 at most here) takes across
# zero moves its element by up to 2 lr, 3e-6 of the sum (none did: the smallest |g| of the first step is
# 1.4e-8); a loss or the sum of squares hardly notices one. The weakest control below, beta2 0.999 for 0.95,
# differs by 1.2e-5 on the third loss (the first two see only the first update, which the betas do not change)
# and beta1 0.8 by 3.5e-5: ten times ORACLE_TOL and more. At lr 0 the parameters are the initial weights, whose
# sums differ by the order of a float64 sum alone, far below the last of the 10 digits gpu_run prints (2e-9:
# two units of it), and the losses are the forward's alone (1e-8 apart): 1e-7 there tells RMSNorm's eps 1e-5
# from 1e-6 (4.7e-7; the embedding's rows have a mean square of 1), which ORACLE_TOL would not.
. tests/mpi_local.sh
GPU_RUN=${GPU_RUN:-./gpu_run}
MPIRUN=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" mpirun --allow-run-as-root --oversubscribe
	--mca odls_base_sigkill_timeout 0)
ORACLE_TOL=1e-6
SUM_TOL=1e-5
cat >"$tmp/oracle_cmp.py" <<'EOF'
# A B TOL [SUMTOL]: the two printouts agree (exit 0), differ (1) or cannot be read (2)
import re, sys
def read(path):
    losses, sums = [], None
    for line in open(path):
        m = re.match(r"step (\d+) loss (\S+) time ", line)
        if m:
            losses.append(float(m.group(2)))
        m = re.match(r"params sum (\S+) sumsq (\S+)", line)
        if m:
            sums = float(m.group(1)), float(m.group(2))
    return losses, sums
(la, sa), (lb, sb) = read(sys.argv[1]), read(sys.argv[2])
tol = float(sys.argv[3])
stol = float(sys.argv[4]) if len(sys.argv) > 4 else tol
if not la or len(la) != len(lb) or sa is None or sb is None:
    print("%d and %d steps, params sums %s and %s" % (len(la), len(lb), sa, sb))
    sys.exit(2)
rel = lambda x, y: abs(x - y) / max(abs(x), abs(y), 1e-300)
dl, ds, dq = max(rel(x, y) for x, y in zip(la, lb)), rel(sa[0], sb[0]), rel(sa[1], sb[1])
print("relative differences: %d losses %.1e at most, params sum %.1e, sumsq %.1e" % (len(la), dl, ds, dq))
sys.exit(0 if dl <= tol and max(ds, dq) <= stol else 1)
EOF
# oracle_pair NAME RANKS ARGS...: gpu_run and oracle.py on the same arguments, into $tmp/NAME.gpu and .oracle
oracle_pair() {
	local name=$1 np=$2
	shift 2
	"${MPIRUN[@]}" -np "$np" "$GPU_RUN" experiments/tiny.ini "$@" >"$tmp/$name.gpu" 2>&1 </dev/null &&
		"$PY" experiments/pytorch/oracle.py experiments/tiny.ini "$@" >"$tmp/$name.oracle" 2>&1 </dev/null
}
THREE="--set run.steps=3 --set run.warmup=0"
if [ ! -x "$GPU_RUN" ] || ! command -v mpirun >/dev/null; then
	bad "oracle.py" "needs $GPU_RUN (make gpu_run) and mpirun"
else
	# NAME|RANKS|TOLERANCE|SUMS' TOLERANCE|WHAT|ARGUMENTS
	while IFS='|' read -r name np tol stol what args; do
		# shellcheck disable=SC2086
		if ! oracle_pair "$name" "$np" $args; then
			bad "oracle.py ($what)" "$(tail -3 "$tmp/$name.gpu" "$tmp/$name.oracle" 2>/dev/null)"
		elif diff=$("$PY" "$tmp/oracle_cmp.py" "$tmp/$name.gpu" "$tmp/$name.oracle" "$tol" "$stol"); then
			ok "oracle.py agrees with gpu_run, $what: $diff"
		else
			bad "oracle.py against gpu_run ($what; tolerance $tol, sums $stol)" "$diff"
		fi
	done <<EOF
fsdp|2|$ORACLE_TOL|$SUM_TOL|fsdp on 2 ranks x 2 microbatches, 3 steps|$THREE
wide|4|$ORACLE_TOL|$SUM_TOL|3 layers on 4 ranks x 2 microbatches, 3 steps|$THREE --set model.layers=3 --set cluster.gpus_per_node=4
ddp|2|$ORACLE_TOL|$SUM_TOL|ddp, 1 warm-up + 2 steps of 1 microbatch of 3, lr 2e-3, weight decay 0.2, eps 1e-6|--set run.steps=2 --set run.warmup=1 --set policy.sharding=ddp --set policy.microbatches=1 --set run.batch=3 --set run.lr=2e-3 --set run.weight_decay=0.2 --set run.eps=1e-6
lr0|2|1e-7|2e-9|lr 0 (the initial weights' sums; the forward alone)|$THREE --set run.lr=0
theta|2|$ORACLE_TOL|$SUM_TOL|Llama 2's RoPE base, model.rope_theta = 10000 (1.3e-3 from 500000's losses), 3 steps|$THREE --set model.rope_theta=10000
EOF
	# the controls: the oracle told something other than gpu_run was must disagree with gpu_run's fsdp run
	for c in "--set run.seed=1235" "--beta1 0.8" "--beta2 0.999"; do
		# shellcheck disable=SC2086
		"$PY" experiments/pytorch/oracle.py experiments/tiny.ini $THREE $c >"$tmp/control.oracle" 2>&1 </dev/null
		diff=$("$PY" "$tmp/oracle_cmp.py" "$tmp/fsdp.gpu" "$tmp/control.oracle" "$ORACLE_TOL" "$SUM_TOL")
		if [ $? = 1 ]; then
			ok "oracle.py $c disagrees with gpu_run's fsdp run: $diff"
		else
			bad "oracle.py $c (a control)" "not a disagreement: $diff"
		fi
	done
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
