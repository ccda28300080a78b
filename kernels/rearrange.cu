// Rearranging copies. `remap`: those of a backward direction computed as a forward problem
// (algorithms/by_forward.py, `Remap`): over a source viewed as (G, A, M, B, SH, SW),
//   dst[g][b][m][a][i][j] = src[g][a][m][b][y][x],
// where (i, j) is first mirrored to (DH-1-i, DW-1-j) when `flip`, then y = (i - off_h) /
// step_h when that is a whole number in [0, SH) (likewise x), and dst is 0 otherwise. That
// one copy spreads dy between stride holes, flips and transposes the filter, windows x, and
// swaps axes, so each needs no kernel of its own. T is an unsigned integer of the element's
// size: values are copied as bits, exactly, whatever the float format.
//
// One thread per destination element, grid-stride: writes are coalesced; reads are
// coalesced whenever the swapped axes are not the innermost ones (every use but the filter).
#include "common.cuh"

template <typename T>
__global__ void __launch_bounds__(256)
    remap(const T* __restrict__ src, T* __restrict__ dst, int A, int M, int B, int SH, int SW,
          int DH, int DW, int off_h, int off_w, int step_h, int step_w, int flip, int total,
          unsigned int dw_mul, unsigned int dw_shr, unsigned int dh_mul, unsigned int dh_shr,
          unsigned int a_mul, unsigned int a_shr, unsigned int m_mul, unsigned int m_shr,
          unsigned int b_mul, unsigned int b_shr) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int idx = static_cast<int>(u);
        const int row = fast_div(idx, dw_mul, dw_shr);  // (((g*B + b)*M + m)*A + a)*DH + i
        int j = idx - row * DW;
        const int plane = fast_div(row, dh_mul, dh_shr);  // ((g*B + b)*M + m)*A + a
        int i = row - plane * DH;
        const int gbm = fast_div(plane, a_mul, a_shr);  // (g*B + b)*M + m
        const int a = plane - gbm * A;
        const int gb = fast_div(gbm, m_mul, m_shr);  // g*B + b
        const int m = gbm - gb * M;
        const int g = fast_div(gb, b_mul, b_shr);
        const int b = gb - g * B;
        if (flip) {
            i = DH - 1 - i;
            j = DW - 1 - j;
        }
        // tap_output with tap 0 is exactly "the source row that lands on i": i = off + y*step.
        const int y = tap_output(i, 0, -off_h, step_h, 0, SH);
        const int x = tap_output(j, 0, -off_w, step_w, 0, SW);
        T value = 0;  // all-zero bits: +0.0 in every float format
        if (y >= 0 && x >= 0)
            value = src[(((static_cast<long long>(g * A + a) * M + m) * B + b) * SH + y) * SW + x];
        dst[idx] = value;
    }
}

// backward_data by stride phases (algorithms/phases.py). phase_filter: over dst viewed as
// (G, AH, AW, CG, KG, JH, JW), dst = w[g][kg][cg][th + SH*(JH-1-j)][tw + SW*(JW-1-l)] viewed as
// (G, KG, CG, R, S), 0 where that tap is past the filter. phase_shuffle: over dx viewed as
// (N, G, CG, H, W), the phase (th, tw) = ((i + PH) % SH, (j + PW) % SW); dx = 0 when it has
// no taps (th >= AH or tw >= AW), else z[n][g][th][tw][cg][oh][ow] viewed as (N, G, AH, AW,
// CG, QH, QW), oh = (i + PH - th) / SH - QH0 (likewise ow). Bits, like remap; one thread
// per destination element, grid-stride; plain division: these copies are small next to the
// convolution between them.
// The next digit of a flat index in a mixed radix, innermost first: rest % base, and rest
// moves on to the remaining digits.
__device__ __forceinline__ int take_digit(int& rest, int base) {
    const int digit = rest % base;
    rest /= base;
    return digit;
}

