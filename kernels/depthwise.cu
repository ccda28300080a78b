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
