#!/usr/bin/env bash
# e2e_calibration.sh - calibration files that are no measurement are
# refused, end to end. Damaged copies of data/calibration/amd-epyc-2-cores-cpu.h5
# (made with h5py; the tiny model on 16 GPUs reads its sessions of 16 ranks:
# 000006 and 000007, and those make validate --emulate appended since, which a
# damage that must leave no 16-rank measurement standing reaches too):
#
#   1. each damage (a time that is NaN, infinite, negative, 0 or over an
#      hour, a size of 0, a pass traffic of 0 or NaN, a table without a field, an attribute of many
#      values, a session without attributes, sessions of two machines that
#      would merge, no collective the schedule needs, a backend no runtime
#      has, quoted escaped) exits 2 with one line
#      naming the file, the session group, table, row and field, and what
#      is allowed; never an assertion, never a step time;
#   2. a valid copy with a session of another world size added prices as
#      the original does; passes of 200k rows in each session merged read
#      in seconds (merging sorts);
#   3. a sweep axis, --what-if or --compare naming an unreadable or invalid
#      calibration exits 2 before anything runs, naming the file and the
#      axis; a sweep over two valid ones runs; none is the catalog's
#      constants, alone or as an axis value beside a file;
#   4. FILE@NNNNNN: a session the file lacks exits 2, naming its last; a
#      damaged later session is not read; ./sim --out records the newest.
# One line per check, then `N passed, N failed`; non-zero exit on failure.
set -u
cd "$(dirname "$0")/.."
SIM=${SIM:-./sim}
PY=/usr/bin/python3
CAL=data/calibration/amd-epyc-2-cores-cpu.h5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok   calibration $1"; pass=$((pass + 1)); }
bad() { echo "FAIL calibration $1: $2"; fail=$((fail + 1)); }

# ---- the damaged copies -------------------------------------------------------------------
if ! "$PY" - "$CAL" "$tmp" <<'EOF'; then
import shutil, sys
import h5py, numpy as np

src, tmp = sys.argv[1], sys.argv[2]
# a session name the file does not have yet, and its sessions of 16 ranks, which ./sim --model tiny
# (2 x 8) merges: make validate appends sessions, so the newest is read from the file
with h5py.File(src, "r") as f:
    NEW = "%06d" % len(f["calibration"])
    S16 = [k for k in sorted(f["calibration"]) if int(f["calibration"][k].attrs["ranks"]) == 16]
open(tmp + "/new_session", "w").write(NEW)
open(tmp + "/newest16", "w").write(S16[-1])

def make(name, damage):
    path = "%s/%s.h5" % (tmp, name)
    shutil.copy(src, path)
    with h5py.File(path, "a") as f:
        damage(f["calibration"])

def attr(session, key, value):
    return lambda c: c[session].attrs.__setitem__(key, value)

def row(session, table, i, field, value):
    def damage(c):
        d = c[session][table]
        a = d[()]
        a[field][i] = value
        d[...] = a
    return damage

def drop_field(session, table, field):
    def damage(c):
        g = c[session]
        a = g[table][()]
        names = [n for n in a.dtype.names if n != field]
        del g[table]
        g.create_dataset(table, data=a[names])
    return damage

def empty(table):
    def damage(c):
        for s in S16:
            dt = c[s][table].dtype
            del c[s][table]
            c[s].create_dataset(table, data=np.zeros(0, dtype=dt))
    return damage

def every_session(key, value):
    def damage(c):
        for g in c.values():
            g.attrs[key] = value
    return damage

def machine(c):
    c["000006"].attrs["hardware"] = "h100"
    c["000006"].attrs["backend"] = "cuda"

def other_world(c):  # a valid session of 3 ranks: the 16-rank run does not read it
    c.copy(c["000007"], NEW)
    g = c[NEW]
    g.attrs["ranks"] = np.int32(3)
    a = g["collectives"][()]
    a["ranks"] = 3
    del g["collectives"]
    g.create_dataset("collectives", data=a)