template <typename T>
__global__ void __launch_bounds__(256)
    phase_filter(const T* __restrict__ w, T* __restrict__ dst, int KG, int CG, int R, int S,
                 int SH, int SW, int AH, int AW, int JH, int JW, int total) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        int rest = static_cast<int>(u);
        const int l = take_digit(rest, JW), j = take_digit(rest, JH);
        const int k = take_digit(rest, KG), c = take_digit(rest, CG);
        const int tw = take_digit(rest, AW), th = take_digit(rest, AH);
        const int g = rest;
        const int t = th + SH * (JH - 1 - j), v = tw + SW * (JW - 1 - l);
        T value = 0;
        if (t < R && v < S)
            value = w[((static_cast<long long>(g * KG + k) * CG + c) * R + t) * S + v];
        dst[u] = value;
    }
}

template <typename T>
__global__ void __launch_bounds__(256)
    phase_shuffle(const T* __restrict__ z, T* __restrict__ dx, int G, int CG, int H, int W,
                  int SH, int SW, int PH, int PW, int AH, int AW, int QH0, int QW0, int QH,
                  int QW, int total) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        int rest = static_cast<int>(u);
        const int x = take_digit(rest, W), y = take_digit(rest, H);
        const int c = take_digit(rest, CG), g = take_digit(rest, G);
        const int n = rest;
        const int th = (y + PH) % SH, tw = (x + PW) % SW;
        T value = 0;
        if (th < AH && tw < AW) {
            const int oh = (y + PH - th) / SH - QH0, ow = (x + PW - tw) / SW - QW0;
            const long long plane = (((static_cast<long long>(n) * G + g) * AH + th) * AW + tw) * CG + c;
            value = z[(plane * QH + oh) * QW + ow];
        }
        dx[u] = value;
    }
}

// Blocks of absmax_parts per operand (_rearrange.SCALE_BLOCKS): the partial maxima each
// transpose block of 3xFP16 reads back.
constexpr int SCALE_BLOCKS = 64;

// 3xFP16's scale of a tensor: the power of two s with max |v| * s in [2^14, 2^15), from the
// SCALE_BLOCKS partial maxima absmax_parts left in its copy's tail; 1 where the maximum is
// 0, infinite or NaN, and capped at 2^127 (a maximum below 2^-113 is all but zero).
__device__ __forceinline__ float parts_scale(float peak) {
    const int e = static_cast<int>((__float_as_uint(peak) >> 23) & 0xFF);  // biased exponent
    if (peak == 0.0f || e == 0xFF) return 1.0f;
    const int scaled = min(127 + 14 - (e - 127), 254);  // biased exponent of 2^(14 - log2)
    return __uint_as_float(static_cast<unsigned int>(max(scaled, 1)) << 23);
}

// Each operand's partial maxima of |v| for 3xFP16's scales: blocks [0, SCALE_BLOCKS) over x,
// the next SCALE_BLOCKS over w, block b writing tail[1 + b % SCALE_BLOCKS] of its operand
// (tail: the floats after its two float16 copies; tail[0] is the scale, transpose's). fmaxf
// passes over NaN, and infinities are passed over too: a NaN or inf element comes through
// its own parts as non-finite, and the scale is the finite values' (an inf maximum took no
// scale, and every part of data past FP16's range overflowed: non-finite outputs the inf
// never reaches; a review of numerical edge cases, 2026-11-30).
__global__ void __launch_bounds__(256)
    absmax_parts(const float* __restrict__ x, float* __restrict__ x_tail, int nx,
                 const float* __restrict__ w, float* __restrict__ w_tail, int nw) {
    __shared__ float best[256];
    const bool of_x = blockIdx.x < SCALE_BLOCKS;
    const float* src = of_x ? x : w;
    const int n = of_x ? nx : nw, b = blockIdx.x % SCALE_BLOCKS;
    float m = 0.0f;
    // Unsigned: a signed counter past 2^31 - SCALE_BLOCKS * 256 wrapped negative and read
    // far past the operand (n in the last 16384 below 2^31; a review of index overflow).
    for (unsigned i = b * 256u + threadIdx.x; i < static_cast<unsigned>(n);
         i += SCALE_BLOCKS * 256u) {
        const float a = fabsf(src[i]);
        m = fmaxf(m, a <= __uint_as_float(0x7F7FFFFFu) ? a : 0.0f);  // FLT_MAX: not inf, NaN
    }
    best[threadIdx.x] = m;
    __syncthreads();
    for (int half = 128; half > 0; half /= 2) {
        if (threadIdx.x < half) best[threadIdx.x] = fmaxf(best[threadIdx.x], best[threadIdx.x + half]);
        __syncthreads();
    }
    if (threadIdx.x == 0) (of_x ? x_tail : w_tail)[1 + b] = best[0];
}

