#!/usr/bin/env bash
# e2e_bad_input.sh BINARY - bad experiments and flags fail cleanly.
#
# Runs BINARY (./sim or ./gpu_run) on every tests/bad/*.ini, whose first
# line is `# expect: <part of the error message>`, then on a missing file,
# on files that are not regular (a directory, devices that never end, a
# FIFO that would block), an empty file, files that are not text (a NUL
# byte, control bytes, CR-only line ends), and on bad flags. Each case must
# exit with status 2 within 20 seconds, print the expected
# text on stderr, and write nothing: the results file named with
# --set run.out is not created and the directory it runs in stays empty.
# One line per case, then `N passed, N failed`; non-zero exit on failure.
set -u

if [ $# -ne 1 ]; then
	echo "usage: $0 BINARY" >&2
	exit 2
fi
bin=$(realpath -- "$1" 2>/dev/null || echo "$1")
here=$(cd "$(dirname "$0")" && pwd)
. "$here/mpi_local.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
name=$(basename "$bin")
passed=0
failed=0

# check CASE EXPECTED ARGS...: run BINARY ARGS... in an empty directory
check() {
	local case=$1 expect=$2 why=""
	shift 2
	rm -rf "$tmp/run" && mkdir "$tmp/run"
	(cd "$tmp/run" && timeout 20 "$bin" "$@" --set "run.out=$tmp/run/out.h5") >"$tmp/stdout" 2>"$tmp/stderr" </dev/null
	local rc=$?
	if [ "$rc" -ne 2 ]; then
		why="exit status $rc, not 2"
	elif ! grep -qF -- "$expect" "$tmp/stderr"; then
		why="stderr lacks: $expect"
	elif [ -e "$tmp/run/out.h5" ]; then
		why="it wrote the results file"
	elif [ -n "$(ls -A "$tmp/run")" ]; then
		why="it wrote $(ls -A "$tmp/run" | tr '\n' ' ')"
	fi
	if [ -z "$why" ]; then
		echo "ok   $name $case"
		passed=$((passed + 1))
	else
		echo "FAIL $name $case: $why"
		sed 's/^/     | /' "$tmp/stderr" | head -5
		failed=$((failed + 1))
	fi
}

for f in "$here"/bad/*.ini; do
	expect=$(head -n 1 "$f" | sed -n 's/^# expect: //p')
	if [ -z "$expect" ]; then
		echo "FAIL $name bad/$(basename "$f"): no '# expect: ' first line"
		failed=$((failed + 1))
		continue
	fi
	check "bad/$(basename "$f")" "$expect" "$f"
done

check "missing file" "nosuch.ini: cannot open: No such file or directory" "$tmp/nosuch.ini"
not_regular="only a regular file is read as an experiment"
check "a directory" "$tmp: is a directory: $not_regular" "$tmp"
check "/dev/null" "/dev/null: is a character device: $not_regular" /dev/null
check "/dev/zero" "/dev/zero: is a character device: $not_regular" /dev/zero
check "/dev/urandom" "/dev/urandom: is a character device: $not_regular" /dev/urandom
mkfifo "$tmp/fifo.ini"
check "a FIFO" "fifo.ini: is a FIFO: $not_regular" "$tmp/fifo.ini"
if [ "$name" = sim ]; then
	# a calibration that is a FIFO: HDF5 waited on it for a writer, forever (gpu_run prices nothing)
	check "a FIFO as the calibration" "cluster.calibration: $tmp/fifo.ini: is a FIFO, not a calibration file" \
		--set "cluster.calibration=$tmp/fifo.ini"
	check "a directory as the calibration" "cluster.calibration: $tmp: is a directory, not a calibration file" \
		--set "cluster.calibration=$tmp"
fi
: >"$tmp/empty.ini"
check "an empty file" "empty.ini: has no 'key = value' line: an empty experiment file is refused" "$tmp/empty.ini"
# text only: a NUL byte cut the line (layers = 2 ran), a binary file's control bytes reached the
# terminal in the messages quoting it, CR-only line ends read as one line with no key
printf '[model]\nlayers = 2\0 3\n' >"$tmp/nul.ini"
check "a NUL byte in a line" "nul.ini:2: line holds a NUL byte: an experiment file is text" "$tmp/nul.ini"
printf '\211HDF\r\n\032\n\0\0\033[2J\n[model]\nla\033[31myers = 2\nname = \001x\n' >"$tmp/binary.ini"
# text CASE: the last case's messages quote no control byte (newlines and tabs aside)
text() {
	if [ "$(LC_ALL=C tr -d '\n\t -~\200-\377' <"$tmp/stderr" | wc -c)" -eq 0 ]; then
		echo "ok   $name $1: no control byte on stderr"
		passed=$((passed + 1))
	else
		echo "FAIL $name $1: control bytes on stderr: $(cat -v "$tmp/stderr" | head -3)"
		failed=$((failed + 1))
	fi
}
check "a binary file" "binary.ini:2: line holds the control character 0x1a: an experiment file is text" \
	"$tmp/binary.ini"
text "a binary file"
printf '[model]\nla\033[31myers = 2\nname = \001x\n' >"$tmp/control.ini"
check "an escape sequence in a key" "control.ini:2: line holds the control character 0x1b" "$tmp/control.ini"
text "an escape sequence in a key"
printf '[model]\rlayers = 2\r' >"$tmp/cr.ini"
check "CR line endings" "cr.ini:1: line holds a carriage return (CR) that no line feed follows: the file has old Mac (CR) line endings" \
	"$tmp/cr.ini"
# user text quoted back escaped (\x1b, \t), never raw: an escape sequence in a value, a key, a flag
# or a path reached the terminal through the message that quoted it
check "--model with an escape" "--model: model.name = 'ti\x1bny' is not a catalog model" --model $'ti\x1bny'
text "--model with an escape"
check "--set with an escape" "--set model.lay\x1bers=3: unknown key 'lay\x1bers' in [model]" --set $'model.lay\x1bers=3'
text "--set with an escape"
check "an unknown flag with an escape" "unknown flag '--layrs\x1b[2J'" $'--layrs\x1b[2J' 3
text "an unknown flag with an escape"
check "a path with an escape" "x\x1b.ini: cannot open: No such file or directory" $'x\x1b.ini'
text "a path with an escape"
printf '[model]\nname = ti\tny\n' >"$tmp/tab.ini"
check "a tab in a value" "tab.ini:2: model.name = 'ti\tny' is not a catalog model" "$tmp/tab.ini"
if [ "$name" = sim ]; then
	check "--memory-budget with an escape" "--memory-budget: '4\x1b' is not" --policy all --memory-budget $'4\x1b'
	text "--memory-budget with an escape"
else
	check "--emulate-gbps with an escape" "--emulate-gbps wants a number in [0.001, 1e+06], not '1\x1b'" \
		--emulate-world 2 --emulate-gbps $'1\x1b'
	text "--emulate-gbps with an escape"
	# the calibration's own flags without it (--quick was taken and ignored)
	check "--quick without --calibrate" "gpu_run: --quick makes a calibration short (a few points): it goes with --calibrate" \
		--quick
	check "--series without --calibrate" "gpu_run: --series names a calibration's series: it goes with --calibrate" \
		--series s1
	# every measured step's op timings are kept for the median step: a run whose timings cannot fit is refused
	# before its first step (it failed allocating 380 GiB)
	check "steps whose op timings cannot fit" "gpu_run: run.steps = 1000000: each measured step's op timings are kept to record the median step, 380.4 GiB for this schedule's 25528 ops; at most 10515 steps" \
		"$here/../experiments/tiny.ini" --gpus-per-node 1 --set model.layers=200 --microbatches 16 --steps 1000000
fi
# numbers are decimal and held by their type: strtod read 1e-400 as 0 (in range, run silently), hex floats
# and a leading '+' passed
check "--lr 1e-400" "--lr: run.lr = 1e-400 is out of range (0 to 10): a double cannot hold it" --lr 1e-400
check "--lr 1e-310" "--lr: run.lr = 1e-310 is out of range (0 to 10): a double cannot hold it" --lr 1e-310
check "--lr 1e400" "--lr: run.lr = 1e400 is out of range (0 to 10)" --lr 1e400
check "--lr 0x1p-3" "--lr: run.lr = '0x1p-3' is not a number (numbers are decimal: hexadecimal is not read)" \
	--lr 0x1p-3
check "--layers +2" "--layers: model.layers = '+2' is not an integer (write it without the '+')" --layers +2
check "--seed +5" "--seed: run.seed = '+5' is not a non-negative integer (write it without the '+')" --seed +5
if [ "$name" = sim ]; then
	check "--top +5" "--top: '+5' is not an integer from 1 to 1000000 (write it without the '+')" --policy all --top +5
	check "--memory-budget 0x10" "--memory-budget: '0x10' is not a number of GiB from above 0 to 1e9 (numbers are decimal" \
		--policy all --memory-budget 0x10
	check "--global-batch 1e3" "--global-batch: '1e3' is not an integer from 1 to" --policy all --global-batch 1e3
else
	check "--emulate-gbps 0x1p3" "--emulate-gbps wants a number in [0.001, 1e+06], not '0x1p3' (numbers are decimal" \
		--emulate-world 2 --emulate-gbps 0x1p3
	check "--emulate-world +2" "--emulate-world wants an integer from 1 to 1048576, not '+2' (write it without the '+')" \
		--emulate-world +2
	check "--emulate-lat-us 1e-400" "--emulate-lat-us wants a number in [0, 1e+06], not '1e-400': a double cannot hold it" \
		--emulate-world 2 --emulate-lat-us 1e-400
fi
check "--layers abc" "--layers: model.layers = 'abc' is not an integer" --layers abc
check "--layers (no value)" "--layers: missing value" --layers
check "--set model.layrs=2" "--set model.layrs=2: unknown key 'layrs' in [model] (did you mean 'layers'?)" \
	--set model.layrs=2
check "--policy fdsp" "did you mean 'fsdp'?" --policy fdsp
check "--nosuch 1" "--nosuch" --nosuch 1
check "--layrs 2" "--layers" --layrs 2
check "two experiment files" "'$here/../experiments/tiny.ini' after the experiment file: one experiment file is read" \
	"$here/../experiments/llama3.ini" "$here/../experiments/tiny.ini"
# the nearest of the binary's own flags is suggested too, not only an experiment flag
if [ "$name" = sim ]; then
	check "--schedul" "unknown flag '--schedul' (did you mean '--schedule'?)" --schedul
	check "--advice" "unknown flag '--advice' (did you mean '--advise'?)" --advice
else
	check "--serialise" "unknown flag '--serialise' (did you mean '--serialize'?)" --serialise
	check "--emulate-word 4" "unknown flag '--emulate-word' (did you mean '--emulate-world'?)" --emulate-word 4
fi
if [ "$name" = gpu_run ]; then
	# a mode ./sim prices but gpu_run's models cannot keep activations for
	check "--ac per-op" "policy.ac = per-op: gpu_run's models" --runtime pytorch --ac per-op
	# strtod reads nan and inf: NaN passed the range test, and tiny ran with the cluster's link
	tiny=("$here/../experiments/tiny.ini" --steps 1 --warmup 0 --emulate-world 2)
	check "--emulate-gbps nan" "--emulate-gbps wants a number in [0.001, 1e+06], not 'nan'" \
		"${tiny[@]}" --emulate-gbps nan
	check "--emulate-lat-us nan" "--emulate-lat-us wants a number in [0, 1e+06], not 'nan'" \
		"${tiny[@]}" --emulate-lat-us nan
	check "--emulate-lat-us -nan" "--emulate-lat-us wants a number in [0, 1e+06], not '-nan'" \
		"${tiny[@]}" --emulate-lat-us -nan
	check "--emulate-gbps inf" "--emulate-gbps wants a number in [0.001, 1e+06], not 'inf'" \
		"${tiny[@]}" --emulate-gbps inf
	# PyTorch's expandable segments map pages, which only ./sim's model of the allocator does
	check "--expandable-segments" "policy.expandable_segments = true: a runtime's allocator reserves whole segments" \
		"${tiny[@]}" --runtime pytorch --expandable-segments
	# PyTorch's attention backend, which ./sim prices: gpu_run runs its model's own kernels
	check "--sdpa cudnn" "policy.sdpa = cudnn names PyTorch's attention backend, which ./sim prices" \
		"${tiny[@]}" --runtime pytorch --sdpa cudnn
	# a PyTorch training loop's reference to the logits, which ./sim prices: gpu_run's loss keeps none
	check "--hold-logits" "policy.hold_logits = true names a PyTorch training loop's reference to the logits" \
		"${tiny[@]}" --runtime pytorch --hold-logits
fi
# the logits a PyTorch training loop holds: the testbed's loss and the chunked loss make no such tensor
check "--hold-logits (testbed)" "policy.hold_logits = true is a PyTorch training loop's reference to the logits: it needs policy.runtime = pytorch or pytorch-compile" \
	--hold-logits
check "--hold-logits --loss chunked" "policy.hold_logits = true needs policy.loss = full: the chunked loss makes no logits tensor of the whole batch" \
	--runtime pytorch --loss chunked --hold-logits
# SDPA's backend needs a PyTorch runtime (the testbed runs its own attention kernel)
check "--sdpa flash" "policy.sdpa = flash is PyTorch's attention backend: it needs policy.runtime = pytorch or pytorch-compile" \
	--sdpa flash

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