def big_passes(c):  # 200k pass sizes in each session the run merges
    for s in S16:
        a = np.zeros(200000, dtype=c[s]["passes"].dtype)
        a["bytes"] = np.arange(1, 200001, dtype=np.uint64) * 4096
        a["ns"] = 100 + 0.25 * a["bytes"].astype(float)
        del c[s]["passes"]
        c[s].create_dataset("passes", data=a)

make("issue_neg", attr("000007", "issue_ns", -1e6))
make("wake_neg", attr("000007", "wake_ns", -5000.0))
make("issue_nan", attr("000007", "issue_ns", float("nan")))
make("wake_inf", attr("000007", "wake_ns", float("inf")))
make("issue_huge", attr("000007", "issue_ns", 1e300))
make("dispatch_nan", attr("000006", "dispatch_ns", float("nan")))
make("fused_neg", attr("000007", "adamw_fused_ns_per_elem", -0.5))
make("traffic_zero", attr("000007", "pass_traffic", 0.0))
make("traffic_nan", attr("000006", "pass_traffic", float("nan")))
make("kernel_nan", row("000007", "kernels", 3, "ns", float("nan")))
make("gemm_neg", row("000007", "gemm", 5, "ns", -3.0))
make("pass_zero", row("000007", "passes", 2, "ns", 0.0))
make("pass_bytes0", row("000007", "passes", 2, "bytes", 0))
make("coll_huge", row("000007", "collectives", 1, "ns", 1e300))
make("coll_inf", row("000006", "collectives", 1, "ns", float("inf")))
make("copy_neg", row("000040", "copies", 3, "ns", -1.0))
make("old_session", row("000000", "kernels", 0, "ns_comm", float("nan")))
make("no_ns", drop_field("000007", "passes", "ns"))
make("no_colls", empty("collectives"))
make("colls_2_ranks", lambda c: [row(s, "collectives", slice(None), "ranks", 2)(c) for s in S16])
make("machine", machine)
make("ranks_array", every_session("ranks", np.arange(100, dtype=np.int32)))
make("no_attrs", lambda c: c.create_group(NEW))
make("backend_unknown", every_session("backend", "cdua"))
make("backend_escape", every_session("backend", "cu\x1b[2Jda"))
make("other_world", other_world)
make("big_passes", big_passes)
EOF
	bad "damaged copies" "h5py could not make them"
	echo "$pass passed, $fail failed"
	exit 1
fi

