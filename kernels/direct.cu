// Tiled direct convolution: one block computes a TH x TW tile of output pixels for KPT
// output channels of one image; input patches and filter slices of `cb` input channels at a
// time are staged in (dynamic) shared memory. No workspace.
//
// Grid: x = tiles_h * tiles_w (row-major over output tiles), y = groups * ceil(kg / KPT),
// z = N. Dynamic shared memory: cb * (in_tile_h * in_tile_w + KPT * R * S) accumulator words,
// computed by algorithms/cuda/direct.py (direct_smem_words).
//
// The backward directions (below the forward kernel) need neither shared tiles nor a
// workspace: direct_bwd_data gathers each dx element from the dy positions that read it,
// direct_bwd_filter reduces each dw element over the batch and the output pixels.
#include "common.cuh"

// Registers are capped at 128 per thread (as for a 512-thread block): room for KPT
// accumulators (double too) while keeping 16+ warps resident per SM.
template <typename T, int TH, int TW, int KPT>
__global__ void __launch_bounds__(TH * TW, 512 / (TH * TW))
    direct_conv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                CONV_SHAPE_PARAMS, int tiles_w, int cb) {
    typedef typename AccOf<T>::type A;
    constexpr int THREADS = TH * TW;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    A* s_in = reinterpret_cast<A*>(smem_raw);

    const int cg = C / groups;
    const int kg = K / groups;
    const int RS = R * S;
    // The input footprint of a TH x TW output tile (stride and dilation included).
    const int in_h = (TH - 1) * str_h + (R - 1) * dil_h + 1;
    const int in_w = (TW - 1) * str_w + (S - 1) * dil_w + 1;
    const int in_tile = in_h * in_w;
    A* s_w = s_in + cb * in_tile;

    const int kblocks = (kg + KPT - 1) / KPT;
    const int g = blockIdx.y / kblocks;
    const int k0 = (blockIdx.y - g * kblocks) * KPT;  // first output channel, within group
    const int n = blockIdx.z;
    const int tile_p = blockIdx.x / tiles_w;
    const int tile_q = blockIdx.x - tile_p * tiles_w;
    const int p0 = tile_p * TH;
    const int q0 = tile_q * TW;
    const int ih0 = tap_input(p0, 0, pad_h, str_h, dil_h);
    const int iw0 = tap_input(q0, 0, pad_w, str_w, dil_w);
    const int tid = threadIdx.y * TW + threadIdx.x;

    const T* xg = x + (static_cast<long long>(n) * C + g * cg) * H * W;
    const T* wg = w + static_cast<long long>(g * kg + k0) * cg * RS;

    A acc[KPT];
#pragma unroll
    for (int kk = 0; kk < KPT; ++kk) acc[kk] = A(0);

    for (int c0 = 0; c0 < cg; c0 += cb) {
        const int cn = min(cb, cg - c0);
        // Input patch, zero outside the image (that is the padding); 4 loads in flight
        // per thread.
        stage_shared<4, THREADS>(s_in, cn * in_tile, tid, [&](int i) {
            const int cc = i / in_tile;
            const int rem = i - cc * in_tile;
            const int a = rem / in_w;
            const int ih = ih0 + a;
            const int iw = iw0 + rem - a * in_w;
            return ih >= 0 && ih < H && iw >= 0 && iw < W
                       ? load_acc(xg + (static_cast<long long>(c0 + cc) * H + ih) * W + iw)
                       : A(0);
        });
        // Filter slice s_w[cc][kk][r][s]; channels past kg read as zero.
        const int wslice = KPT * RS;
        stage_shared<4, THREADS>(s_w, cn * wslice, tid, [&](int i) {
            const int cc = i / wslice;
            const int rem = i - cc * wslice;
            const int kk = rem / RS;
            const int rs = rem - kk * RS;
            return k0 + kk < kg
                       ? load_acc(wg + (static_cast<long long>(kk) * cg + c0 + cc) * RS + rs)
                       : A(0);
        });
        __syncthreads();
        for (int cc = 0; cc < cn; ++cc) {
            const A* si = s_in + cc * in_tile + threadIdx.y * str_h * in_w + threadIdx.x * str_w;
            const A* sw = s_w + cc * wslice;
            for (int r = 0; r < R; ++r) {
                for (int s = 0; s < S; ++s) {
                    const A v = si[r * dil_h * in_w + s * dil_w];
                    const int rs = r * S + s;
#pragma unroll
                    for (int kk = 0; kk < KPT; ++kk) acc[kk] += v * sw[kk * RS + rs];
                }
            }
        }
        __syncthreads();  // the next chunk overwrites the tiles
    }

    const int p = p0 + threadIdx.y;
    const int q = q0 + threadIdx.x;
    if (p < P && q < Q) {
        T* yp = y + ((static_cast<long long>(n) * K + g * kg + k0) * P + p) * Q + q;
#pragma unroll
        for (int kk = 0; kk < KPT; ++kk) {
            if (k0 + kk < kg) store_acc(yp + static_cast<long long>(kk) * P * Q, acc[kk]);
        }
    }
}

