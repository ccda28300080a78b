// One-warp kernels that exercise each warp-level PTX wrapper of kernels/common.cuh, for
// tests/test_cuda_emu_warp.py: each gathers its fragments straight from global memory by the
// PTX ISA layout, runs the instruction, and scatters the result, so the test can compare it
// with a NumPy model. `bug` injects one mistake (0: none) that the tests must catch.
#include "common.cuh"
#include "wgmma.cuh"

// D (16x8) = A (16x8) . B (8x8) + C, TF32 m16n8k8. bug 1: a1 and a2 swapped (wrong fragment
// index); bug 2: raw floats instead of cvt.rna (the low 13 bits are dropped, not rounded).
__global__ void __launch_bounds__(32) mma_tf32_kernel(const float* a, const float* b,
                                                      const float* c, float* d, int bug) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const float av[4] = {a[g * 8 + t], a[(g + 8) * 8 + t], a[g * 8 + t + 4],
                         a[(g + 8) * 8 + t + 4]};
    const float bv[2] = {b[t * 8 + g], b[(t + 4) * 8 + g]};
    unsigned int af[4], bf[2];
    for (int i = 0; i < 4; ++i) af[i] = bug == 2 ? __float_as_uint(av[i]) : tf32_rna(av[i]);
    for (int i = 0; i < 2; ++i) bf[i] = bug == 2 ? __float_as_uint(bv[i]) : tf32_rna(bv[i]);
    if (bug == 1) {
        const unsigned int tmp = af[1];
        af[1] = af[2];
        af[2] = tmp;
    }
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                    c[(g + 8) * 8 + 2 * t + 1]};
    __syncthreads();
    mma_tf32(acc, af, bf);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// D (16x8) = A (16x16) . B (16x8) + C in float16 / bfloat16 (T), fragments from global.
// bug 1: B registers swapped; bug 3: lanes 16..31 skip the mma (divergence).
template <typename T>
__global__ void __launch_bounds__(32) mma_k16_kernel(const T* a, const T* b, const float* c,
                                                     float* d, int bug) {
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const unsigned short* as = &a[0].bits;
    const unsigned short* bs = &b[0].bits;
    auto pack = [](unsigned short lo, unsigned short hi) {
        return static_cast<unsigned int>(lo) | (static_cast<unsigned int>(hi) << 16);
    };
    unsigned int af[4], bf[2];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
        af[i] = pack(as[row * 16 + col], as[row * 16 + col + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        const int k = 2 * t + 8 * i;
        bf[i] = pack(bs[k * 8 + g], bs[(k + 1) * 8 + g]);
    }
    if (bug == 1) {
        const unsigned int tmp = bf[0];
        bf[0] = bf[1];
        bf[1] = tmp;
    }
    float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t],
                    c[(g + 8) * 8 + 2 * t + 1]};
    __syncthreads();
    if (bug != 3 || lane < 16) mma_k16(a, acc, af, bf);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// src: 32 rows of 8 b16 into shared; ldmatrix.x4 with lane l giving row l (out[lane*4 + j]),
// then ldmatrix.x2.trans with lane l < 16 giving row l (out[128 + lane*2 + j]).
// bug 1: lane gives row (l + 1) % 32; bug 2: row address 8 bytes off (misaligned).
__global__ void __launch_bounds__(32) ldmatrix_kernel(const unsigned short* src,
                                                      unsigned int* out, int bug) {
    __shared__ __align__(16) unsigned short tile[32][8];
    const int lane = threadIdx.x;
    for (int j = 0; j < 8; ++j) tile[lane][j] = src[lane * 8 + j];
    __syncthreads();
    const int row = bug == 1 ? (lane + 1) % 32 : lane;
    const unsigned long long address = smem_addr(&tile[row][0]) + (bug == 2 ? 8 : 0);
    unsigned int r4[4];
    ldmatrix_x4(r4, address);
    unsigned int r2[2];
    ldmatrix_x2_trans(r2, smem_addr(&tile[lane % 16][0]));
    for (int j = 0; j < 4; ++j) out[lane * 4 + j] = r4[j];
    for (int j = 0; j < 2; ++j) out[128 + lane * 2 + j] = r2[j];
}

