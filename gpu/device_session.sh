#!/usr/bin/env bash
# gpu/device_session.sh - every piece of GPU work of a session, in one
# script that runs from the carried tree on a lent machine with one H100 or
# H200 (the `run` tool: the command runs in the repository root, $OUT comes
# back). Nothing is built there: the binaries are built on the build machine
# and carried with the library bundle (gpu/cuda/bundle.sh), packed into
# gpu/carry.tar.gz (gpu/pack.sh; unpacked here first), because the lent
# machine has no MPI, HDF5 or GSL and may have cuBLAS, NCCL and cuDNN only
# inside its Python environment (nvidia/*/lib).
#
#   bash gpu/device_session.sh [STEP...]       default: every step, in order
#
# DEVICE=cpu rehearses the calibrate, runs and compare steps on the build
# machine with gpu_run's CPU backend and the tiny model (the same families,
# flags, files and summary; tests/e2e_device_session.sh runs it in make test);
# the steps that need the GPU say so. DATA (default data) is where the
# calibration and the runs are written.
#
# Steps (each one's log is logs/STEP.log inside $OUT/logs.tar.gz):
#   host       the machine: nvidia-smi, driver, the binaries' ldd, where
#              cudart, cuBLAS(Lt), NCCL and cuDNN resolve and their versions
#   test       ./gpu_test: every layer, block, head and the model against the
#              C reference, outputs poisoned (make gpu-test's first half)
#   bench      ./gpu_bench: per-kernel table, block time, MFU (both FLOP
#              counts); ac none/selective, 32 blocks with full recomputation
#              (more than 512 timed kernels), cuDNN attention, GEMM autotuning
#   memcheck   compute-sanitizer memcheck over ./gpu_test
#   racecheck  compute-sanitizer racecheck over the shared-memory kernels
#   calibrate  ./gpu_run --calibrate on cuda as rank 0 of the emulated 2 x 8
#              job the runs are (llama3-8b's shapes, 4 blocks, seq 4096):
#              every kernel of the model alone and beside the emulated
#              traffic, the GEMM grid, memory passes, host-device copies
#              each way, each collective of every sharding's groups from
#              1 KiB to the largest, AdamW at two sizes, the overheads; a quick session first
#              (seconds), a quick one of the full-size run's shapes (seq 8192), one of the job
#              under the pytorch runtime (its copies), then the full one
#              (data/calibration/<hardware>-cuda.h5 in this tree, appended)
#   runs       ./gpu_run --device cuda: one real NCCL rank (its own file,
#              not compared), then every policy family as rank 0 of the
#              same emulated 2 x 8 job (--emulate-world 16; NCCL refuses
#              two ranks on one GPU), then llama3-8b at full size, seq 8192,
#              as one rank of 16; 2 warm-up and 5 measured steps each
#              (data/runs/<hardware>-cuda-<date>.h5 in this tree); last,
#              the pytorch runtime on one real rank (FSDP2's copies, no
#              collective; the one-rank file)
#   compare    ./sim --compare of those runs (the bundle's libraries): priced
#              by the calibration, then by the catalog alone; the
#              predictions are appended beside the runs, the reports kept
#   hooks      gpu/device_steps.d/*.sh, in name order, if any (PyTorch
#              reference runs of later issues); each gets $OUT and the
#              library environment, and its own log
#   staged     several real ranks on the one GPU (--staged-collectives:
#              collectives through host memory and MPI): ddp, zero2, the
#              optimizer offloaded and in backward, fsdp on 2 ranks, hsdp
#              2 x 2 and fsdp on 4 (llama3-8b's blocks, 2
#              of them, seq 1024, vocab 32768, 3 steps); each policy's first loss is
#              fsdp's, the rest within STAGED_RTOL: the numbers of ranks
#              other than 0, which no emulated run has (not compared, no
#              file kept; DEVICE=cpu rehearses it on the CPU backend)
#
# A command of the `run` tool may last 10 minutes: the steps share a budget
# (BUDGET_S, default 560 s); a step is started only when the budget still
# holds its minimum, else it is listed as skipped, to be run by a second
# call naming it (gpu/README.md gives the two calls that cover everything).
# A failing step is reported and the next one runs. set -u, never set -e.
# Every command inside a step runs under tmo, which ends it by the step's own
# end: the step's timeout would not reach it (timeout makes a process group).
#
# $OUT receives at most seven files (the tool brings back at most eight),
# refreshed after each step:
#   summary.txt    one line per step (status, seconds, the figures), the
#                  library paths and versions, what was skipped
#   logs.tar.gz    logs/STEP.log of every step
#   <hardware>-cuda.h5               the calibration (data/README.md)
#   <hardware>-cuda-<date>.h5        gpu_run's runs with ./sim's predictions
#                                    (core/results.h schema; the device,
#                                    library versions and fabric as run
#                                    attributes)
#   <hardware>-cuda-<date>.h5.compare.txt, .compare.json   the comparison
#   gpu_bench.h5   gpu_bench's runs
# where <hardware> is gpu_run --hardware's device (h100, h200). Their
# names are the ones they are committed under (gpu/README.md).
#
# Wherever nvidia-smi is, the GPU's SM clock, memory clock, power,
# temperature and utilization are sampled every 250 ms for the whole call
# (logs/clocks.csv), and when each step, each gpu_run of the calibrate and
# runs steps and each command of the hooks began (logs/phases.txt, in
# nvidia-smi's clock); at the end gpu/clocks.py's table of the SM clock and
# power each phase ran at (logs/clocks.table) is added to the summary: a
# kernel's time follows the SM clock, which falls at the board's power cap,
# so a calibration and the runs it prices are compared at the clocks each
# ran at (gpu/README.md, "The H200 session").
set -u
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
OUT=${OUT:-$REPO/device_out}
DEVICE=${DEVICE:-cuda}
DATA=${DATA:-data}
case "$DEVICE" in cuda | cpu) ;; *) echo "device_session.sh: DEVICE=$DEVICE (allowed: cuda, cpu)" >&2; exit 2 ;; esac
mkdir -p "$OUT" || exit 1
WORK=$(mktemp -d /tmp/device_session.XXXXXX) || exit 1
LOGS=$WORK/logs
mkdir -p "$LOGS"
BUDGET_S=${BUDGET_S:-560}
START=$(date +%s)
STAMP=$WORK/started # what this call made is newer than this file
touch "$STAMP"
HOST_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} # the hooks' (PyTorch finds its own CUDA libraries)
SUMMARY=$OUT/summary.txt
BENCH_H5=$OUT/gpu_bench.h5
export REPO OUT WORK LOGS BENCH_H5 DEVICE HOST_LD_LIBRARY_PATH
export HDF5_USE_FILE_LOCKING=FALSE PYTHONUNBUFFERED=1

