// Tiled direct convolution: one block computes a TH x TW tile of output pixels for KPT
// output channels of one image; input patches and filter slices of `cb` input channels at a
// time are staged in (dynamic) shared memory. No workspace.
//
// Grid: x = tiles_h * tiles_w (row-major over output tiles), y = groups * ceil(kg / KPT),
// z = N. Dynamic shared memory: cb * (in_tile_h * in_tile_w + KPT * R * S) accumulator words,
// computed by algorithms/cuda/direct.py (direct_smem_words).
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
    const int ih0 = p0 * str_h - pad_h;
    const int iw0 = q0 * str_w - pad_w;
    const int tid = threadIdx.y * TW + threadIdx.x;

    const T* xg = x + (static_cast<long long>(n) * C + g * cg) * H * W;
    const T* wg = w + static_cast<long long>(g * kg + k0) * cg * RS;

    A acc[KPT];
#pragma unroll
    for (int kk = 0; kk < KPT; ++kk) acc[kk] = A(0);

    for (int c0 = 0; c0 < cg; c0 += cb) {
        const int cn = min(cb, cg - c0);
        // Input patch, zero outside the image (that is the padding).
        for (int i = tid; i < cn * in_tile; i += THREADS) {
            const int cc = i / in_tile;
            const int rem = i - cc * in_tile;
            const int a = rem / in_w;
            const int b = rem - a * in_w;
            const int ih = ih0 + a;
            const int iw = iw0 + b;
            A v = A(0);
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
                v = load_acc(xg + (static_cast<long long>(c0 + cc) * H + ih) * W + iw);
            }
            s_in[i] = v;
        }
        // Filter slice s_w[cc][kk][r][s]; channels past kg read as zero.
        const int wslice = KPT * RS;
        for (int i = tid; i < cn * wslice; i += THREADS) {
            const int cc = i / wslice;
            const int rem = i - cc * wslice;
            const int kk = rem / RS;
            const int rs = rem - kk * RS;
            A v = A(0);
            if (k0 + kk < kg) {
                v = load_acc(wg + (static_cast<long long>(kk) * cg + c0 + cc) * RS + rs);
            }
            s_w[i] = v;
        }
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
