// Shared helpers for every convtune kernel.
//
// These sources are compiled two ways: by NVRTC through cupy.RawModule at run time (the
// loader pastes this header in place of its #include line, so the compile cache key covers
// it) and by nvcc in tests/test_kernels_compile.py. Neither may depend on a CUDA header, so
// half precision is a plain 16-bit storage type converted with PTX instructions.
#pragma once

// float16 storage; arithmetic always happens in float.
struct half_t {
    unsigned short bits;
};

// bfloat16 storage (the high 16 bits of a float); arithmetic always happens in float.
struct bf16_t {
    unsigned short bits;
};

// The accumulation type of a storage type: float for float and half, double for double.
template <typename T>
struct AccOf {
    typedef float type;
};
template <>
struct AccOf<double> {
    typedef double type;
};

__device__ __forceinline__ float load_acc(const float* p) { return *p; }
__device__ __forceinline__ double load_acc(const double* p) { return *p; }
__device__ __forceinline__ float load_acc(const half_t* p) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(p->bits));
    return f;
}

__device__ __forceinline__ float load_acc(const bf16_t* p) {
    return __uint_as_float(static_cast<unsigned int>(p->bits) << 16);
}

__device__ __forceinline__ void store_acc(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_acc(double* p, double v) { *p = v; }
__device__ __forceinline__ void store_acc(half_t* p, float v) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
    p->bits = b;
}

__device__ __forceinline__ void store_acc(bf16_t* p, float v) {
    unsigned short b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(v));
    p->bits = b;
}

// Two adjacent outputs p[0] = a, p[1] = b in one store; p must be aligned to two elements (8
// bytes for float, 4 for the 16-bit types: the host checks). Why: the tensor-core epilogues
// hold columns 2t and 2t + 1 of a row in one lane, and storing them one by one made every
// warp-wide store touch 8 sectors for 2-4 bytes of each lane, twice over.
__device__ __forceinline__ void store_acc2(float* p, float a, float b) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}
template <typename T>  // half_t or bf16_t
__device__ __forceinline__ void store_acc2(T* p, float a, float b) {
    T lo, hi;
    store_acc(&lo, a);
    store_acc(&hi, b);
    const unsigned int v = lo.bits | (static_cast<unsigned int>(hi.bits) << 16);
    asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One 16-byte store of 4 floats to a 16-byte-aligned global address. Written in PTX because
// NVVM split a plain float4 store into 4 scalar stores inside the implicit-GEMM epilogue.
__device__ __forceinline__ void store_float4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
                 "f"(d)
                 : "memory");
}

// dst[i] = value(i) for 0 <= i < count, the block's THREADS threads sharing the work. Each
// thread issues U loads before its first shared-memory store: in a loop of load, store,
// load, store the store waits for its load, so a thread had one load in flight and a
// memory-bound fill paid one memory latency per element it staged.
template <int U, int THREADS, typename A, typename F>
__device__ __forceinline__ void stage_shared(A* dst, int count, int tid, F value) {
    for (int base = tid; base < count; base += U * THREADS) {
        A v[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * THREADS;
            v[u] = i < count ? value(i) : A(0);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = base + u * THREADS;
            if (i < count) dst[i] = v[u];
        }
    }
}

// n / d for 0 <= n, d < 2^31 with a multiply and a shift; (mul, shift) come from
// algorithms.cuda._loader.fastdiv(d), which tests/test_cuda_index_math.py checks.
__device__ __forceinline__ int fast_div(int n, unsigned int mul, unsigned int shift) {
    const unsigned int un = static_cast<unsigned int>(n);
    return static_cast<int>((__umulhi(un, mul) + un) >> shift);
}

// The input coordinate that output coordinate `o` reads through filter tap `t` (one axis):
// the forward index map, shared by every kernel that walks it either way.
__device__ __forceinline__ int tap_input(int o, int t, int pad, int str, int dil) {
    return o * str - pad + t * dil;
}

// Its inverse: the output coordinate whose tap `t` reads input coordinate `i`, or -1 when
// there is none (i + pad - t * dil negative, between two strides: a "hole", or >= O). The
// sign test comes first because C++ division truncates toward zero.
__device__ __forceinline__ int tap_output(int i, int t, int pad, int str, int dil, int O) {
    const int num = i + pad - t * dil;
    if (num < 0) return -1;
    const int o = num / str;
    return (o * str == num && o < O) ? o : -1;
}

