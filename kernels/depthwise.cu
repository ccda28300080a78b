// Depthwise convolution (groups == C, K = M * C): memory-bound, so each input element should
// cross the memory bus once. One block takes one (image, input channel) plane and one
// TILE_H x TILE_W tile of its output pixels: it stages the tile's input footprint (the halo
// included, zero where it falls in the padding) in shared memory once, converted to the
// accumulation type, together with the M * R * S filter taps of the channel (stage_shared:
// four loads in flight per thread, where a load-then-store loop had one), then computes
// the tile for each of the M output channels c * M + j that read this plane. A thread
// computes PH vertically adjacent output pixels (TILE_H = TH * PH): its PH accumulators share
// each filter tap it loads. Lanes run along the output width, so loads of the footprint
// (row-major over the whole block) and stores of y are coalesced. No workspace.
//
// KR, KS > 0 fix the filter size at compile time (a 3x3 instance): the tap loops unroll, so
// tap offsets become immediates and the per-output instruction count drops, which matters
// for a kernel that must issue little more than its loads to keep up with HBM. 0 reads R and
// S at run time.
//
// Grid: x = N * C * tiles_h * tiles_w, tiles fastest (neighbouring blocks share halo rows in
// L2). Dynamic shared memory: (in_h * in_w + M * R * S) accumulator words, where
// in_h = (TILE_H - 1) * str_h + (R - 1) * dil_h + 1 and likewise in_w; computed by
// algorithms/cuda/depthwise.py (smem_bytes).
#include "common.cuh"

// Registers capped at 64 per thread (1024 resident threads per SM, half of an H100's): a
// memory-bound kernel wants many loads in flight, and without the minimum-blocks argument
// ptxas 13 capped these at 32 and spilled the double instances.
template <typename T, int TW, int TH, int PH, int KR, int KS>
__global__ void __launch_bounds__(TW * TH, 1024 / (TW * TH))
    depthwise_conv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   CONV_SHAPE_PARAMS, int tiles_w, int tiles) {
    typedef typename AccOf<T>::type A;
    constexpr int THREADS = TW * TH;
    constexpr int TILE_H = TH * PH;
    constexpr int FILL_LOADS = 4;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    A* s_in = reinterpret_cast<A*>(smem_raw);

    const int M = K / C;  // channel multiplier (groups == C)
    const int RR = KR > 0 ? KR : R;
    const int SS = KS > 0 ? KS : S;
    const int RS = RR * SS;
    const int in_h = (TILE_H - 1) * str_h + (R - 1) * dil_h + 1;
    const int in_w = (TW - 1) * str_w + (S - 1) * dil_w + 1;
    const int in_tile = in_h * in_w;
    A* s_w = s_in + in_tile;

    const int plane = blockIdx.x / tiles;  // n * C + c
    const int tile = blockIdx.x - plane * tiles;
    const int c = plane % C;
    const int n = plane / C;
    const int tile_p = tile / tiles_w;
    const int p0 = tile_p * TILE_H;
    const int q0 = (tile - tile_p * tiles_w) * TW;
    const int ih0 = p0 * str_h - pad_h;
    const int iw0 = q0 * str_w - pad_w;
    const int tid = threadIdx.y * TW + threadIdx.x;

    // The footprint, zero outside the image (that is the padding), FILL_LOADS loads in
    // flight per thread.
    const T* xp = x + static_cast<long long>(plane) * H * W;
    stage_shared<FILL_LOADS, THREADS>(s_in, in_tile, tid, [&](int i) {
        const int a = i / in_w;
        const int ih = ih0 + a;
        const int iw = iw0 + i - a * in_w;
        return ih >= 0 && ih < H && iw >= 0 && iw < W ? load_acc(xp + ih * W + iw) : A(0);
    });
    // The taps of output channels c * M .. c * M + M - 1 (w is (K, 1, R, S)), contiguous.
    const T* wp = w + static_cast<long long>(c) * M * RS;
    stage_shared<FILL_LOADS, THREADS>(s_w, M * RS, tid, [&](int i) { return load_acc(wp + i); });
    __syncthreads();

    const int q = q0 + threadIdx.x;
    const int row0 = threadIdx.y * PH;  // this thread's first output row within the tile
    const A* si = s_in + row0 * str_h * in_w + threadIdx.x * str_w;
    for (int j = 0; j < M; ++j) {
        const A* sw = s_w + j * RS;
        A acc[PH];
#pragma unroll
        for (int i = 0; i < PH; ++i) acc[i] = A(0);
#pragma unroll
        for (int r = 0; r < RR; ++r) {
            const A* srow = si + r * dil_h * in_w;
#pragma unroll
            for (int s = 0; s < SS; ++s) {
                const A wv = sw[r * SS + s];
                const A* sp = srow + s * dil_w;
#pragma unroll
                for (int i = 0; i < PH; ++i) acc[i] += sp[i * str_h * in_w] * wv;
            }
        }
        if (q < Q) {
            T* yp = y + (static_cast<long long>(n) * K + c * M + j) * P * Q + q;
#pragma unroll
            for (int i = 0; i < PH; ++i) {
                const int p = p0 + row0 + i;
                if (p < P) store_acc(yp + static_cast<long long>(p) * Q, acc[i]);
            }
        }
    }
}

