// Implicit-GEMM convolution on Hopper's warpgroup tensor cores (wgmma.mma_async, sm_90a only),
// FP32 accumulation, from NHWC copies of the operands: per group g,
// Y_g (kg x N*P*Q) = W_g (kg x R*S*cg) . X_g, K index k = (r*S + s)*cg + c, as in the NHWC
// instances of implicit_gemm_tc.cu (the host makes the copies). Operand types:
// - float16 or bfloat16: one wgmma m64n128k16 per 16 of K;
// - float32 as TF32 (m64n128k8 per 8 of K), from copies the host rounded to TF32 (cvt.rna;
//   the tensor core itself would truncate): COPIES 1 for math "tf32"; COPIES 2 for math
//   "fp32", 3xTF32: the host's copies are big = tf32(v) then small = tf32(v - big), each
//   operand's small copy right after its big one, and each product is small.big + big.small
//   + big.big (small.small, below 2^-22 of the product, is dropped), summed per K-step from
//   zero and then added to the FP32 accumulators;
// - float32 as two float16 parts of v * s, 3xFP16 (math "fp32", T half_t, COPIES 2, y
//   float): the same products on m64n128k16, half 3xTF32's tensor work and bytes per
//   element for as many bits (11 + 11), s a power of two per tensor that keeps the parts in
//   FP16's range (`WgmmaOutput`).
//
// Block tile BM (output channels) x BN = 128 (output pixels over the batch), K-step BK = 128
// bytes of elements (64 16-bit values, 32 floats); BM / 64 warpgroups, warpgroup j computing
// rows 64j..64j+63 with four wgmma per K-step and copy pair, A and B straight from shared
// memory (no fragments in registers, no ldmatrix): the 64 x 128 FP32 accumulator is 64
// registers per thread.
//
// Shared memory, per stage and copy: the A tile (BM x BK) then the B tile (BN x BK), each
// K-major in wgmma's 128-byte-swizzled layout (CUTLASS's Swizzle<3,4,3>): row r (a filter or
// a pixel) holds its 128 bytes of the K-step at byte 128 * r of the tile, its 16-byte chunk c
// at byte 16 * (c ^ (r % 8)) of the row; 8-row groups are 1024-byte atoms (stride byte offset
// 1024; the leading byte offset is unused), every tile starts on a 1024-byte boundary, and a
// wgmma's 32-byte slice kc of K starts 32 * kc bytes into the tile (the hardware applies the
// XOR to the address bits). Copying thread ct (every thread of the one-role kernel, the
// producers of the warp-specialized one below) copies chunk ct % 8 of rows
// ct / 8 + i * ROW_STEP (NhwcStageCopies): 8 lanes fetch one row's 128 contiguous bytes (a
// whole line of the NHWC copy when the row's K-step lies in one filter tap), and a warp's 32
// 16-byte writes fall in 32 distinct banks.
// Why: the unswizzled core-matrix layout (16 * e for vector e) had a warp fetch 64 bytes of 8
// rows, and Nsight Compute counted 33.6 M bank conflicts on those cp.async writes (48% of the
// kernel's shared-memory wavefronts) on VGG-16's conv4_2 in float16, H200, 2026-11-25.
//
// Pipeline: STAGES stages of cp.async (16 bytes, zero-fill at padding and edges), and
// IN_FLIGHT (0 or 1) K-steps of wgmma left running at the end of a K-step, so AHEAD = STAGES -
// 1 - IN_FLIGHT K-steps of copies in flight. Per K-step kt: wait for this thread's copies of
// the step, fence.proxy.async (cp.async writes through the generic proxy; wgmma reads through
// the async proxy), barrier (everyone's copies have landed, and every warpgroup has retired
// the wgmma of step kt - 1 - IN_FLIGHT), issue the copies of step kt + AHEAD into the stage
// that step read, then wgmma.fence, the K-step's wgmma, commit, and wait until IN_FLIGHT
// groups remain. With IN_FLIGHT 1 the tensor cores work through the barrier and the next
// step's copy issue; the accumulators chain from one group to the next (wgmma orders
// same-shape wgmma on the same accumulators). 3xTF32 adds its partial sums to the
// accumulators once their group is done: at IN_FLIGHT 0 after every K-step, at IN_FLIGHT 1
// after every FLUSH_STEPS K-steps (and the last), where it waits for none to remain.
//
// Epilogue: the FP32 accumulator layout of m64nNkK, whatever K (warp w of the warpgroup holds
// rows 16w..16w+15; register 4j + 2v + h of lane (g = lane / 4, t = lane % 4) is row
// 16w + g + 8v, column 8j + 2t + h), stored into NCHW y: with `pairs` (the host's test, as
// in implicit_gemm_tc.cu: P*Q even and the written array aligned to two elements) the two
// columns 8j + 2t, 8j + 2t + 1 of a row, adjacent pixels of one image, in one store.
//
// Split K (gridDim.z > 1, for grids too small to fill the GPU): block z runs K-steps
// [z * kper, (z + 1) * kper) only and writes FP32 partial sums to partials[z], laid out like
// y; the last of a tile's splits to finish adds them in a fixed order and stores y
// (common.cuh sum_split_tile, as implicit_gemm_tc.cu does). Without a split the host passes
// y as `partials` and `counters` and the kernel never touches them.
//
// Grid: x = ceil(N*P*Q / BN), y = groups * ceil(kg / BM), z = splits. Needs cg a whole
// number of 16-byte vectors (a vector stays within one filter tap) and 16-byte aligned
// copies; all tensors < 2^31 elements (a small copy is addressed past its big one, and a
// split's partial sums past the others, in 64-bit arithmetic).
#include "common.cuh"
#include "wgmma.cuh"