// Two cp.async groups per thread into shared, each zero-filled where lane % 5 == 4, then out =
// shared. Group 0: 16 bytes at src[lane*4], group 1: 8 then 4 bytes at src[128 + lane*3].
// bug 1: no wait before reading; bug 2: wait_group 1 then read group 1 too; bug 3: misaligned
// 16-byte source; bug 4: destination is a global address.
__global__ void __launch_bounds__(32) cp_async_kernel(const float* src, float* out, float* junk,
                                                      int bug) {
    __shared__ __align__(16) float s0[32 * 4];
    __shared__ __align__(16) float s1[32 * 4];
    const int lane = threadIdx.x;
    const bool ok = lane % 5 != 4;
    const float* g0 = src + lane * 4 + (bug == 3 ? 1 : 0);
    cp_async<16>(bug == 4 ? reinterpret_cast<unsigned long long>(junk) : smem_addr(&s0[lane * 4]),
                 g0, ok);
    cp_async_commit();
    cp_async<8>(smem_addr(&s1[lane * 4]), src + 128 + lane * 4, ok);
    cp_async<4>(smem_addr(&s1[lane * 4 + 2]), src + 128 + lane * 4 + 2, ok);
    s1[lane * 4 + 3] = 7.0f;
    cp_async_commit();
    if (bug == 2) {
        cp_async_wait<1>();
    } else if (bug != 1) {
        cp_async_wait<0>();
    }
    __syncthreads();
    for (int j = 0; j < 4; ++j) out[lane * 4 + j] = s0[lane * 4 + j];
    for (int j = 0; j < 4; ++j) out[128 + lane * 4 + j] = s1[lane * 4 + j];
    if (bug == 1 || bug == 2) cp_async_wait<0>();
}

// Dynamic shared memory beyond 48 KiB (the launch's opt-in is the test's): each lane writes
// and reads back its slot at both ends of the `bytes` the launch gave.
__global__ void __launch_bounds__(32) dynamic_smem_kernel(float* out, int bytes) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float* s = reinterpret_cast<float*>(smem_raw);
    const int lane = threadIdx.x, last = bytes / 4 - 32;
    s[lane] = lane;
    s[last + lane] = 2.0f * lane;
    __syncthreads();
    out[lane] = s[lane] + s[last + lane];
}

// One wgmma m64n8 on one warpgroup (128 threads): D (64x8) = A (64xK) . B^T (B: 8xK) + C,
// K = 32 bytes of elements (k16 for half_t, k8 for float as TF32). A and B come row-major
// from global memory and are staged by plain stores into the K-major, unswizzled canonical
// layout that the PTX ISA's matrix descriptors describe: core matrices of 8 rows x 16 bytes;
// the two core matrices along K of an 8-row group LBO = 128 bytes apart, 8-row groups
// SBO = 256 bytes apart; A at byte 0 of dynamic shared memory, B at 2048. D goes out by the
// accumulator layout: lane l of warp w, g = l / 4, t = l % 4, register 2v + h holds row
// 16w + g + 8v, column 2t + h. bug 1: A's descriptor with LBO and SBO swapped; bug 2: D's
// registers v and h swapped; bug 3: no wgmma.wait_group before reading D. Not bugs, but
// chains the emulator must follow: 4, two more wgmma on the same registers, the last issued
// while the second is still in flight over a wait_group 1 (D = 3 A.B^T + C); 5, a second
// wgmma in the same group that takes the registers in another order (h swapped), so each
// register adds the product of its neighbour column; 6, a second wgmma on the same registers
// in a second group, and D read after a wait_group 1 (the second still in flight: NaN).
__device__ __forceinline__ void wgmma_m64n8(const half_t*, float& d0, float& d1, float& d2,
                                            float& d3, unsigned long long a,
                                            unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, "
                 "%6, %7, %8, %9, %10;"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "l"(a), "l"(b), "n"(1), "n"(1), "n"(1), "n"(0), "n"(0));
}
__device__ __forceinline__ void wgmma_m64n8(const float*, float& d0, float& d1, float& d2,
                                            float& d3, unsigned long long a,
                                            unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, %4, %5, "
                 "%6, %7, %8;"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
                 : "l"(a), "l"(b), "n"(1), "n"(1), "n"(1));
}

