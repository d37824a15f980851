#!/usr/bin/env bash
# gpu/cuda/bundle.sh - gather, from this build machine's Debian packages,
# the shared libraries gpu_run, gpu_test, gpu_bench and sim need that a bare GPU
# host lacks, so that the binaries built here run there:
#
#   Open MPI (mpirun/orterun, orted, ompi_info, its MCA components, help
#   files and config), PMIx's plugins and help files, libhdf5, libgsl,
#   libinih, libcunit, and every library those pull in (ldd), except the
#   C library family, libstdc++/libgcc_s (a GPU host has newer ones) and
#   the CUDA libraries (libcuda, libcudart, cuBLAS, cuDNN, NCCL: the GPU
#   host has its own, matched to its driver).
#
# Usage: bash gpu/cuda/bundle.sh [--check] [DIR]   (default gpu/bundle, git-ignored)
#   --check  afterwards, in a private mount namespace (root, unshare) with the
#            system's Open MPI, PMIx and every bundled library hidden, run
#            `mpirun -np 2 hostname` and ldd the binaries from the bundle alone
# Then, on the GPU host, from the repository root:
#   source gpu/bundle/env.sh        # PATH (mpirun) and Open MPI's relocation only
#   ./gpu_test; ./gpu_bench; mpirun --allow-run-as-root -np 2 ./gpu_run ...
# Nothing goes on LD_LIBRARY_PATH for the shell: gpu_run, gpu_test,
# gpu_bench and sim find DIR/lib through their rpath ($ORIGIN/gpu/bundle/lib, set by
# the Makefile, so the default DIR), and the Open MPI programs of the bundle
# (mpirun, orted, ompi_info) are small scripts that put DIR/lib on the
# library path of the real program alone (and of the job mpirun starts).
#
# Layout:
#   DIR/lib/           every bundled shared library, flat
#   DIR/openmpi/       an Open MPI prefix: bin/ (the wrapper scripts),
#                      libexec/ (the real orterun, orted, ompi_info), the
#                      component and help directories at the paths Debian
#                      configured relative to /usr, etc/ (OPAL_PREFIX
#                      relocates it)
#   DIR/pmix/          PMIx plugins, help files, config
#   DIR/env.sh         the one file to source
#   DIR/MANIFEST       each bundled file and the Debian package it came from
set -euo pipefail
cd "$(dirname "$0")/../.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
out=${1:-gpu/bundle}

die() { echo "bundle.sh: $*" >&2; exit 1; }
command -v ompi_info >/dev/null || die "ompi_info not found: install openmpi-bin (make deps)"
command -v ldd >/dev/null || die "ldd not found"
command -v patchelf >/dev/null || die "patchelf not found: apt-get install patchelf"

# Libraries never bundled: libc family (ABI of the host), C++ runtime
# (hosts with CUDA carry newer ones), CUDA/NCCL/driver (the host's own),
# sanitizer runtimes (a sanitizer build is not for the GPU host).
skip_re='^(linux-vdso|ld-linux|libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z-]*|libnvrtc[a-z-]*|libnvJitLink|libasan|libubsan|liblsan|libtsan)\.so'

# The linker cache, read once. No pipeline below ends early on a reader
# that exits (head, awk's exit): under pipefail the writer's SIGPIPE would
# fail the script. Each command's output is captured whole, then parsed.
ldcache=$(ldconfig -p)
first_line() { sed -n '1{p;q}'; }

# Open MPI's configured directories, to rebuild its prefix inside the bundle.
ompi_path() {
	local all
	all=$(ompi_info --path "$1" --parsable)
	sed -n 's/^path:[a-z_]*:\(.*\)$/\1/p' <<<"$all" | first_line
}
ompi_prefix=$(ompi_path prefix)
ompi_pkglibdir=$(ompi_path pkglibdir)
ompi_pkgdatadir=$(ompi_path pkgdatadir)
ompi_sysconfdir=$(ompi_path sysconfdir)
ompi_bindir=$(ompi_path bindir)
if [ -z "$ompi_prefix" ] || [ ! -d "$ompi_pkglibdir" ]; then
	die "cannot read Open MPI's directories from ompi_info"