// The output's type, and whether the copies are scaled: the operands' type, unscaled; or
// float for two float16 parts (3xFP16: T half_t, COPIES 2), whose copies hold each operand
// times its tensor's power of two, s, in the float right after the operand's two copies
// (rearrange.cu transpose PARTS 3): its products come out times both, undone exactly before
// the tile is stored.
template <typename T, int COPIES>
struct WgmmaOutput {
    typedef T type;
    static constexpr bool scaled = false;
};
template <>
struct WgmmaOutput<half_t, 2> {
    typedef float type;
    static constexpr bool scaled = true;
};

// Elements of one copy of x (N*H*W*C) and of w (K * C/groups * R*S): a two-part operand's
// small copy starts this far after its big one, and 3xFP16's scale twice as far.
__device__ __forceinline__ long long x_copy_elements(const ConvShape& shape) {
    return static_cast<long long>(shape.N) * shape.H * shape.W * shape.C;
}
__device__ __forceinline__ long long w_copy_elements(const ConvShape& shape) {
    return static_cast<long long>(shape.K) * (shape.C / shape.groups) * shape.R * shape.S;
}

template <typename T, int COPIES>
__device__ __forceinline__ void unscale_parts(float (&acc)[64], const T* x, const T* w,
                                              const ConvShape& shape) {
    if constexpr (WgmmaOutput<T, COPIES>::scaled) {
        const float inv =
            (1.0f / *reinterpret_cast<const float*>(x + 2 * x_copy_elements(shape))) *
            (1.0f / *reinterpret_cast<const float*>(w + 2 * w_copy_elements(shape)));
#pragma unroll
        for (int v = 0; v < 64; ++v) acc[v] *= inv;
    }
}

// The parameters of both NHWC kernels (one launcher packs them: _gemm_launch.GemmLaunch).
#define WGMMA_NHWC_PARAMS                                                                     \
    const T *__restrict__ x, const T *__restrict__ w,                                         \
        typename WgmmaOutput<T, COPIES>::type *__restrict__ y, CONV_SHAPE_STRUCT,             \
        unsigned int cg_mul, unsigned int cg_shr, unsigned int s_mul, unsigned int s_shr,     \
        unsigned int pq_mul, unsigned int pq_shr, unsigned int q_mul, unsigned int q_shr,     \
        void *__restrict__ partials, void *__restrict__ counters, int kper, int pairs

