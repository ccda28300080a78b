// Convolution with one group on Hopper's warpgroup tensor cores (wgmma.mma_async, sm_90a)
// straight from NCHW float32 x: no NHWC copy of x, and for a 1x1 filter (any stride and
// padding) none of W either, nor any workspace but split K's partial sums. Per image a 1x1
// layer is the GEMM y[n] (K x P*Q) = W (K x C) . x[n] (C x the P*Q input pixels read); a
// filter with taps (TAPS) is the sum of one such GEMM per tap (r, s), each over the input
// pixels that tap reads (zeros where it reads padding). This kernel computes the transpose,
// y^T (pixels x K) = x^T (pixels x C) . W^T, so that each operand is in a layout wgmma
// reads: x^T is wgmma's A,
// loaded into registers from a shared tile that holds x's NCHW rows as they are (channel by
// channel, pixels contiguous), and W^T is its B, whose K-major layout is W's own rows (C
// contiguous). Why: TF32 has no transposed wgmma layouts, so implicit_gemm_wgmma.cu reads
// NHWC copies of x, and on ResNet-50's late 1x1 layers those copies cost a third of its run
// (TF32, H200, 2026-11-27: wgmma 53-59 us on res4.1x1a.rest against cuDNN's 28); an A operand
// in registers has no layout in memory to satisfy.
//
// Tiles: BM output channels (the wgmma N: 64, 128, or 96 for layers whose K a 96-row tile
// covers with less waste) by BN output pixels over the batch (64
// per warpgroup: BN / 64 warpgroups), K-steps of BK = 32 channels (128 bytes of a W row) of
// one tap: with taps, K runs tap by tap ((r, s) row-major), ceil(C / BK) K-steps each, and W
// is read from the host's copy of it laid out (K, R*S, C) (one transpose launch before this
// one, which also rounds or splits it; a tap's C channels are then one contiguous piece of a
// W row, as a 1x1 filter's are).
// Why taps: on 3x3 layers the NHWC configurations copy x (and at 3xTF32 write two parts of
// it) before their GEMM: half the bytes VGG-16's early layers move at TF32, two thirds at
// 3xTF32.
// Precision (COPIES):
// - 1, 1xTF32 (math "tf32"): x rounded to TF32 in registers, W in shared memory (both as
//   tf32_rna_for_mma: ties away, the low bits left for the tensor core to drop);
// - 2, 3xTF32 (math "fp32"): x split into big = tf32(v) and small = tf32(v - big) in
//   registers, W's tile into a big and a small tile in shared memory; small.big + big.small +
//   big.big summed per K-step from zero, then added to the FP32 accumulators (the tensor core
//   rounds its sums toward zero: implicit_gemm_wgmma.cu says why this matters).
// W's tile lands by cp.async in FP32, and each thread rounds (or splits) the 16-byte chunks it
// copied itself once they have landed, before fence.proxy.async and the barrier: W needs no
// copy kernel and no workspace. With taps W is copied anyway (below), so the copy rounds it
// (or writes its big part, then the small one after all K*R*S*C of it) and the tiles land
// ready: 15% of the K-loop's instructions less at TF32, 12% at 3xTF32 (kernel_loop_sass.py),
// where TF32 with taps would otherwise issue more than its wgmma take.
//
// Shared memory, per stage: the W tile(s) (BM rows x 128 bytes each, in the 128-byte-swizzled
// K-major layout and thread mapping of implicit_gemm_wgmma.cu's filter tile; the small tile
// after the big one), then x's tile: BK channel rows of BN pixels at a pitch of LDX = BN + 8
// floats. Why + 8: a warp's fragment load reads channel rows t (0..3) at pixel pairs 2g, 2g + 1
// (g 0..7; below), 8 bytes a lane, which the hardware serves half a warp at a time: banks
// (LDX * t + 2g) % 32 and the next, all distinct in each half with LDX = 8 mod 32. x is copied
// in vectors of VEC floats:
// 4 (16 bytes) at stride 1 without padding where P*Q is a multiple of 4, so that a vector's
// pixels are adjacent in one image and the vector aligned; else 1 (a strided layer reads
// every stride-th pixel). Thread tid owns one vector of output pixels (the input pixel it
// reads, or that it is padding, worked out once, and with taps again per K-step from the
// tap's offsets) and the channel rows tid / (BN / VEC) + i * X_ROW_STEP of it. With taps
// VEC is 1: a tap's pixels are shifted by its column, off any 16-byte grid.
//
// Pipeline as implicit_gemm_wgmma.cu's: STAGES stages of cp.async, and IN_FLIGHT K-steps of
// wgmma left running at the end of a K-step (3xTF32's then add their partial sums every
// FLUSH_STEPS K-steps, wgmma.cuh). A wgmma reads its A registers until its wait, so with one
// group in flight the K loop alternates two sets of them (unrolled by two, so that each set's
// index is a constant: registers, not local memory).
//
// Pixel order: the GEMM's rows may be any order of the output pixels, so row g + 8 v of each
// warp's 16 (the m64nNk8 fragments' row halves) is pixel 2g + v: a lane's two A words of a
// channel are adjacent in x's tile (one 8-byte load), and so are its two outputs of a channel.
// Epilogue: accumulator 4j + 2v + h of lane (g = lane / 4, t = lane % 4) of warp w in
// warpgroup wg is pixel n0 + 64 wg + 16 w + 2g + v, channel m0 + 8 j + 2 t + h (the FP32
// layout of m64nNk8): a thread stores its two pixels of a channel as one 8-byte pair where
// `pairs` says they are in one image and aligned (P*Q even, y or split K's partials 8-byte
// aligned), else one by one. Split K (grid.z > 1) as implicit_gemm_wgmma.cu's (common.cuh
// sum_split_tile; its tile is channels by pixels, as here).
//
// The launch arguments are implicit_gemm_wgmma_conv's (the host builds both launches alike):
// the divisors of C/groups and S are not used. Needs C a multiple of 4 (16-byte
// W vectors within a row, and within a tap's piece of it), 16-byte aligned x (VEC 4) and w,
// all tensors < 2^31 elements.
#include "common.cuh"
#include "wgmma.cuh"