// backward_data: dx[n][g*cg + c][ih][iw] = sum over the group's k and the taps (r, s) whose
// output position (p, q) is integral and in range (tap_output) of dy[n][k][p][q] * w[k][c][r][s].
// One thread per input pixel computes CPT channels, so each dy load serves CPT products.
// Grid: x = ceil(H * W / 256), y = groups * cblocks (cblocks = ceil(cg / CPT)), z = N.
template <typename T, int CPT>
__global__ void __launch_bounds__(256)
    direct_bwd_data(const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
                    CONV_SHAPE_PARAMS, int cblocks) {
    typedef typename AccOf<T>::type A;
    const int cg = C / groups;
    const int kg = K / groups;
    const int RS = R * S;
    const int PQ = P * Q;
    const int g = blockIdx.y / cblocks;
    const int c0 = (blockIdx.y - g * cblocks) * CPT;  // first input channel, within group
    const int n = blockIdx.z;
    const int hw = blockIdx.x * blockDim.x + threadIdx.x;
    if (hw >= H * W) return;
    const int ih = hw / W;
    const int iw = hw - ih * W;
    const int cn = min(CPT, cg - c0);
    const T* dyg = dy + (static_cast<long long>(n) * K + g * kg) * PQ;
    const T* wg = w + (static_cast<long long>(g) * kg * cg + c0) * RS;

    A acc[CPT];
#pragma unroll
    for (int cc = 0; cc < CPT; ++cc) acc[cc] = A(0);
    for (int r = 0; r < R; ++r) {
        const int p = tap_output(ih, r, pad_h, str_h, dil_h, P);
        if (p < 0) continue;
        for (int s = 0; s < S; ++s) {
            const int q = tap_output(iw, s, pad_w, str_w, dil_w, Q);
            if (q < 0) continue;
            const T* dyp = dyg + p * Q + q;
            const T* wp = wg + r * S + s;
            for (int k = 0; k < kg; ++k) {
                const A v = load_acc(dyp + static_cast<long long>(k) * PQ);
#pragma unroll
                for (int cc = 0; cc < CPT; ++cc) {
                    // Channels past cg re-read the last one (no branch); they are not stored.
                    const int ch = min(cc, cn - 1);
                    acc[cc] += v * load_acc(wp + (static_cast<long long>(k) * cg + ch) * RS);
                }
            }
        }
    }
    T* dxp = dx + ((static_cast<long long>(n) * C + g * cg + c0) * H + ih) * W + iw;
#pragma unroll
    for (int cc = 0; cc < CPT; ++cc) {
        if (cc < cn) store_acc(dxp + static_cast<long long>(cc) * H * W, acc[cc]);
    }
}

// backward_filter: one block per dw element (k, c, r, s), flattened in dw's own order on
// grid x, reduces dy[n][k][p][q] * x[n][g*cg + c][tap_input(p, r)][tap_input(q, s)] over
// n, p, q: each thread sums a strided share in the accumulator type (float for half), then
// a fixed-order shared-memory tree adds the THREADS partial sums. Only N*P*Q/THREADS terms
// are summed serially, which keeps the error small at large N; the order never depends on
// scheduling, so the result is deterministic.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    direct_bwd_filter(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dw,
                      CONV_SHAPE_PARAMS, unsigned int pq_mul, unsigned int pq_shr,
                      unsigned int q_mul, unsigned int q_shr) {
    typedef typename AccOf<T>::type A;
    __shared__ A part[THREADS];
    const int cg = C / groups;
    const int kg = K / groups;
    const int RS = R * S;
    const int PQ = P * Q;
    const int e = blockIdx.x;
    const int kc = e / RS;
    const int rs = e - kc * RS;
    const int k = kc / cg;
    const int c = kc - k * cg;
    const int r = rs / S;
    const int s = rs - r * S;
    const T* xc = x + static_cast<long long>(k / kg * cg + c) * H * W;
    const T* dyk = dy + static_cast<long long>(k) * PQ;

    A acc = A(0);
    const int total = N * PQ;  // one channel of dy over the batch: < 2^31 like dy itself
    // An unsigned counter: a signed one, past 2^31 - THREADS, wrapped negative and the loop
    // read gigabytes past dy's end (total in the last THREADS below 2^31; a review of
    // index overflow, 2026-11-30). total < 2^31 keeps i + THREADS below 2^32.
    for (unsigned u = threadIdx.x; u < static_cast<unsigned>(total); u += THREADS) {
        const int i = static_cast<int>(u);
        const int img = fast_div(i, pq_mul, pq_shr);
        const int pq = i - img * PQ;
        const int p = fast_div(pq, q_mul, q_shr);
        const int q = pq - p * Q;
        const int ih = tap_input(p, r, pad_h, str_h, dil_h);
        const int iw = tap_input(q, s, pad_w, str_w, dil_w);
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            const A v = load_acc(dyk + static_cast<long long>(img) * K * PQ + pq);
            acc += v * load_acc(xc + (static_cast<long long>(img) * C * H + ih) * W + iw);
        }
    }
    part[threadIdx.x] = acc;
    __syncthreads();
#pragma unroll
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) store_acc(dw + e, part[0]);
}
