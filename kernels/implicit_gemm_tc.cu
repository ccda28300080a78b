// Tensor-core implicit-GEMM convolution (mma.sync, sm_80+): per group g,
// Y_g (kg x N*P*Q) = W_g (kg x cg*R*S) . X_g, with X_g gathered from the NCHW input while its
// shared-memory tiles are filled (never formed in memory).
//
// Block tile BM (output channels) x BN (output pixels over the batch), K-step BK = 16 (32
// for 16-bit NHWC instances: half the barriers and pipeline waits per product); WM x WN
// warps, each computing a (BM/WM) x (BN/WN) warp tile as MI x NI mma tiles of 16 x 8.
//   float:           m16n8k8 TF32. PASSES 3 (math "fp32", 3xTF32): each operand x is split
//                    into big = tf32(x) and small = tf32(x - big) and the warp accumulates
//                    small.big + big.small + big.big in FP32 (small.small, about 2^-22 of
//                    the product, is dropped), each k8 step from zero and added to the
//                    accumulator with a rounded FADD, which keeps FP32 accuracy; PASSES 1 (math
//                    "tf32"): big.big only.
//   half_t / bf16_t: m16n8k16, FP32 accumulation; fragments read with ldmatrix (A as x4, B
//                    as x2.trans from its K-major rows).
// Pipeline: STAGES shared-memory stages, in dynamic shared memory (48 KiB unless the host
// opts in, as it does for the deeper pipelines of its "-sS" configurations). float tiles are
// filled with 4-byte cp.async (zero-fill for padding and edges), STAGES-1 tiles in flight
// during the multiply; a 16-bit element is too small for cp.async's 4-byte minimum and NCHW
// gathers give no contiguous pairs, so 16-bit tiles go through registers: the loads of step
// kt + STAGES - 1 are issued before the multiply of step kt and stored to the ring after it.
// One barrier per K-step.
//
// 16-byte vector fills (VA, VB: elements per copy, VA * sizeof(T) == 16, or 1 for element-
// wise copies), chosen by the host per call:
// - A (VA > 1): the filter's rows are contiguous along CRS; when CRS is a whole number of
//   vectors and w is 16-byte aligned, A tiles are filled with 16-byte cp.async.
// - B (VB > 1, only with VA > 1): a 1x1 filter at stride 1 without padding makes B(k, n) =
//   x[img][c = k][pq], contiguous along n within an image; when P*Q is a whole number of
//   vectors and x is 16-byte aligned, B tiles are filled with 16-byte cp.async, with no
//   per-element index math.
// A vector-filled tile of a 16-bit type goes to shared memory asynchronously, not through
// registers.
//
// NHWC (VA == VB > 1): the host has copied x to NHWC and the filter to (K, R, S, C/groups)
// (K index k = (r*S + s)*cg + c), so a run of VB consecutive k at one pixel is contiguous
// whenever cg is a whole number of vectors: B tiles are filled with 16-byte cp.async on any
// geometry (padding, stride, dilation), and stored n-major (Bs[n][k], rows like A's) so
// 16-bit B fragments come from non-transposed ldmatrix.x4, two n8 tiles at a time.
//
// Loading, in vectors of VA / VB elements (1: element-wise): A (filter) vector e = tid +
// i*THREADS is row e / (BK/VA), k VA * (e % (BK/VA)) (a warp reads contiguous filter rows);
// B (input) column n = VB * (tid % (BN/VB)) is fixed per thread, its rows are
// tid / (BN/VB) + i * B_ROWS, so the column's image/pixel decomposition happens once. NHWC:
// B vector e = tid + i*THREADS is pixel e / (BK/VB), k VB * (e % (BK/VB)); each thread's
// pixels are decomposed once, and its k (the same for all its vectors) walks from K-step to
// K-step with its filter tap (common.cuh NhwcTapWalk). Every copy's source is worked out
// once up to its K-step (a filter row's offset, a column's or pixel's corner), so a copy
// costs an add, its bounds (a select, not a branch) and the copy; an element-wise B of a
// 1x1 filter (RS == 1) takes its own compiled loop, with no tap to work out per copy.
// 1xTF32 rounds its fragments as it reads them, but for NCHW tiles of vector A and element-wise
// B, where each thread rounds its landed copies in shared memory once (ROUND_IN_PLACE).
// Grid: x = ceil(N*P*Q / BN), y = groups * ceil(kg / BM), z = K splits. All tensors < 2^31
// elements.
//
// Split K (gridDim.z > 1, for grids too small to fill the GPU): block z multiplies K-steps
// [z * kper, (z + 1) * kper) only and writes its FP32 partial sums to partials[z] (laid out
// like y). The last of a tile's splits to finish (counted in `counters`, one per tile, which
// it leaves at zero again) adds the splits in a fixed order (deterministic) and stores y
// (common.cuh sum_split_tile): one launch, where a summing kernel after it cost a launch
// more, a host's enqueue of 5.5 us on the H200 (BENCHMARKS.md, "Split K summed in the
// kernel"). `partials` and `counters` are void*: without a split the host passes y for both,
// of any type, and the kernel never touches them.
//
// Epilogue: a lane's two values of a row are columns 2t and 2t + 1, adjacent pixels. With
// `pairs` (host: P*Q even, so an even column's pixel and the next share an image, and y, or
// the split's partials, aligned to two elements) each pair is one store (store_acc2), else
// one store per value. Two loops, not one with a branch per value: that one made ptxas spill
// 4-12 bytes of the 16-bit 64x64 vector instances at sm_80. Only 16-bit and 1xTF32
// instances with a vector operand pair their stores (PAIRED, below); others ignore `pairs`.
#include "common.cuh"