fi
rel() { case "$1" in "$ompi_prefix"/*) echo "${1#"$ompi_prefix"/}" ;; *) die "$1 is not under $ompi_prefix" ;; esac; }

# PMIx (external to Debian's Open MPI): its plugin and help directories.
pmix_lib=$(sed -n 's/.*libpmix\.so\.2 (.*) => \(.*\)/\1/p' <<<"$ldcache" | first_line)
pmix_home=""
if [ -n "$pmix_lib" ]; then
	real=$(readlink -f "$pmix_lib")
	case "$real" in */pmix2/lib/*) pmix_home=${real%/lib/*} ;; esac
fi

rm -rf "$out"
mkdir -p "$out/lib" "$out/openmpi/bin" "$out/openmpi/libexec" "$out/openmpi/etc" "$out/pmix"
om="$out/openmpi"

# --- Open MPI: binaries, components, help files, config --------------------------
# The real programs go to libexec/; bin/ holds scripts that give them, and
# only them (and the processes mpirun starts), the bundle's libraries.
for b in orterun orted ompi_info; do
	cp -L "$ompi_bindir/$b" "$om/libexec/$b"
	cat > "$om/bin/$b" <<EOF
#!/bin/sh
# written by gpu/cuda/bundle.sh: run the bundled $b with the bundle's libraries
_b=\$(cd "\$(dirname "\$0")/../.." && pwd)
LD_LIBRARY_PATH="\$_b/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$_b/openmpi/libexec/$b" "\$@"
EOF
	chmod +x "$om/bin/$b"
done
ln -s orterun "$om/bin/mpirun"
ln -s orterun "$om/bin/mpiexec"
mkdir -p "$om/$(rel "$ompi_pkglibdir")" "$om/$(rel "$ompi_pkgdatadir")"
cp -L "$ompi_pkglibdir"/*.so "$om/$(rel "$ompi_pkglibdir")/"
cp -rL "$ompi_pkgdatadir"/. "$om/$(rel "$ompi_pkgdatadir")/"
cp -L "$ompi_sysconfdir"/* "$om/etc/" 2>/dev/null || true

# --- PMIx plugins and help ------------------------------------------------------------
if [ -n "$pmix_home" ]; then
	mkdir -p "$out/pmix/lib/pmix" "$out/pmix/share"
	cp -L "$pmix_home"/lib/pmix/*.so "$out/pmix/lib/pmix/" 2>/dev/null || true
	cp -rL "$pmix_home"/share/. "$out/pmix/share/" 2>/dev/null || true
	# its config names the system plugin directory; env.sh names the bundle's
	[ -f "$out/pmix/share/pmix-mca-params.conf" ] &&
		sed -i '/^[[:space:]]*mca_base_component_path/d' "$out/pmix/share/pmix-mca-params.conf"
fi

# --- the ELF files whose dependencies we close over -----------------------------------------
elfs=()
for b in gpu_run gpu_test gpu_bench sim; do
	[ -x "$b" ] && elfs+=("$b")
done
[ ${#elfs[@]} -gt 0 ] || echo "bundle.sh: note: no gpu_run/gpu_test/gpu_bench/sim built yet; bundling the libraries by name only" >&2
elfs+=("$om/libexec/orterun" "$om/libexec/orted" "$om/libexec/ompi_info")
elfs+=("$om/$(rel "$ompi_pkglibdir")"/*.so)
[ -d "$out/pmix/lib/pmix" ] && elfs+=("$out"/pmix/lib/pmix/*.so)
# the libraries the project links, by soname, whether or not a binary is built
for so in libhdf5_serial.so.103 libhdf5_serial_hl.so.100 libgsl.so.27 libgslcblas.so.0 \
	  libinih.so.1 libcunit.so.1 libmpi.so.40; do
	p=$(awk -v s="$so" '$1 == s && /x86-64/ { print $NF; exit }' <<<"$ldcache")
	if [ -n "$p" ]; then elfs+=("$p"); else echo "bundle.sh: note: $so not installed here" >&2; fi
done

declare -A have=()
copy_lib() { # $1 soname, $2 path
	[[ -n "${have[$1]:-}" ]] && return
	have[$1]=1
	cp -L "$2" "$out/lib/$1"
	echo "$2" >> "$out/.sources"
}
: > "$out/.sources"
missing=0
for f in "${elfs[@]}"; do
	case "$f" in */lib*.so.*) n=$(basename "$f"); [[ $n =~ $skip_re ]] || copy_lib "$n" "$f" ;; esac
	while read -r name arrow path _; do
		[ "$arrow" = "=>" ] || continue
		[[ $name =~ $skip_re ]] && continue
		if [ "$path" = "not" ]; then
			echo "bundle.sh: warning: $f needs $name, which is not installed here" >&2
			missing=1
			continue
		fi
		copy_lib "$name" "$path"
	done < <(ldd "$f" 2>/dev/null)