// One block's copies of its K-steps into the stages (the layout of the file comment), made by
// COPY_THREADS threads (every thread of the block, or a warp-specialized kernel's producers),
// `ct` the copying thread's index among them: chunk ct % 8 of rows ct / 8 + i * ROW_STEP. A
// thread's k offset is fixed and its rows are all congruent mod 8 (ROW_STEP a multiple of 8),
// so one XOR serves them: its pixels are decomposed once, and its K index walks from K-step to
// K-step with its tap (common.cuh NhwcTapWalk), so that a copy's source is one add.
template <typename T, int BM, int COPIES, int COPY_THREADS>
struct NhwcStageCopies {
    static constexpr int BN = 128, ROW_BYTES = 128, BK = ROW_BYTES / sizeof(T);
    static constexpr int VEC = 16 / sizeof(T);  // elements per 16-byte copy
    static constexpr int A_BYTES = BM * ROW_BYTES, COPY_BYTES = (BM + BN) * ROW_BYTES;
    static constexpr int STAGE_BYTES = COPIES * COPY_BYTES;
    static constexpr int ROW_STEP = COPY_THREADS / 8;  // rows between a thread's vectors
    static constexpr int A_LOADS = BM / ROW_STEP, B_LOADS = BN / ROW_STEP;
    static_assert(ROW_STEP % 8 == 0 && BN % ROW_STEP == 0 && BM % ROW_STEP == 0,
                  "tiles split evenly over the copying threads, rows congruent mod 8");
    static_assert(COPIES == 1 || COPIES == 2,
                  "one copy, or two parts (3xTF32: float; 3xFP16: float16)");
    static_assert(BM % 64 == 0, "a warpgroup per 64 rows");

    int swizzled;  // byte of this thread's first vector in a tile
    int cg, crs;   // channels per group, and the GEMM's K (C/groups * R * S)
    long long x_small, w_small;  // 3xTF32: each operand's small copy follows its big one
    NhwcPixels<B_LOADS> pixels;
    // Each vector's source before its tap, worked out once: a pixel's NHWC offset at its
    // receptive field's corner (NhwcPixels), a filter row's offset in w; `walk` then carries
    // this thread's K index (kv past the step's first) from K-step to K-step.
    int a_row[A_LOADS];
    bool a_ok[A_LOADS];
    NhwcTapWalk walk;

    __device__ __forceinline__ void init(int ct, const ConvShape& shape, int m0, int n0, int grp,
                                         int kfirst, unsigned int cg_mul, unsigned int cg_shr,
                                         unsigned int s_mul, unsigned int s_shr,
                                         unsigned int pq_mul, unsigned int pq_shr,
                                         unsigned int q_mul, unsigned int q_shr) {
        CONV_SHAPE_FIELDS;
        cg = C / groups;
        crs = cg * R * S;
        const int kg = K / groups, CRS = crs;
        const int row0 = ct / 8;
        swizzled = row0 * ROW_BYTES + ((ct % 8) ^ (row0 % 8)) * 16;
        x_small = x_copy_elements(shape);
        w_small = w_copy_elements(shape);
        pixels.init(n0 + row0, ROW_STEP, N * P * Q, P * Q, Q, H * W * C, W, C, grp * cg, str_h,
                    str_w, pad_h, pad_w, pq_mul, pq_shr, q_mul, q_shr);
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int m = m0 + row0 + i * ROW_STEP;
            a_ok[i] = m < kg;
            a_row[i] = (grp * kg + m) * CRS;  // in w, not wg: one base for every copy
        }
        walk.init(kfirst * BK + VEC * (ct % 8), cg, S, W, C, dil_h, dil_w, cg_mul, cg_shr, s_mul,
                  s_shr);
    }

    // Fills stage st (at shared-space address `smem`) with the K-step `walk` is at, then moves
    // it on by one K-step (stages are filled in K order, one K-step after another).
    __device__ __forceinline__ void load(const T* __restrict__ x, const T* __restrict__ w,
                                         unsigned long long smem, int st, const ConvShape& shape) {
        const int H = shape.H, W = shape.W, C = shape.C, S = shape.S;
        // Bitwise & rather than &&: every term is cheap, and a branch per copy is not. The
        // GEMM's K is a multiple of VEC, so a vector is all inside K or all past it.
        const bool k_ok = walk.kk < crs;
#pragma unroll
        for (int copy = 0; copy < COPIES; ++copy) {
            const unsigned long long a_dst =
                smem + st * STAGE_BYTES + copy * COPY_BYTES + swizzled;
            const T* w_copy = w + copy * w_small;  // 3xTF32's small copies follow the big
            const T* x_copy = x + copy * x_small;
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const bool ok = a_ok[i] & k_ok;
                const T* src = w_copy + element(ok, a_row[i] + walk.kk);
                cp_async<16>(a_dst + i * COPY_THREADS * 16ull, src, ok);
            }
            const unsigned long long b_dst = a_dst + A_BYTES;
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                bool ok;
                const T* src = pixels.source(x_copy, i, walk, k_ok, H, W, ok);
                cp_async<16>(b_dst + i * COPY_THREADS * 16ull, src, ok);
            }
        }
        walk.advance(BK, cg, S, W, C, shape.dil_h, shape.dil_w);
    }
};

