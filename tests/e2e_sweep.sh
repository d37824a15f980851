#!/usr/bin/env bash
# e2e_sweep.sh - ./sim's sweeps, the advisor and --policy all, end to end.
#
#   1. every tests/bad_sweeps/*.ini (first line `# expect: <message>`)
#      exits 2 with its message and writes nothing; flags that do not go
#      with --sweep are refused; a comment after a continued value ends it;
#      a global batch that no configuration can make is refused; a file
#      that is not text (a NUL byte, control bytes, CR line ends) is refused;
#      rows as fast as each other keep the sweep's order; --top 1000000 and
#      --memory-budget 1e9 (the bounds) are taken, one past them is not;
#   2. experiments/sweeps/small.ini run alone, and on 1, 2 and 3 MPI ranks:
#      every configuration appears exactly once in each file, the same set
#      with the same figures whatever the rank count, as many as the sweep
#      reports, and a row equals ./sim run on that configuration alone;
#   3. a rank killed mid-sweep (kill -9 of a worker under mpirun), Ctrl-C
#      (SIGINT) of a sweep alone and mpirun stopped (SIGINT to mpirun,
#      which sends its ranks SIGTERM): the file is readable at every
#      moment while the sweep runs, and after it holds the rows done so
#      far, each once, marked interrupted (a killed rank: or running);
#   4. the advisor's pick is the fastest row that fits of its own table,
#      and the minimum of the same constraints swept from a sweep file;
#      the what-if of experiments/sweeps/fabric.ini names the change of
#      the fastest that the rows show, across a value where nothing fits
#      too, and calls no policy a change because fsdp's derived shard
#      group follows the nodes; --sweep --top past the 20 rows kept as it
#      goes prints them all, and --json is valid (a quote in the path) and
#      names each walked row's policy; a calibration axis of "" (the
#      catalog) writes its rows;
#   5. --policy all --out writes a table of every policy;
#   6. an axis of 4,000 values (the most an axis may have) is written whole.
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
. tests/mpi_local.sh
SIM=${SIM:-./sim}
SIM=$(realpath "$SIM")
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   sweep $1"; pass=$((pass + 1)); }
bad() { echo "FAIL sweep $1: $2"; fail=$((fail + 1)); }

