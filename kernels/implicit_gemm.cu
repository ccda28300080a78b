// Implicit-GEMM convolution: per group g, Y_g (kg x N*P*Q) = W_g (kg x cg*R*S) . X_g, where
// the (cg*R*S) x (N*P*Q) matrix X_g is never formed: each shared-memory tile of it is
// gathered straight from the NCHW input while it is loaded.
//
// Block tile BM (output channels) x BN (output pixels over the whole batch), K-step BK,
// thread tile TM x TN held in registers, two shared-memory stages: the global loads of
// step k+1 are in flight while step k is multiplied, one barrier per step.
//
// Grid: x = ceil(N*P*Q / BN), y = groups * ceil(kg / BM); block = (BM/TM)*(BN/TN) threads.
// Divisions by R*S, S, P*Q and Q use fast_div constants computed on the host (no
// per-call device memory, no workspace). All tensors must have < 2^31 elements.
//
// Loading, per thread and K-step:
//   A (filter): k = tid % BK, rows m = tid / BK + j * (THREADS / BK), j < A_LOADS: a warp
//     reads BK-long contiguous runs of consecutive filter rows.
//   B (input):  one row k = tid / B_TPR and columns tid % B_TPR + j * B_TPR, j < B_LOADS:
//     a warp reads consecutive output pixels, so consecutive (strided) input pixels; the
//     per-column image/pixel decomposition is done once, before the K loop.
#include "common.cuh"

// MIN_BLOCKS caps registers at 65536 / (threads * MIN_BLOCKS) so that many blocks share an
// SM; each shipped configuration (implicit_gemm.py) uses one that compiles spill-free.
template <typename T, int BM, int BN, int BK, int TM, int TN, int MIN_BLOCKS>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MIN_BLOCKS)
    implicit_gemm_conv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                       CONV_SHAPE_STRUCT, int vec_out, unsigned int rs_mul, unsigned int rs_shr,
                       unsigned int s_mul, unsigned int s_shr, unsigned int pq_mul,
                       unsigned int pq_shr, unsigned int q_mul, unsigned int q_shr) {
    CONV_SHAPE_FIELDS;
    constexpr int TX = BN / TN;  // threads along the pixel dimension
    constexpr int TY = BM / TM;  // threads along the channel dimension
    constexpr int THREADS = TX * TY;
    constexpr int A_STRIDE = THREADS / BK;  // rows of A one pass of the block loads
    constexpr int A_LOADS = BM / A_STRIDE;
    constexpr int B_TPR = THREADS / BK;  // threads per row of B
    constexpr int B_LOADS = BN / B_TPR;
    constexpr int APAD = 4;  // keeps the transposed A stores conflict-free, float4 reads aligned
    static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read as float4");
    static_assert(BM % TM == 0 && BN % TN == 0, "block tile must split into thread tiles");
    static_assert(THREADS % BK == 0, "every thread loads one K index of A and one row of B");
    static_assert(BM % A_STRIDE == 0 && BN % B_TPR == 0, "tiles must split evenly");
    static_assert(THREADS % 32 == 0, "whole warps");

    __shared__ __align__(16) float As[2][BK][BM + APAD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int cg = C / groups;
    const int kg = K / groups;
    const int RS = R * S;
    const int CRS = cg * RS;
    const int PQ = P * Q;
    const int NPQ = N * PQ;
    const int HW = H * W;

    const int mblocks = (kg + BM - 1) / BM;
    const int g = blockIdx.y / mblocks;
    const int m0 = (blockIdx.y - g * mblocks) * BM;
    const int n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;

    const T* wg = w + static_cast<long long>(g) * kg * CRS;

    const int a_k = tid % BK;
    const int a_m = tid / BK;
    const int b_k = tid / B_TPR;
    const int b_c = tid % B_TPR;

    // Per-column gather state: the input offset of the receptive field's top-left corner,
    // and its (h, w) packed as two signed 16-bit halves to save registers (the host keeps
    // H, W, padding and the filter footprint under 2^14, see implicit_gemm.py).
    int col_off[B_LOADS];
    int col_hw[B_LOADS];
#pragma unroll
    for (int j = 0; j < B_LOADS; ++j) {
        const int npq = n0 + b_c + j * B_TPR;
        if (npq < NPQ) {
            const int img = fast_div(npq, pq_mul, pq_shr);
            const int pq = npq - img * PQ;
            const int p = fast_div(pq, q_mul, q_shr);
            const int q = pq - p * Q;
            const int h0 = p * str_h - pad_h;
            const int w0 = q * str_w - pad_w;
            // Shifted as unsigned: left-shifting a negative int is undefined in C++17.
            col_hw[j] = static_cast<int>((static_cast<unsigned int>(h0) << 16) |
                                         (static_cast<unsigned int>(w0) & 0xFFFFu));
            col_off[j] = (img * C + g * cg) * HW + h0 * W + w0;
        } else {
            col_hw[j] = static_cast<int>(0xC0000000u);  // h0 = -16384: out of bounds for every tap
            col_off[j] = 0;
        }
    }

    float a_reg[A_LOADS];
    float b_reg[B_LOADS];

    // Global -> registers for the K-step starting at k0.
    auto load_tiles = [&](int k0) {
        const int ka = k0 + a_k;
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) {
            const int m = m0 + a_m + j * A_STRIDE;
            a_reg[j] = (m < kg && ka < CRS) ? load_acc(wg + m * CRS + ka) : 0.0f;
        }
        const int kb = k0 + b_k;
        const bool row_ok = kb < CRS;
        const int c = fast_div(kb, rs_mul, rs_shr);
        const int rs = kb - c * RS;
        const int r = fast_div(rs, s_mul, s_shr);
        const int s = rs - r * S;
        const int dr = r * dil_h;
        const int ds = s * dil_w;
        const int row_off = c * HW + dr * W + ds;
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) {
            const int ih = (col_hw[j] >> 16) + dr;  // arithmetic shift keeps the sign
            const int iw = static_cast<int>(static_cast<short>(col_hw[j] & 0xFFFF)) + ds;
            const bool ok = row_ok && static_cast<unsigned int>(ih) < static_cast<unsigned int>(H) &&
                            static_cast<unsigned int>(iw) < static_cast<unsigned int>(W);
            b_reg[j] = ok ? load_acc(x + col_off[j] + row_off) : 0.0f;
        }
    };
    // Registers -> shared stage `buf`.
    auto store_tiles = [&](int buf) {
#pragma unroll
        for (int j = 0; j < A_LOADS; ++j) As[buf][a_k][a_m + j * A_STRIDE] = a_reg[j];
#pragma unroll
        for (int j = 0; j < B_LOADS; ++j) Bs[buf][b_k][b_c + j * B_TPR] = b_reg[j];
    };

    const int ty = tid / TX;
    const int tx = tid - ty * TX;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) {
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    }

    const int ktiles = (CRS + BK - 1) / BK;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < ktiles;
        if (more) load_tiles((kt + 1) * BK);  // in flight during the multiply below
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a_frag[TM];
            float b_frag[TN];
            // Thread rows: ty*4 + i*4*TY (+0..3); columns likewise with tx, TX.