ALL_STEPS=(host test bench memcheck racecheck calibrate runs compare hooks staged)
declare -A MIN_S=([host]=15 [test]=45 [memcheck]=120 [racecheck]=60 [bench]=90 [calibrate]=60 [runs]=150
	[compare]=15 [hooks]=30 [staged]=60)
declare -A MAX_S=([host]=60 [test]=150 [memcheck]=300 [racecheck]=200 [bench]=270 [calibrate]=180 [runs]=300
	[compare]=60 [hooks]=360 [staged]=240)

say() { echo "[$(date -u +%H:%M:%S)] $*"; }
# phase NAME: from now on the session does NAME (logs/phases.txt; the clock nvidia-smi stamps its samples
# with, the machine's local time, to the millisecond: gpu/clocks.py sets the samples against these lines)
PHASES=$LOGS/phases.txt
phase() { echo "$(date '+%Y/%m/%d %H:%M:%S.%3N') $*" >>"$PHASES"; }
export PHASES
note() { echo "$*" >>"$SUMMARY"; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
# tmo SECONDS COMMAND...: the command under timeout, for SECONDS at most (0: no limit of its
# own) and never past the step's end (STEP_END, set by run_step): an inner timeout is a
# process group of its own, which the step's timeout does not reach, so it must end by
# itself before the step does.
tmo() {
	local s=$1 end_s
	shift
	end_s=$((${STEP_END:-$(($(date +%s) + s + 10))} - $(date +%s) - 5))
	{ [ "$s" -eq 0 ] || [ "$end_s" -lt "$s" ]; } && s=$end_s
	if [ "$s" -lt 1 ]; then
		echo "not run (the step's time is up): $*"
		return 124
	fi
	timeout -k 5 "$s" "$@"
}
pack() {
	tar -C "$WORK" -czf "$OUT/logs.tar.gz.part" logs 2>/dev/null && mv -f "$OUT/logs.tar.gz.part" "$OUT/logs.tar.gz"
}

# ---- the library environment, once -------------------------------------------------
# Open MPI from the bundle (mpirun is a script giving the bundle's libraries to
# itself and its job); the CUDA libraries from the toolkit where it has them,
# else from the Python environment's nvidia/*/lib folders.
find_python() { # the first Python that imports torch (its nvidia/*/lib hold the CUDA libraries), else the first
	local py first=""
	for py in python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
		command -v "$py" >/dev/null 2>&1 || continue
		[ -n "$first" ] || first=$(command -v "$py")
		if "$py" -c 'import torch' >/dev/null 2>&1; then
			command -v "$py"
			return 0
		fi
	done
	[ -n "$first" ] && echo "$first"
}

setup_libs() {
	local dirs=() d p
	if [ -f gpu/bundle/env.sh ]; then
		# shellcheck disable=SC1091
		source gpu/bundle/env.sh
	else
		note "WARN no gpu/bundle: carry it (gpu/cuda/bundle.sh); mpirun and the binaries' MPI, HDF5, GSL may be missing"
	fi
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
		[ -d "$d" ] && dirs+=("$d")
	done
	PY=$(find_python) || PY=""
	if [ -n "$PY" ]; then
		while read -r p; do
			[ -d "$p" ] || continue
			while read -r d; do
				dirs+=("$d")
			done < <(find "$p" -maxdepth 3 -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u)
		done < <("$PY" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null)
	fi
	if [ ${#dirs[@]} -gt 0 ]; then
		LD_LIBRARY_PATH=$(IFS=:; echo "${dirs[*]}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		export LD_LIBRARY_PATH
	fi
	export PY
	SAN=$(command -v compute-sanitizer 2>/dev/null || true)
	if [ -z "$SAN" ]; then
		for d in "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/nvcc)")" /usr/local/cuda/bin /usr/local/cuda-*/bin \
			/usr/local/cuda/compute-sanitizer /opt/nvidia/*/compute-sanitizer; do
			[ -x "$d/compute-sanitizer" ] && { SAN=$d/compute-sanitizer; break; }
		done
	fi
	export SAN
	# the device's name for the files (gpu_run --hardware: "h100-cuda"), and the files in this tree
	# shellcheck disable=SC2086
	HW=$(timeout -k 5 60 $MPI1 ./gpu_run "$EXP" $JOB --hardware 2>/dev/null | tail -1)
	case "$HW" in *-"$DEVICE") ;; *) HW=unknown-$DEVICE ;; esac
	CAL_FILE=$DATA/calibration/$HW.h5
	RUNS_FILE=$DATA/runs/$HW-$(date -u +%Y%m%d).h5
	mkdir -p "$DATA/calibration" "$DATA/runs"
	export HW CAL_FILE RUNS_FILE
}

# What the session has made so far, into $OUT under the names it is committed with.
sync_out() {
	local f
	for f in "$CAL_FILE" "$RUNS_FILE" "$RUNS_FILE.compare.txt" "$RUNS_FILE.compare.json"; do
		# this call's files only (the tool brings back eight): a file in the tree from before is not news
		[ -f "$f" ] && [ "$f" -nt "$STAMP" ] && cp -f "$f" "$OUT/$(basename "$f")"
	done
}

# Open MPI on this one machine: shared memory only, and the ob1 PML, the one the bundle's
# openmpi-mca-params.conf leaves these processes anyway (it excludes ucx; cm's MTLs find no
# hardware), named so that cm and its MTLs are not opened and probed (0.2 s less a start).
MPI_LOCAL="--allow-run-as-root --mca btl self,vader --mca pml ob1 --bind-to none"
# One process under the bundle's mpirun; a word list, for timeout.
MPI1="mpirun $MPI_LOCAL -np 1"
export MPI_LOCAL MPI1

# The issue-9 job the calibration and the compared runs share: llama3-8b's
# shapes, 4 blocks, seq 4096, rank 0 of the experiment's 2 x 8 on the
# emulated fabric, the catalog GPU the device is (its datasheet prices the
# catalog comparison). Word lists (no value has a space).
catalog_gpu() {
	case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
	*H200*) echo h200 ;;
	*A100*) echo a100-80g ;;
	*) echo h100-sxm ;;
	esac
}
# The rehearsal (DEVICE=cpu): the tiny model on the same emulated 2 x 8 job.
if [ "$DEVICE" = cuda ]; then
	CATALOG_GPU=$(catalog_gpu) # the hooks price their runs on it too
	export CATALOG_GPU
	EXP=experiments/llama3.ini
	MODEL="--set cluster.gpu=$CATALOG_GPU --set model.layers=4 --set model.seq=4096"
	FULL="--set cluster.gpu=$CATALOG_GPU" # llama3-8b at full size, seq 8192