template <int BM, int BN, int STAGES, int COPIES, int IN_FLIGHT, int VEC, bool TAPS = false>
__global__ void __launch_bounds__(BN / 64 * 128, 1)
    implicit_gemm_wgmma_nchw(const float* __restrict__ x, const float* __restrict__ w,
                             float* __restrict__ y, CONV_SHAPE_STRUCT, unsigned int cg_mul,
                             unsigned int cg_shr, unsigned int s_mul, unsigned int s_shr,
                             unsigned int pq_mul, unsigned int pq_shr, unsigned int q_mul,
                             unsigned int q_shr, void* __restrict__ partials,
                             void* __restrict__ counters, int kper, int pairs) {
    CONV_SHAPE_FIELDS;
    constexpr int BK = 32, THREADS = BN / 64 * 128, ACC = BM / 2, LDX = BN + 8;
    constexpr int W_BYTES = BM * 128, X_BYTES = BK * LDX * 4;
    constexpr int STAGE_BYTES = COPIES * W_BYTES + X_BYTES;
    constexpr int W_ROW_STEP = THREADS / 8, W_LOADS = BM / W_ROW_STEP;
    constexpr int X_VECTORS = BN / VEC, X_ROW_STEP = THREADS / X_VECTORS;
    constexpr int X_LOADS = BK / X_ROW_STEP;
    static_assert(BM == 64 || BM == 96 || BM == 128, "the wgmma N: 64, 96 or 128");
    static_assert(BN % 64 == 0 && (VEC == 1 || VEC == 4), "64 pixels per warpgroup");
    static_assert(STAGE_BYTES % 1024 == 0, "swizzled tiles start on 1024-byte boundaries");
    static_assert(BM % W_ROW_STEP == 0 && W_ROW_STEP % 8 == 0 && THREADS % X_VECTORS == 0 &&
                      BK % X_ROW_STEP == 0,
                  "tiles split evenly over the threads");
    static_assert(COPIES == 1 || COPIES == 2, "1xTF32 or 3xTF32");
    static_assert(!TAPS || VEC == 1, "a tap's pixels are shifted off the 16-byte grid");
    constexpr int AHEAD = STAGES - 1 - IN_FLIGHT;  // K-steps of copies in flight
    static_assert(AHEAD >= 1, "a pipeline needs a stage beyond those the wgmma read");
    static_assert(IN_FLIGHT == 0 || IN_FLIGHT == 1, "at most one K-step's wgmma in flight");
    constexpr int FLUSH = COPIES == 2 && IN_FLIGHT == 1 ? FLUSH_STEPS : 1;  // (wgmma.cuh)

    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const unsigned long long smem = smem_addr(smem_raw);
    const int PQ = P * Q;
    const int NPQ = N * PQ;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    const int tid = threadIdx.x;

    // W: chunk tid % 8 (channels kv..kv+3 of the K-step) of filter rows wrow0 + i * W_ROW_STEP,
    // at byte w_swizzled + i * W_ROW_STEP * 128 of the tile (the rows are congruent mod 8).
    const int kv = 4 * (tid % 8);
    const int wrow0 = tid / 8;
    const int w_swizzled = wrow0 * 128 + ((tid % 8) ^ (wrow0 % 8)) * 16;
    const int w_row = TAPS ? R * S * C : C;  // a W row: the host's (K, R*S, C) copy with taps
    const int w_small = K * w_row;  // with taps at 3xTF32: where the copy's small parts start
    int w_src[W_LOADS];
    bool w_ok[W_LOADS];
#pragma unroll
    for (int i = 0; i < W_LOADS; ++i) {
        const int m = m0 + wrow0 + i * W_ROW_STEP;
        w_ok[i] = m < K;
        w_src[i] = m * w_row + kv;
    }
    // x: output pixels n0 + VEC * xv .. + VEC - 1 of channel rows xrow0 + i * X_ROW_STEP; the
    // input pixel each reads (a stride, or padding, whose pixels are zeros; VEC 4 only at
    // stride 1 without padding, where input and output pixels coincide).
    const int HW = H * W;
    const int xv = tid % X_VECTORS, xrow0 = tid / X_VECTORS;
    const int pixel = n0 + VEC * xv;
    const bool pixel_in = pixel < NPQ;
    int ih0 = 0, iw0 = 0, x_image = 0;  // tap (0, 0)'s input pixel; channel xrow0's plane
    if (pixel_in) {
        const int img = fast_div(pixel, pq_mul, pq_shr);
        const int pq = pixel - img * PQ;
        const int oh = fast_div(pq, q_mul, q_shr);
        ih0 = oh * str_h - pad_h;
        iw0 = (pq - oh * Q) * str_w - pad_w;
        x_image = (img * C + xrow0) * HW;
    }
    bool pixel_ok;  // whether the input pixel read is in x (not padding, not past the batch)
    int x_src;      // its element in channel xrow0, read only where ok
    // The input pixel (dh, dw) from tap (0, 0)'s: once, and with taps per K-step.
    auto read_pixel = [&](int dh, int dw) {
        const int ih = ih0 + dh, iw = iw0 + dw;
        pixel_ok = pixel_in && ih >= 0 && ih < H && iw >= 0 && iw < W;
        x_src = x_image + ih * W + iw;
    };
    read_pixel(0, 0);
    const int x_dst = COPIES * W_BYTES + (xrow0 * LDX + VEC * xv) * 4;

    // This block's K-steps: all of them, or split z's slice of kper (the last may be short).
    // With taps the first is tap `tap`'s K-step k0 / BK.
    const int csteps = (C + BK - 1) / BK;  // K-steps per tap
    const int kfirst = blockIdx.z * kper;
    const int ktiles = min((TAPS ? R * S : 1) * csteps - kfirst, kper);
    const int tap = TAPS ? kfirst / csteps : 0;
    int k0 = (kfirst - tap * csteps) * BK;  // the first channel of the next K-step to load
    int tap_r = TAPS ? tap / S : 0, tap_s = TAPS ? tap - tap / S * S : 0;
    int w_tap = tap * C;  // where the tap's channels start in a W row

    // Fills stage st with the next K-step. C is a multiple of 4: a W vector is all inside C or
    // all past it.
    auto load_stage = [&](int st) {
        const unsigned long long base = smem + st * STAGE_BYTES;
        if (TAPS) read_pixel(tap_r * dil_h, tap_s * dil_w);  // the pixel this tap reads
        const bool k_ok = k0 + kv < C;
#pragma unroll
        for (int i = 0; i < W_LOADS; ++i) {
            const bool ok = w_ok[i] & k_ok;
            const unsigned long long to = base + w_swizzled + i * W_ROW_STEP * 128;
            cp_async<16>(to, w + element(ok, w_src[i] + w_tap + k0), ok);
            if (TAPS && COPIES == 2) {  // the copy's small part, into the small tile
                cp_async<16>(to + W_BYTES, w + element(ok, w_small + w_src[i] + w_tap + k0),
                             ok);
            }
        }
        if (k0 + BK <= C) {
            // Every channel row of the K-step is in C (every K-step where C % 32 == 0): one
            // test, the pixel's, and a fixed step between rows, a multiply-add per copy where
            // a test, a select and an address each took two to six instructions (SASS).
            const float* src = x + element(pixel_ok, x_src + k0 * HW);
            const int step = pixel_ok ? X_ROW_STEP * HW : 0;
#pragma unroll
            for (int i = 0; i < X_LOADS; ++i) {
                cp_async<4 * VEC>(base + x_dst + i * X_ROW_STEP * LDX * 4, src, pixel_ok);
                src += step;
            }
        } else {
#pragma unroll
            for (int i = 0; i < X_LOADS; ++i) {
                const int c = k0 + xrow0 + i * X_ROW_STEP;
                const bool ok = pixel_ok & (c < C);
                cp_async<4 * VEC>(base + x_dst + i * X_ROW_STEP * LDX * 4,
                                  x + element(ok, x_src + (k0 + i * X_ROW_STEP) * HW), ok);
            }
        }
        k0 += BK;
        if (TAPS && k0 >= C) {  // the tap's channels are done: the next tap's first K-step
            k0 = 0;
            w_tap += C;
            if (++tap_s == S) {
                tap_s = 0;
                ++tap_r;
            }
        }
    };

    // Rounds (1xTF32) or splits (3xTF32) the W chunks this thread copied into stage st, once
    // they have landed (with taps they came rounded or split).
    auto round_w = [&](int st) {
        if (TAPS) return;
        unsigned char* base = smem_raw + st * STAGE_BYTES + w_swizzled;
#pragma unroll
        for (int i = 0; i < W_LOADS; ++i) {
            float4* big = reinterpret_cast<float4*>(base + i * W_ROW_STEP * 128);
            const float4 v = *big;
            if (COPIES == 1) {
                *big = make_float4(__uint_as_float(tf32_rna_for_mma(v.x)),
                                   __uint_as_float(tf32_rna_for_mma(v.y)),
                                   __uint_as_float(tf32_rna_for_mma(v.z)),
                                   __uint_as_float(tf32_rna_for_mma(v.w)));
            } else {
                const float4 b = make_float4(__uint_as_float(tf32_big(v.x)),
                                             __uint_as_float(tf32_big(v.y)),
                                             __uint_as_float(tf32_big(v.z)),
                                             __uint_as_float(tf32_big(v.w)));
                *big = b;
                *reinterpret_cast<float4*>(base + W_BYTES + i * W_ROW_STEP * 128) =
                    make_float4(__uint_as_float(tf32_rna_for_mma(v.x - b.x)),
                                __uint_as_float(tf32_rna_for_mma(v.y - b.y)),
                                __uint_as_float(tf32_rna_for_mma(v.z - b.z)),
                                __uint_as_float(tf32_rna_for_mma(v.w - b.w)));
            }
        }
    };

    float acc[ACC], part[ACC];
#pragma unroll
    for (int v = 0; v < ACC; ++v) acc[v] = part[v] = 0.0f;
    float(&sums)[ACC] = COPIES == 2 ? part : acc;

#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < ktiles) load_stage(s);
        cp_async_commit();  // one group per stage, empty past the end, so the count is fixed
    }
    const int lane = tid % 32, g = lane / 4, t = lane % 4;
    const int row = (tid / 128) * 64 + (tid % 128) / 32 * 16 + 2 * g;  // this lane's first pixel
    // A fragment word i of a k8 slice: channel t + 4 (i / 2), pixel row + i % 2 (pixel order).
    const int frag = COPIES * W_BYTES / 4 + t * LDX + row;
    const unsigned long long b_desc0 = wgmma_desc(smem, 1024);
    constexpr unsigned long long STAGE_UNITS = STAGE_BYTES / 16, W_UNITS = W_BYTES / 16;
    int read = 0, write = AHEAD;  // the stages of K-steps kt and kt + AHEAD
    unsigned int a_big[2][BK / 8][4], a_small[2][BK / 8][4];

    // K-step kt, with A register set SET (two sets alternate; where each step is waited for,
    // one would do, and ptxas gives the dead set's registers to other values).
    auto step = [&](auto set, int kt) {
        constexpr int SET = decltype(set)::value ? 1 : 0;
        cp_async_wait<AHEAD - 1>();  // this thread's copies of step kt have landed
        round_w(read);
        fence_proxy_async();         // ... and its W chunks, rounded, are visible to wgmma
        __syncthreads();             // ... everyone's; step kt - 1 - IN_FLIGHT's wgmma are done
        if (kt + AHEAD < ktiles) load_stage(write);
        cp_async_commit();
        write = write + 1 == STAGES ? 0 : write + 1;
        const float* xs = reinterpret_cast<const float*>(smem_raw + read * STAGE_BYTES) + frag;
        const unsigned long long b_tile = b_desc0 + read * STAGE_UNITS;
        read = read + 1 == STAGES ? 0 : read + 1;
#pragma unroll
        for (int kc = 0; kc < BK / 8; ++kc) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 pair =
                    *reinterpret_cast<const float2*>(xs + (8 * kc + 4 * (i / 2)) * LDX);
                const float v = i % 2 ? pair.y : pair.x;  // one 8-byte load per two words
                if (COPIES == 1) {
                    a_big[SET][kc][i] = tf32_rna_for_mma(v);
                } else {
                    a_big[SET][kc][i] = tf32_big(v);
                    a_small[SET][kc][i] =
                        tf32_rna_for_mma(v - __uint_as_float(a_big[SET][kc][i]));
                }
            }
        }
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < BK / 8; ++kc) {  // a k8 slice (32 bytes of a W row) per wgmma
            const unsigned long long b_big = b_tile + 2 * kc;
            if (COPIES == 2) {  // the small terms first, as CUTLASS's 3xTF32 does
                wgmma_tf32_rs(sums, a_small[SET][kc], b_big);
                wgmma_tf32_rs(sums, a_big[SET][kc], b_big + W_UNITS);
            }
            wgmma_tf32_rs(sums, a_big[SET][kc], b_big);
        }
        wgmma_commit();
        if (COPIES == 2 && ((kt + 1) % FLUSH == 0 || kt + 1 == ktiles)) {
            wgmma_wait<0>();  // every group on `part` is done
#pragma unroll
            for (int v = 0; v < ACC; ++v) {
                acc[v] += part[v];
                part[v] = 0.0f;
            }
        } else {
            wgmma_wait<IN_FLIGHT>();
        }
    };
    for (int kt = 0; kt < ktiles; kt += 2) {
        step(Flag<false>{}, kt);
        if (kt + 1 < ktiles) step(Flag<true>{}, kt + 1);
    }
    wgmma_wait<0>();     // the last K-step's wgmma, before the epilogue reads acc
    cp_async_wait<0>();  // only empty groups remain; nothing may be in flight at exit

    // Partial sums of split z into partials[z], laid out like y; else y itself.
    float* out = gridDim.z > 1 ? static_cast<float*>(partials) +
                                     static_cast<long long>(blockIdx.z) * N * K * PQ
                               : y;
    // This lane's two pixels, each at channel 0 of its image (null past the batch). p0 is even:
    // with P*Q even (`pairs`) p0 + 1 is in p0's image, and in the batch when p0 is.
    float* at[2];
#pragma unroll
    for (int v = 0; v < 2; ++v) {
        const int p = n0 + row + v;
        const int im = fast_div(p, pq_mul, pq_shr);
        at[v] = p < NPQ ? out + static_cast<long long>(im) * K * PQ + (p - im * PQ) : nullptr;
    }
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = m0 + 8 * j + 2 * t + h;
            if (m >= K) continue;
            const long long channel = static_cast<long long>(m) * PQ;
            if (pairs) {
                if (at[0]) store_acc2(at[0] + channel, acc[4 * j + h], acc[4 * j + 2 + h]);
            } else {
#pragma unroll
                for (int v = 0; v < 2; ++v) {
                    if (at[v]) at[v][channel] = acc[4 * j + 2 * v + h];
                }
            }
        }
    }
    if (gridDim.z > 1) {
        sum_split_tile<BM, BN, THREADS>(shape, partials, y, counters, smem_raw, m0, n0, 0, K,
                                        pq_mul, pq_shr);
    }
}