// The shape of a convolution, in the order algorithms.cuda._loader.shape_args() passes it.
#define CONV_SHAPE_PARAMS                                                                  \
    int N, int C, int H, int W, int K, int R, int S, int P, int Q, int pad_h, int pad_w,  \
        int str_h, int str_w, int dil_h, int dil_w, int groups

// The same shape as one structure (algorithms.cuda._loader.shape_struct packs it, fields in
// this order). Why: CuPy converts every kernel argument on its own, about 0.36 us apiece on
// an H200's host (benchmarks/bench_launch_cost.py, 2026-11-26), so sixteen ints cost some
// 6 us per launch. __grid_constant__ keeps it in parameter memory: a by-value copy cost up
// to 40 registers and spilled two instances. The implicit-GEMM, tensor-core and im2col
// kernels take it; direct and depthwise keep the ints (ptxas gave the structure's loads 9-37
// more registers there, past an occupancy step).
struct ConvShape {
    int N, C, H, W, K, R, S, P, Q, pad_h, pad_w, str_h, str_w, dil_h, dil_w, groups;
};
#define CONV_SHAPE_STRUCT const __grid_constant__ ConvShape shape
// The structure's fields as the locals every kernel body names; the first statement of a
// kernel that takes CONV_SHAPE_STRUCT.
#define CONV_SHAPE_FIELDS                                                                  \
    [[maybe_unused]] const int N = shape.N, C = shape.C, H = shape.H, W = shape.W,        \
                               K = shape.K, R = shape.R, S = shape.S, P = shape.P,        \
                               Q = shape.Q, pad_h = shape.pad_h, pad_w = shape.pad_w,     \
                               str_h = shape.str_h, str_w = shape.str_w,                  \
                               dil_h = shape.dil_h, dil_w = shape.dil_w,                  \
                               groups = shape.groups

// Split K's sum, in the GEMM kernel: every block of a split tile calls this after storing its
// FP32 partial sums to part[blockIdx.z] (each N*K*P*Q floats, laid out like y). Each counts
// itself in `counters` (one per tile: blockIdx.y * gridDim.x + blockIdx.x); the last to
// finish resets the count to zero (for the next launch, which stream order puts after this
// one) and stores y at the tile's BM x BN outputs (rows m0 + .. below kg = K/groups of group
// `grp`, columns n0 + .. below N*P*Q; pq_mul, pq_shr divide by P*Q) as the splits' sum in
// split order, the same order whichever block was last. `flag`: shared memory the block no
// longer needs. The pattern of the CUDA C++ Programming Guide's fence example: each thread's
// stores, a fence, the barrier, one thread's atomic; the summing block reads through L2
// (__ldcg), past an L1 that is not coherent.
template <int BM, int BN, int THREADS, typename T>
__device__ __forceinline__ void sum_split_tile(const ConvShape& shape, const void* partials,
                                               T* __restrict__ y, void* counters, void* flag,
                                               int m0, int n0, int grp, int kg,
                                               unsigned int pq_mul, unsigned int pq_shr) {
    const int K = shape.K, PQ = shape.P * shape.Q, NPQ = shape.N * PQ;
    const long long total = static_cast<long long>(shape.N) * K * PQ;
    const float* __restrict__ part = static_cast<const float*>(partials);
    unsigned int* last = static_cast<unsigned int*>(flag);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int* count =
            static_cast<unsigned int*>(counters) + blockIdx.y * gridDim.x + blockIdx.x;
        *last = atomicAdd(count, 1u) == gridDim.z - 1;
        if (*last) *count = 0;
    }
    __syncthreads();
    if (!*last) return;
    __threadfence();
    for (int e = threadIdx.x; e < BM * BN; e += THREADS) {
        const int m = m0 + e / BN, n = n0 + e % BN;  // consecutive threads: adjacent pixels
        if (m >= kg || n >= NPQ) continue;
        const int img = fast_div(n, pq_mul, pq_shr);
        const long long at =
            static_cast<long long>(img * K + grp * kg + m) * PQ + (n - img * PQ);
        float sum = __ldcg(part + at);
        for (unsigned int z = 1; z < gridDim.z; ++z) sum += __ldcg(part + z * total + at);
        store_acc(y + at, sum);
    }
}