else
	EXP=experiments/tiny.ini
	MODEL="--set cluster.nodes=2 --set cluster.gpus_per_node=8"
	FULL="$MODEL --set model.name=small"
fi
JOB="--device $DEVICE $MODEL --emulate-world 16"
export EXP MODEL FULL JOB

# The steps that need the GPU say so plainly when there is none (the binaries would exit 0).
have_gpu() {
	[ "$DEVICE" = cuda ] || { echo "DEVICE=$DEVICE: this step needs the GPU"; return 1; }
	nvidia-smi -L 2>/dev/null | grep -q '^GPU' && return 0
	echo "no GPU here (nvidia-smi -L lists none): nothing to run"
	return 1
}
# The calibration and the runs: the GPU, or the CPU backend's rehearsal.
have_device() { if [ "$DEVICE" = cpu ]; then return 0; fi; have_gpu; }

# ---- steps: each runs in its own bash, its output in logs/STEP.log -----------------------

step_host() {
	local rc=0 b lib
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "uname: $(uname -a)"
	echo "commit: $(git rev-parse HEAD 2>/dev/null || cat gpu/COMMIT 2>/dev/null || echo unknown)"
	nvidia-smi || rc=1
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || rc=1
	cat /proc/driver/nvidia/version 2>/dev/null
	echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
	echo "compute-sanitizer: ${SAN:-none} $([ -n "$SAN" ] && "$SAN" --version 2>/dev/null | tail -1)"
	echo "python: ${PY:-none}"
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	for b in gpu_run gpu_test gpu_bench sim; do
		echo "== ldd $b"
		if [ ! -x "$b" ]; then
			echo "$b: not carried"
			rc=1
			continue
		fi
		ldd "$b"
		if ldd "$b" | grep -q "not found"; then
			echo "$b: LIBRARIES NOT FOUND"
			rc=1
		fi
	done
	echo "== where the CUDA libraries resolve (what gpu_run loads: ldd above; every copy here)"
	for lib in libcuda.so.1 libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 \
		libcudnn_graph.so.9; do
		local found=""
		for d in ${LD_LIBRARY_PATH//:/ } /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/lib64; do
			[ -e "$d/$lib" ] && found="$found $(readlink -f "$d/$lib")"
		done
		echo "$lib:${found:- not found}"
	done
	if [ -n "$PY" ]; then
		echo "== the Python environment's view"
		"$PY" - <<'PY' || true
import importlib.metadata as md
for p in ("torch", "nvidia-cuda-runtime", "nvidia-cublas", "nvidia-nccl-cu13", "nvidia-cudnn-cu13"):
    try:
        print(p, md.version(p))
    except Exception as e:
        print(p, "not installed")
try:
    import torch
    print("torch cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(),
          "nccl", ".".join(map(str, torch.cuda.nccl.version())), "device", torch.cuda.get_device_name(0))
except Exception as e:
    print("torch:", e)
PY
	fi
	echo "== mpirun"
	command -v mpirun
	timeout 30 $MPI1 hostname || rc=1
	echo "== gpu_run loads"
	timeout 30 $MPI1 ./gpu_run --help >/dev/null || rc=1
	return $rc
}

step_test() {
	have_gpu || return 1
	tmo 0 ./gpu_test >"$WORK/test.out" 2>&1
	local r=$?
	cat "$WORK/test.out"
	# a GPU that CUDA cannot use makes gpu_test say so and exit 0: not a pass
	[ $r -eq 0 ] && ! grep -qE '^[0-9]+ passed, 0 failed' "$WORK/test.out" && { echo "no checks ran"; r=1; }
	return $r
}

step_memcheck() {
	have_gpu || return 1
	[ -n "$SAN" ] || { echo "compute-sanitizer not installed"; return 1; }
	tmo 0 "$SAN" --tool memcheck --error-exitcode 3 --print-limit 20 ./gpu_test
}

step_racecheck() {
	local rc=0 g
	have_gpu || return 1
	[ -n "$SAN" ] || { echo "compute-sanitizer not installed"; return 1; }
	for g in attention rmsnorm cross_entropy embedding; do
		echo "== racecheck $g"
		tmo 90 "$SAN" --tool racecheck --error-exitcode 3 --print-limit 20 ./gpu_test "$g" || rc=1
	done
	return $rc
}

step_bench() {
	local rc=0
	have_gpu || return 1
	bench() { # NAME SECONDS ARGS...
		local name=$1 s=$2 r
		shift 2
		echo "== gpu_bench $name: $*"
		tmo "$s" ./gpu_bench --out "$BENCH_H5" "$@" >"$WORK/bench.out" 2>&1
		r=$?
		cat "$WORK/bench.out"
		[ $r -eq 0 ] && grep -q "no CUDA device" "$WORK/bench.out" && r=1
		[ $r -eq 0 ] || { echo "gpu_bench $name: FAILED ($r)"; rc=1; }
		awk -v name="$name" -v rc="$r" '
			/^block forward/ { b = $(NF - 7) " ms fwd+bwd per block" }
			/^MFU/ { mfu = $2 " (conventional), " $(NF - 4) " causal" }
			/^attention: cuDNN was asked for/ { fell = 1 }
			/^attention: cuDNN.s plans/ { m = $0; sub(/.*indices /, "", m); att = att ", mask indices " m }
			/^attention: cuDNN.s backward under GQA by the graph/ { att = att ", GQA backward of KV heads" }
			/^attention: cuDNN.s backward under GQA by the repeated/ { att = att ", GQA backward on repeated K, V" }
			END {
				if (fell || att != "")
					att = (fell ? "cudnn fell back" : "cudnn") att
				printf "  %-10s rc=%s  %s  MFU %s %s\n", name, rc, b, mfu, att
			}' \
			"$WORK/bench.out" >>"$LOGS/bench.table"
	}
	bench default 60
	bench selective 60 --ac selective
	bench full32 80 --blocks 32 --ac full --warmup 1 --repeats 1
	bench cudnn 45 --attention cudnn
	bench cudnn-rep 45 --attention cudnn --cudnn-gqa repeat
	bench cudnn-f32 45 --attention cudnn --cudnn-mask float
	bench autotune 60 --gemm-autotune
	return $rc
}

step_calibrate() {
	local rc=0 left_s
	have_device || return 1
	echo "calibration of $JOB into $CAL_FILE"
	echo "== quick: a session in seconds, so that the runs have one if the full calibration does not finish"
	phase "calibrate: quick"
	# the watchdog ends a calibration that makes no progress for 60 s and says what each stream waits
	# on (each measurement lasts milliseconds; the first GPU session's stopped, its GPU idle, and used
	# the whole step)
	# shellcheck disable=SC2086
	tmo 150 $MPI1 ./gpu_run "$EXP" $JOB --set run.timeout_s=60 --calibrate "$CAL_FILE" --quick || rc=1
	# the full-size run's kernels at its own shapes (seq 8192; the job's are at 4096), appended as a
	# quick session before the full one, so that the newest session, whose scalars price every run
	# (the optimizer at the size the runs step), is the job's full one. The first H200 session had
	# the job's shapes only: the full-size run's norms' backward were priced as passes of their bytes
	# and its attention scaled by FLOPs from seq 4096 (-6.0% on the step)
	echo "== the full-size run's shapes, quick"
	phase "calibrate: full-size shapes, quick"
	# shellcheck disable=SC2086
	tmo 90 $MPI1 ./gpu_run "$EXP" --device "$DEVICE" $FULL --emulate-world 16 --set run.timeout_s=60 \
		--calibrate "$CAL_FILE" --quick || rc=1
	# the pytorch runtime's copies (FSDP2's per-tensor unpack and pack, each size its schedule launches:
	# the first H200 session priced them as passes, 40 % short), a quick session of the job under it
	echo "== the pytorch runtime's copies, quick"
	phase "calibrate: pytorch copies, quick"
	# shellcheck disable=SC2086
	tmo 60 $MPI1 ./gpu_run "$EXP" $JOB --set policy.runtime=pytorch --set run.timeout_s=60 \
		--calibrate "$CAL_FILE" --quick || rc=1
	left_s=$((STEP_END - $(date +%s) - 10))
	if [ "$left_s" -lt 30 ]; then
		echo "no time left for the full calibration"
		return 1
	fi
	echo "== full (at most ${left_s}s)"
	phase "calibrate: full"
	# shellcheck disable=SC2086
	tmo "$left_s" $MPI1 ./gpu_run "$EXP" $JOB --set run.timeout_s=60 --calibrate "$CAL_FILE" || rc=1
	return $rc
}

step_runs() {
	local rc=0 n=0 bad=0
	have_device || return 1
	# shellcheck disable=SC2206
	local SMALL=($JOB --set "run.out=$RUNS_FILE" --set run.warmup=2 --set run.steps=5)
	gpurun() { # NAME SECONDS ARGS...
		local name=$1 s=$2 r
		shift 2
		echo "== gpu_run $name: $*"
		phase "runs: $name"
		# the watchdog (no progress for 40 s) inside each run's own limit: a hang says what it waited on
		tmo "$s" $MPI1 ./gpu_run "$EXP" --set run.timeout_s=40 "$@" >"$WORK/run.out" 2>&1
		r=$?
		cat "$WORK/run.out"
		n=$((n + 1))
		if [ $r -ne 0 ]; then
			echo "gpu_run $name: FAILED ($r)"
			bad=$((bad + 1))
			rc=1
		fi
		# one line for the summary: name, status, step time, MFU, peak memory, exposed communication
		awk -v name="$name" -v rc="$r" '
			/^summary: step time/ { t = $4 " ms"; for (i = 5; i < NF; i++) if ($i == "MFU") mfu = $(i + 1) }
			/^summary: compute/ { x = $7 " ms exposed" }
			/^summary: peak memory/ { m = sprintf("%.2f GiB peak", $4 / 2^30) }
			END { printf "  %-22s rc=%s  %s  MFU %s  %s  %s\n", name, rc, t, mfu, m, x }' \
			"$WORK/run.out" >>"$LOGS/runs.table"
	}
	# one real rank: NCCL's communicators, splits and collectives over one GPU (its own file: a
	# world of 1 has no calibration to compare it with)
	# shellcheck disable=SC2086
	gpurun nccl-1rank 60 --device "$DEVICE" $MODEL --set "run.out=$WORK/nccl.h5" \
		--set run.warmup=1 --set run.steps=2 --set cluster.nodes=1 --set cluster.gpus_per_node=1
	# the issue's step-level figure, early so that the step's time does not run out before it:
	# llama3-8b as one rank of 16 (2 x 8, fsdp, seq 8192)
	# shellcheck disable=SC2086
	gpurun llama3-8b-rank0of16 150 --device "$DEVICE" $FULL --set "run.out=$RUNS_FILE" \
		--set run.warmup=2 --set run.steps=5 --emulate-world 16
	# the emulated traffic's own ceiling: the same job on a link no kernel keeps up with, so each
	# collective takes what its kernel needs (its own file, not compared); the log gets GB/s per kind
	# shellcheck disable=SC2086
	gpurun emu-ceiling 45 $JOB --set "run.out=$WORK/ceiling.h5" --set run.warmup=1 --set run.steps=3 \
		--emulate-gbps 100000 --emulate-lat-us 0
	if [ -n "$PY" ] && [ -f "$WORK/ceiling.h5" ]; then
		"$PY" - "$WORK/ceiling.h5" <<'PY' || true
import sys, collections, h5py
with h5py.File(sys.argv[1], "r") as f:
    for name, g in f["runs"].items():
        by = collections.defaultdict(lambda: [0, 0])
        for o in g["ops"][()]:
            kind = o["label"].decode().split()[0]
            if kind in ("AG", "RS", "AR") and o["bytes"] > 0 and o["end_ns"] > o["start_ns"]:
                by[kind][0] += int(o["bytes"])
                by[kind][1] += int(o["end_ns"] - o["start_ns"])
        for kind, (b, ns) in sorted(by.items()):
            print("emu-ceiling run %s: %s %.1f MiB in %.3f ms: %.0f GB/s" % (name, kind, b / 2**20, ns / 1e6, b / ns))
PY
	fi
	# every policy family as rank 0 of 2 x 8 (llama3-8b's shapes, 4 blocks, seq 4096): the runs compared
	gpurun fsdp 45 "${SMALL[@]}"
	gpurun ddp 60 "${SMALL[@]}" --set policy.sharding=ddp
	gpurun zero2 45 "${SMALL[@]}" --set policy.sharding=zero2
	gpurun hsdp 45 "${SMALL[@]}" --set policy.sharding=hsdp --set policy.shard_group=8
	gpurun no-sync 60 "${SMALL[@]}" --set policy.microbatches=2 --set policy.accum=no-sync
	gpurun defer-replica 60 "${SMALL[@]}" --set policy.sharding=hsdp --set policy.shard_group=8 \
		--set policy.microbatches=2 --set policy.accum=defer-replica
	gpurun partial2 60 "${SMALL[@]}" --set policy.microbatches=2 --set policy.accum=partial:2
	gpurun block+io 45 "${SMALL[@]}" --set policy.wrap=block+io
	gpurun whole 45 "${SMALL[@]}" --set policy.wrap=whole
	gpurun reshard-no 45 "${SMALL[@]}" --set policy.reshard=no
	gpurun optim-in-bwd 45 "${SMALL[@]}" --set policy.optim_in_backward=true
	gpurun fused 45 "${SMALL[@]}" --set policy.optim=fused
	gpurun per-param 45 "${SMALL[@]}" --set policy.optim=per-param
	gpurun ac-full 45 "${SMALL[@]}" --set policy.ac=full
	gpurun ac-selective 45 "${SMALL[@]}" --set policy.ac=selective
	gpurun offload-optim 60 "${SMALL[@]}" --set policy.offload=optim
	gpurun offload-params 60 "${SMALL[@]}" --set policy.offload=params
	gpurun pytorch 45 "${SMALL[@]}" --set policy.runtime=pytorch
	if [ "$DEVICE" = cuda ]; then
		gpurun pure-bf16 45 "${SMALL[@]}" --set policy.precision=pure-bf16
		# a bf16 reduce under mixed precision: each reduced shard cast into the fp32 sharded gradient
		# (the first microbatch) or added to it (the second), as FSDP2's foreach_reduce does
		gpurun reduce-bf16 60 "${SMALL[@]}" --set policy.reduce_dtype=bf16 --set policy.microbatches=2
	else
		echo "== gpu_run pure-bf16, reduce-bf16: not rehearsed (the CPU backend computes in fp32)"
	fi
	gpurun chunked-loss 45 "${SMALL[@]}" --set policy.loss=chunked
	# FSDP2 over one real rank: no collective, the shards cast and copied in (local_shards), into the
	# one-rank file; last, so that the families above come first
	# shellcheck disable=SC2086
	gpurun pytorch-1rank 45 --device "$DEVICE" $MODEL --set "run.out=$WORK/nccl.h5" \
		--set run.warmup=1 --set run.steps=2 --set cluster.nodes=1 --set cluster.gpus_per_node=1 \
		--set policy.runtime=pytorch
	echo "$n runs, $bad failed"
	return $rc
}

# Several real ranks on the one GPU (cuda: --staged-collectives, each collective through pinned host
# memory and MPI, since NCCL refuses two ranks on one GPU; cpu: the CPU backend's MPI as it is): the
# CUDA backend's numbers for ranks other than 0, which the emulated runs never have (their shards,
# packs, reductions and optimizer ranges). ddp, zero2, the optimizer offloaded and in backward, and
# fsdp on 2 ranks, hsdp 2 x 2 against fsdp on 4: every policy's first loss is fsdp's (the same parameters, the same data: shards put together
# wrong would change it), and its later losses and final parameters agree within STAGED_RTOL (the
# reductions' order may differ: 1e-2 on cuda's bf16, 1e-5 on the CPU's fp32). Not compared by ./sim
# (fabric = staged), nothing written to data/. STAGED_SET: more settings (words) for the policies
# checked against fsdp, none for fsdp's runs (tests/e2e_device_session.sh makes them differ so).
# STAGED_TIMEOUT_S: each run's watchdog (45 s; the test makes the reference hang with a tiny one).
step_staged() {
	local rc=0 n=0 bad=0 last=0 flag="" tol shape set=${STAGED_SET:-}
	have_device || return 1
	if [ "$DEVICE" = cuda ]; then
		flag=--staged-collectives
		tol=${STAGED_RTOL:-1e-2}
		shape="--set cluster.gpu=$CATALOG_GPU --set model.layers=2 --set model.seq=1024 --set model.vocab=32768"
	else
		tol=${STAGED_RTOL:-1e-5}
		shape="--set model.layers=2"
	fi
	staged() { # NAME NP NODES SECONDS ARGS...: the run's losses and parameter sums, one per line
		local name=$1 np=$2 nodes=$3 s=$4 r
		shift 4
		echo "== gpu_run $name: $np ranks on this $DEVICE, $*"
		phase "staged: $name"
		# the first MPI jobs of several processes on the device machine: no single-copy transport
		# (process_vm_readv, which a container may forbid; these messages are small), and the
		# watchdog well inside the run's own limit, so that a hang says what each stream waited on
		# shellcheck disable=SC2086
		tmo "$s" mpirun $MPI_LOCAL --mca btl_vader_single_copy_mechanism none --oversubscribe -np "$np" \
			./gpu_run "$EXP" --device "$DEVICE" $shape $flag --set run.warmup=0 --set run.steps=3 \
			--set run.timeout_s="${STAGED_TIMEOUT_S:-45}" --set cluster.nodes="$nodes" --set cluster.gpus_per_node=$((np / nodes)) \
			"$@" >"$WORK/staged-$name.out" 2>&1
		r=$?
		last=$r
		n=$((n + 1))
		grep -E '^(step|params|gpu_run)' "$WORK/staged-$name.out"
		awk '/^step [0-9]+ loss /{ print $4 } /^params sum /{ print $3; print $5 }' "$WORK/staged-$name.out" \
			>"$WORK/staged-$name.nums"
		if [ $r -ne 0 ] || [ "$(wc -l <"$WORK/staged-$name.nums")" -ne 5 ]; then
			echo "gpu_run $name: FAILED ($r)"
			tail -5 "$WORK/staged-$name.out"
			bad=$((bad + 1))
			rc=1
		fi
	}
	same() { # NAME REF: NAME's numbers against REF's
		[ -s "$WORK/staged-$1.nums" ] && [ -s "$WORK/staged-$2.nums" ] || return 0
		if paste "$WORK/staged-$1.nums" "$WORK/staged-$2.nums" | awk -v tol="$tol" '
			function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
			NR == 1 && rel($1, $2) > 1e-6 { print "first loss " $1 " against " $2; bad = 1 }
			NR > 1 && rel($1, $2) > tol { print "line " NR ": " $1 " against " $2; bad = 1 }
			$1 != $1 + 0 { print "not a number: " $1; bad = 1 }
			END { exit bad }'; then
			echo "$1 = $2: the same first loss, the rest within $tol"
		else
			echo "$1 against $2: DIFFERENT"
			bad=$((bad + 1))
			rc=1
		fi
	}
	staged fsdp2 2 1 90
	# the reference hung (the watchdog's exit 4, or the limit): every other run takes the same staged path
	case $last in 4 | 124 | 137)
		echo "staged: $n runs, $bad failed or differed (fsdp2, the reference, hung: the rest not run)"
		return 1 ;;
	esac
	# the 4-rank pair first: the only check of HSDP's two groups, kept should the step run out of time
	staged fsdp4 4 1 120
	# shellcheck disable=SC2086
	staged hsdp4 4 2 120 --set policy.sharding=hsdp --set policy.shard_group=2 $set
	# shellcheck disable=SC2086
	staged ddp2 2 1 90 --set policy.sharding=ddp $set
	# shellcheck disable=SC2086
	staged zero2-2 2 1 90 --set policy.sharding=zero2 $set
	# the host thread's queue holds the host optimizer's steps among the staged collectives
	# shellcheck disable=SC2086
	staged offload2 2 1 90 --set policy.offload=optim $set
	# shellcheck disable=SC2086
	staged optim-in-bwd2 2 1 90 --set policy.optim_in_backward=true $set
	same ddp2 fsdp2
	same zero2-2 fsdp2
	same offload2 fsdp2
	same optim-in-bwd2 fsdp2
	same hsdp4 fsdp4
	echo "staged: $n runs, $bad failed or differed"
	return $rc
}