done

# --- rpaths: the bundle's ELF files find each other, not the system's ------------------
# Debian builds libmpi, libopen-rte, liboshmem and Open MPI's components with a
# RUNPATH of its system library directory. A library with a RUNPATH of its own
# has its dependencies looked up there and on LD_LIBRARY_PATH only, never
# through the binary's rpath: on a host without the packages libmpi would then
# miss libopen-rte. Each such RUNPATH now names the bundle's lib/ instead.
while IFS= read -r -d '' f; do
	[ -n "$(patchelf --print-rpath "$f" 2>/dev/null)" ] || continue
	to=$(realpath --relative-to="$(dirname "$f")" "$out/lib")
	[ "$to" = . ] && to='' || to=/$to
	patchelf --set-rpath "\$ORIGIN$to" "$f"
done < <(find "$out" -type f \( -name '*.so*' -o -path "$om/libexec/*" \) -print0)

# --- env.sh --------------------------------------------------------------------------
pkglib_rel=$(rel "$ompi_pkglibdir")
pkgdata_rel=$(rel "$ompi_pkgdatadir")
cat > "$out/env.sh" <<EOF
# env.sh - source this (bash) to run Open MPI from this bundle on a host
# without the Debian packages; written by gpu/cuda/bundle.sh. It sets no
# LD_LIBRARY_PATH: gpu_run, gpu_test and gpu_bench find the bundle's
# libraries through their rpath, and mpirun, orted and ompi_info here are
# scripts that give the bundle's libraries to themselves alone. CUDA,
# cuBLAS, NCCL and cuDNN come from the host.
_bundle="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export PATH="\$_bundle/openmpi/bin\${PATH:+:\$PATH}"
# Open MPI relocated: every directory it derives from its prefix, and sysconf
export OPAL_PREFIX="\$_bundle/openmpi"
export OPAL_PKGLIBDIR="\$_bundle/openmpi/$pkglib_rel"
export OPAL_PKGDATADIR="\$_bundle/openmpi/$pkgdata_rel"
export OPAL_SYSCONFDIR="\$_bundle/openmpi/etc"
# PMIx plugins and help files
export PMIX_PKGLIBDIR="\$_bundle/pmix/lib/pmix"
export PMIX_PKGDATADIR="\$_bundle/pmix/share/pmix"
export PMIX_SYSCONFDIR="\$_bundle/pmix/share"
export PMIX_MCA_mca_base_component_path="\$_bundle/pmix/lib/pmix"
unset _bundle
EOF