// A warpgroup's 64 x 128 FP32 accumulators (the m64nNk layout of the file comment; `row` this
// lane's first row, t = lane % 4) into NCHW `out`: y, or with `split` the FP32 partial sums of
// split K (laid out like y), in pairs of adjacent pixels where `pairs`.
template <typename T>
__device__ __forceinline__ void store_wgmma_tile(const float (&acc)[64], T* __restrict__ y,
                                                 float* __restrict__ split_sums, bool split,
                                                 const ConvShape& shape, int row, int n0, int t,
                                                 int grp, int kg, unsigned int pq_mul,
                                                 unsigned int pq_shr, int pairs) {
    constexpr int BN = 128;
    const int K = shape.K, PQ = shape.P * shape.Q, NPQ = shape.N * PQ;
    if (pairs) {
        // The two columns of a pair share an image, and N*P*Q being even the second exists
        // whenever the first does.
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int n = n0 + j * 8 + 2 * t;
            if (n >= NPQ) continue;
            const int img = fast_div(n, pq_mul, pq_shr);
            const int base = (img * K + grp * kg) * PQ + (n - img * PQ);
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const int m = row + 8 * v;
                if (m >= kg) continue;
                const float a = acc[4 * j + 2 * v], b = acc[4 * j + 2 * v + 1];
                if (split) {
                    store_acc2(split_sums + base + m * PQ, a, b);
                } else {
                    store_acc2(y + base + m * PQ, a, b);
                }
            }
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int n = n0 + j * 8 + 2 * t + h;
            if (n >= NPQ) continue;
            const int img = fast_div(n, pq_mul, pq_shr);
            const int base = (img * K + grp * kg) * PQ + (n - img * PQ);
#pragma unroll
            for (int v = 0; v < 2; ++v) {
                const int m = row + 8 * v;
                if (m >= kg) continue;
                if (split) {
                    split_sums[base + m * PQ] = acc[4 * j + 2 * v + h];
                } else {
                    store_acc(y + base + m * PQ, acc[4 * j + 2 * v + h]);
                }
            }
        }
    }
}

// One K-step of wgmma on a warpgroup's 64 rows of stage tiles a_tile and b_tile (descriptors):
// four 32-byte slices of K, at 3xTF32 each as small.big + big.small + big.big.
template <typename T, int COPIES, int COPY_UNITS>
__device__ __forceinline__ void wgmma_k_step(float (&sums)[64], unsigned long long a_tile,
                                             unsigned long long b_tile) {
    const T* kind = nullptr;  // selects wgmma_m64n128's operand type
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {  // a 32-byte slice of K per wgmma
        const unsigned long long a_big = a_tile + 2 * kc, b_big = b_tile + 2 * kc;
        if (COPIES == 2) {  // the small terms first, as CUTLASS's 3xTF32 does
            wgmma_m64n128(kind, sums, a_big + COPY_UNITS, b_big);
            wgmma_m64n128(kind, sums, a_big, b_big + COPY_UNITS);
        }
        wgmma_m64n128(kind, sums, a_big, b_big);
    }
}

// After a K-step's commit: wait until IN_FLIGHT groups remain; or, at 3xTF32 where `flush`,
// until none do, and add the partial sums `part` to `acc` (starting `part` again from zero).
template <int COPIES, int IN_FLIGHT>
__device__ __forceinline__ void wgmma_retire(float (&acc)[64], float (&part)[64], bool flush) {
    if (COPIES == 2 && flush) {
        wgmma_wait<0>();  // every group on `part` is done
#pragma unroll
        for (int v = 0; v < 64; ++v) {
            acc[v] += part[v];
            part[v] = 0.0f;
        }
    } else {
        wgmma_wait<IN_FLIGHT>();
    }
}

