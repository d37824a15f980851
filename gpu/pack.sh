#!/usr/bin/env bash
# gpu/pack.sh - what a GPU session's call carries, as one archive: the
# device tool sends the tracked tree and the carried paths, 64 MiB in all,
# and the library bundle with the four binaries is 55 MB as files; packed
# (gzip, which every host has) it is about 20 MB.
#
#   bash gpu/pack.sh        # after make sim gpu_run gpu_test_bin gpu_bench_bin
#                           # and bash gpu/cuda/bundle.sh --check
#
# writes gpu/carry.tar.gz (git-ignored): gpu/bundle/ and ./gpu_run,
# ./gpu_test, ./gpu_bench, ./sim; gpu/device_session.sh unpacks it in the
# device's tree before anything else. Then prints what the call would send
# (the files git tracks, those it neither tracks nor ignores, and the
# archive) against the tool's limit; exit 1 when over it, 2 when something
# to pack is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=$((64 * 1024 * 1024))
ARCHIVE=gpu/carry.tar.gz
parts=(gpu/bundle gpu_run gpu_test gpu_bench sim)
for p in "${parts[@]}"; do
	if [ ! -e "$p" ]; then
		echo "pack.sh: $p is missing: build it first (make sim gpu_run gpu_test_bin gpu_bench_bin;" \
			"bash gpu/cuda/bundle.sh --check)" >&2
		exit 2
	fi
done
[ -f gpu/bundle/env.sh ] || { echo "pack.sh: gpu/bundle has no env.sh: run bash gpu/cuda/bundle.sh" >&2; exit 2; }
tar -cf - "${parts[@]}" | gzip -9 >"$ARCHIVE.part"
mv -f "$ARCHIVE.part" "$ARCHIVE"

size() { # the bytes of the files named on stdin, NUL-separated
	xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}
tracked=$(git ls-files -z | size)
untracked=$(git ls-files -z --others --exclude-standard | size)
archive=$(stat -c %s "$ARCHIVE")
total=$((tracked + untracked + archive))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "pack.sh: $ARCHIVE $(mib "$archive"); the call sends $(mib "$total"): tracked $(mib "$tracked")," \
	"untracked $(mib "$untracked"), the archive; the limit is $(mib "$LIMIT")"
if [ "$total" -gt "$LIMIT" ]; then
	echo "pack.sh: over the device tool's limit by $(mib $((total - LIMIT))): the call would be refused" >&2
	exit 1
fi
echo "pack.sh: carry [\"$ARCHIVE\"]"
