"""attention_emu.py - attention.cu's kernels replayed in numpy, lane by lane.

ldmatrix (plain and .trans) and mma.sync.m16n8k16 are emulated from the
fragment layouts of the PTX ISA; the forward and backward kernels' loops,
addressing (a_row/a_col/bn_row/bn_col), masks, online softmax, dS^T staging
and dQ/dK/dV stores are transcribed from attention.cu, one warp at a time
(shared-memory staging without the cp.async pipelining). The results are
compared with a float64 reference. It checks the kernels' index math where
no GPU is at hand; keep it in step with attention.cu when that changes.

    /usr/bin/python3 gpu/cuda/attention_emu.py     # about a minute

Expected: every relative error near 2e-3 (one bf16 rounding), lse near 1e-8,
no NaN. An indexing mistake shows as errors of order 1 or NaN.
"""
import numpy as np
import sys

L = np.arange(32)
G = L >> 2
TQ = L & 3


def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def ldsm_x4(sm, rows, cols):
    out = np.zeros((4, 32, 2), np.float32)
    for i in range(4):
        for lane in range(32):
            j, c = lane >> 2, 2 * (lane & 3)
            r, cc = rows[8 * i + j], cols[8 * i + j]
            out[i, lane] = sm[r, cc + c: cc + c + 2]
    return out


def ldsm_x4_t(sm, rows, cols):
    out = np.zeros((4, 32, 2), np.float32)
    for i in range(4):
        for lane in range(32):
            j0, col = 2 * (lane & 3), lane >> 2
            for e in range(2):
                out[i, lane, e] = sm[rows[8 * i + j0 + e], cols[8 * i + j0 + e] + col]
    return out


def mma(c, a, b0, b1):
    A = np.zeros((16, 16), np.float64)
    B = np.zeros((16, 8), np.float64)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 2 * t:2 * t + 2] = a[0][lane]
        A[g + 8, 2 * t:2 * t + 2] = a[1][lane]
        A[g, 2 * t + 8:2 * t + 10] = a[2][lane]
        A[g + 8, 2 * t + 8:2 * t + 10] = a[3][lane]
        B[2 * t:2 * t + 2, g] = b0[lane]
        B[2 * t + 8:2 * t + 10, g] = b1[lane]
    C = A @ B
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        c[lane, 0:2] += C[g, 2 * t:2 * t + 2]
        c[lane, 2:4] += C[g + 8, 2 * t:2 * t + 2]


def a_row(l): return l & 15
def a_col(l): return (l >> 4) * 8
def bn_row(l): return (l & 7) + (l >> 4) * 8
def bn_col(l): return ((l >> 3) & 1) * 8


def pack(x0, x1):  # (32,) each -> (32, 2) bf16
    return bf16(np.stack([x0, x1], axis=1))


def ref_attention(qkv, B, T, H, KV, HD):
    W = (H + 2 * KV) * HD
    x = qkv.reshape(B, T, W).astype(np.float64)
    out = np.zeros((B, T, H * HD))
    lse = np.zeros((B, H, T))
    grp = H // KV
    sc = 1 / np.sqrt(HD)
    P = {}
    for b in range(B):
        for h in range(H):
            g = h // grp
            q = x[b, :, h * HD:(h + 1) * HD]
            k = x[b, :, (H + g) * HD:(H + g + 1) * HD]
            v = x[b, :, (H + KV + g) * HD:(H + KV + g + 1) * HD]
            s = q @ k.T * sc
            s[np.triu_indices(T, 1)] = -np.inf
            m = s.max(1, keepdims=True)
            l = np.log(np.exp(s - m).sum(1, keepdims=True)) + m
            p = np.exp(s - l)
            out[b, :, h * HD:(h + 1) * HD] = p @ v
            lse[b, h] = l[:, 0]
            P[b, h] = p
    return out.reshape(B * T, H * HD), lse, P