template <typename T, int BM, int STAGES, int COPIES, int IN_FLIGHT>
__global__ void __launch_bounds__(BM / 64 * 128, 1)
    implicit_gemm_wgmma_conv(WGMMA_NHWC_PARAMS) {
    CONV_SHAPE_FIELDS;
    constexpr int THREADS = BM / 64 * 128;
    using Copies = NhwcStageCopies<T, BM, COPIES, THREADS>;
    constexpr int BN = Copies::BN, BK = Copies::BK, ROW_BYTES = Copies::ROW_BYTES;
    constexpr int SBO = 8 * ROW_BYTES;  // 8-row groups: one 1024-byte swizzle atom
    constexpr int STAGE_BYTES = Copies::STAGE_BYTES;
    constexpr int AHEAD = STAGES - 1 - IN_FLIGHT;  // K-steps of copies in flight
    static_assert(AHEAD >= 1, "a pipeline needs a stage beyond those the wgmma read");
    static_assert(IN_FLIGHT == 0 || IN_FLIGHT == 1, "at most one K-step's wgmma in flight");
    // 3xTF32's K-steps per partial sum: 1 when each step is waited for; with a group in
    // flight, FLUSH_STEPS (128 floats of K), where the wait for all groups comes once per
    // FLUSH_STEPS steps instead of every step.
    constexpr int FLUSH = COPIES == 2 && IN_FLIGHT == 1 ? FLUSH_STEPS : 1;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned long long smem = smem_addr(smem_raw);

    const int cg = C / groups;
    const int kg = K / groups;
    const int CRS = cg * R * S;
    const int PQ = P * Q;
    const int mblocks = (kg + BM - 1) / BM;
    const int grp = blockIdx.y / mblocks;
    const int m0 = (blockIdx.y - grp * mblocks) * BM;
    const int n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;

    // This block's K-steps: all of them, or split z's slice of kper (the last may be short).
    const int kfirst = blockIdx.z * kper;
    const int ktiles = min((CRS + BK - 1) / BK - kfirst, kper);
    Copies copies;
    copies.init(tid, shape, m0, n0, grp, kfirst, cg_mul, cg_shr, s_mul, s_shr, pq_mul, pq_shr,
                q_mul, q_shr);

    // 3xTF32 sums FLUSH K-steps' products in `part` first, then adds them to acc in FP32
    // (round to nearest): the tensor core rounds its sums toward zero, which summed straight
    // into acc drifts past the FP32 tolerance over long K (implicit_gemm_tc.cu measured 1.6e-5
    // at K = 2304 on an H100). 1xTF32 and 16-bit types, within wider tolerances, use acc alone.
    float acc[64], part[64];
#pragma unroll
    for (int v = 0; v < 64; ++v) acc[v] = part[v] = 0.0f;
    float(&sums)[64] = COPIES == 2 ? part : acc;

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < ktiles) copies.load(x, w, smem, s, shape);
        cp_async_commit();  // one group per stage, empty past the end, so the count is fixed
    }
    const int wgroup = tid / 128;
    // The descriptors of stage 0's tiles (this warpgroup's rows of A, and B). Another stage,
    // copy or 32-byte slice of K is as many 16-byte units more in the start-address field,
    // which never carries out of its 14 bits (shared memory is below 256 KiB): an add, where
    // building each descriptor anew took four instructions, eight times a K-step.
    const unsigned long long a_desc0 = wgmma_desc(smem + wgroup * 64 * ROW_BYTES, SBO);
    const unsigned long long b_desc0 = wgmma_desc(smem + Copies::A_BYTES, SBO);
    constexpr unsigned long long STAGE_UNITS = STAGE_BYTES / 16;
    constexpr int COPY_UNITS = Copies::COPY_BYTES / 16;
    int read = 0, write = AHEAD;  // the stages of K-steps kt and kt + AHEAD (AHEAD < STAGES)
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<AHEAD - 1>();  // this thread's copies of step kt have landed
        fence_proxy_async();         // ... and are visible to the tensor cores
        __syncthreads();             // ... everyone's; step kt - 1 - IN_FLIGHT's wgmma are done
        if (kt + AHEAD < ktiles) copies.load(x, w, smem, write, shape);
        cp_async_commit();
        write = write + 1 == STAGES ? 0 : write + 1;
        const unsigned long long a_tile = a_desc0 + read * STAGE_UNITS;
        const unsigned long long b_tile = b_desc0 + read * STAGE_UNITS;
        read = read + 1 == STAGES ? 0 : read + 1;
        wgmma_fence();
        wgmma_k_step<T, COPIES, COPY_UNITS>(sums, a_tile, b_tile);
        wgmma_commit();
        wgmma_retire<COPIES, IN_FLIGHT>(acc, part, (kt + 1) % FLUSH == 0 || kt + 1 == ktiles);
    }
    wgmma_wait<0>();     // the last K-step's wgmma, before the epilogue reads acc
    cp_async_wait<0>();  // only empty groups remain; nothing may be in flight at exit

    // Split K: FP32 partial sums into partials[z], laid out like y; the tile's last split
    // adds them once they are stored (the stages are done with: wgmma_wait<0> above, and the
    // sum's first barrier, so its flag goes there).
    float* split_sums =
        static_cast<float*>(partials) + static_cast<long long>(blockIdx.z) * N * K * PQ;
    const int lane = tid % 32, t = lane % 4;
    const int row = m0 + wgroup * 64 + (tid % 128) / 32 * 16 + lane / 4;
    unscale_parts<T, COPIES>(acc, x, w, shape);
    store_wgmma_tile(acc, y, split_sums, gridDim.z > 1, shape, row, n0, t, grp, kg, pq_mul,
                     pq_shr, pairs);
    if (gridDim.z > 1) {
        sum_split_tile<BM, BN, THREADS>(shape, partials, y, counters, smem_raw, m0, n0, grp,
                                        kg, pq_mul, pq_shr);
    }
}