// transpose's destination type: T's, or float16 for 3xFP16's parts (PARTS 3).
template <typename T, int PARTS>
struct TransposeDst {
    typedef T type;
};
template <>
struct TransposeDst<float, 3> {
    typedef half_t type;
};

// A batch of transposes, dst[b][j][i] = src[b][i][j] over (batch, rows, cols): NCHW -> NHWC
// with (rows, cols) = (C, H*W), and a filter (K, C/groups, R*S) -> (K, R*S, C/groups), the
// operands of the tensor-core kernels' NHWC configurations. PARTS 0: bits, like remap (T an
// unsigned type). PARTS 1 and 2, T float, for wgmma's TF32 operands (which the tensor core
// would truncate): dst holds tf32(v) (cvt.rna), and with PARTS 2 the whole batch's
// tf32(v - tf32(v)) follows it (3xTF32's big and small parts). PARTS 3, T float: dst is
// float16 (`TransposeDst`), h(v * s) then the whole batch's h(v * s - h(v * s)), h rounding
// to nearest even (3xFP16's big and small parts), s the power of two that takes the
// tensor's largest |v| to [2^14, 2^15) (FP16's range ends at 65504), worked out from
// absmax_parts' maxima in the tail after the two copies, where block 0 also leaves s for
// the GEMM to undo. One 32x32 tile per block iteration (grid-stride over batch x row tiles
// x column tiles) through shared memory, so that reads and writes are both coalesced; the +1
// column keeps the transposed reads off a single bank.
// STRIDED: column j of a source row is not element j but the pixel a 1x1 filter at a stride
// reads for output pixel j = p*Q + q: element (j / Q) * step_h + (j % Q) * step_w of a row
// of src_row (H*W) elements (step_h = stride_h * W, step_w = stride_w), so that cols = P*Q
// and the NHWC copy holds only the pixels the GEMM reads (a quarter at stride 2), which then
// runs as a stride-1 1x1 layer (algorithms/cuda/_rearrange.py `gathered`). Unused otherwise.
template <typename T, int PARTS, bool STRIDED = false>
__global__ void __launch_bounds__(256)
    transpose(const T* __restrict__ src, typename TransposeDst<T, PARTS>::type* __restrict__ dst,
              int rows, int cols,
              int row_tiles, int col_tiles, int tiles, unsigned int plane_mul,
              unsigned int plane_shr, unsigned int col_mul, unsigned int col_shr, int src_row,
              unsigned int q_mul, unsigned int q_shr, int q, int step_h, int step_w) {
    __shared__ T tile[32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    // Tiles are numbered (b, tile row, tile column), innermost last; (plane_mul, plane_shr)
    // divide by row_tiles * col_tiles and (col_mul, col_shr) by col_tiles. Why not `/`: two
    // 32-bit divisions per tile were a large share of the instructions of a kernel that
    // Nsight Compute found issue-bound (H200, 2026-11-25: 65% of issue slots busy, 19% of
    // DRAM bandwidth).
    const int per_plane = row_tiles * col_tiles;
    const long long plane =
        static_cast<long long>(fast_div(tiles, plane_mul, plane_shr)) * rows * cols;
    float scale = 1.0f;
    if constexpr (PARTS == 3) {  // the tensor's scale from its partial maxima
        float* tail = reinterpret_cast<float*>(dst + 2 * plane);
        float* maxima = &tile[0][0];  // the tile's first SCALE_BLOCKS floats, for a moment
        if (threadIdx.x < SCALE_BLOCKS) maxima[threadIdx.x] = tail[1 + threadIdx.x];
        __syncthreads();
        float peak = 0.0f;
        for (int i = 0; i < SCALE_BLOCKS; ++i) peak = fmaxf(peak, maxima[i]);
        scale = parts_scale(peak);
        if (blockIdx.x == 0 && threadIdx.x == 0) tail[0] = scale;  // for the GEMM
        __syncthreads();  // every thread has read the maxima before the tiles overwrite them
    }
    for (int u = blockIdx.x; u < tiles; u += gridDim.x) {
        const int b = fast_div(u, plane_mul, plane_shr);
        const int rest = u - b * per_plane;
        const int tile_row = fast_div(rest, col_mul, col_shr);
        const int i0 = tile_row * 32, j0 = (rest - tile_row * col_tiles) * 32;
        const long long base = static_cast<long long>(b) * rows * cols;
        // This thread's source column: j0 + tx itself, or the pixel it stands for.
        long long from = base + j0 + tx;
        int row_length = cols;
        if constexpr (STRIDED) {
            const int j = j0 + tx;
            const int p = fast_div(j, q_mul, q_shr);
            from = static_cast<long long>(b) * rows * src_row + p * step_h + (j - p * q) * step_w;
            row_length = src_row;
        }
        // Read rows i0 + ty + 8m, 32 consecutive columns: a thread's four loads first, then
        // its four stores (stage_shared's reason: one load in flight per element otherwise).
        T v[4] = {};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const int k = ty + 8 * m;
            if (i0 + k < rows && j0 + tx < cols)
                v[m] = src[from + static_cast<long long>(i0 + k) * row_length];
        }
#pragma unroll
        for (int m = 0; m < 4; ++m) tile[ty + 8 * m][tx] = v[m];
        __syncthreads();
        for (int k = ty; k < 32; k += 8) {  // write rows j0 + k of dst, 32 consecutive i
            if (j0 + k < cols && i0 + tx < rows) {
                const long long at = base + static_cast<long long>(j0 + k) * rows + i0 + tx;
                if constexpr (PARTS == 0) {
                    dst[at] = tile[tx][k];
                } else if constexpr (PARTS == 3) {
                    typename TransposeDst<T, PARTS>::type big, small;
                    const float v = tile[tx][k] * scale;  // exact: a power of two
                    store_acc(&big, v);
                    store_acc(&small, v - load_acc(&big));
                    dst[at] = big;
                    dst[plane + at] = small;
                } else {
                    const float big = __uint_as_float(tf32_rna(tile[tx][k]));
                    dst[at] = big;
                    if (PARTS == 2) dst[plane + at] = __uint_as_float(tf32_rna(tile[tx][k] - big));
                }
            }
        }
        __syncthreads();  // the tile is read before the next iteration overwrites it
    }
}