def ref_attention_bwd(dout, qkv, out, lse, B, T, H, KV, HD, P):
    W = (H + 2 * KV) * HD
    x = qkv.reshape(B, T, W).astype(np.float64)
    d = np.zeros((B, T, W))
    do = dout.reshape(B, T, H * HD)
    grp = H // KV
    sc = 1 / np.sqrt(HD)
    for b in range(B):
        for h in range(H):
            g = h // grp
            q = x[b, :, h * HD:(h + 1) * HD]
            k = x[b, :, (H + g) * HD:(H + g + 1) * HD]
            v = x[b, :, (H + KV + g) * HD:(H + KV + g + 1) * HD]
            p = P[b, h]
            dO = do[b, :, h * HD:(h + 1) * HD]
            dv = p.T @ dO
            dp = dO @ v.T
            delta = (dO * out.reshape(B, T, H * HD)[b, :, h * HD:(h + 1) * HD]).sum(1, keepdims=True)
            ds = p * (dp - delta)
            d[b, :, h * HD:(h + 1) * HD] += sc * ds @ k
            d[b, :, (H + g) * HD:(H + g + 1) * HD] += sc * ds.T @ q
            d[b, :, (H + KV + g) * HD:(H + KV + g + 1) * HD] += dv
    return d.reshape(B * T, W)