// The warp-specialized kernel ("-ws" configurations): the same tiles, shared-memory layout,
// wgmma and epilogue, but the copies are PRODUCERS threads' alone (threads BM / 64 * 128 on:
// a warpgroup, or two warps at 3xTF32, whose consumers need the registers a larger block would
// not leave them), handed to the BM / 64 consumer warpgroups through mbarriers instead of a
// block barrier per K-step. Why: Nsight Compute put the one-role kernel's warps mostly at
// its barrier and its copy waits (VGG-16 conv4_2 float16, H200, 2026-11-25: barrier 1.82 and
// wait 1.45 stall cycles per instruction, the tensor cores idle between), every warp issuing
// both roles.
//
// Stage st has two mbarriers after the stages in dynamic shared memory: full[st] (PRODUCERS
// arrivals: each producer thread once its copies of the stage have landed and it ran
// fence.proxy.async) and empty[st] (one arrival per consumer thread once the wgmma that read
// the stage are done). K-step kt uses stage kt % STAGES in its (kt / STAGES)-th use, so
// consumers wait on full[st] with parity (kt / STAGES) & 1 and the producers, before refilling,
// on empty[st] with the parity of the previous use. A producer keeps LAG = STAGES - 2 K-steps
// of copies in flight after the one it issued: it signals step kt - LAG once it has issued
// step kt. LAG must stay below STAGES - 1: consumers release step j's stage only once step
// j + 1 has arrived (one wgmma group in flight), so a producer waiting for a stage must
// already have signalled the step after it. Consumers keep one K-step's wgmma in flight (3xTF32:
// its partial sums added every FLUSH_STEPS K-steps). No split K (the grid's z is 1).
template <typename T, int BM, int STAGES, int COPIES, int PRODUCERS>
__global__ void __launch_bounds__(BM / 64 * 128 + PRODUCERS, 1)
    implicit_gemm_wgmma_ws(WGMMA_NHWC_PARAMS) {
    CONV_SHAPE_FIELDS;
    constexpr int CONSUMERS = BM / 64 * 128;
    using Copies = NhwcStageCopies<T, BM, COPIES, PRODUCERS>;
    constexpr int BN = Copies::BN, BK = Copies::BK, ROW_BYTES = Copies::ROW_BYTES;
    constexpr int SBO = 8 * ROW_BYTES, STAGE_BYTES = Copies::STAGE_BYTES;
    constexpr int LAG = STAGES - 2;
    static_assert(LAG >= 1, "three stages or more");
    static_assert(PRODUCERS == 64 || PRODUCERS == 128, "two producer warps or a warpgroup");
    constexpr int FLUSH = COPIES == 2 ? FLUSH_STEPS : 1;
    (void)partials, (void)counters, (void)kper;

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned long long smem = smem_addr(smem_raw);
    const unsigned long long bars = smem + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES]

    const int cg = C / groups;
    const int kg = K / groups;
    const int CRS = cg * R * S;
    const int mblocks = (kg + BM - 1) / BM;
    const int grp = blockIdx.y / mblocks;
    const int m0 = (blockIdx.y - grp * mblocks) * BM;
    const int n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;
    const int ktiles = (CRS + BK - 1) / BK;

    if (tid == 0) {
#pragma unroll
        for (int st = 0; st < STAGES; ++st) {
            mbarrier_init(bars + 8 * st, PRODUCERS);
            mbarrier_init(bars + 8 * (STAGES + st), CONSUMERS);
        }
    }
    __syncthreads();  // the barriers are initialized before anyone uses them

    if (tid >= CONSUMERS) {  // the producers
        Copies copies;
        copies.init(tid - CONSUMERS, shape, m0, n0, grp, 0, cg_mul, cg_shr, s_mul, s_shr,
                    pq_mul, pq_shr, q_mul, q_shr);
        int st = 0;
        unsigned int use = 0;  // parity of stage st's use by step kt: (kt / STAGES) & 1
        for (int kt = 0; kt < ktiles; ++kt) {
            // The previous use's release: empty[st]'s phase of parity use ^ 1 (or a give-up:
            // the consumers then give up too, at the latest when they wait for this step).
            if (kt >= STAGES && !mbarrier_wait(bars + 8 * (STAGES + st), use ^ 1u)) {
                cp_async_wait<0>();
                return;
            }
            copies.load(x, w, smem, st, shape);
            cp_async_commit();
            if (kt >= LAG) {
                cp_async_wait<LAG>();  // step kt - LAG's copies have landed
                fence_proxy_async();   // ... and are visible to the tensor cores
                const int done = st >= LAG ? st - LAG : st + STAGES - LAG;
                mbarrier_arrive(bars + 8 * done);
            }
            if (++st == STAGES) {
                st = 0;
                use ^= 1u;
            }
        }
        cp_async_wait<0>();
        fence_proxy_async();
        for (int kt = max(ktiles - LAG, 0); kt < ktiles; ++kt) {
            mbarrier_arrive(bars + 8 * (kt % STAGES));
        }
        return;
    }

    float acc[64], part[64];