# ---- 1. each refused: exit 2, one line, its message ------------------------------------------
# name|what the message says
cases=(
	"issue_neg|/calibration/000007: attribute issue_ns = -1e+06 (allowed: finite, >= 0 and at most 3.6e+12 ns, an hour)"
	"wake_neg|/calibration/000007: attribute wake_ns = -5000 (allowed: finite, >= 0"
	"issue_nan|/calibration/000007: attribute issue_ns = nan"
	"wake_inf|/calibration/000007: attribute wake_ns = inf"
	"issue_huge|/calibration/000007: attribute issue_ns = 1e+300"
	"dispatch_nan|/calibration/000006: attribute dispatch_ns = nan"
	"fused_neg|/calibration/000007: attribute adamw_fused_ns_per_elem = -0.5 (allowed: finite, > 0 and at most 1e+06 ns per element)"
	"traffic_zero|/calibration/000007: attribute pass_traffic = 0 (allowed: above 0 and at most 8, the bytes of traffic per byte of a pass's label; without it 1.5, data/README.md)"
	"traffic_nan|/calibration/000006: attribute pass_traffic = nan (allowed: above 0"
	"kernel_nan|/calibration/000007: kernels row 3: ns = nan (allowed: finite, > 0 and at most 3.6e+12 ns, an hour)"
	"gemm_neg|/calibration/000007: gemm row 5: ns = -3 (allowed: finite, > 0"
	"pass_zero|/calibration/000007: passes row 2: ns = 0 (allowed: finite, > 0"
	"pass_bytes0|/calibration/000007: passes row 2: bytes = 0 (allowed: 1 to 2^50"
	"coll_huge|/calibration/000007: collectives row 1: ns = 1e+300"
	"coll_inf|/calibration/000006: collectives row 1: ns = inf"
	"copy_neg|/calibration/000040: copies row 3: ns = -1"
	"old_session|/calibration/000000: kernels row 0: ns_comm = nan (allowed: finite, >= 0"
	"no_ns|/calibration/000007: passes has no field ns (its fields: bytes, ns)"
	"no_colls|no allgather over 16 ranks measured (sessions of 16 ranks, newest /calibration/$(cat "$tmp/newest16"))"
	"colls_2_ranks|no allgather over 16 ranks measured"
	"machine|sessions /calibration/$(cat "$tmp/newest16") (amd-epyc-2-cores, cpu) and /calibration/000006 (h100, cuda) of 16 ranks would merge, but are different machines"
	"ranks_array|/calibration/000000: attribute ranks holds 100 values where one is expected"
	"no_attrs|/calibration/$(cat "$tmp/new_session"): no attribute ranks"
	"backend_unknown|/calibration/000000: attribute backend = 'cdua' (allowed: cpu|cuda|pytorch; did you mean 'cuda'?)"
	"backend_escape|/calibration/000000: attribute backend = 'cu\x1b[2Jda' (allowed: cpu|cuda|pytorch; did you mean 'cuda'?)"
)
for c in "${cases[@]}"; do
	name=${c%%|*} want=${c#*|}
	timeout 20 "$SIM" --model tiny --calibration "$tmp/$name.h5" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc = 2 ] && grep -qF -- "$tmp/$name.h5: $want" "$tmp/err" && [ "$(wc -l <"$tmp/err")" = 1 ] &&
		[ ! -s "$tmp/out" ]; then
		ok "$name: exit 2, one line"
	else
		bad "$name" "exit $rc, $(head -3 "$tmp/err" | tr '\n' ' ') $(head -3 "$tmp/out" | tr '\n' ' ')"
	fi
done
# the same in an experiment file's cluster.calibration
printf '[model]\nname = tiny\n[cluster]\ncalibration = %s\n' "$tmp/wake_neg.h5" >"$tmp/exp.ini"
"$SIM" "$tmp/exp.ini" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && grep -qF "attribute wake_ns = -5000" "$tmp/err" && ok "experiment file: exit 2" ||
	bad "experiment file" "exit $rc, $(head -2 "$tmp/err")"

# ---- 2. valid files ------------------------------------------------------------------------------
"$SIM" --model tiny --calibration "$CAL" --json >"$tmp/orig.json" 2>"$tmp/err" &&
	"$SIM" --model tiny --calibration "$tmp/other_world.h5" --json >"$tmp/other.json" 2>>"$tmp/err"
rc=$?
if [ $rc = 0 ] && out=$("$PY" - "$tmp/orig.json" "$tmp/other.json" <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b):
    del d["config"]["cluster"]["calibration"]
assert a == b, "a session of another world size changed the prices"
assert 0.001 < a["step_time_s"] < 1 and a["exposed_comm_s"] > 0, a["step_time_s"]
print("step %.6f s, exposed comm %.6f s" % (a["step_time_s"], a["exposed_comm_s"]))
EOF
); then ok "a valid session of another world size prices nothing differently: $out"; else
	bad "valid copy" "exit $rc, ${out:-} $(head -2 "$tmp/err")"; fi
start=$(date +%s.%N)
timeout 20 "$SIM" --model tiny --calibration "$tmp/big_passes.h5" --json >"$tmp/big.json" 2>"$tmp/err"
rc=$?
secs=$(echo "$(date +%s.%N) - $start" | bc)
if [ $rc = 0 ] && "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); assert 0 < d['step_time_s'] < 1" \
	"$tmp/big.json" 2>/dev/null && [ "$(echo "$secs < 10" | bc)" = 1 ]; then
	ok "400k pass rows merged in $(printf %.2f "$secs") s"