def emu_fwd(qkv, B, T, H, KV, HD):
    WARPS, BC = 8, 64
    BR = 16 * WARPS
    LOG2E = 1.4426950408889634
    ld = (H + 2 * KV) * HD
    out = np.full((B * T, H * HD), np.nan, np.float32)
    lse = np.full((B, H, T), np.nan, np.float32)
    scale = 1 / np.sqrt(HD)
    sl2 = np.float32(scale * LOG2E)
    nqt = (T + BR - 1) // BR
    for bh in range(B * H):
        b, h = bh // H, bh % H
        g = h // (H // KV)
        base = qkv[b * T:(b + 1) * T]
        for qt in range(nqt):
            q0 = qt * BR
            sQ = np.zeros((BR, HD + 8), np.float32)
            for r in range(BR):
                if q0 + r < T:
                    sQ[r, :HD] = base[q0 + r, h * HD:(h + 1) * HD]
            ntiles = (min(q0 + BR, T) - 1) // BC + 1
            for warp in range(WARPS):
                qf = [ldsm_x4(sQ, warp * 16 + a_row(L), kk * 16 + a_col(L)) for kk in range(HD // 16)]
                o = np.zeros((HD // 8, 32, 4))
                m0 = np.full(32, -np.inf); m1 = np.full(32, -np.inf)
                l0 = np.zeros(32); l1 = np.zeros(32)
                wrow = q0 + warp * 16
                row0 = wrow + G; row1 = row0 + 8
                for j in range(ntiles):
                    k0 = j * BC
                    if k0 > wrow + 15:
                        continue
                    ks = np.zeros((BC, HD + 8), np.float32)
                    vs = np.zeros((BC, HD + 8), np.float32)
                    for r in range(BC):
                        if k0 + r < T:
                            ks[r, :HD] = base[k0 + r, (H + g) * HD:(H + g + 1) * HD]
                            vs[r, :HD] = base[k0 + r, (H + KV + g) * HD:(H + KV + g + 1) * HD]
                    s = np.zeros((BC // 8, 32, 4))
                    for kk in range(HD // 16):
                        for np_ in range(BC // 16):
                            bf = ldsm_x4(ks, np_ * 16 + bn_row(L), kk * 16 + bn_col(L))
                            mma(s[2 * np_], qf[kk], bf[0], bf[1])
                            mma(s[2 * np_ + 1], qf[kk], bf[2], bf[3])
                    if k0 + BC - 1 > wrow or k0 + BC > T:
                        for nt in range(BC // 8):
                            for e in range(4):
                                col = k0 + nt * 8 + TQ * 2 + (e & 1)
                                row = row0 if e < 2 else row1
                                msk = (col > row) | (col >= T)
                                s[nt][msk, e] = -np.inf
                    mx0 = m0.copy(); mx1 = m1.copy()
                    for nt in range(BC // 8):
                        mx0 = np.maximum(mx0, np.maximum(s[nt][:, 0], s[nt][:, 1]))
                        mx1 = np.maximum(mx1, np.maximum(s[nt][:, 2], s[nt][:, 3]))
                    for off in (1, 2):
                        mx0 = np.maximum(mx0, mx0[L ^ off]); mx1 = np.maximum(mx1, mx1[L ^ off])
                    ms0 = np.where(mx0 == -np.inf, 0, mx0 * sl2)
                    ms1 = np.where(mx1 == -np.inf, 0, mx1 * sl2)
                    with np.errstate(invalid='ignore'):
                        c0 = np.exp2(m0 * sl2 - ms0); c1 = np.exp2(m1 * sl2 - ms1)
                    m0, m1 = mx0, mx1
                    rs0 = np.zeros(32); rs1 = np.zeros(32)
                    for nt in range(BC // 8):
                        s[nt][:, 0] = np.exp2(s[nt][:, 0] * sl2 - ms0)
                        s[nt][:, 1] = np.exp2(s[nt][:, 1] * sl2 - ms0)
                        s[nt][:, 2] = np.exp2(s[nt][:, 2] * sl2 - ms1)
                        s[nt][:, 3] = np.exp2(s[nt][:, 3] * sl2 - ms1)
                        rs0 += s[nt][:, 0] + s[nt][:, 1]; rs1 += s[nt][:, 2] + s[nt][:, 3]
                    l0 = l0 * c0 + rs0; l1 = l1 * c1 + rs1
                    for dt in range(HD // 8):
                        o[dt][:, 0:2] *= c0[:, None]; o[dt][:, 2:4] *= c1[:, None]
                    for kc in range(BC // 16):
                        a = [pack(s[2 * kc][:, 0], s[2 * kc][:, 1]), pack(s[2 * kc][:, 2], s[2 * kc][:, 3]),
                             pack(s[2 * kc + 1][:, 0], s[2 * kc + 1][:, 1]), pack(s[2 * kc + 1][:, 2], s[2 * kc + 1][:, 3])]
                        for dp in range(HD // 16):
                            bf = ldsm_x4_t(vs, kc * 16 + a_row(L), dp * 16 + a_col(L))
                            mma(o[2 * dp], a, bf[0], bf[1])
                            mma(o[2 * dp + 1], a, bf[2], bf[3])
                for off in (1, 2):
                    l0 = l0 + l0[L ^ off]; l1 = l1 + l1[L ^ off]
                for lane in range(32):
                    for dt in range(HD // 8):
                        c = h * HD + dt * 8 + TQ[lane] * 2
                        if row0[lane] < T:
                            out[b * T + row0[lane], c:c + 2] = bf16(o[dt][lane, 0:2] / l0[lane])
                        if row1[lane] < T:
                            out[b * T + row1[lane], c:c + 2] = bf16(o[dt][lane, 2:4] / l1[lane])
                    if TQ[lane] == 0:
                        if row0[lane] < T:
                            lse[b, h, row0[lane]] = m0[lane] * scale + np.log(l0[lane])
                        if row1[lane] < T:
                            lse[b, h, row1[lane]] = m1[lane] * scale + np.log(l1[lane])
    return out, lse


def emu_bwd(dout, qkv, out, lse, B, T, H, KV, HD):
    WARPS, BR = 8, 64
    BC = 16 * WARPS
    LOG2E = 1.4426950408889634
    ld = (H + 2 * KV) * HD
    dld = H * HD
    grp = H // KV
    scale = 1 / np.sqrt(HD)
    sl2 = np.float32(scale * LOG2E)
    dqkv = np.full((B * T, ld), np.nan, np.float32)
    dq = np.zeros((B * T, H * HD))
    # delta
    delta = np.zeros((B, H, T))
    for n in range(B * T):
        for h in range(H):
            delta[n // T, h, n % T] = (dout[n, h * HD:(h + 1) * HD].astype(np.float64) * out[n, h * HD:(h + 1) * HD]).sum()
    DQ_SPLIT = 2 if HD >= 32 else 1
    DW = HD // DQ_SPLIT
    nkt = (T + BC - 1) // BC
    for bg in range(B * KV):
        b, g = bg // KV, bg % KV
        base = qkv[b * T:(b + 1) * T]
        for jt in range(nkt):
            k0 = jt * BC
            sK = np.zeros((BC, HD + 8), np.float32); sV = np.zeros((BC, HD + 8), np.float32)
            for r in range(BC):
                if k0 + r < T:
                    sK[r, :HD] = base[k0 + r, (H + g) * HD:(H + g + 1) * HD]
                    sV[r, :HD] = base[k0 + r, (H + KV + g) * HD:(H + KV + g + 1) * HD]
            nq = (T + BR - 1) // BR
            i0 = k0 // BR
            per_head = nq - i0
            dk = np.zeros((WARPS, HD // 8, 32, 4)); dv = np.zeros((WARPS, HD // 8, 32, 4))
            for it in range(grp * per_head):
                h = g * grp + it // per_head
                qs = (i0 + it % per_head) * BR
                sQ = np.zeros((BR, HD + 8), np.float32); sdO = np.zeros((BR, HD + 8), np.float32)
                sL = np.zeros(BR, np.float32); sD = np.zeros(BR, np.float32)
                for r in range(BR):
                    if qs + r < T:
                        sQ[r, :HD] = base[qs + r, h * HD:(h + 1) * HD]
                        sdO[r, :HD] = dout[b * T + qs + r, h * HD:(h + 1) * HD]
                        sL[r] = lse[b, h, qs + r]
                        sD[r] = delta[b, h, qs + r]
                sdS = np.full((BC, BR + 8), np.nan, np.float32)
                for warp in range(WARPS):
                    krow0 = k0 + warp * 16 + G; krow1 = krow0 + 8
                    s = np.zeros((BR // 8, 32, 4)); dp = np.zeros((BR // 8, 32, 4))
                    for kk in range(HD // 16):
                        ka = ldsm_x4(sK, warp * 16 + a_row(L), kk * 16 + a_col(L))
                        va = ldsm_x4(sV, warp * 16 + a_row(L), kk * 16 + a_col(L))
                        for np_ in range(BR // 16):
                            bq = ldsm_x4(sQ, np_ * 16 + bn_row(L), kk * 16 + bn_col(L))
                            bo = ldsm_x4(sdO, np_ * 16 + bn_row(L), kk * 16 + bn_col(L))
                            mma(s[2 * np_], ka, bq[0], bq[1]); mma(s[2 * np_ + 1], ka, bq[2], bq[3])
                            mma(dp[2 * np_], va, bo[0], bo[1]); mma(dp[2 * np_ + 1], va, bo[2], bo[3])
                    edge = qs < k0 + BC or qs + BR > T
                    for nt in range(BR // 8):
                        for e in range(4):
                            qc = nt * 8 + TQ * 2 + (e & 1); q = qs + qc
                            krow = krow0 if e < 2 else krow1
                            p = np.exp2(s[nt][:, e] * sl2 - sL[qc] * LOG2E)
                            if edge:
                                p = np.where((q < krow) | (q >= T), 0, p)
                            s[nt][:, e] = p
                            dp[nt][:, e] = p * (dp[nt][:, e] - sD[qc])
                    for kc in range(BR // 16):
                        pa = [pack(s[2 * kc][:, 0], s[2 * kc][:, 1]), pack(s[2 * kc][:, 2], s[2 * kc][:, 3]),
                              pack(s[2 * kc + 1][:, 0], s[2 * kc + 1][:, 1]), pack(s[2 * kc + 1][:, 2], s[2 * kc + 1][:, 3])]
                        sa = [pack(dp[2 * kc][:, 0], dp[2 * kc][:, 1]), pack(dp[2 * kc][:, 2], dp[2 * kc][:, 3]),
                              pack(dp[2 * kc + 1][:, 0], dp[2 * kc + 1][:, 1]), pack(dp[2 * kc + 1][:, 2], dp[2 * kc + 1][:, 3])]
                        for dq2 in range(HD // 16):
                            bo = ldsm_x4_t(sdO, kc * 16 + a_row(L), dq2 * 16 + a_col(L))
                            bq = ldsm_x4_t(sQ, kc * 16 + a_row(L), dq2 * 16 + a_col(L))
                            mma(dv[warp][2 * dq2], pa, bo[0], bo[1]); mma(dv[warp][2 * dq2 + 1], pa, bo[2], bo[3])
                            mma(dk[warp][2 * dq2], sa, bq[0], bq[1]); mma(dk[warp][2 * dq2 + 1], sa, bq[2], bq[3])
                        for lane in range(32):
                            r0 = warp * 16 + G[lane]; c = kc * 16 + TQ[lane] * 2
                            sdS[r0, c:c + 2] = sa[0][lane]
                            sdS[r0 + 8, c:c + 2] = sa[1][lane]
                            sdS[r0, c + 8:c + 10] = sa[2][lane]
                            sdS[r0 + 8, c + 8:c + 10] = sa[3][lane]
                # __syncthreads; dQ
                for warp in range(WARPS):
                    qr, dc0 = (warp % 4) * 16, (warp // 4) * DW
                    if warp // 4 >= DQ_SPLIT:
                        continue
                    acc = np.zeros((DW // 8, 32, 4))
                    for kc in range(BC // 16):
                        a = ldsm_x4_t(sdS, kc * 16 + bn_row(L), qr + bn_col(L))
                        for dp2 in range(DW // 16):
                            bk = ldsm_x4_t(sK, kc * 16 + a_row(L), dc0 + dp2 * 16 + a_col(L))
                            mma(acc[2 * dp2], a, bk[0], bk[1]); mma(acc[2 * dp2 + 1], a, bk[2], bk[3])
                    for lane in range(32):
                        q0r = qs + qr + G[lane]; q1r = q0r + 8
                        for dt in range(DW // 8):
                            c = h * HD + dc0 + dt * 8 + TQ[lane] * 2
                            if q0r < T:
                                dq[b * T + q0r, c:c + 2] += acc[dt][lane, 0:2]
                            if q1r < T:
                                dq[b * T + q1r, c:c + 2] += acc[dt][lane, 2:4]
            for warp in range(WARPS):
                for lane in range(32):
                    krow0 = k0 + warp * 16 + G[lane]; krow1 = krow0 + 8
                    for dt in range(HD // 8):
                        ck = (H + g) * HD + dt * 8 + TQ[lane] * 2
                        cv = (H + KV + g) * HD + dt * 8 + TQ[lane] * 2
                        if krow0 < T:
                            dqkv[b * T + krow0, ck:ck + 2] = bf16(dk[warp][dt][lane, 0:2] * scale)
                            dqkv[b * T + krow0, cv:cv + 2] = bf16(dv[warp][dt][lane, 0:2])
                        if krow1 < T:
                            dqkv[b * T + krow1, ck:ck + 2] = bf16(dk[warp][dt][lane, 2:4] * scale)
                            dqkv[b * T + krow1, cv:cv + 2] = bf16(dv[warp][dt][lane, 2:4])
    dqkv[:, :H * HD] = bf16(dq * scale)
    return dqkv


def rel(a, b):
    return np.linalg.norm((a - b).ravel()) / np.linalg.norm(b.ravel())


def case(B, T, H, KV, HD, seed=0):
    rng = np.random.default_rng(seed)
    W = (H + 2 * KV) * HD
    qkv = bf16(rng.standard_normal((B * T, W)).astype(np.float32))
    dout = bf16(rng.standard_normal((B * T, H * HD)).astype(np.float32))
    out_r, lse_r, P = ref_attention(qkv, B, T, H, KV, HD)
    out_e, lse_e = emu_fwd(qkv, B, T, H, KV, HD)
    d_r = ref_attention_bwd(dout, qkv, out_r, lse_r, B, T, H, KV, HD, P)
    d_e = emu_bwd(dout, qkv, out_e, lse_e, B, T, H, KV, HD)
    hq = H * HD
    print(f"B{B} T{T} H{H} KV{KV} HD{HD}: out {rel(out_e, out_r):.2e} lse {rel(lse_e, lse_r):.2e} "
          f"dq {rel(d_e[:, :hq], d_r[:, :hq]):.2e} dk {rel(d_e[:, hq:hq + KV * HD], d_r[:, hq:hq + KV * HD]):.2e} "
          f"dv {rel(d_e[:, hq + KV * HD:], d_r[:, hq + KV * HD:]):.2e} nan {np.isnan(out_e).sum() + np.isnan(d_e).sum()}")
    sys.stdout.flush()


if __name__ == "__main__":
    case(1, 20, 2, 1, 16)
    case(2, 70, 2, 2, 16)
    case(1, 150, 4, 2, 32)
    case(1, 130, 2, 1, 64)
    case(1, 9, 2, 2, 64)
    case(1, 140, 2, 1, 128)
