// A CPU execution model for kernels/*.cu, for tests on machines without a GPU.
//
// Every CUDA thread of a block is a fiber with its own stack, switched by emu_switch below
// (glibc's swapcontext makes a signal-mask system call on every switch, and a block
// switches once per thread and barrier). A kernel without barriers runs its threads as
// plain calls. A block's fibers run one at a time, each until its next __syncthreads() or
// its end, in an order the caller picks per launch (forward, reverse, or shuffled every
// phase); the blocks run one after another in the same kind of order (launch order,
// reversed, shuffled). A race between two threads of one barrier phase, or a result that
// depends on which block ran last, therefore changes results between schedules, which the
// tests compare bit for bit. Shared arrays (static and
// dynamic) are separate heap blocks filled with 0xFF (NaN as float) for every block, so
// AddressSanitizer sees overruns of them and an unwritten slot that is read shows up as
// NaN; global buffers are the caller's own heap blocks.
// Launch checks: grid/block limits and __launch_bounds__, 48 KiB of shared memory (dynamic
// beyond it only as far as the kernel opted in), every typed pointer argument aligned to its
// element type, barriers reached by all threads of a block the same number of times.
// translate.py rewrites the few CUDA-only constructs (`__shared__` declarations, inline PTX) into
// calls of this file; everything else of the kernel source compiles as plain C++17.
// Warp-level PTX (mma.sync, ldmatrix, cp.async) lives in warp.h, included at the end: a
// fiber parked at a warp instruction (state kAtWarp) runs again once its warp's last lane
// arrives, within the same barrier phase.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

#define __global__
#define __device__
#define __grid_constant__  // parameters are plain values on the CPU
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) alignas(n)

struct uint3 {
    unsigned int x, y, z;
};
struct dim3 {
    unsigned int x, y, z;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// The current thread's coordinates; the scheduler sets them before resuming a fiber.
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

using std::max;
using std::min;

// sin(pi x) and cos(pi x), CUDA's sincospif (within an ulp there), here from double.
inline void sincospif(float x, float* s, float* c) {
    const double angle = 3.141592653589793238 * static_cast<double>(x);
    *s = static_cast<float>(std::sin(angle));
    *c = static_cast<float>(std::cos(angle));
}

inline unsigned int __umulhi(unsigned int a, unsigned int b) {
    return static_cast<unsigned int>((static_cast<unsigned long long>(a) * b) >> 32);
}

// Global-memory ordering and atomics. One fiber runs at a time and a block runs to its end
// before the next starts, so an atomic is a plain read-modify-write and a fence orders
// nothing that is not already ordered; what they are for (a block that sees what blocks
// before it wrote) the emulator checks by running the blocks in several orders (`launch`).
inline void __threadfence() {}
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
    const unsigned int old = *p;
    *p = old + v;
    return old;
}
inline float __ldcg(const float* p) { return *p; }

// emu_switch(&save, to): save the callee-saved registers and stack pointer of the running
// context in `save`, resume the one `to` holds (x86-64 System V; kernels leave the FP
// control state alone, so it is not switched).
extern "C" void emu_switch(void** save, void* to);
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");

namespace emu {

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "cuda-emu: %s (block %u,%u,%u thread %u,%u,%u)\n", what, blockIdx.x,
                 blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
    std::fflush(stderr);
    std::abort();
}

constexpr std::size_t kStackBytes = 256 * 1024;
constexpr std::size_t kSharedLimit = 48 * 1024;  // static; dynamic without an opt-in
// The most a block may take, static and dynamic, once its kernel opted in
// (cudaFuncAttributeMaxDynamicSharedMemorySize): an H100's sharedMemPerBlockOptin.
constexpr std::size_t kSharedOptInLimit = 227 * 1024;

struct Fiber {
    void* sp = nullptr;  // saved stack pointer while suspended
    char* stack = nullptr;
    uint3 tid{};
    int barriers = 0;
    bool done = false;
    int state = 0;  // kRunnable, kAtBarrier, kAtWarp (waiting for its warp's other lanes)
                    // or kAtMbarrier (waiting for an mbarrier's phase: `ready` says when)
    std::size_t shared_next = 0;  // index of the next __shared__ declaration it reaches
    bool (*ready)(const void*, unsigned) = nullptr;  // kAtMbarrier: whether it may go on
    const void* waits_on = nullptr;  // ... the mbarrier
    unsigned parity = 0;             // ... and the phase parity it waits past
    bool deferred = false;  // runs again only once no other fiber can (set by an arrival)
};