else
	bad "400k pass rows" "exit $rc in $secs s, $(head -2 "$tmp/err")"
fi

# ---- 3. sweeps, what-if, compare: an input error before anything runs ---------------------------
flag_case() { # NAME EXPECTED ARGS...
	local name=$1 expect=$2
	shift 2
	timeout 60 "$SIM" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	local rc=$?
	if [ $rc = 2 ] && grep -qF -- "$expect" "$tmp/err" && ! grep -q "nothing fits\|breaks a rule" "$tmp/out" "$tmp/err"; then
		ok "$name"
	else
		bad "$name" "exit $rc, $(head -2 "$tmp/err" | tr '\n' ' ') $(head -2 "$tmp/out" | tr '\n' ' ')"
	fi
}
printf '[model]\nname = tiny\n[cluster]\ncalibration = /nonexistent.h5, %s\n' "$CAL" >"$tmp/sweep.ini"
flag_case "sweep axis: an unreadable calibration" \
	"$tmp/sweep.ini:4: cluster.calibration = /nonexistent.h5 cannot be read: No such file or directory" \
	--sweep "$tmp/sweep.ini"
printf '[model]\nname = tiny\n[cluster]\ncalibration = %s, %s\n' "$CAL" "$tmp/coll_huge.h5" >"$tmp/sweep.ini"
flag_case "sweep axis: an invalid calibration" \
	"$tmp/sweep.ini:4: cluster.calibration = $tmp/coll_huge.h5 is not a valid calibration: $tmp/coll_huge.h5: /calibration/000007: collectives row 1" \
	--sweep "$tmp/sweep.ini"
flag_case "--what-if: an unreadable calibration" \
	"--what-if cluster.calibration: cluster.calibration = /nonexistent.h5 cannot be read" \
	--model tiny --advise --what-if "cluster.calibration=$CAL,/nonexistent.h5"
flag_case "--what-if: sessions of two machines" \
	"--what-if cluster.calibration: cluster.calibration = $tmp/machine.h5 is not a valid calibration" \
	--model tiny --advise --what-if "cluster.calibration=$CAL,$tmp/machine.h5"
flag_case "--advise around an invalid calibration" "cluster.calibration = $tmp/old_session.h5 is not a valid calibration" \
	--model tiny --calibration "$tmp/old_session.h5" --advise
# a committed results file of measured runs (kept .h5.xz: decompressed with Python's lzma)
/usr/bin/python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
	"$(ls data/runs/amd-epyc-2-cores-cpu-2*.h5.xz | tail -1)" "$tmp/runs.h5"
sum=$(md5sum <"$tmp/runs.h5")
flag_case "--compare with an invalid calibration: said once" "--calibration: $tmp/pass_zero.h5: /calibration/000007: passes row 2" \
	--compare "$tmp/runs.h5" --calibration "$tmp/pass_zero.h5"
[ "$(wc -l <"$tmp/err")" = 1 ] && [ "$(md5sum <"$tmp/runs.h5")" = "$sum" ] && ok "--compare: one line, the file untouched" ||
	bad "--compare" "$(wc -l <"$tmp/err") lines; file changed: $(md5sum <"$tmp/runs.h5") vs $sum"
# FILE@NNNNNN, the file as it stood when session NNNNNN was appended: a session it lacks is refused, naming its
# last; the damage of a later session is not read (the copy prices as the original did then); ./sim --out
# records the calibration so, its newest session named
flag_case "--compare naming a session the file lacks" \
	"--calibration: $CAL: no session /calibration/999999 (its sessions end at /calibration/" \
	--compare "$tmp/runs.h5" --calibration "$CAL@999999"
flag_case "./sim naming a session the file lacks" "no session /calibration/999999" \
	--model tiny --calibration "$CAL@999999"