#pragma unroll
    for (int v = 0; v < 64; ++v) acc[v] = part[v] = 0.0f;
    float(&sums)[64] = COPIES == 2 ? part : acc;
    const int wgroup = tid / 128;
    const unsigned long long a_desc0 = wgmma_desc(smem + wgroup * 64 * ROW_BYTES, SBO);
    const unsigned long long b_desc0 = wgmma_desc(smem + Copies::A_BYTES, SBO);
    constexpr unsigned long long STAGE_UNITS = STAGE_BYTES / 16;
    constexpr int COPY_UNITS = Copies::COPY_BYTES / 16;
    int st = 0, last = 0;
    unsigned int use = 0;  // parity of stage st's current use
    bool gave_up = false;
    for (int kt = 0; kt < ktiles; ++kt) {
        // Step kt's copies have landed and are visible (or the wait gave up: see
        // MBARRIER_GIVE_UP_NS).
        if (!mbarrier_wait(bars + 8 * st, use)) {
            gave_up = true;
            break;
        }
        wgmma_fence();
        wgmma_k_step<T, COPIES, COPY_UNITS>(sums, a_desc0 + st * STAGE_UNITS,
                                            b_desc0 + st * STAGE_UNITS);
        wgmma_commit();
        // Step kt - 1's wgmma are done after this (and at a flush, step kt's too).
        wgmma_retire<COPIES, 1>(acc, part, (kt + 1) % FLUSH == 0 || kt + 1 == ktiles);
        if (kt > 0) mbarrier_arrive(bars + 8 * (STAGES + last));  // its stage is free
        last = st;
        if (++st == STAGES) {
            st = 0;
            use ^= 1u;
        }
    }
    wgmma_wait<0>();  // the last K-step's wgmma, before the epilogue reads acc
    if (gave_up) {  // a tile that is not the product is NaN, never a plausible number
#pragma unroll
        for (int v = 0; v < 64; ++v) acc[v] = __uint_as_float(0x7FC00000u);
    }

    const int lane = tid % 32;
    const int row = m0 + wgroup * 64 + (tid % 128) / 32 * 16 + lane / 4;
    unscale_parts<T, COPIES>(acc, x, w, shape);
    store_wgmma_tile(acc, y, static_cast<float*>(nullptr), false, shape, row, n0, lane % 4, grp,
                     kg, pq_mul, pq_shr, pairs);
}