# --- MANIFEST: where each library came from ----------------------------------------------
{
	echo "# gpu/bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
	echo "# file <- source (package)"
	sort -u "$out/.sources" | while read -r src; do
		real=$(readlink -f "$src")
		pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1,2 | sed 's/: .*//') || true
		[ -n "$pkg" ] || pkg=$(dpkg -S "$src" 2>/dev/null | head -1 | sed 's/: .*//') || true
		ver=""
		[ -n "$pkg" ] && ver=$(dpkg-query -W -f='${Version}' "${pkg%%:*}" 2>/dev/null || true)
		echo "lib/$(basename "$src") <- $src (${pkg:-unknown} $ver)"
	done
} > "$out/MANIFEST"
rm -f "$out/.sources"

n=$(find "$out/lib" -maxdepth 1 -type f | wc -l)
size=$(du -sh "$out" | cut -f1)
echo "bundle.sh: $out: $n libraries, Open MPI $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full:\(.*\)/\1/p'), $size; on the GPU host: source $out/env.sh"
[ $check = 1 ] || exit $missing

# --- --check: the bundle alone, system copies hidden ---------------------------------------
if ! command -v unshare >/dev/null || [ "$(id -u)" != 0 ]; then
	die "--check needs root and unshare"
fi
BUNDLE_DIR=$(cd "$out" && pwd)
export BUNDLE_DIR OMPI_PKGLIBDIR=$ompi_pkglibdir OMPI_PKGDATADIR=$ompi_pkgdatadir
export OMPI_SYSCONFDIR=$ompi_sysconfdir OMPI_BINDIR=$ompi_bindir PMIX_HOME=$pmix_home
export SKIP_RE=$skip_re
unshare -m bash -eu -c '
	empty=$(mktemp -d)
	for d in "$OMPI_PKGLIBDIR" "$OMPI_PKGDATADIR" "$OMPI_SYSCONFDIR" ${PMIX_HOME:+"$PMIX_HOME"}; do
		mount --bind "$empty" "$d"
	done
	for f in "$BUNDLE_DIR"/lib/*; do
		for g in /usr/lib/x86_64-linux-gnu/"$(basename "$f")"*; do
			[ -e "$g" ] && mount --bind /dev/null "$g"
		done
	done
	for b in orterun orted ompi_info; do mount --bind /dev/null "$OMPI_BINDIR/$b"; done
	env -i SKIP_RE="$SKIP_RE" PATH=/usr/bin:/bin bash -c "
		source \"$BUNDLE_DIR/env.sh\"
		[ -z \"\${LD_LIBRARY_PATH:-}\" ] || { echo \"check: env.sh set LD_LIBRARY_PATH\"; exit 1; }
		echo \"check: mpirun is \$(command -v mpirun)\"
		mpirun --allow-run-as-root -np 2 hostname | sed \"s/^/check: rank on /\"
		for b in gpu_run gpu_test gpu_bench sim; do
			[ -x \"\$b\" ] || continue
			# the loader itself: ldd fails, or prints not found, where a library cannot load
			all=\$(ldd \"\$b\" 2>&1) || { echo \"check: \$b: the loader failed:\"; echo \"\$all\"; exit 1; }
			if grep -q \"not found\" <<<\"\$all\"; then
				echo \"check: \$b: libraries not found:\"; grep \"not found\" <<<\"\$all\"; exit 1
			fi
			out=\$(./\$b --help 2>&1 >/dev/null) || { echo \"check: \$b --help failed:\"; echo \"\$out\"; exit 1; }
			bad=\$(ldd \"\$b\" | sed \"s#/\\./#/#g\" | awk -v re=\"\$SKIP_RE\" -v dir=\"$BUNDLE_DIR/\" \\
				\"\\\$2 == \\\"=>\\\" && \\\$1 !~ re && index(\\\$3, dir) != 1\")
			if [ -n \"\$bad\" ]; then
				echo \"check: \$b: not from the bundle:\"; echo \"\$bad\"; exit 1
			fi
			echo \"check: \$b: every library but libc, libstdc++ and CUDA comes from the bundle\"
		done
	"
'
echo "bundle.sh: --check passed"