# the --json objects less their last field, the calibration's name
a=$(timeout 60 "$SIM" --model tiny --calibration "$tmp/pass_zero.h5@000006" --json 2>"$tmp/err" | sed 's/, "calibration": .*//')
b=$(timeout 60 "$SIM" --model tiny --calibration "$CAL@000006" --json 2>>"$tmp/err" | sed 's/, "calibration": .*//')
c=$(timeout 60 "$SIM" --model tiny --calibration "$CAL" --json 2>>"$tmp/err" | sed 's/, "calibration": .*//')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && [ ! -s "$tmp/err" ]; then
	ok "a damaged session after FILE@NNNNNN is not read: priced as the original then, not as now"
else
	bad "FILE@NNNNNN before a damaged session" "$(head -2 "$tmp/err") ${a:0:60} / ${b:0:60} / ${c:0:60}"
fi
newest=$("$PY" -c 'import sys, h5py; print(max(h5py.File(sys.argv[1], "r")["calibration"]))' "$CAL")
if timeout 60 "$SIM" --model tiny --calibration "$CAL" --out "$tmp/pinned.h5" >/dev/null 2>"$tmp/err" &&
	got=$("$PY" -c 'import sys, h5py; r = h5py.File(sys.argv[1], "r")["runs"]; print(*[r[k].attrs["cluster.calibration"] for k in r])' "$tmp/pinned.h5") &&
	[ "$got" = "$CAL@$newest" ]; then
	ok "./sim --out records its calibration as it stood ($got)"
else
	bad "./sim --out's calibration" "${got:-} $(head -2 "$tmp/err")"
fi
printf '[model]\nname = tiny\n[cluster]\ncalibration = %s, %s\n' "$CAL" "$tmp/other_world.h5" >"$tmp/sweep.ini"
if timeout 60 "$SIM" --sweep "$tmp/sweep.ini" --out "$tmp/sweep.h5" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "2 configurations of 2 candidates" "$tmp/out" &&
	got=$("$PY" -c 'import sys, h5py; g = h5py.File(sys.argv[1], "r")["sweeps"]; print(*g[max(g)].attrs["values.cluster.calibration"])' "$tmp/sweep.h5") &&
	[ "$got" = "$CAL@$newest $tmp/other_world.h5@$(printf '%06d' $((10#$newest + 1)))" ]; then
	ok "a sweep over two valid calibrations runs, its rows naming each as it stood"
else
	bad "a sweep over two valid calibrations" "$(head -3 "$tmp/err") ${got:-}"
fi

# none: the catalog's constants, as with no calibration named; a sweep axis may hold it beside files
printf '[model]\nname = tiny\n[cluster]\ncalibration = none, %s\n' "$CAL" >"$tmp/sweep_none.ini"
if [ "$("$SIM" --model tiny --calibration none --json 2>&1)" = "$("$SIM" --model tiny --json 2>&1)" ] &&
	timeout 60 "$SIM" --sweep "$tmp/sweep_none.ini" --out "$tmp/sweep_none.h5" >"$tmp/out" 2>"$tmp/err" &&
	got=$("$PY" - "$tmp/sweep_none.h5" "$("$SIM" --model tiny --json)" "$("$SIM" --model tiny --calibration "$CAL" --json)" <<'EOF'
import json, sys, h5py
g = h5py.File(sys.argv[1], "r")["sweeps"]
s = g[max(g)]
rows = s["configs"][()]
want = {"none": json.loads(sys.argv[2])["step_time_s"], "cal": json.loads(sys.argv[3])["step_time_s"]}
vals = [v.decode() if isinstance(v, bytes) else str(v) for v in s.attrs["values.cluster.calibration"]]
assert vals[0] == "none" and vals[1].endswith(".h5@" + vals[1][-6:]), vals
steps = sorted(float(r["step_time_s"]) for r in rows)
assert len(steps) == 2 and all(abs(x - y) <= 1e-6 * y for x, y in zip(steps, sorted(want.values()))), (steps, want)
print("the catalog's row %.4f s, the calibration's %.4f s" % (want["none"], want["cal"]))
EOF
	); then
	ok "calibration none: the catalog, alone and as a sweep's axis value ($got)"
else
	bad "calibration none" "$(head -3 "$tmp/err") ${got:-}"
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