// The offset of a copy's source element where `ok`, else 0 (a valid address never read: see
// cp_async), as unsigned: tensors are under 2^31 elements, and an unsigned offset makes
// `base + element(...)` one wide multiply-add (IMAD.WIDE.U32), where a signed one took a sign
// extension, a select of each half, a 64-bit add and a 64-bit shift-add per copy (SASS of
// implicit_gemm_wgmma's K-step, benchmarks/kernel_loop_sass.py).
__device__ __forceinline__ unsigned int element(bool ok, int offset) {
    return ok ? static_cast<unsigned int>(offset) : 0u;
}

// A compile-time bool as a value, to compile a generic lambda once per case (CuPy's NVRTC
// has no <type_traits>).
template <bool B>
struct Flag {
    static constexpr bool value = B;
};

// --- NHWC gathers of an implicit GEMM's pixel operand (implicit_gemm_tc.cu's NHWC instances,
// implicit_gemm_wgmma.cu): x is NHWC and the K index is k = (r*S + s)*cg + c. ---

// A thread's K index kk walked forward by a fixed step per K-step, its tap kept without
// divisions (two at `init`, none after): channel c and filter column s, dh = r * dil_h and
// dw = s * dil_w, and `offset` = (dh * W + dw) * C + c, what a pixel's NHWC offset at its
// receptive field's corner needs added. Why: recomputing the tap (two divisions) and each
// copy's address from it every K-step made the wgmma kernel's K-step about 250 instructions a
// warp to issue against 4 wgmma, and that issue, not the tensor cores, set its pace (H200, VGG-16
// conv4_2 float16: 6.45 cycles per issued instruction, no warp waiting on wgmma).
struct NhwcTapWalk {
    int kk, c, s, dh, dw, offset;

    __device__ __forceinline__ void init(int kk0, int cg, int S, int W, int C, int dil_h,
                                         int dil_w, unsigned int cg_mul, unsigned int cg_shr,
                                         unsigned int s_mul, unsigned int s_shr) {
        const int rs = fast_div(kk0, cg_mul, cg_shr);
        const int r = fast_div(rs, s_mul, s_shr);
        kk = kk0;
        c = kk0 - rs * cg;
        s = rs - r * S;
        dh = r * dil_h;
        dw = s * dil_w;
        offset = (dh * W + dw) * C + c;
    }

    // kk += step. A step of at least cg crosses taps (as many as step / cg).
    __device__ __forceinline__ void advance(int step, int cg, int S, int W, int C, int dil_h,
                                            int dil_w) {
        kk += step;
        c += step;
        offset += step;
        while (c >= cg) {  // the next filter column; past the last, the next row
            c -= cg;
            offset += dil_w * C - cg;
            dw += dil_w;
            if (++s == S) {
                s = 0;
                offset += dil_h * W * C - dw * C;
                dw = 0;
                dh += dil_h;
            }
        }
    }
};

// The LOADS output pixels first, first + step, ... of a thread's B-tile copies, decomposed
// once (`init`) into their receptive fields' corners (h0, w0) and the NHWC offset of the
// corner's channels of group grp (negative at top or left padding, then never read);
// `source` then gives each one's copy source at a walk's tap, every K-step.
template <int LOADS>
struct NhwcPixels {
    int corner[LOADS], h0[LOADS], w0[LOADS];
    bool valid[LOADS];  // false past N*P*Q

    __device__ __forceinline__ void init(int first, int step, int NPQ, int PQ, int Q, int HWC,
                                         int W, int C, int group_channels, int str_h, int str_w,
                                         int pad_h, int pad_w, unsigned int pq_mul,
                                         unsigned int pq_shr, unsigned int q_mul,
                                         unsigned int q_shr) {
#pragma unroll
        for (int i = 0; i < LOADS; ++i) {
            const int n = first + i * step;
            valid[i] = n < NPQ;
            const int pixel = valid[i] ? n : 0;
            const int img = fast_div(pixel, pq_mul, pq_shr);
            const int pq = pixel - img * PQ;
            const int p = fast_div(pq, q_mul, q_shr);
            h0[i] = p * str_h - pad_h;
            w0[i] = (pq - p * Q) * str_w - pad_w;
            corner[i] = img * HWC + group_channels + (h0[i] * W + w0[i]) * C;
        }
    }