// depthwise_flat: no shared memory and no barrier. One thread computes QV adjacent output
// pixels of one output row, reading its taps' inputs straight from global memory (its
// neighbours' reads of the same rows hit L1/L2), as PyTorch's NCHW depthwise kernel does.
// The tile kernel above stages a footprint per block and waits at a barrier: on 7x7 and
// 14x14 planes most of its threads idle, and on strided layers its blocks are short; the
// flat kernel keeps every thread busy on any plane size.
//
// Grid: one thread per (n, k, p, group of QV columns), the column groups fastest, so a
// warp's loads and stores run along rows. A thread whose window lies inside the image
// takes the unchecked loop; one near the border checks each input coordinate.
// SW > 0: the stride along the width is SW and its dilation 1 (compiled in), so the
// (QV - 1) * SW + S inputs of a filter row are loaded once into registers and shared by the
// QV outputs (at stride 2, 9 loads a row for 4 outputs instead of 12). SW == 0: any stride
// and dilation, read at run time, each tap loaded by the output that reads it.
constexpr int DW_FLAT_THREADS = 256;

template <bool CHECK, int QV, int KR, int KS, int SW, typename T, typename A>
__device__ __forceinline__ void depthwise_flat_sum(A (&acc)[QV], const T* __restrict__ xp,
                                                   const T* __restrict__ wp, int ih0, int iw0,
                                                   int H, int W, int RR, int SS, int str_w,
                                                   int dil_h, int dil_w) {
#pragma unroll
    for (int r = 0; r < (KR > 0 ? KR : RR); ++r) {
        const int ih = ih0 + r * dil_h;
        if (CHECK && (ih < 0 || ih >= H)) continue;
        const T* xr = xp + ih * W;
        if constexpr (SW > 0) {
            A v[(QV - 1) * SW + KS];
#pragma unroll
            for (int j = 0; j < (QV - 1) * SW + KS; ++j) {
                const int iw = iw0 + j;
                v[j] = !CHECK || (iw >= 0 && iw < W) ? load_acc(xr + iw) : A(0);
            }
#pragma unroll
            for (int s = 0; s < KS; ++s) {
                const A wv = load_acc(wp + r * KS + s);
#pragma unroll
                for (int q = 0; q < QV; ++q) acc[q] += v[q * SW + s] * wv;
            }
        } else {
#pragma unroll
            for (int s = 0; s < (KS > 0 ? KS : SS); ++s) {
                const A wv = load_acc(wp + r * SS + s);
#pragma unroll
                for (int q = 0; q < QV; ++q) {
                    const int iw = iw0 + q * str_w + s * dil_w;
                    if (!CHECK || (iw >= 0 && iw < W)) acc[q] += load_acc(xr + iw) * wv;
                }
            }
        }
    }
}

// Registers capped at 64 (4 blocks of 256 threads), as for depthwise_conv.
template <typename T, int QV, int KR, int KS, int SW>
__global__ void __launch_bounds__(DW_FLAT_THREADS, 4)
    depthwise_flat(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                   CONV_SHAPE_PARAMS, int groups_q, unsigned int gq_mul, unsigned int gq_shift,
                   unsigned int p_mul, unsigned int p_shift, unsigned int k_mul,
                   unsigned int k_shift, unsigned int m_mul, unsigned int m_shift, int total) {
    static_assert(SW == 0 || KS > 0, "SW keeps a filter row in registers: KS is fixed");
    typedef typename AccOf<T>::type A;
    const int idx = blockIdx.x * DW_FLAT_THREADS + threadIdx.x;
    if (idx >= total) return;
    const int row = fast_div(idx, gq_mul, gq_shift);  // (n * K + k) * P + p
    const int q0 = (idx - row * groups_q) * QV;
    const int plane = fast_div(row, p_mul, p_shift);  // n * K + k
    const int p = row - plane * P;
    const int n = fast_div(plane, k_mul, k_shift);
    const int k = plane - n * K;
    const int c = fast_div(k, m_mul, m_shift);  // k / M: output channel k reads channel c
    const int RR = KR > 0 ? KR : R;
    const int SS = KS > 0 ? KS : S;
    const T* xp = x + (static_cast<long long>(n) * C + c) * H * W;
    const T* wp = w + static_cast<long long>(k) * RR * SS;
    const int ih0 = p * str_h - pad_h;
    const int iw0 = q0 * str_w - pad_w;
    const bool inside = ih0 >= 0 && ih0 + (RR - 1) * dil_h < H && iw0 >= 0 &&
                        iw0 + (QV - 1) * str_w + (SS - 1) * dil_w < W;
    A acc[QV];
#pragma unroll
    for (int q = 0; q < QV; ++q) acc[q] = A(0);
    if (inside) {
        depthwise_flat_sum<false, QV, KR, KS, SW>(acc, xp, wp, ih0, iw0, H, W, RR, SS,
                                                  str_w, dil_h, dil_w);
    } else {
        depthwise_flat_sum<true, QV, KR, KS, SW>(acc, xp, wp, ih0, iw0, H, W, RR, SS,
                                                 str_w, dil_h, dil_w);
    }
    T* yp = y + static_cast<long long>(row) * Q + q0;
#pragma unroll
    for (int q = 0; q < QV; ++q) {
        if (q0 + q < Q) store_acc(yp + q, acc[q]);
    }
}