struct Block {
    void* main_sp = nullptr;
    std::vector<Fiber> fibers;
    Fiber* current = nullptr;
    std::function<void()> body;
    std::vector<void*> shared;  // this block's static shared arrays, in declaration order
    std::vector<std::size_t> shared_sizes;
    std::size_t shared_bytes = 0;
    unsigned char* dynamic_shared = nullptr;
    std::size_t dynamic_bytes = 0;
    std::size_t dynamic_limit = kSharedLimit;  // the kernel's opt-in, or 48 KiB
    bool fibers_on = true;  // false: a barrier-free kernel, its threads run one after another
    // Whether an mbarrier arrival defers its thread until no other can run (warp.h): in every
    // schedule but the reverse one, so that of a case's two runs (forward, reverse) one has
    // producers as slow as they can be and the other as fast.
    bool defer_arrivals = true;
    // Whether a block whose every thread waits on an mbarrier lets time pass instead of failing
    // (the kExpireWaits flag of a schedule): see run_block.
    bool expire_waits = false;
    int expiries = 0;  // ... and how often it has (per block)
    const void* main_stack_bottom = nullptr;
    std::size_t main_stack_size = 0;
};

inline Block* g_block = nullptr;

enum FiberState { kRunnable = 0, kAtBarrier = 1, kAtWarp = 2, kAtMbarrier = 3 };

inline void enter_fiber_side() {
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &g_block->main_stack_bottom,
                                    &g_block->main_stack_size);
#endif
}

// Fiber -> scheduler. `finished`: this fiber's stack is never resumed again.
inline void to_scheduler(Fiber& f, bool finished) {
#if EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, g_block->main_stack_bottom,
                                   g_block->main_stack_size);
    emu_switch(&f.sp, g_block->main_sp);
    __sanitizer_finish_switch_fiber(fake, &g_block->main_stack_bottom,
                                    &g_block->main_stack_size);
#else
    (void)finished;
    emu_switch(&f.sp, g_block->main_sp);
#endif
}

inline void fiber_entry() {
    enter_fiber_side();
    g_block->body();
    Fiber& f = *g_block->current;
    f.done = true;
    to_scheduler(f, true);
    fail("finished fiber resumed");
}

// A fresh stack whose first resume() "returns" into fiber_entry with the alignment of a call.
inline void start_fiber(Fiber& f) {
    auto top = reinterpret_cast<std::uintptr_t>(f.stack + kStackBytes) & ~std::uintptr_t{15};
    auto* slot = reinterpret_cast<void**>(top - 16);
    slot[1] = nullptr;  // fiber_entry's return address: it never returns
    slot[0] = reinterpret_cast<void*>(&fiber_entry);
    for (int i = 1; i <= 6; ++i) slot[-i] = nullptr;  // the registers emu_switch pops
    f.sp = slot - 6;
}

// Scheduler -> fiber `f`, until it reaches a barrier or ends.
inline void resume(Fiber& f) {
    g_block->current = &f;
    threadIdx = f.tid;
#if EMU_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
    emu_switch(&g_block->main_sp, f.sp);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    emu_switch(&g_block->main_sp, f.sp);
#endif
}

inline void end_block_async(Block& b);

inline void* take_shared(std::size_t bytes, std::size_t alignment) {
    Block& b = *g_block;
    Fiber& f = *b.current;
    if (f.shared_next == b.shared.size()) {
        void* p = nullptr;
        if (posix_memalign(&p, std::max<std::size_t>(alignment, sizeof(void*)), bytes) != 0) {
            fail("out of host memory for shared memory");
        }
        std::memset(p, 0xFF, bytes);
        b.shared.push_back(p);
        b.shared_sizes.push_back(bytes);
        b.shared_bytes += bytes;
        if (b.shared_bytes > kSharedLimit) fail("block uses over 48 KiB of static shared memory");
        if (b.shared_bytes + b.dynamic_bytes > std::max(kSharedLimit, b.dynamic_limit)) {
            fail("block's static and dynamic shared memory pass its kernel's limit");
        }
    }
    return b.shared[f.shared_next++];
}