# ---- 1. bad sweep files and flags ----------------------------------------------
for f in tests/bad_sweeps/*.ini; do
	expect=$(head -n 1 "$f" | sed -n 's/^# expect: //p')
	rm -rf "$tmp/run" && mkdir "$tmp/run"
	(cd "$tmp/run" && timeout 20 "$SIM" --sweep "$OLDPWD/$f" --out "$tmp/run/o.h5") >"$tmp/out" 2>"$tmp/err" </dev/null
	rc=$?
	if [ $rc = 2 ] && grep -qF -- "$expect" "$tmp/err" && [ -z "$(ls -A "$tmp/run")" ]; then
		ok "bad/$(basename "$f")"
	else
		bad "bad/$(basename "$f")" "exit $rc, $(head -2 "$tmp/err" | tr '\n' ' ') $(ls -A "$tmp/run")"
	fi
done
flag_case() { # NAME EXPECTED ARGS...
	local name=$1 expect=$2
	shift 2
	timeout 20 "$SIM" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	local rc=$?
	[ $rc = 2 ] && grep -qF -- "$expect" "$tmp/err" && ok "$name" || bad "$name" "exit $rc, $(head -2 "$tmp/err")"
}
flag_case "--sweep with an experiment flag" "--sweep: '--nodes' is not allowed here" \
	--sweep experiments/sweeps/small.ini --nodes 4
flag_case "--sweep with --policy all" "--sweep and --policy all cannot be used together" \
	--sweep experiments/sweeps/small.ini --policy all
flag_case "--what-if without --advise" "--what-if needs --advise" experiments/llama3.ini --what-if cluster.nodes=1,2
flag_case "--what-if on a policy key" "policy.sharding is not a resource" \
	experiments/llama3.ini --advise --what-if policy.sharding=fsdp,hsdp
flag_case "--memory-budget alone" "--memory-budget needs --policy all, --sweep or --advise" \
	experiments/llama3.ini --memory-budget 40
flag_case "--what-if's message names the flag" "--what-if cluster.inter_gbps: cluster.inter_gbps = 1 is listed twice" \
	experiments/tiny.ini --advise --what-if cluster.inter_gbps=1,1
flag_case "--what-if over more values than an axis holds" "cluster.inter_gbps has more than 4000 values" \
	experiments/tiny.ini --advise --what-if cluster.inter_gbps=1..4001
flag_case "--policy all with a sharding" "--policy all and --policy fsdp given together" \
	experiments/tiny.ini --policy all --policy fsdp
flag_case "a sharding with --policy all after it" "--policy all and --set policy.sharding=ddp given together" \
	experiments/tiny.ini --set policy.sharding=ddp --policy all
# a global batch no configuration can make is bad input, whichever way it is explored
flag_case "--global-batch no configuration makes (--advise)" "global batch 3: no configuration makes it" \
	experiments/tiny.ini --advise --global-batch 3
flag_case "--global-batch no configuration makes (--policy all)" "global batch 3: no configuration makes it" \
	experiments/tiny.ini --policy all --global-batch 3
flag_case "--global-batch no configuration makes (--sweep)" "global batch 3: no configuration makes it" \
	--sweep experiments/sweeps/small.ini --global-batch 3
# a sweep file is text: a NUL byte cut the line (nodes = 1 swept alone), control bytes reached the
# terminal in the messages quoting them, CR-only line ends read as one line
text_case() { # NAME EXPECTED PRINTF-FORMAT: the sweep file that printf writes from FORMAT and tiny's path
	local name=$1 expect=$2
	printf "$3" "$(realpath experiments/tiny.ini)" >"$tmp/text.ini"
	rm -rf "$tmp/run" && mkdir "$tmp/run"
	(cd "$tmp/run" && timeout 20 "$SIM" --sweep "$tmp/text.ini" --out "$tmp/run/o.h5") >"$tmp/out" 2>"$tmp/err" </dev/null
	local rc=$?
	if [ $rc = 2 ] && grep -qF -- "$expect" "$tmp/err" && [ -z "$(ls -A "$tmp/run")" ] &&
		[ "$(LC_ALL=C tr -d '\n\t -~\200-\377' <"$tmp/err" | wc -c)" = 0 ]; then
		ok "$name"
	else
		bad "$name" "exit $rc, $(head -2 "$tmp/err" | cat -v | tr '\n' ' ') $(ls -A "$tmp/run")"
	fi
}
text_case "a NUL byte in a line" "text.ini:4: line holds a NUL byte: a sweep file is text" \
	'[sweep]\nexperiment = %s\n[cluster]\nnodes = 1\0, 2\n'
text_case "control bytes in a line" "text.ini:4: line holds the control character 0x1b: a sweep file is text" \
	'[sweep]\nexperiment = %s\n[cluster]\nno\033[31mdes = 1, 2\n'
text_case "CR line endings" "text.ini:1: line holds a carriage return (CR) that no line feed follows" \
	'[sweep]\rexperiment = %s\r[cluster]\rnodes = 1, 2\r'
# good_case NAME FORMAT: a sweep of tiny.ini (printf FORMAT, %s the experiment) has 3 configurations
good_case() {
	printf "$2" "$(realpath experiments/tiny.ini)" >"$tmp/good.ini"
	if "$SIM" --sweep "$tmp/good.ini" >"$tmp/out" 2>"$tmp/err" </dev/null &&
		grep -q "3 configurations of 3 candidates" "$tmp/err" "$tmp/out"; then
		ok "$1"
	else
		bad "$1" "$(head -2 "$tmp/out" "$tmp/err")"
	fi
}
# a comment after a value continued on an indented line ends the value, as on a key's line
good_case "a comment on a continued line" \
	'[sweep]\nexperiment = %s\n[policy]\nsharding = fsdp, zero2,\n  ddp            ; continued\n'
# a range of large integers counts exactly: 1e15..1e15+2 is three values, not a thousand
good_case "a range of large integers" '[sweep]\nexperiment = %s\n[run]\nseed = 1000000000000000..1000000000000002\n'

# configurations as fast as each other keep the sweep's order: seeds 3, 1, 2 price alike
printf '[sweep]\nexperiment = %s\n[run]\nseed = 3, 1, 2\n' "$(realpath experiments/tiny.ini)" >"$tmp/seeds.ini"
if "$SIM" --sweep "$tmp/seeds.ini" >"$tmp/out" 2>&1 </dev/null &&
	[ "$(awk '/^ +[0-9]+ +[0-9.]+ / { printf "%s ", $NF }' "$tmp/out")" = "seed=3 seed=1 seed=2 " ]; then
	ok "equal step times ranked in the sweep's order"
else
	bad "equal step times ranked in the sweep's order" "$(awk '/^ +[0-9]+ +[0-9.]+ /' "$tmp/out" | tr '\n' ' ')"
fi
# the flags' bounds are allowed, and one past them is not
if "$SIM" experiments/tiny.ini --policy all --top 1000000 --memory-budget 1e9 >/dev/null 2>"$tmp/err"; then
	ok "--top 1000000 and --memory-budget 1e9 (the bounds) are taken"
else
	bad "the flags' bounds" "$(head -2 "$tmp/err")"
fi
flag_case "--top 1000001" "--top: '1000001' is not an integer from 1 to 1000000" experiments/tiny.ini --policy all \
	--top 1000001
flag_case "--memory-budget 1.1e9" "--memory-budget: '1.1e9' is not a number of GiB" experiments/tiny.ini --policy all \
	--memory-budget 1.1e9
flag_case "--global-batch 1 (a count it takes, no configuration makes)" "global batch 1: no configuration makes it" \
	experiments/tiny.ini --policy all --global-batch 1

# ---- 2. every configuration once, whatever the ranks ---------------------------
small=experiments/sweeps/small.ini
"$SIM" --sweep $small --json --out "$tmp/r0.h5" >"$tmp/r0.json" 2>"$tmp/r0.err"
rc0=$?
for np in 1 2 3; do
	"${MPIRUN[@]}" -np $np "$SIM" --sweep $small --json --out "$tmp/r$np.h5" >"$tmp/r$np.json" 2>"$tmp/r$np.err" </dev/null
	[ $? = 0 ] || bad "small on $np ranks" "exit status $?: $(head -3 "$tmp/r$np.err")"
done
if [ $rc0 = 0 ] && $PY - "$tmp" <<'PY'
import h5py, json, numpy as np, sys
d = sys.argv[1]
tables = {}
for k in "0123":
    j = json.load(open(f"{d}/r{k}.json"))
    g = h5py.File(f"{d}/r{k}.h5", "r")["sweeps/000000"]
    rows = g["configs"][()]
    assert g.attrs["status"] == "complete", g.attrs["status"]
    assert len(rows) == j["configurations"] == g.attrs["rows"], (len(rows), j["configurations"])
    skipped = j["skipped_invalid"] + j["skipped_duplicate"] + j["skipped_off_batch"]
    assert j["configurations"] + skipped == j["candidates"] == 216, j
    assert len(np.unique(rows["index"])) == len(rows), "a configuration twice"
    assert j["ranks"] == (1 if k == "0" else int(k)), j["ranks"]
    tables[k] = np.sort(rows, order="index")
for k in "123":
    assert (tables[k] == tables["0"]).all(), f"{k} ranks differ from one"

PY
then ok "small.ini: every configuration once, the same rows alone and on 1, 2 and 3 ranks"
else bad "small.ini on 1 to 3 ranks" "$(tail -3 "$tmp/r0.err")"; fi

# a row equals the configuration run on its own
row=$($PY - "$tmp/r2.h5" <<'PY'
import h5py, numpy as np, sys
r = np.sort(h5py.File(sys.argv[1], "r")["sweeps/000000/configs"][()], order="index")
x = r[len(r) // 2]
s = lambda v: v.decode() if isinstance(v, bytes) else v
print(int(x["cluster.nodes"]), x["cluster.inter_gbps"], s(x["policy.sharding"]), s(x["policy.accum"]),
      s(x["policy.reshard"]), int(x["policy.microbatches"]), repr(float(x["step_time_s"])), int(x["peak_reserved_bytes"]))
PY
)
read -r nodes inter sharding accum reshard mb step peak <<<"$row"
one=$("$SIM" experiments/llama3.ini --nodes "$nodes" --inter-gbps "$inter" --policy "$sharding" --accum "$accum" \
	--reshard "$reshard" --microbatches "$mb" --json)
if $PY -c "
import json, sys
j = json.loads(sys.argv[1]); step, peak = float(sys.argv[2]), int(sys.argv[3])
assert abs(j['step_time_s'] - step) <= 1e-8 * step and j['peak_reserved_bytes'] == peak, (j['step_time_s'], step)  # --json: 9 digits
" "$one" "$step" "$peak"; then
	ok "a row equals ./sim on that configuration ($sharding $accum, $nodes nodes, $inter GB/s)"
else
	bad "row against ./sim" "$row"
fi

# ---- 3. killed and interrupted -------------------------------------------------
# every policy of 8b: far longer than the checks wait
long=experiments/sweeps/policies_8b.ini
watch() { # FILE: open the file again and again while the sweep runs; rows never go down
	$PY - "$1" "$2" <<'PY'
import h5py, os, sys, time
path, pidfile = sys.argv[1], sys.argv[2]
last, opened, t0 = 0, 0, time.time()
while time.time() - t0 < 120:
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            n = len(f["sweeps/000000/configs"])
            assert n >= last, (n, last)
            last, opened = n, opened + 1
        if last > 0 and opened >= 3:
            break
    time.sleep(0.2)
print(last)
PY
}
"${MPIRUN[@]}" -np 3 "$SIM" --sweep $long --out "$tmp/k.h5" >"$tmp/k.out" 2>"$tmp/k.err" </dev/null &
job=$!
if seen=$(watch "$tmp/k.h5" x) && [ "$seen" -gt 0 ]; then
	victim=$(pgrep -P "$job" -x sim | tail -1)
	[ -z "$victim" ] && victim=$(pgrep -f "sim --sweep $long" | grep -v "^$job$" | tail -1)
	kill -9 "$victim" 2>/dev/null
fi
wait $job
krc=$?
if [ $krc != 0 ] && $PY - "$tmp/k.h5" <<'PY'
import h5py, numpy as np, sys
g = h5py.File(sys.argv[1], "r")["sweeps/000000"]
rows = g["configs"][()]
assert len(rows) > 0 and len(np.unique(rows["index"])) == len(rows)
assert g.attrs["rows"] == len(rows) and g.attrs["status"] in ("interrupted", "running"), g.attrs["status"]
assert len(rows) < g.attrs["candidates"]
PY
then ok "a rank killed mid-sweep: the file holds the rows done so far, each once (exit $krc)"
else bad "killed rank" "exit $krc, $(tail -2 "$tmp/k.err")"; fi

"$SIM" --sweep $long --out "$tmp/i.h5" >"$tmp/i.out" 2>"$tmp/i.err" </dev/null &
job=$!
watch "$tmp/i.h5" x >/dev/null
kill -INT $job
wait $job
irc=$?
if [ $irc = 130 ] && grep -q "interrupted (SIGINT)" "$tmp/i.err" && $PY - "$tmp/i.h5" <<'PY'
import h5py, numpy as np, sys
g = h5py.File(sys.argv[1], "r")["sweeps/000000"]
rows = g["configs"][()]
assert g.attrs["status"] == "interrupted" and g.attrs["rows"] == len(rows) > 0
assert len(np.unique(rows["index"])) == len(rows)
PY
then ok "Ctrl-C: exit 130, the rows so far written and marked interrupted"
else bad "Ctrl-C" "exit $irc, $(tail -2 "$tmp/i.err")"; fi

# mpirun itself stopped (Ctrl-C reaching mpirun, which sends the ranks SIGTERM): rank 0 writes the rows so far,
# marked interrupted, before the job ends; the workers leave the signal to it (a worker dying of it first had
# mpirun kill rank 0 before its last write, the file left "running")
"${MPIRUN[@]}" -np 2 "$SIM" --sweep $long --out "$tmp/m.h5" >"$tmp/m.out" 2>"$tmp/m.err" </dev/null &
job=$!
watch "$tmp/m.h5" x >/dev/null
kill -INT $job
wait $job
if grep -q "sweep: interrupted (SIG[A-Z]*) after [0-9]* of" "$tmp/m.err" && $PY - "$tmp/m.h5" <<'PY'
import h5py, numpy as np, sys
g = h5py.File(sys.argv[1], "r")["sweeps/000000"]
rows = g["configs"][()]
assert g.attrs["status"] == "interrupted", g.attrs["status"]
assert g.attrs["rows"] == len(rows) > 0 and len(np.unique(rows["index"])) == len(rows)
PY
then ok "mpirun stopped mid-sweep: the rows so far written and marked interrupted"
else bad "mpirun stopped" "$(grep sweep: "$tmp/m.err" | tail -2)"; fi

# ---- 4. the advisor --------------------------------------------------------------
"$SIM" experiments/llama3.ini --advise --memory-budget 40 --json --out "$tmp/a.h5" >"$tmp/a.json" 2>"$tmp/a.err"
arc=$?
printf '[sweep]\nexperiment = %s\npolicies = all\nmemory_budget_gib = 40\n' "$(realpath experiments/llama3.ini)" >"$tmp/same.ini"
"$SIM" --sweep "$tmp/same.ini" --json --out "$tmp/s.h5" >"$tmp/s.json" 2>"$tmp/s.err"
src=$?
if [ $arc = 0 ] && [ $src = 0 ] && $PY - "$tmp" <<'PY'
import h5py, json, numpy as np, sys
d = sys.argv[1]
a = json.load(open(f"{d}/a.json"))
best = a["best"]
def fastest(path):
    r = h5py.File(path, "r")["sweeps/000000/configs"][()]
    fit = r[(r["fits"] == 1) & np.isfinite(r["step_time_s"])]
    m = fit["step_time_s"].min()
    return m, int(fit["index"][fit["step_time_s"] == m].min()), len(r)
m, i, n = fastest(f"{d}/a.h5")
assert best["step_time_s"] == m and best["index"] == i, (best, m, i)
assert best["peak_reserved_bytes"] <= 40 * 2**30
s_m, s_i, s_n = fastest(f"{d}/s.h5")
assert s_m == m and s_i == i and s_n == n, (s_m, s_i, s_n, m, i, n)
assert a["runners_up"] and all(r["step_time_s"] >= m for r in a["runners_up"])
front = a["pareto"]
assert all(x["step_time_s"] > y["step_time_s"] and x["peak_reserved_bytes"] <= y["peak_reserved_bytes"]
           for x, y in zip(front, front[1:])), "the front is not a front"
PY
then ok "--advise: the pick is the fastest that fits of its table and of the same sweep from a file"
else bad "--advise pick" "exit $arc/$src, $(tail -2 "$tmp/a.err") $(tail -2 "$tmp/s.err")"; fi

"$SIM" --sweep experiments/sweeps/fabric.ini --advise --json --out "$tmp/f.h5" >"$tmp/f.json" 2>"$tmp/f.err"
if [ $? = 0 ] && $PY - "$tmp" <<'PY'
import h5py, json, numpy as np, sys
d = sys.argv[1]
w = json.load(open(f"{d}/f.json"))["what_if"]
r = h5py.File(f"{d}/f.h5", "r")["sweeps/000000/configs"][()]
fam = lambda v: v.decode() if isinstance(v, bytes) else v
winners = []
for v in w["values"]:
    at = r[(r[w["key"]] == float(v["value"])) & (r["fits"] == 1) & np.isfinite(r["step_time_s"])]
    assert v["best_step_time_s"] == at["step_time_s"].min()
    winners.append(fam(at["policy.sharding"][at["step_time_s"].argmin()]))
    for sh, t in v["by_sharding"].items():
        assert t == at[np.array([fam(x) == sh for x in at["policy.sharding"]])]["step_time_s"].min()
assert winners[0] == "hsdp" and winners[-1] == "fsdp", winners
PY
then ok "what-if over the fabric: the fastest at each NIC speed is the rows' minimum (hsdp, then fsdp)"
else bad "what-if" "$(tail -2 "$tmp/f.err")"; fi

# ---- 5. --policy all --out ---------------------------------------------------------
"$SIM" experiments/tiny.ini --policy all --top 1 --out "$tmp/p.h5" >"$tmp/p.out" 2>&1
if [ $? = 0 ] && grep -q "rows: $tmp/p.h5, /sweeps/000000" "$tmp/p.out" && $PY -c "
import h5py, sys
g = h5py.File(sys.argv[1], 'r')['sweeps/000000']
assert len(g['configs']) == 1728 and g.attrs['policies'] == 'all' and g.attrs['status'] == 'complete'
" "$tmp/p.h5"; then ok "--policy all --out: 1728 rows for tiny"
else bad "--policy all --out" "$(tail -3 "$tmp/p.out")"; fi

# ---- 6. an axis of as many values as an axis may have ---------------------------------
# its values are one attribute of the sweep's group: 4,000 of them fit the object header
printf '[sweep]\nexperiment = %s\n\n[cluster]\ninter_gbps = 1..4000\n' "$PWD/experiments/tiny.ini" >"$tmp/big.ini"
"$SIM" --sweep "$tmp/big.ini" --out "$tmp/big.h5" >"$tmp/big.out" 2>"$tmp/big.err"
if [ $? = 0 ] && [ ! -s "$tmp/big.err" ] && $PY -c "
import h5py, sys
g = h5py.File(sys.argv[1], 'r')['sweeps/000000']
v = g.attrs['values.cluster.inter_gbps']
assert len(v) == 4000 and len(g['configs']) == 4000 and g.attrs['status'] == 'complete', (len(v), len(g['configs']))
" "$tmp/big.h5"; then ok "an axis of 4000 values: its values and 4000 rows in the file"
else bad "an axis of 4000 values" "$(head -3 "$tmp/big.err")"; fi

# ---- 7. a sweep too large to run in passing: said before it runs ----------------------------
# 4,000 x 300 pricing values, 1.2 million candidates: the count, and how to stop or shrink it, is the
# first line on stderr (it ran minutes with no word for its first 10 s); stopped at once (SIGTERM: a
# background job ignores SIGINT until the sweep's handler is set, which may be after the line)
printf '[sweep]\nexperiment = %s\n[cluster]\ninter_gbps = 1..4000\nintra_gbps = 1..300\n' \
	"$PWD/experiments/tiny.ini" >"$tmp/huge.ini"
"$SIM" --sweep "$tmp/huge.ini" >"$tmp/huge.out" 2>"$tmp/huge.err" </dev/null &
job=$!
for _ in $(seq 100); do [ -s "$tmp/huge.err" ] && break; sleep 0.1; done
kill -TERM $job 2>/dev/null
wait $job
hrc=$?
if { [ $hrc = 130 ] || [ $hrc = 143 ]; } && head -1 "$tmp/huge.err" | grep -qF "sweep: $tmp/huge.ini: 1200000 candidates (1200000 combinations of the axes); Ctrl-C stops it and keeps the rows done; mpirun -np N shares it, fewer values make it smaller"; then
	ok "1.2 million candidates: the count said before the sweep runs"
else
	bad "a huge sweep" "exit $hrc, $(head -2 "$tmp/huge.err")"
fi
# a pick that fits only by flushing PyTorch's cache at the GPU's memory says so (llama3-8b's shapes, 2 blocks, on
# 20 GiB: 19.6 GiB reserved, 2 flushes a step), the count as ./sim's own report gives it; with room (28 GiB), nothing
flushes() { # HBM_GIB: the text's line, then --json's alloc_retries_step
	"$SIM" --model llama3-8b --layers 2 --runtime pytorch --hbm-gib "$1" --advise 2>/dev/null | grep "^  at the GPU's memory"
	"$SIM" --model llama3-8b --layers 2 --runtime pytorch --hbm-gib "$1" --advise --json 2>/dev/null |
		/usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["best"]["alloc_retries_step"])'
}
tight=$(flushes 20)
roomy=$(flushes 28)
if [ "$tight" = "  at the GPU's memory, allocator: 2 cache flushes a step, 23 over the run's 12 steps (PyTorch's num_alloc_retries), each a device synchronization
2" ] && [ "$roomy" = 0 ]; then
	ok "--advise: a pick that flushes the cache at the GPU's memory says how often"
else
	bad "--advise's flushes" "on 20 GiB: '$tight'; on 28 GiB: '$roomy'"
fi
# a runner-up as fast as the pick, whose parts move a lot but offset each other (llama3-8b on one GPU, its host
# optimizer the critical path; full checkpointing: as much more recompute as less exposed host copies), says
# what moved, not that nothing moved by a millisecond
eq=$("$SIM" experiments/llama3.ini --nodes 1 --gpus-per-node 1 --advise --top 3 2>&1 | grep "checkpointing full instead of none:")
if echo "$eq" | grep -q '(+0.0000 s, +0.0%): checkpointing full instead of none: 0.[0-9]* s more recompute, 0.[0-9]* s less exposed host copies, which offset each other;'; then
	ok "--advise: a runner-up of the same step names the parts that offset each other"
else
	bad "--advise's offsetting parts" "'$eq'"
fi
# a what-if whose values leave out the base's own (79.6 GiB): the advice in full at the nearest listed (80, not
# the first, 10, where nothing fits), said so; the same policy fastest wherever one fits, not "at every value"
wi=$("$SIM" experiments/llama3.ini --advise --what-if cluster.hbm_gib=10,80,120 2>&1)
if echo "$wi" | grep -qx "at hbm_gib = 80 (of the values listed, the nearest this experiment's 79.6):" &&
	echo "$wi" | grep -qx "  the fastest is the same policy at every value where one fits" &&
	! echo "$wi" | grep -qx "  the fastest is the same policy at every value"; then
	ok "--what-if without the base's value: the advice at the nearest listed, nothing claimed where nothing fits"
else
	bad "--what-if without the base's value" "$(echo "$wi" | grep -n "same policy\|^at ")"
fi
# where the fastest changes: from each value where one fits to the next where one fits (a value where nothing
# fits between two others did hide a change), and a what-if over the nodes does not call the same policy a
# change because the shard group fsdp derives follows the world
wi=$("$SIM" experiments/llama3.ini --layers 2 --advise --memory-budget 12 --what-if 'model.seq=2048,131072,16384' 2>&1)
wn=$("$SIM" experiments/llama3.ini --layers 2 --advise --what-if 'cluster.nodes=1,2' 2>&1)
if echo "$wi" | grep -q "^    between 2048 and 16384: " && ! echo "$wi" | grep -q "the fastest is the same policy" &&
	echo "$wn" | grep -qx "  the fastest is the same policy at every value" && ! echo "$wn" | grep -q "^    between"; then
	ok "--what-if: a change across a value where nothing fits said; the same policy on 1 and 2 nodes not a change"
else
	bad "--what-if's changes" "$(echo "$wi" | grep -n "same policy\|between"); $(echo "$wn" | grep -n "same policy\|between")"
fi
# --top past the 20 rows a sweep keeps as it goes: all of them, fastest first, the same order as the first 20;
# --json one valid object, a path with a quote in it escaped, each walked row named by its policy
mkdir -p "$tmp/q\"d"
printf '[sweep]\nexperiment = %s/experiments/llama3.ini\npolicies = all\n[model]\nlayers = 2\n' "$PWD" >"$tmp/q\"d/w.ini"
"$SIM" --sweep "$tmp/q\"d/w.ini" --top 25 >"$tmp/top25.txt" 2>/dev/null
"$SIM" --sweep "$tmp/q\"d/w.ini" --top 20 >"$tmp/top20.txt" 2>/dev/null
"$SIM" --sweep "$tmp/q\"d/w.ini" --top 25 --json >"$tmp/top25.json" 2>/dev/null
if [ "$(grep -c '^ *[0-9]* *[0-9.]* *[0-9.]* .*GiB  fsdp\|^ *[0-9]* *[0-9.]* *[0-9.]* .*GiB  zero2\|^ *[0-9]* *[0-9.]* *[0-9.]* .*GiB  hsdp\|^ *[0-9]* *[0-9.]* *[0-9.]* .*GiB  ddp' "$tmp/top25.txt")" = 25 ] &&
	[ "$(grep -A20 '^rank' "$tmp/top20.txt")" = "$(grep -A20 '^rank' "$tmp/top25.txt")" ] &&
	/usr/bin/python3 - "$tmp/top25.json" "$tmp/q\"d/w.ini" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["sweep"] == sys.argv[2], d["sweep"]
f = d["fastest"]
assert len(f) == 25 and d["interrupted"] is False
assert all(r["configuration"].split(" ")[0] in ("ddp", "fsdp", "zero2", "hsdp") for r in f), f[0]
assert [r["step_time_s"] for r in f] == sorted(r["step_time_s"] for r in f)
EOF
then
	ok "--sweep --top 25: 25 rows, the first 20 as --top 20's; --json valid, the path escaped, the policies named"
else
	bad "--sweep --top past 20" "$(wc -l <"$tmp/top25.txt") lines; $(head -c 200 "$tmp/top25.json")"
fi
# a calibration axis of "" (the catalog, as none): the rows written as for none
printf '[sweep]\nexperiment = %s/experiments/llama3.ini\n[model]\nlayers = 2\n[cluster]\ncalibration = ""\n' "$PWD" \
	>"$tmp/cal.ini"
if "$SIM" --sweep "$tmp/cal.ini" --out "$tmp/cal.h5" >/dev/null 2>"$tmp/cal.err" &&
	/usr/bin/python3 -c '
import sys, h5py
g = h5py.File(sys.argv[1], "r")["sweeps"]
rows = g[list(g)[0]]["configs"]
assert len(rows) == 1, len(rows)' "$tmp/cal.h5"; then
	ok "a calibration axis of \"\": the catalog, its row written"
else
	bad "a calibration axis of \"\"" "$(head -2 "$tmp/cal.err")"
fi
# the policy walk counted in 1,000 combinations of the axes (seconds): a line once it takes a second
printf '[sweep]\npolicies = all\n[cluster]\nnodes = 1..1000\n' >"$tmp/count.ini"
"$SIM" --sweep "$tmp/count.ini" >"$tmp/count.out" 2>"$tmp/count.err" </dev/null &
job=$!
for _ in $(seq 200); do [ -s "$tmp/count.err" ] && break; sleep 0.1; done
kill -TERM $job 2>/dev/null
wait $job
if grep -q "^sweep: counting the policy walk: [0-9]* of 1000 combinations of the axes (.*%), [0-9]* candidates so far, ETA" \
	"$tmp/count.err"; then
	ok "counting the policy walk in 1000 combinations: said while it counts"
else
	bad "counting the walk" "$(head -2 "$tmp/count.err")"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