#pragma unroll
            for (int i = 0; i < TM / 4; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(&As[cur][kk][i * 4 * TY + ty * 4]);
                a_frag[i * 4 + 0] = v.x;
                a_frag[i * 4 + 1] = v.y;
                a_frag[i * 4 + 2] = v.z;
                a_frag[i * 4 + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < TN / 4; ++j) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][kk][j * 4 * TX + tx * 4]);
                b_frag[j * 4 + 0] = v.x;
                b_frag[j * 4 + 1] = v.y;
                b_frag[j * 4 + 2] = v.z;
                b_frag[j * 4 + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < TM; ++i) {
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
            }
        }
        // The other stage was last read before the previous barrier, so it is free.
        if (more) store_tiles(cur ^ 1);
        __syncthreads();
    }

    // Epilogue: column npq = (img, pq) lands at y[img][g*kg + m][pq].
#pragma unroll
    for (int j4 = 0; j4 < TN / 4; ++j4) {
        const int col0 = n0 + j4 * 4 * TX + tx * 4;
        if (vec_out && col0 + 3 < NPQ) {
            // PQ % 4 == 0 and an aligned y (checked on the host): the 4 columns are in one
            // image, and for float one 16-byte aligned vector (half stores them one by one).
            const int img = fast_div(col0, pq_mul, pq_shr);
            const int pq = col0 - img * PQ;
            T* yb = y + (static_cast<long long>(img) * K + g * kg) * PQ + pq;
#pragma unroll
            for (int i = 0; i < TM; ++i) {
                const int m = m0 + (i / 4) * 4 * TY + ty * 4 + (i % 4);
                if (m < kg) {
                    T* yp = yb + static_cast<long long>(m) * PQ;
                    if constexpr (sizeof(T) == 4) {
                        store_float4(yp, acc[i][j4 * 4], acc[i][j4 * 4 + 1], acc[i][j4 * 4 + 2],
                                     acc[i][j4 * 4 + 3]);
                    } else {
#pragma unroll
                        for (int jj = 0; jj < 4; ++jj) store_acc(yp + jj, acc[i][j4 * 4 + jj]);
                    }
                }
            }
        } else {
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const int col = col0 + jj;
                if (col < NPQ) {
                    const int img = fast_div(col, pq_mul, pq_shr);
                    const int pq = col - img * PQ;
                    T* yb = y + (static_cast<long long>(img) * K + g * kg) * PQ + pq;
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
                        const int m = m0 + (i / 4) * 4 * TY + ty * 4 + (i % 4);
                        if (m < kg) store_acc(yb + static_cast<long long>(m) * PQ, acc[i][j4 * 4 + jj]);
                    }
                }
            }
        }
    }
}