// A `__shared__ T name[..]` declaration: the block's array, the same for all its threads.
template <typename A>
inline A& shared_array(std::size_t alignment) {
    return *static_cast<A*>(take_shared(sizeof(A), std::max(alignment, alignof(A))));
}

// __launch_bounds__(max_threads, ...): a larger block fails to launch on a GPU.
inline void check_launch_bounds(long long max_threads) {
    if (1ll * blockDim.x * blockDim.y * blockDim.z > max_threads) {
        fail("block has more threads than the kernel's __launch_bounds__");
    }
}

inline unsigned char* dynamic_shared() {
    if (g_block->dynamic_bytes == 0) fail("extern __shared__ array used with shared_mem = 0");
    return g_block->dynamic_shared;
}

inline void syncthreads() {
    if (!g_block->fibers_on) fail("__syncthreads() in a kernel launched as barrier-free");
    Fiber& f = *g_block->current;
    ++f.barriers;
    f.state = kAtBarrier;
    to_scheduler(f, false);  // resume() restores threadIdx before switching back
}

// kExpireWaits is a flag added to a schedule: it runs a kernel's give-up path (run_block).
enum Schedule { kForward = 0, kReverse = 1, kShuffle = 2, kExpireWaits = 4 };

// The time the emulator let pass (kExpireWaits), added to the host's clock when a kernel reads
// %globaltimer.
inline unsigned long long g_time_passed_ns = 0;

// Wakes every thread waiting on an mbarrier with its try_wait false, an hour later on the
// global timer, as a GPU's try_wait gives up after its time limit and the kernel's loop reads
// the timer; returns whether any was waiting. Only a kernel that gives up after a while gets
// past a deadlock this way: one that waits forever parks again, and after kMaxExpiries hours
// of a block's time the block fails as it would without the flag.
constexpr int kMaxExpiries = 16;

inline bool expire_mbarrier_waits(Block& b) {
    bool any = false;
    for (Fiber& f : b.fibers) any = any || (!f.done && f.state == kAtMbarrier);
    if (!any || ++b.expiries > kMaxExpiries) return false;
    for (Fiber& f : b.fibers) {
        if (!f.done && f.state == kAtMbarrier) f.state = kRunnable;
    }
    g_time_passed_ns += 3600ull * 1000000000ull;
    return true;
}

// Thread indices in launch order, or reversed (kShuffle reshuffles them per phase).
inline std::vector<std::size_t> thread_order(std::size_t threads, int schedule) {
    std::vector<std::size_t> order(threads);
    for (std::size_t i = 0; i < threads; ++i) order[i] = i;
    if (schedule == kReverse) std::reverse(order.begin(), order.end());
    return order;
}

inline void run_block(Block& b, int schedule, std::mt19937& rng) {
    std::vector<std::size_t> order = thread_order(b.fibers.size(), schedule);
    for (int phase = 0;; ++phase) {
        if (schedule == kShuffle) std::shuffle(order.begin(), order.end(), rng);
        // Sweep until no fiber can run: one parked at a warp-synchronous instruction
        // (warp.h) runs again once the last lane of its warp has arrived there, one waiting
        // on an mbarrier once the phase it waits past has completed.
        // A fiber that arrived at an mbarrier waits until no other fiber can run (warp.h).
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t i : order) {
                Fiber& f = b.fibers[i];
                if (!f.done && f.state == kAtMbarrier && f.ready(f.waits_on, f.parity)) {
                    f.state = kRunnable;
                }
                if (!f.done && f.state == kRunnable && !f.deferred) {
                    resume(f);
                    progress = true;
                }
            }
            // Nothing else could run: release the first deferred fiber still running.
            for (Fiber& f : b.fibers) {
                if (progress) break;
                if (f.deferred) {
                    f.deferred = false;
                    progress = !f.done;
                }
            }
            // Nor could a deferred one: with kExpireWaits, time passes for the waiting ones.
            if (!progress && b.expire_waits) progress = expire_mbarrier_waits(b);
        }
        std::size_t done = 0;
        for (Fiber& f : b.fibers) {
            if (f.state == kAtWarp) {
                g_block->current = &f;
                threadIdx = f.tid;
                fail("a warp-synchronous instruction was not reached by every lane of its warp");
            }
            if (f.state == kAtMbarrier) {
                g_block->current = &f;
                threadIdx = f.tid;
                fail("an mbarrier wait that no arrival completes (every thread is waiting)");
            }
            f.state = kRunnable;
            done += f.done;
            if (!f.done && f.barriers != phase + 1) {
                fail("threads of a block disagree on __syncthreads()");
            }
        }
        if (done == b.fibers.size()) return;
        if (done != 0) fail("some threads exited while others wait at __syncthreads()");
    }
}