step_compare() {
	local rc=0 runs_abs
	[ -f "$RUNS_FILE" ] || { echo "no runs ($RUNS_FILE): run the runs step first"; return 1; }
	[ -x ./sim ] || { echo "./sim not carried: compare on the build machine (gpu/README.md)"; return 1; }
	if [ -f "$CAL_FILE" ]; then
		echo "== priced by the calibration $CAL_FILE"
		tmo 60 ./sim --compare "$RUNS_FILE" --calibration "$CAL_FILE" >"$RUNS_FILE.compare.txt" || rc=1
		tmo 60 ./sim --compare "$RUNS_FILE" --calibration "$CAL_FILE" --json >"$RUNS_FILE.compare.json" ||
			rc=1
		cat "$RUNS_FILE.compare.txt"
	else
		echo "no calibration ($CAL_FILE): run the calibrate step first"
		rc=1
	fi
	# the catalog alone (no calibration file where ./sim looks for one: an empty directory)
	echo "== priced by the catalog"
	mkdir -p "$WORK/nocal"
	runs_abs=$(realpath "$RUNS_FILE")
	(cd "$WORK/nocal" && tmo 60 "$REPO/sim" --compare "$runs_abs") || rc=1
	return $rc
}

step_hooks() {
	local rc=0 f any=0
	for f in gpu/device_steps.d/*.sh; do
		[ -e "$f" ] || continue
		any=1
		echo "== hook $f"
		OUT="$OUT" LD_LIBRARY_PATH="$HOST_LD_LIBRARY_PATH" tmo 0 bash "$f" "$OUT" \
			>"$LOGS/hook_$(basename "$f" .sh).log" 2>&1 ||
			{ echo "hook $f: FAILED ($?)"; rc=1; }
		tail -5 "$LOGS/hook_$(basename "$f" .sh).log"
	done
	[ $any = 1 ] || echo "no gpu/device_steps.d/*.sh: nothing to run"
	return $rc
}

# The figures a step's log holds, one line for the summary.
figures() {
	local log=$LOGS/$1.log
	case $1 in
	host) grep -m1 -E '^NVIDIA|^name,' "$log" >/dev/null && sed -n '/^name, driver/{n;p;q}' "$log" ;;
	test) grep -E 'passed, [0-9]+ failed|^note cuDNN.s plans|^note attention cuDNN .*(: the backward by|fell back)' "$log" |
		tr '\n' ' ' ;;
	memcheck) grep -E 'passed, [0-9]+ failed|ERROR SUMMARY' "$log" | tr '\n' ' ' ;;
	racecheck) grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|passed, ' "$log" | tr '\n' ' ' ;;
	bench) grep -c 'FAILED' "$log" | sed 's/$/ failed (table below)/' ;;
	runs) grep -E 'runs, [0-9]+ failed' "$log" ;;
	staged) grep -E '^staged: [0-9]+ runs' "$log" ;;
	calibrate) grep -E '^calibration: ' "$log" | tail -1 ;;
	compare) awk '/^== priced by/ { by = $5 } /measured runs? compared/ { printf "%s: %s; ", by, $0 }' "$log" ;;
	*) tail -1 "$log" ;;
	esac
}

run_step() {
	local name=$1 remain budget t0 rc
	remain=$(left)
	if [ -z "${MIN_S[$name]:-}" ]; then
		note "SKIP $name: no such step (steps: ${ALL_STEPS[*]})"
		return
	fi
	if [ "$remain" -lt "${MIN_S[$name]}" ]; then
		note "SKIP $name: ${remain}s of the budget left, it needs at least ${MIN_S[$name]}s: run it in another call"
		say "skip $name (budget)"
		return
	fi
	budget=${MAX_S[$name]}
	[ "$budget" -gt "$remain" ] && budget=$remain
	say "== $name (at most ${budget}s)"
	phase "$name"
	t0=$(date +%s)
	STEP_END=$((t0 + budget)) timeout -k 15 "$budget" bash -c "step_$name" >"$LOGS/$name.log" 2>&1
	rc=$?
	local secs=$(($(date +%s) - t0)) status=OK
	[ $rc -eq 0 ] || status=FAIL
	[ $rc -eq 124 ] || [ $rc -eq 137 ] && status="FAIL (timed out)"
	note "$status $name rc=$rc ${secs}s: $(figures "$name" 2>/dev/null | cut -c1-600)"
	[ -f "$LOGS/$name.table" ] && cat "$LOGS/$name.table" >>"$SUMMARY"
	say "$status $name (${secs}s)"
	tail -n 15 "$LOGS/$name.log"
	sync_out
	pack
}

# The carried archive (gpu/pack.sh: the bundle and the binaries), unpacked into this tree first.
CARRY=${CARRY:-gpu/carry.tar.gz}
UNPACKED="no $CARRY (the bundle and the binaries carried as they are)"
if [ -f "$CARRY" ]; then
	if tar -xzf "$CARRY"; then UNPACKED="unpacked $CARRY"; else UNPACKED="FAILED to unpack $CARRY"; fi
fi
setup_libs
# the GPU's clocks and power for the whole call (a sampler that ends by itself should the call be killed)
CLOCKS_CSV=""
if command -v nvidia-smi >/dev/null 2>&1; then
	CLOCKS_CSV=$LOGS/clocks.csv
	timeout $((BUDGET_S + 120)) nvidia-smi \
		--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
		--format=csv -lms 250 >"$CLOCKS_CSV" 2>/dev/null &
	SMI=$!
	trap 'kill "$SMI" 2>/dev/null' EXIT
fi
export CLOCKS_CSV # the hooks sample none of their own then, and add their commands to PHASES
export -f phase
export -f tmo step_host step_test step_memcheck step_racecheck step_bench step_calibrate step_runs step_compare step_hooks step_staged \
	have_gpu have_device catalog_gpu

{
	echo "device session $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), budget ${BUDGET_S}s"
	echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	echo "python: ${PY:-none}; compute-sanitizer: ${SAN:-none}; mpirun: $(command -v mpirun || echo none)"
	echo "hardware: $HW; calibration $CAL_FILE; runs $RUNS_FILE"
	echo "carried: $UNPACKED"
} >"$SUMMARY"
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${ALL_STEPS[@]}")
for s in "${steps[@]}"; do
	run_step "$s"
done
phase end
if [ -n "$CLOCKS_CSV" ]; then
	kill "$SMI" 2>/dev/null
	wait "$SMI" 2>/dev/null
	if "${PY:-python3}" gpu/clocks.py "$CLOCKS_CSV" "$PHASES" >"$LOGS/clocks.table" 2>&1; then
		{
			echo "the GPU's SM clock and power per phase (logs/clocks.table, gpu/clocks.py):"
			sed 's/^/  /' "$LOGS/clocks.table"
		} >>"$SUMMARY"
	else
		note "WARN gpu/clocks.py: $(tail -1 "$LOGS/clocks.table")"
	fi
fi
sync_out
pack
note "done in $(($(date +%s) - START))s; logs in logs.tar.gz; results: $(cd "$OUT" && ls -- *.h5 *.compare.* 2>/dev/null | tr '\n' ' ')"
echo "======== summary ($SUMMARY)"
cat "$SUMMARY"
rm -rf "$WORK"
exit 0