// NCHW -> NHWC with the channels padded to CP with zeros: dst[b][j][c] = src[b][c][j] for
// c < C, 0 for C <= c < CP, over (batch, C, cols) -> (batch, cols, CP): x (cols = H*W) and a
// filter (batch K, cols R*S) of one group whose C is not a whole number of 16-byte vectors
// (a network's first layer, C = 3), which the NHWC GEMM kernels need (a vector stays in one
// tap). PARTS as transpose's: 0 bits (T unsigned), 1 TF32-rounded, 2 also the TF32
// remainders after all `total` rounded elements. One thread per destination element,
// grid-stride: writes coalesced, and a warp's reads are CP runs of 32 / CP columns.
template <typename T, int PARTS>
__global__ void __launch_bounds__(256)
    pad_channels(const T* __restrict__ src, T* __restrict__ dst, int C, int CP, int cols,
                 int total, unsigned int cp_mul, unsigned int cp_shr, unsigned int cols_mul,
                 unsigned int cols_shr) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int idx = static_cast<int>(u);
        const int pixel = fast_div(idx, cp_mul, cp_shr);  // b * cols + j
        const int c = idx - pixel * CP;
        const int b = fast_div(pixel, cols_mul, cols_shr);
        const int j = pixel - b * cols;
        const T v = c < C ? src[(static_cast<long long>(b) * C + c) * cols + j] : T(0);
        if constexpr (PARTS == 0) {
            dst[idx] = v;
        } else {
            const float big = __uint_as_float(tf32_rna(v));
            dst[idx] = big;
            if (PARTS == 2) {
                dst[static_cast<long long>(total) + idx] = __uint_as_float(tf32_rna(v - big));
            }
        }
    }
}