template <typename T>
__global__ void __launch_bounds__(128) wgmma_kernel(const T* a, const T* b, const float* c,
                                                    float* d, int bug) {
    constexpr int E = sizeof(T), K = 32 / E, CORE_K = 16 / E, LBO = 128, SBO = 256;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int tid = threadIdx.x;
    auto stage = [&](const T* src, int rows, int base) {
        for (int i = tid; i < rows * K; i += 128) {
            const int r = i / K, k = i % K;
            const int at =
                base + (r / 8) * SBO + (r % 8) * 16 + (k / CORE_K) * LBO + (k % CORE_K) * E;
            *reinterpret_cast<T*>(smem_raw + at) = src[i];
        }
    };
    stage(a, 64, 0);
    stage(b, 8, 2048);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma
    __syncthreads();
    const unsigned long long shared = smem_addr(smem_raw);
    auto desc = [](unsigned long long address, int lbo, int sbo) {
        return ((address & 0x3FFFFull) >> 4) | (static_cast<unsigned long long>(lbo >> 4) << 16) |
               (static_cast<unsigned long long>(sbo >> 4) << 32);
    };
    const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = c[(16 * w + g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    const unsigned long long da = bug == 1 ? desc(shared, SBO, LBO) : desc(shared, LBO, SBO),
                             db = desc(shared + 2048, LBO, SBO);
    wgmma_m64n8(a, acc[0], acc[1], acc[2], acc[3], da, db);
    if (bug == 5) wgmma_m64n8(a, acc[1], acc[0], acc[3], acc[2], da, db);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (bug == 4) {
        wgmma_m64n8(a, acc[0], acc[1], acc[2], acc[3], da, db);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(1) : "memory");
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        wgmma_m64n8(a, acc[0], acc[1], acc[2], acc[3], da, db);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    }
    if (bug == 6) {
        wgmma_m64n8(a, acc[0], acc[1], acc[2], acc[3], da, db);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(1) : "memory");
    }
    const bool early = bug == 3 || bug == 6;  // D read while a wgmma on it is in flight
    if (!early) asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0) : "memory");
    for (int i = 0; i < 4; ++i) {
        const int v = bug == 2 ? i % 2 : i / 2, h = bug == 2 ? i / 2 : i % 2;
        d[(16 * w + g + 8 * v) * 8 + 2 * t + h] = acc[i];
    }
    if (early) asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0) : "memory");
}