// Vector-A-only and 1xTF32 NHWC instances ask for one block per SM: left to its own
// heuristic, ptxas held some at 128 registers and spilled; the bound lets them take what
// they need. Others give 0, no minimum (forcing 1 everywhere raised most instances'
// registers by up to 70; 3xTF32 NHWC ones from 182 to 240).
// kdiv is the K index's first divisor: R*S (NCHW, k = c*R*S + rs) or C/groups (NHWC).
template <typename T, int BM, int BN, int WM, int WN, int STAGES, int PASSES, int VA, int VB,
          bool NHWC, int BK>
__global__ void __launch_bounds__(
    WM * WN * 32, ((VA > 1 && VB == 1) || (NHWC && sizeof(T) == 4 && PASSES == 1)) ? 1 : 0)
    implicit_gemm_tc_conv(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                          CONV_SHAPE_STRUCT, unsigned int kdiv_mul, unsigned int kdiv_shr,
                          unsigned int s_mul, unsigned int s_shr, unsigned int pq_mul,
                          unsigned int pq_shr, unsigned int q_mul, unsigned int q_shr,
                          void* __restrict__ partials, void* __restrict__ counters,
                          int kper, int pairs) {
    CONV_SHAPE_FIELDS;
    constexpr int THREADS = WM * WN * 32;
    constexpr bool F32 = sizeof(T) == 4;
    // Row padding: 16-bit rows stay multiples of 16 bytes for ldmatrix. For the TF32 fragment
    // reads (lane g, t reads A[g][t] and B[t][g]) an A row stride of 20 floats and a B row
    // stride of BN + 8 floats put the 32 lanes in 32 distinct banks (BN + 4 gave 2-way
    // conflicts on B).
    constexpr int APAD = F32 ? 4 : 8;
    constexpr int BPAD = 8;
    constexpr int WTM = BM / WM, WTN = BN / WN;
    constexpr int MI = WTM / 16, NI = WTN / 8;
    // cp.async fills a tile of float, or of vectors; element-wise 16-bit goes via registers.
    constexpr bool A_ASYNC = F32 || VA > 1;
    constexpr bool B_ASYNC = F32 || VB > 1;
    constexpr int A_VECS = BM * BK / VA;  // vectors of one A tile
    constexpr int A_LOADS = (A_VECS + THREADS - 1) / THREADS;
    constexpr int B_VPR = BN / VB;        // vectors per row of B
    constexpr int B_ROWS = THREADS / B_VPR;  // rows of B one pass of the block fills
    constexpr int B_LOADS = BK / B_ROWS;
    constexpr int NB_LOADS = BN * BK / VB / THREADS;  // NHWC: B vectors per thread
    constexpr int NB_STRIDE = THREADS / (BK / VB);     // NHWC: tile rows between them
    constexpr int B_D0 = NHWC ? BN : BK, B_D1 = NHWC ? BK + APAD : BN + BPAD;  // Bs rows, cols
    // 1xTF32: where to round to TF32 (cvt.rna: FSETP and a predicated add in SASS). Rounding at
    // every fragment read costs two instructions per element per warp that reads it (96 of 317
    // a K-step of the 128x64 1x1 instance once took). In shared memory, each thread rounding
    // its own landed copies once, costs a read and a write of every tile more: with 32x32
    // warp tiles 640 bytes of shared memory per mma m16n8k8 against 384, with 64x64 ones 320
    // against 192. In place for every vector A (2026-11-26) against every fragment before,
    // on an H100 (2026-11-27) against an H200 (2026-11-26), with fewer copy instructions in
    // both: NCHW tiles of vector A and element-wise B (3x3 layers, strided 1x1) 10-21% faster
    // in geomean; vector B (1x1 at stride 1) no faster, its 64x64 tile bound by shared memory
    // (L1 86% of peak, stalls on short_scoreboard and mio_throttle); NHWC's "-sS" tiles
    // slower on the large layers. So in place for the first kind only, whose K-step spends
    // the most instructions copying. Element-wise A gains nothing (a load and a store per
    // element against two roundings).
    constexpr bool ROUND_IN_PLACE = F32 && PASSES == 1 && VA > 1 && VB == 1 && !NHWC;
    static_assert(WTM % 16 == 0 && WTN % 8 == 0, "warp tiles are whole mma tiles");
    static_assert((VA == 1 || VA * sizeof(T) == 16) && (VB == 1 || VB * sizeof(T) == 16),
                  "vector copies are 16 bytes");
    static_assert(VB == 1 || VA > 1, "a vector B comes with a vector A");
    static_assert(THREADS % B_VPR == 0 && BK % B_ROWS == 0,
                  "B tiles must split evenly over the threads");
    static_assert(VA > 1 || A_VECS % THREADS == 0, "A tiles must split evenly over the threads");
    static_assert(STAGES >= 2, "a pipeline needs two stages");
    static_assert(BK == 16 || (BK == 32 && NHWC && sizeof(T) == 2),
                  "K-step 32 only for 16-bit NHWC tiles");
    static_assert(F32 || PASSES == 1, "16-bit operands take one pass");
    static_assert(!NHWC || (VA > 1 && VA == VB && NB_LOADS * VB * THREADS == BN * BK &&
                            (F32 || NI % 2 == 0)),
                  "NHWC: vector tiles split evenly, 16-bit n8 tiles in pairs");

    // The stages live in dynamic shared memory, A tiles then B tiles (each a multiple of 16
    // bytes): the host passes their size, and opts in beyond 48 KiB (the "-sS" tiles).
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using ATiles = T[STAGES][BM][BK + APAD];
    using BTiles = T[STAGES][B_D0][B_D1];
    ATiles& As = *reinterpret_cast<ATiles*>(smem_raw);
    BTiles& Bs = *reinterpret_cast<BTiles*>(smem_raw + sizeof(ATiles));

    const int cg = C / groups;
    const int kg = K / groups;
    const int RS = R * S;
    const int CRS = cg * RS;
    const int PQ = P * Q;
    const int NPQ = N * PQ;
    const int HW = H * W;
    const int mblocks = (kg + BM - 1) / BM;
    const int grp = blockIdx.y / mblocks;
    const int m0 = (blockIdx.y - grp * mblocks) * BM;
    const int n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int lane = tid % 32, warp = tid / 32;
    const int wm = (warp / WN) * WTM, wn = (warp % WN) * WTN;
    const int g = lane / 4, t = lane % 4;  // the mma fragment coordinates of this lane

    const unsigned long long as_base = smem_addr(&As[0][0][0]);
    const unsigned long long bs_base = smem_addr(&Bs[0][0][0]);

    // Each copy's source before its K-step, worked out once, so that a copy costs an add, its
    // bounds and the copy (as in implicit_gemm_wgmma.cu; recomputing them every K-step was
    // about half of the 1xTF32 128x64 1x1 instance's 317 SASS instructions a K-step, per
    // benchmarks/kernel_loop_sass.py). A: this thread's K offset in a step and its rows'
    // offsets in w (a thread's vectors share the K offset: THREADS is a multiple of A_VPR).
    constexpr int A_VPR = BK / VA;                 // vectors per A row
    constexpr int A_ROW_STEP = THREADS / A_VPR;    // rows between a thread's A vectors
    static_assert(THREADS % A_VPR == 0, "a thread's A vectors share their K offset");
    const int a_k = (tid % A_VPR) * VA;
    const int a_m = tid / A_VPR;
    int a_row[A_LOADS];
    bool a_ok[A_LOADS];
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        const int m = m0 + a_m + i * A_ROW_STEP;
        a_ok[i] = m < kg;
        a_row[i] = (grp * kg + m) * CRS + a_k;  // in w: one base for every copy
    }
    const unsigned long long a_dst0 = as_base + (a_m * (BK + APAD) + a_k) * sizeof(T);
    constexpr unsigned long long A_STAGE_BYTES = BM * (BK + APAD) * sizeof(T);

    // B, NCHW: this thread's column (its first, for a vector) and its offset in x at the
    // receptive field's corner; for a vector, or a 1x1 filter (RS == 1: k is the channel, the
    // pixel the same for every k), b_off is the element of its first row itself.
    const int b_col = (tid % B_VPR) * VB;
    const int b_row = tid / B_VPR;
    int col_off = 0, h0 = 0, w0 = 0, b_off = 0;
    bool col_ok = n0 + b_col < NPQ;  // for a vector: all VB columns (VB | P*Q)
    // NHWC: this thread's pixels, tile rows nb_row + i * NB_STRIDE (common.cuh NhwcPixels);
    // `walk` carries this thread's K index from K-step to K-step with its tap.
    const int nb_k = VB * (tid % (BK / VB));
    const int nb_row = tid / (BK / VB);
    NhwcPixels<NHWC ? NB_LOADS : 1> pixels;
    NhwcTapWalk walk{};  // NHWC only: set before the first copy (below)
    if constexpr (NHWC) {
        pixels.init(n0 + nb_row, NB_STRIDE, NPQ, PQ, Q, HW * C, W, C, grp * cg, str_h, str_w,
                    pad_h, pad_w, pq_mul, pq_shr, q_mul, q_shr);
    } else if (col_ok) {
        const int img = fast_div(n0 + b_col, pq_mul, pq_shr);
        const int pq = n0 + b_col - img * PQ;
        const int p = fast_div(pq, q_mul, q_shr);
        h0 = p * str_h - pad_h;
        w0 = (pq - p * Q) * str_w - pad_w;
        col_off = (img * C + grp * cg) * HW + (VB > 1 ? pq : 0);
        if (VB == 1 && RS == 1) {  // one tap: its bounds are the column's
            col_ok = static_cast<unsigned int>(h0) < static_cast<unsigned int>(H) &&
                     static_cast<unsigned int>(w0) < static_cast<unsigned int>(W);
        }
        b_off = col_off + (VB > 1 ? 0 : h0 * W + w0) + b_row * HW;
    }
    const unsigned long long b_dst0 =
        bs_base + (NHWC ? nb_row * (BK + APAD) + nb_k : b_row * (BN + BPAD) + b_col) * sizeof(T);
    constexpr unsigned long long B_STAGE_BYTES = B_D0 * B_D1 * sizeof(T);

    // 16-bit tiles of a later K-step, held in registers across the multiply (see the loop).
    unsigned short a_regs[A_ASYNC ? 1 : A_LOADS], b_regs[B_ASYNC ? 1 : B_LOADS];

    // Fill stage `st` with the K-step starting at k0: a tile with cp.async when A_ASYNC /
    // B_ASYNC; else (16-bit element-wise) into shared memory, or only into a_regs / b_regs
    // when `to_regs` (store_regs ends it). Stages are filled in K order, one K-step after
    // another (NHWC's `walk` moves on by one each time). Bounds are bitwise &, not &&: every
    // term is cheap, and a branch per copy is not.
    auto load_stage = [&](auto one_tap, int st, int k0, bool to_regs) {
        const bool ak_ok = k0 + a_k < CRS;  // for a vector: all VA (VA | CRS)
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            if (A_VECS % THREADS != 0 && tid + i * THREADS >= A_VECS) break;  // a short tile
            const bool ok = a_ok[i] & ak_ok;
            const T* src = w + element(ok, a_row[i] + k0);
            if constexpr (A_ASYNC) {
                cp_async<VA * sizeof(T)>(
                    a_dst0 + st * A_STAGE_BYTES + i * A_ROW_STEP * (BK + APAD) * sizeof(T),
                    src, ok);
            } else {
                const unsigned short v = ok ? src->bits : 0;
                if (to_regs) {
                    a_regs[i] = v;
                } else {
                    As[st][a_m + i * A_ROW_STEP][a_k].bits = v;
                }
            }
        }
        if constexpr (NHWC) {  // k = (r*S + s)*cg + c: a vector stays in one (r, s)
            const bool k_ok = walk.kk < CRS;
#pragma unroll
            for (int i = 0; i < NB_LOADS; ++i) {
                bool ok;
                const T* src = pixels.source(x, i, walk, k_ok, H, W, ok);
                cp_async<16>(b_dst0 + st * B_STAGE_BYTES +
                                 i * NB_STRIDE * (BK + APAD) * sizeof(T),
                             src, ok);
            }
            walk.advance(BK, cg, S, W, C, dil_h, dil_w);
        } else {
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                const int k = b_row + i * B_ROWS;
                const int kk = k0 + k;
                bool ok;
                const T* src;
                if constexpr (VB > 1 || decltype(one_tap)::value) {
                    // Row kk is channel kk, at b_off + (kk - b_row) * HW.
                    ok = col_ok & (kk < CRS);
                    src = x + element(ok, b_off + (k0 + i * B_ROWS) * HW);
                } else {
                    const int c = fast_div(kk, kdiv_mul, kdiv_shr);
                    const int rs = kk - c * RS;
                    const int r = fast_div(rs, s_mul, s_shr);
                    const int ih = h0 + r * dil_h;
                    const int iw = w0 + (rs - r * S) * dil_w;
                    ok = col_ok & (kk < CRS) &
                         (static_cast<unsigned int>(ih) < static_cast<unsigned int>(H)) &
                         (static_cast<unsigned int>(iw) < static_cast<unsigned int>(W));
                    src = x + element(ok, col_off + c * HW + ih * W + iw);
                }
                if constexpr (B_ASYNC) {
                    cp_async<VB * sizeof(T)>(
                        b_dst0 + st * B_STAGE_BYTES + i * B_ROWS * (BN + BPAD) * sizeof(T), src,
                        ok);
                } else {
                    const unsigned short v = ok ? src->bits : 0;
                    if (to_regs) {
                        b_regs[i] = v;
                    } else {
                        Bs[st][k][b_col].bits = v;  // NCHW: Bs is [BK][BN + BPAD]
                    }
                }
            }
        }
    };

    auto store_regs = [&](int st) {
        if constexpr (!A_ASYNC) {
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) As[st][a_m + i * A_ROW_STEP][a_k].bits = a_regs[i];
        }
        if constexpr (!B_ASYNC) {
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) Bs[st][b_row + i * B_ROWS][b_col].bits = b_regs[i];
        }
    };

    // ROUND_IN_PLACE: round this thread's landed copies of stage st (its own, so no barrier
    // is needed before; the loop's barrier publishes them). Nothing otherwise.
    auto round_stage = [&](int st) {
        if constexpr (ROUND_IN_PLACE) {
            auto round = [](float& v) { v = __uint_as_float(tf32_rna_for_mma(v)); };
            auto round_vector = [&](float* p) {  // 16 bytes: one load and one store
                float4 v = *reinterpret_cast<float4*>(p);
                round(v.x);
                round(v.y);
                round(v.z);
                round(v.w);
                *reinterpret_cast<float4*>(p) = v;
            };
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                if (A_VECS % THREADS != 0 && tid + i * THREADS >= A_VECS) break;
                round_vector(&As[st][a_m + i * A_ROW_STEP][a_k]);
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) round(Bs[st][b_row + i * B_ROWS][b_col]);
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;
        }
    }

    // This block's K-steps: all of them, or its split's.
    const int kt0 = blockIdx.z * kper;
    const int ktiles = min(kper, (CRS + BK - 1) / BK - kt0);
    const int kbase = kt0 * BK;
    if constexpr (NHWC) {
        walk.init(kbase + nb_k, cg, S, W, C, dil_h, dil_w, kdiv_mul, kdiv_shr, s_mul, s_shr);
    }
    // The prologue and the K loop, compiled twice for element-wise NCHW B: a 1x1 filter's
    // copies (one_tap) need no tap of their own, and a runtime test between the two
    // ways in the loop would issue both ways' setup every K-step.
    auto k_loop = [&](auto one_tap) {
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < ktiles) load_stage(one_tap, s, kbase + s * BK, false);
            cp_async_commit();  // one group per stage, empty past the end, so the count is fixed
        }
        // The stages of K-steps kt and kt + STAGES - 1, as counters rather than `% STAGES`.
        int st = 0, write = STAGES - 1;
        for (int kt = 0; kt < ktiles; ++kt) {
            cp_async_wait<STAGES - 2>();  // this thread's copies of step kt have landed
            round_stage(st);  // 1xTF32, NCHW, vector A and element-wise B only (ROUND_IN_PLACE)
            __syncthreads();              // ... and everyone's; stage `write` (kt - 1's) is free
            const int next = kt + STAGES - 1;
            const bool fetch = next < ktiles;
            // 16-bit element-wise: the global loads are issued now and stored after the multiply,
            // so their latency hides behind it; stage `write` was freed by the barrier above.
            if (fetch) load_stage(one_tap, write, kbase + next * BK, !F32);
            cp_async_commit();
            if constexpr (F32) {
#pragma unroll
                for (int kk = 0; kk < BK; kk += 8) {
                    unsigned int a_big[MI][4], a_small[MI][4];
#pragma unroll
                    for (int i = 0; i < MI; ++i) {
                        const int row = wm + i * 16 + g;
#pragma unroll
                        for (int v = 0; v < 4; ++v) {
                            // a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
                            const float val = As[st][row + 8 * (v & 1)][kk + t + 4 * (v >> 1)];
                            a_big[i][v] = PASSES == 3      ? tf32_big(val)
                                          : ROUND_IN_PLACE ? __float_as_uint(val)
                                                           : tf32_rna(val);
                            a_small[i][v] =
                                PASSES == 3 ? tf32_rna(val - __uint_as_float(a_big[i][v])) : 0u;
                        }
                    }
#pragma unroll
                    for (int j = 0; j < NI; ++j) {
                        const int col = wn + j * 8 + g;
                        unsigned int b_big[2], b_small[2];
#pragma unroll
                        for (int v = 0; v < 2; ++v) {  // b0 (k = t, n = g), b1 (k = t + 4, n = g)
                            float val;
                            if constexpr (NHWC) {
                                val = Bs[st][col][kk + t + 4 * v];
                            } else {
                                val = Bs[st][kk + t + 4 * v][col];
                            }
                            b_big[v] = PASSES == 3      ? tf32_big(val)
                                     : ROUND_IN_PLACE ? __float_as_uint(val)
                                                      : tf32_rna(val);
                            b_small[v] =
                                PASSES == 3 ? tf32_rna(val - __uint_as_float(b_big[v])) : 0u;
                        }
#pragma unroll
                        for (int i = 0; i < MI; ++i) {
                            if constexpr (PASSES == 3) {
                                // The tensor core truncates its FP32 sums (rounds toward zero), a
                                // bias that grows with K: into acc directly, 3xTF32 measured
                                // 3.2e-5 at K = 4608 on an H100. So each k8 step sums its three
                                // products (small terms first) from zero and acc takes that with
                                // a rounded FADD, as a CUDA-core dot product would.
                                float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                                mma_tf32(part, a_small[i], b_big);
                                mma_tf32(part, a_big[i], b_small);
                                mma_tf32(part, a_big[i], b_big);
#pragma unroll
                                for (int v = 0; v < 4; ++v) acc[i][j][v] += part[v];
                            } else {
                                mma_tf32(acc[i][j], a_big[i], b_big);
                            }
                        }
                    }
                }
            } else {
#pragma unroll
                for (int kk = 0; kk < BK; kk += 16) {
                    unsigned int a_frag[MI][4];
#pragma unroll
                    for (int i = 0; i < MI; ++i) {
                        // Lane l gives row l % 16 of the 16x16 tile, at column kk + 8 * (l / 16).
                        const int row = wm + i * 16 + lane % 16;
                        ldmatrix_x4(a_frag[i], as_base + ((st * BM + row) * (BK + APAD) + kk +
                                                          8 * (lane / 16)) * 2ull);
                    }
                    if constexpr (NHWC) {
#pragma unroll
                        for (int j = 0; j < NI; j += 2) {
                            // Matrices (n8 tile j, k kk..kk+7), (j, kk+8..kk+15), (j+1, kk..),
                            // (j+1, kk+8..): lane l gives row n = l % 8 of matrix l / 8.
                            unsigned int b4[4];
                            const int row = wn + j * 8 + 8 * (lane / 16) + lane % 8;
                            ldmatrix_x4(b4, bs_base + ((st * BN + row) * (BK + APAD) + kk +
                                                       8 * ((lane / 8) % 2)) * 2ull);
                            const unsigned int b_lo[2] = {b4[0], b4[1]}, b_hi[2] = {b4[2], b4[3]};
#pragma unroll
                            for (int i = 0; i < MI; ++i) {
                                mma_k16(x, acc[i][j], a_frag[i], b_lo);
                                mma_k16(x, acc[i][j + 1], a_frag[i], b_hi);
                            }
                        }
                    } else {
#pragma unroll
                        for (int j = 0; j < NI; ++j) {
                            // Lanes 0..15 give K rows kk..kk+15 of the 16x8 B tile (16..31
                            // unused).
                            unsigned int b_frag[2];
                            ldmatrix_x2_trans(b_frag, bs_base + ((st * BK + kk + lane % 16) *
                                                                 (BN + BPAD) + wn + j * 8) * 2ull);
#pragma unroll
                            for (int i = 0; i < MI; ++i) mma_k16(x, acc[i][j], a_frag[i], b_frag);
                        }
                    }
                }
                if (!(A_ASYNC && B_ASYNC) && fetch) store_regs(write);
            }
            st = st + 1 == STAGES ? 0 : st + 1;
            write = write + 1 == STAGES ? 0 : write + 1;
        }
    };
    if constexpr (VB == 1 && !NHWC) {
        if (RS == 1) {
            k_loop(Flag<true>{});
        } else {
            k_loop(Flag<false>{});
        }
    } else {
        k_loop(Flag<false>{});
    }
    cp_async_wait<0>();  // only empty groups remain; nothing may be in flight at exit

    // Epilogue: c0, c1 at (g, 2t), (g, 2t+1); c2, c3 at (g+8, ...). Column n = (img, pq)
    // lands at y[img][grp*kg + m][pq], or at the same place in this split's partials.
    const bool split = gridDim.z > 1;
    float* pz = static_cast<float*>(partials) + static_cast<long long>(blockIdx.z) * N * K * PQ;
    // After the stores of a split: the stages are done with (every thread is past its last
    // fragment read once the sum's first barrier is passed), so its flag goes there.
    const auto sum_splits = [&] {
        sum_split_tile<BM, BN, THREADS>(shape, partials, y, counters, smem_raw, m0, n0, grp,
                                        kg, pq_mul, pq_shr);
    };
    // Not for 3xTF32 (FP32 outputs; ptxas gave those instances up to 28 more registers for
    // the second loop) nor the element-wise instances (8 bytes spilled at sm_90).
    constexpr bool PAIRED = PASSES == 1 && (VA > 1 || VB > 1 || NHWC);
    if (PAIRED && pairs) {
        // Both columns of a pair in one store: they share an image (P*Q is even), and N*P*Q
        // being even, the second exists whenever the first does.
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int n = n0 + wn + j * 8 + 2 * t;
            if (n >= NPQ) continue;
            const int img = fast_div(n, pq_mul, pq_shr);
            const int base = (img * K + grp * kg) * PQ + (n - img * PQ);
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                    const int m = m0 + wm + i * 16 + g + 8 * v;
                    if (m >= kg) continue;
                    if (split) {
                        store_acc2(pz + base + m * PQ, acc[i][j][2 * v], acc[i][j][2 * v + 1]);
                    } else {
                        store_acc2(y + base + m * PQ, acc[i][j][2 * v], acc[i][j][2 * v + 1]);
                    }
                }
            }
        }
        if (split) sum_splits();
        return;
    }
#pragma unroll
    for (int j = 0; j < NI; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + wn + j * 8 + 2 * t + h;
            if (n >= NPQ) continue;
            const int img = fast_div(n, pq_mul, pq_shr);
            const int base = (img * K + grp * kg) * PQ + (n - img * PQ);
#pragma unroll
            for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                    const int m = m0 + wm + i * 16 + g + 8 * v;
                    if (m >= kg) continue;
                    if (split) {
                        pz[base + m * PQ] = acc[i][j][2 * v + h];
                    } else {
                        store_acc(y + base + m * PQ, acc[i][j][2 * v + h]);
                    }
                }
            }
        }
    }
    if (split) sum_splits();
}
