"""Where a profiled step leaves the GPU idle: the stretches in which no
kernel of any stream runs (fsdp_bench.py --profile; standard library only,
so that it is checked without PyTorch: tests/e2e_validate.sh).

A step whose host falls behind (eager dispatch, a synchronization, a
Python callback between kernels) shows as time between kernels; a step
bound by its GPU shows none. ./sim --compare sets the measured idle time
against the one its timeline leaves between ops (the host's dispatch, the
launch queue, waits between streams).
"""

TOP_GAPS = 16  # the longest gaps kept, with the kernels on either side


def gpu_gaps(kernels, top=TOP_GAPS):
    """kernels: [(name, start_us, end_us)] of one step, every stream's. Returns (span_us, busy_us, gaps): from the
    first kernel's start to the last one's end; the time at least one kernel ran (the union of their intervals);
    and the `top` longest stretches with none running, longest first, each (name of the kernel that ended last
    before it, name of the one that starts it, its start in us from the first kernel's, its length in us)."""
    ks = sorted((k for k in kernels if k[2] >= k[1]), key=lambda k: (k[1], k[2]))
    if not ks:
        return 0.0, 0.0, []
    first = ks[0][1]
    busy, gaps = 0.0, []
    name, start, end = ks[0]  # the stretch of busy time so far, and the kernel that ends it last
    for n, s, e in ks[1:]:
        if s > end:
            busy += end - start
            gaps.append((name, n, end - first, s - end))
            name, start, end = n, s, e
        elif e > end:
            name, end = n, e
    busy += end - start
    gaps.sort(key=lambda g: -g[3])
    return end - first, busy, gaps[:top]
