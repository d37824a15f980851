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
# ./gpu_test, ./gpu_bench, ./sim, and gpu/COMMIT (the commit they were built
# from); gpu/device_session.sh unpacks it in the
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
# the commit the binaries were built from (the device's tree has no .git): the host step prints it
{ git rev-parse HEAD 2>/dev/null || echo unknown; } >gpu/COMMIT
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || sed -i 's/$/ (with uncommitted changes)/' gpu/COMMIT
tar -cf - "${parts[@]}" gpu/COMMIT | gzip -9 >"$ARCHIVE.part"
rm -f gpu/COMMIT
mv -f "$ARCHIVE.part" "$ARCHIVE"

size() { # the bytes of the files named on stdin, NUL-separated
	# a tracked file deleted in the working tree is not sent: stat's failure for it is not one
	{ xargs -0 -r stat -c %s -- 2>/dev/null || true; } | awk '{ s += $1 } END { print s + 0 }'
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