inline void run_threads_in_order(Block& b, int schedule, std::mt19937& rng) {
    std::vector<std::size_t> order = thread_order(b.fibers.size(), schedule);
    if (schedule == kShuffle) std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t i : order) {
        b.current = &b.fibers[i];
        threadIdx = b.fibers[i].tid;
        b.body();
    }
}

template <typename P>
constexpr char type_code() {
    if constexpr (std::is_pointer_v<P>) return 'p';
    else if constexpr (std::is_same_v<P, int>) return 'i';
    else if constexpr (std::is_same_v<P, unsigned int>) return 'u';
    else if constexpr (std::is_same_v<P, unsigned long long>) return 'U';
    else if constexpr (std::is_same_v<P, float>) return 'f';
    else if constexpr (std::is_same_v<P, double>) return 'd';
    else if constexpr (std::is_class_v<P>) return 'S';
    else return '?';
}

// One letter per kernel parameter: p pointer, i int, u unsigned int, U unsigned long long,
// f float, d double, S a structure passed by value.
template <typename... Ps>
const char* signature(void (*)(Ps...)) {
    static const char codes[] = {type_code<Ps>()..., '\0'};
    return codes;
}

// Each parameter's size in bytes (a structure's must match the bytes the host passes).
template <typename... Ps>
const unsigned* parameter_sizes(void (*)(Ps...)) {
    static const unsigned sizes[] = {static_cast<unsigned>(sizeof(Ps))..., 0u};
    return sizes;
}

// A typed pointer must be aligned for its type (a void* may point anywhere: the kernel casts
// it, and UBSan checks the typed accesses).
template <typename P>
void check_argument(void* arg, int index) {
    if constexpr (std::is_pointer_v<P> && !std::is_void_v<std::remove_pointer_t<P>>) {
        const auto address = reinterpret_cast<std::uintptr_t>(*static_cast<P*>(arg));
        if (address % alignof(std::remove_pointer_t<P>) != 0) {
            std::fprintf(stderr, "cuda-emu: pointer argument %d at %#lx is not aligned to %zu\n",
                         index, static_cast<unsigned long>(address),
                         alignof(std::remove_pointer_t<P>));
            std::abort();
        }
    }
}

template <typename... Ps, std::size_t... I>
void call(void (*kernel)(Ps...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<Ps*>(args[I])...);
}

