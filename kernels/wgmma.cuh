// Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) as the kernels of implicit_gemm_wgmma.cu and
// implicit_gemm_wgmma_nchw.cu issue it: the instructions with their accumulator operands, the
// fences and waits around them, and the shared-memory matrix descriptor of the 128-byte
// swizzled K-major layout (the PTX ISA's "Asynchronous Warpgroup Level Matrix" section;
// tests/cuda_emu/warp.h emulates each). Needs common.cuh (half_t, bf16_t) first.
#pragma once

// 3xTF32's K-steps (of 32 floats) per partial sum where a kernel leaves a group of wgmma in
// flight: the partial sums are added to the FP32 accumulators, once every group is done,
// every FLUSH_STEPS K-steps instead of every one. Their truncation grows with their length:
// summed straight over K = 2304 they cost 1.4e-5 in emulation and 1.6e-5 on an H100
// (mma.sync); over 128 floats 1.2e-6 in emulation (tc_long_k: tests/test_cuda_emulated.py).
constexpr int FLUSH_STEPS = 4;

// The 64 accumulator operands of an m64n128 wgmma, and their constraints (the emulator's
// translator expands these object-like macros inside inline PTX).
#define WGMMA_N128_D                                                                           \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
    "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define WGMMA_N128_ACC \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), \
    "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), \
    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), \
    "+f"(d[62]), "+f"(d[63])

// d (64 x 128, FP32) += A (64 x 32 bytes of K) . B (32 bytes of K x 128), both K-major in
// shared memory, described by a and b; scale-d 1 (accumulate), no negation; 16-bit types
// untransposed (tf32 has no transposition operands: K-major is its only layout).
__device__ __forceinline__ void wgmma_m64n128(const half_t*, float (&d)[64],
                                              unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_N128_D
                 "%64, %65, %66, %67, %68, %69, %70;"
                 : WGMMA_N128_ACC
                 : "l"(a), "l"(b), "n"(1), "n"(1), "n"(1), "n"(0), "n"(0));
}
__device__ __forceinline__ void wgmma_m64n128(const bf16_t*, float (&d)[64],
                                              unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_N128_D
                 "%64, %65, %66, %67, %68, %69, %70;"
                 : WGMMA_N128_ACC
                 : "l"(a), "l"(b), "n"(1), "n"(1), "n"(1), "n"(0), "n"(0));
}
__device__ __forceinline__ void wgmma_m64n128(const float*, float (&d)[64],
                                              unsigned long long a, unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WGMMA_N128_D
                 "%64, %65, %66, %67, %68;"
                 : WGMMA_N128_ACC
                 : "l"(a), "l"(b), "n"(1), "n"(1), "n"(1));
}

// The 32 accumulator operands of an m64n64 wgmma, and their constraints.
#define WGMMA_N64_D \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define WGMMA_N64_ACC \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31])

// The 48 accumulator operands of an m64n96 wgmma (implicit_gemm_wgmma_nchw.cu's 96-channel
// tiles), and their constraints.
#define WGMMA_N96_D                                                                            \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
    "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
    "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
#define WGMMA_N96_ACC \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), \
    "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])

// d (64 x N, FP32) += A (64 x 8, TF32, in registers) . B (8 x N, TF32, K-major in shared
// memory, described by b); scale-d 1. A's fragment (CUTLASS's ALayout_64x8, the m16n8k8 A
// fragment per warp): lane l of warp w of the warpgroup, g = l / 4, t = l % 4, holds a[0] =
// (row 16w + g, k t), a[1] = (16w + g + 8, t), a[2] = (16w + g, t + 4), a[3] = (16w + g + 8,
// t + 4). The registers must not change until the wgmma's wait (the PTX ISA: as its
// accumulators).
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[64], const unsigned int (&a)[4],
                                              unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WGMMA_N128_D
                 "{%64, %65, %66, %67}, %68, %69, %70, %71;"
                 : WGMMA_N128_ACC
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(1), "n"(1));
}
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[48], const unsigned int (&a)[4],
                                              unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n96k8.f32.tf32.tf32 " WGMMA_N96_D
                 "{%48, %49, %50, %51}, %52, %53, %54, %55;"
                 : WGMMA_N96_ACC
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(1), "n"(1));
}
__device__ __forceinline__ void wgmma_tf32_rs(float (&d)[32], const unsigned int (&a)[4],
                                              unsigned long long b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 " WGMMA_N64_D
                 "{%32, %33, %34, %35}, %36, %37, %38, %39;"
                 : WGMMA_N64_ACC
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(1), "n"(1), "n"(1));
}

// Orders this thread's earlier register accesses (the accumulators) before the next wgmma.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Wait until at most N of this warpgroup's committed wgmma groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (cp.async's) visible to the
// async proxy, through which wgmma reads its operands.
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A shared-memory matrix descriptor for the 128-byte-swizzled K-major layout: start address
// and SBO in 16-byte units (14 bits each, bits 0 and 32), LBO 1 (unused by this layout, bits
// 16), base offset 0 (tiles on 1024-byte boundaries), layout type 1 = 128-byte swizzle (bits
// 62-63). The start address is the shared-window address's low 18 bits (shared memory is
// below 256 KiB).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned long long shared, int sbo) {
    return ((shared & 0x3FFFFull) >> 4) | (1ull << 16) |
           (static_cast<unsigned long long>(sbo >> 4) << 32) | (1ull << 62);
}

// mbarriers (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"): an
// 8-byte shared-memory object counting arrivals per phase, for warp-specialized kernels whose
// producers and consumers hand stages to each other without __syncthreads. `bar` is a
// shared-space address (smem_addr), 8-byte aligned.
__device__ __forceinline__ void mbarrier_init(unsigned long long bar, unsigned int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"l"(bar), "r"(count) : "memory");
}
// One arrival (release: this thread's earlier writes are visible to a thread whose wait sees
// the phase complete). Returns the phase's token, which only mbarrier.test_wait would read.
__device__ __forceinline__ unsigned long long mbarrier_arrive(unsigned long long bar) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "l"(bar) : "memory");
    return state;
}
// How long a wait may last before its kernel gives up, in nanoseconds of the global timer. A
// stage's copies land in microseconds, so only a deadlock (a bug, or hardware not doing what
// the emulator's model says) waits this long; the kernel then finishes with NaN where it gave
// up, and a tuning run records a wrong result instead of hanging the GPU for good.
constexpr unsigned long long MBARRIER_GIVE_UP_NS = 1000000000ull;

// One try_wait.parity: whether the phase of parity `parity` has completed (the hardware may
// suspend the thread a while first).
__device__ __forceinline__ bool mbarrier_try_wait(unsigned long long bar, unsigned int parity) {
    unsigned int done;
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
        "selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "l"(bar), "r"(parity)
        : "memory");
    return done != 0;
}
// Waits until the phase of parity `parity` (0 or 1) has completed (acquire): true, or false
// once MBARRIER_GIVE_UP_NS have passed without it (the caller then gives up its work).
__device__ __forceinline__ bool mbarrier_wait(unsigned long long bar, unsigned int parity) {
    if (mbarrier_try_wait(bar, parity)) return true;
    const unsigned long long start = global_timer_ns();
    while (!mbarrier_try_wait(bar, parity)) {
        if (global_timer_ns() - start > MBARRIER_GIVE_UP_NS) return false;
    }
    return true;
}