// One wgmma m64n8k8 tf32 with A from registers (the form implicit_gemm_wgmma_nchw.cu issues):
// D (64x8) = A (64x8) . B^T (B: 8x8) + C. A comes row-major from global memory straight into
// each lane's four registers by the documented fragment (lane l of warp w, g = l / 4, t = l %
// 4: register i holds row 16w + g + 8 (i % 2), column t + 4 (i / 2)); B is staged as in
// wgmma_kernel. bug 1: registers a1 and a2 swapped; bug 2: a[0] overwritten while the wgmma
// is in flight (the emulator must abort at the wait).
__global__ void __launch_bounds__(128) wgmma_rs_kernel(const float* a, const float* b,
                                                       const float* c, float* d, int bug) {
    constexpr int LBO = 128, SBO = 256;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const int tid = threadIdx.x;
    for (int i = tid; i < 8 * 8; i += 128) {
        const int r = i / 8, k = i % 8;
        *reinterpret_cast<float*>(smem_raw + (r % 8) * 16 + (k / 4) * LBO + (k % 4) * 4) = b[i];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
    unsigned int frag[4];
    for (int i = 0; i < 4; ++i) {
        const int j = bug == 1 && (i == 1 || i == 2) ? 3 - i : i;
        frag[i] = __float_as_uint(a[(16 * w + g + 8 * (j % 2)) * 8 + t + 4 * (j / 2)]);
    }
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = c[(16 * w + g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
    const unsigned long long db = ((smem_addr(smem_raw) & 0x3FFFFull) >> 4) |
                                  (static_cast<unsigned long long>(LBO >> 4) << 16) |
                                  (static_cast<unsigned long long>(SBO >> 4) << 32);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, %8, %9, %10, %11;"
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
                 : "r"(frag[0]), "r"(frag[1]), "r"(frag[2]), "r"(frag[3]), "l"(db), "n"(1),
                   "n"(1), "n"(1));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (bug == 2) frag[0] = 0u;
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0) : "memory");
    for (int i = 0; i < 4; ++i) d[(16 * w + g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = acc[i];
}

// A producer warp (threads 32..63) hands ROUNDS rounds of 32 floats to a consumer warp
// (threads 0..31) through one shared stage and two mbarriers, as a warp-specialized kernel's
// stages go: the producer waits until the stage is empty (from round 1 on), copies its round
// in with cp.async, waits for its own copies and arrives on `full`; the consumer waits on
// `full` with the round's parity, writes lane (l + 1) % 32's value to out (another thread's
// copy), and arrives on `empty`. bug 1: the consumer waits on the other parity; 2: the
// producer never waits for `empty`; 3: `full` expects one arrival more than the 32 it gets.
// A wait that gives up (wgmma.cuh MBARRIER_GIVE_UP_NS) ends its thread; the consumer's first
// writes -1 - r over its round r of out.
__global__ void __launch_bounds__(64) mbarrier_kernel(const float* src, float* out, int bug) {
    constexpr int ROUNDS = 3;
    __shared__ __align__(16) float stage[32];
    __shared__ __align__(8) unsigned long long bars[2];
    const int tid = threadIdx.x, lane = tid % 32;
    const unsigned long long full = smem_addr(&bars[0]), empty = smem_addr(&bars[1]);
    if (tid == 0) {
        mbarrier_init(full, bug == 3 ? 33 : 32);
        mbarrier_init(empty, 32);
    }
    __syncthreads();
    for (int r = 0; r < ROUNDS; ++r) {
        if (tid >= 32) {
            if (r > 0 && bug != 2 && !mbarrier_wait(empty, (r - 1) & 1)) return;
            cp_async<4>(smem_addr(&stage[lane]), src + r * 32 + lane, true);
            cp_async_commit();
            cp_async_wait<0>();
            mbarrier_arrive(full);
        } else {
            if (!mbarrier_wait(full, (r & 1) ^ (bug == 1 ? 1 : 0))) {
                out[r * 32 + lane] = -1.0f - r;
                return;
            }
            out[r * 32 + lane] = stage[(lane + 1) % 32];
            mbarrier_arrive(empty);
        }
    }
}
// The production wgmma path: 128-byte-swizzled K-major tiles (wgmma.cuh wgmma_desc,
// SBO 1024), a whole 128-byte K-step issued as four wgmma whose descriptors advance 32 bytes
// (2 units) each, two warpgroups (A rows 64w..64w+63 at byte 64w * 128), N = 128.
// D (128 x 128) = A (128 x KS) . B^T (B: 128 x KS) + C, KS = 128 bytes of elements.
// bug 10 + b (float only): A from registers (wgmma_tf32_rs, the NCHW kernel's form), B
// swizzled, with bug b.
// bug 1: tiles stored unswizzled (row r at 128 r, chunk c at 16 c); bug 2: see da.
template <typename T>
__global__ void __launch_bounds__(256) wgmma_sw128_kernel(const T* a, const T* b,
                                                          const float* c, float* d, int bug) {
    constexpr int E = sizeof(T), KS = 128 / E;
    extern __shared__ __align__(16) unsigned char smem_raw_[];
    // Swizzle atoms on 1024-byte shared-window boundaries whatever the base (+1024 bytes).
    unsigned char* smem_raw = smem_raw_ + ((1024 - (smem_addr(smem_raw_) & 1023)) & 1023);
    const int tid = threadIdx.x;
    const bool rs = bug >= 10;
    bug %= 10;
    auto at = [&](int r, int k) {
        const int chunk = k * E / 16, within = k * E % 16;
        return r * 128 + (bug == 1 ? chunk : (chunk ^ (r % 8))) * 16 + within;
    };
    for (int i = tid; i < 128 * KS; i += 256) {
        const int r = i / KS, k = i % KS;
        *reinterpret_cast<T*>(smem_raw + at(r, k)) = a[i];
        *reinterpret_cast<T*>(smem_raw + 16384 + at(r, k)) = b[i];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const unsigned long long smem = smem_addr(smem_raw);
    const int wg = tid / 128, w = (tid % 128) / 32, g = (tid % 32) / 4, t = tid % 4;
    float acc[64];
    for (int i = 0; i < 64; ++i)
        acc[i] = c[(64 * wg + 16 * w + g + 8 * ((i / 2) % 2)) * 128 + 8 * (i / 4) + 2 * t + i % 2];
    // bug 2: A's descriptor starts a row into the 1024-byte swizzle pattern, base offset 0.
    const unsigned long long da = wgmma_desc(smem + wg * 64 * 128 + (bug == 2 ? 128 : 0), 1024),
                             db = wgmma_desc(smem + 16384, 1024);
    unsigned int fr[KS / 8][4];
    if constexpr (sizeof(T) == 4) {
        for (int kc = 0; kc < KS / 8; ++kc)
            for (int i = 0; i < 4; ++i)
                fr[kc][i] = __float_as_uint(
                    a[(64 * wg + 16 * w + g + 8 * (i % 2)) * KS + 8 * kc + t + 4 * (i / 2)]);
    }
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    const T* kind = nullptr;
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
        if constexpr (sizeof(T) == 4) {
            if (rs) {
                wgmma_tf32_rs(acc, fr[kc], db + 2 * kc);
                continue;
            }
        }
        wgmma_m64n128(kind, acc, da + 2 * kc, db + 2 * kc);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(0) : "memory");
    for (int i = 0; i < 64; ++i)
        d[(64 * wg + 16 * w + g + 8 * ((i / 2) % 2)) * 128 + 8 * (i / 4) + 2 * t + i % 2] = acc[i];
}