// Runs the whole grid; returns only if every check passed (failures abort the process).
// `smem_limit`: the kernel's max_dynamic_shared_size_bytes (48 KiB unless it opted in).
// `fibers` false (translate.py: a kernel with neither barriers nor warp instructions) runs the
// threads one after another on the scheduler's own stack, with no fibers.
template <typename... Ps>
void launch(void (*kernel)(Ps...), dim3 grid, dim3 block, std::size_t smem,
            std::size_t smem_limit, void** args, int schedule, unsigned int seed, bool fibers) {
    const bool expire_waits = (schedule & kExpireWaits) != 0;
    schedule &= ~kExpireWaits;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 ||
        grid.x > 2147483647u) {
        fail("grid dimensions out of range");
    }
    const unsigned long long threads = 1ull * block.x * block.y * block.z;
    if (threads == 0 || threads > 1024 || block.z > 64) fail("block dimensions out of range");
    if (smem_limit > kSharedOptInLimit) fail("kernel opted in to more shared memory than a GPU has");
    if (smem > smem_limit) {
        fail(smem_limit == kSharedLimit ? "dynamic shared memory over 48 KiB without an opt-in"
                                        : "dynamic shared memory over the kernel's opt-in");
    }
    {
        int index = 0;
        ((check_argument<Ps>(args[index], index), ++index), ...);
        (void)index;
    }
    gridDim = grid;
    blockDim = block;
    std::mt19937 rng(seed);
    Block b;
    b.dynamic_limit = smem_limit;
    b.body = [&] { call(kernel, args, std::index_sequence_for<Ps...>{}); };
    b.fibers.resize(threads);
    b.fibers_on = fibers;
    b.defer_arrivals = schedule != kReverse;
    b.expire_waits = expire_waits;
    if (fibers) {
        for (Fiber& f : b.fibers) f.stack = static_cast<char*>(std::malloc(kStackBytes));
    }
    g_block = &b;
    // Blocks in launch order, reversed, or shuffled with the schedule's threads: a GPU runs
    // them in no promised order, so a result that depends on it (a block reading what
    // another wrote, split K's last block summing the others' partial sums) must come out
    // the same every way.
    std::vector<uint3> blocks;
    for (unsigned int bz = 0; bz < grid.z; ++bz) {
        for (unsigned int by = 0; by < grid.y; ++by) {
            for (unsigned int bx = 0; bx < grid.x; ++bx) blocks.push_back({bx, by, bz});
        }
    }
    if (schedule == kReverse) std::reverse(blocks.begin(), blocks.end());
    if (schedule == kShuffle) std::shuffle(blocks.begin(), blocks.end(), rng);
    for (const uint3& index : blocks) {
        blockIdx = index;
        b.dynamic_bytes = smem;
        b.dynamic_shared = nullptr;
        if (smem != 0) {
            b.dynamic_shared = static_cast<unsigned char*>(std::malloc(smem));
            std::memset(b.dynamic_shared, 0xFF, smem);
        }
        b.expiries = 0;
        std::size_t t = 0;
        for (unsigned int z = 0; z < block.z; ++z) {
            for (unsigned int y = 0; y < block.y; ++y) {
                for (unsigned int x = 0; x < block.x; ++x, ++t) {
                    Fiber& f = b.fibers[t];
                    f.tid = {x, y, z};
                    f.barriers = 0;
                    f.done = false;
                    f.shared_next = 0;
                    f.state = kRunnable;
                    f.deferred = false;
                    if (fibers) start_fiber(f);
                }
            }
        }
        if (fibers) {
            run_block(b, schedule, rng);
        } else {
            run_threads_in_order(b, schedule, rng);
        }
        end_block_async(b);
        for (void* p : b.shared) std::free(p);
        b.shared.clear();
        b.shared_sizes.clear();
        b.shared_bytes = 0;
        std::free(b.dynamic_shared);
    }
    for (Fiber& f : b.fibers) std::free(f.stack);
    g_block = nullptr;
}

// --- the inline PTX instructions kernels/common.cuh uses ------------------------------------
inline void ptx_cvt_f32_f16(float& out, unsigned short bits) {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof h);
    out = static_cast<float>(h);
}

inline void ptx_cvt_rn_f16_f32(unsigned short& out, float value) {
    const _Float16 h = static_cast<_Float16>(value);  // IEEE round to nearest even
    std::memcpy(&out, &h, sizeof out);
}

// The kernels' only mov.u64 reads %globaltimer (common.cuh global_timer_ns): nanoseconds, here
// of the host's steady clock plus the time kExpireWaits let pass.
inline void ptx_mov_u64(unsigned long long& out) {
    out = static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now().time_since_epoch()).count()) + g_time_passed_ns;
}

inline void ptx_st_global_v2_f32(float* p, float a, float b) {
    if (reinterpret_cast<std::uintptr_t>(p) % 8 != 0) fail("misaligned st.global.v2.f32");
    p[0] = a;
    p[1] = b;
}

// 32 bits to a 4-byte-aligned address of any element type (two 16-bit values).
template <typename T>
inline void ptx_st_global_b32(T* p, unsigned int v) {
    if (reinterpret_cast<std::uintptr_t>(p) % 4 != 0) fail("misaligned st.global.b32");
    std::memcpy(static_cast<void*>(p), &v, sizeof v);
}

inline void ptx_st_global_v4_f32(float* p, float a, float b, float c, float d) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) fail("misaligned st.global.v4.f32");
    p[0] = a;
    p[1] = b;
    p[2] = c;
    p[3] = d;
}

}  // namespace emu

inline void __syncthreads() { emu::syncthreads(); }

#include "warp.h"