    // Pixel i's run of channels at `walk`'s tap in x, with `ok` whether to copy it (a valid
    // pixel, k_ok, inside the image); x itself, a valid address never read, where not. Bounds
    // are bitwise &, not &&: every term is cheap, and a branch per copy is not.
    template <typename T>
    __device__ __forceinline__ const T* source(const T* x, int i, const NhwcTapWalk& walk,
                                               bool k_ok, int H, int W, bool& ok) const {
        const int ih = h0[i] + walk.dh, iw = w0[i] + walk.dw;
        ok = valid[i] & k_ok & (static_cast<unsigned int>(ih) < static_cast<unsigned int>(H)) &
             (static_cast<unsigned int>(iw) < static_cast<unsigned int>(W));
        return x + element(ok, corner[i] + walk.offset);
    }
};


// --- Warp-level tensor-core and async-copy PTX (sm_80+), one instruction per inline-PTX statement so
// tests/cuda_emu can emulate each (tests/cuda_emu/warp.h documents the fragment layouts). ---

// The GPU's global timer, in nanoseconds (%globaltimer).
__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

// The shared-space address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned long long smem_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return a;
}

// x rounded to TF32 (10 mantissa bits, ties away), as the 32-bit pattern mma reads.
__device__ __forceinline__ unsigned int tf32_rna(float x) {
    unsigned int r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// x rounded to TF32 for a tensor core alone to read: half a TF32 unit added to the bits (ties
// away, as cvt.rna), the low 13 bits left for the tensor core to drop (it reads the 19 high
// ones); infinity and NaN as they are. Where the value goes through memory, ptxas cannot drop
// cvt.rna's mask as it does before an mma: this is one instruction less per element.
__device__ __forceinline__ unsigned int tf32_rna_for_mma(float x) {
    const unsigned int bits = __float_as_uint(x);
    return fabsf(x) < __uint_as_float(0x7f800000u) ? bits + 0x1000u : bits;
}

// 3xTF32's big part of x: x rounded to TF32 (ties away) with the low 13 bits cleared, as
// cvt.rna, but without its test for infinity and NaN, one instruction less per element. An
// infinity comes out as itself; a NaN may come out as any value, which is harmless here:
// its small part, x - big, is NaN whatever big is, and carries the NaN into the sum.
__device__ __forceinline__ unsigned int tf32_big(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// v as a copy for TF32 operands stores it: rounded to TF32 if TF32 (float only), else as is.
template <bool TF32, typename V>
__device__ __forceinline__ V tf32_stored(V v) {
    if constexpr (TF32) {
        return __uint_as_float(tf32_rna(v));
    } else {
        return v;
    }
}

// d += A (16x8, row) . B (8x8, col) on TF32 operands, FP32 accumulation.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned int (&a)[4],
                                         const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += A (16x16, row) . B (16x8, col) on packed float16 / bfloat16 pairs (the pointer picks).
__device__ __forceinline__ void mma_k16(const half_t*, float (&d)[4], const unsigned int (&a)[4],
                                        const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_k16(const bf16_t*, float (&d)[4], const unsigned int (&a)[4],
                                        const unsigned int (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four / two 8x8 b16 matrices from shared memory; each lane gives one 16-byte row address.
__device__ __forceinline__ void ldmatrix_x4(unsigned int (&r)[4], unsigned long long row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "l"(row)
                 : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned int (&r)[2], unsigned long long row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "l"(row)
                 : "memory");
}

// BYTES (4, 8 or 16) from global `src` to shared `dst`, asynchronously; zero-filled when !ok
// (src is then not read, but must still be a valid, aligned address).
template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned long long dst, const void* src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"l"(dst), "l"(src),
                 "n"(BYTES), "r"(ok ? BYTES : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
