// Warp-level PTX for the CPU execution model of runtime.h: mma.sync, ldmatrix, cp.async,
// mbarrier, wgmma.
//
// Warp-synchronous instructions (mma.sync, ldmatrix) are a rendezvous of the 32 fibers of a
// warp (lanes = consecutive linear thread indices): each lane parks a pointer to its own
// operands and result registers (its stack stays alive while it is suspended), and the last
// lane to arrive computes the whole warp's instruction from the documented fragment layouts
// (PTX ISA, "Matrix Fragments for mma.m16n8k8 / m16n8k16", "ldmatrix") and scatters every
// lane's result. Lanes that arrive at different instructions, or a warp some lane never
// brings to the instruction (divergence, early exit, a barrier in between), fail.
// cp.async is honestly asynchronous: at issue the destination is filled with 0xFF bytes
// (NaN as float) and poisoned for AddressSanitizer, and the copy lands only at the
// cp.async.wait_group that retires its group, so a read of an in-flight destination aborts
// (ASan, whole 8-byte granules) or reads NaN (which the tests compare against).
// Shared-space addresses (cvta.to.shared) are opaque: (array index + 1) << 32 | byte offset,
// so a generic or global pointer handed to a .shared instruction fails to decode.
#pragma once

#include <cstring>
#include <unordered_map>
#include <tuple>
#include <utility>

#if EMU_ASAN
#include <sanitizer/asan_interface.h>
#endif

inline float __uint_as_float(unsigned int u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

namespace emu {

constexpr unsigned long long kDynamicSharedIndex = 0xFFFF;

// The host address of shared-space address `a`, `bytes` long, aligned to `align`.
inline unsigned char* shared_host(unsigned long long a, std::size_t bytes, std::size_t align,
                                  const char* what) {
    Block& b = *g_block;
    const unsigned long long index = a >> 32;
    const std::size_t offset = static_cast<std::size_t>(a & 0xFFFFFFFFull);
    unsigned char* base = nullptr;
    std::size_t size = 0;
    if (index == kDynamicSharedIndex + 1) {
        base = b.dynamic_shared;
        size = b.dynamic_bytes;
    } else if (index >= 1 && index <= b.shared.size()) {
        base = static_cast<unsigned char*>(b.shared[index - 1]);
        size = b.shared_sizes[index - 1];
    }
    if (base == nullptr || offset + bytes > size) fail(what);
    if (offset % align != 0) fail("misaligned shared-memory address in a warp instruction");
    return base + offset;
}

// cvta.to.shared.u64: generic -> shared-space address (see the file comment).
inline void ptx_cvta_to_shared_u64(unsigned long long& out, const void* p) {
    Block& b = *g_block;
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < b.shared.size(); ++i) {
        const auto* base = static_cast<const unsigned char*>(b.shared[i]);
        if (c >= base && c < base + b.shared_sizes[i]) {
            out = (static_cast<unsigned long long>(i + 1) << 32) | (c - base);
            return;
        }
    }
    if (b.dynamic_shared != nullptr && c >= b.dynamic_shared &&
        c < b.dynamic_shared + b.dynamic_bytes) {
        out = ((kDynamicSharedIndex + 1) << 32) | (c - b.dynamic_shared);
        return;
    }
    fail("cvta.to.shared of an address outside shared memory");
}

// --- the rendezvous ---------------------------------------------------------------------------
struct WarpLane {
    const void* in = nullptr;
    void* out = nullptr;
};
// A warp (SIZE 32) or a warpgroup (SIZE 128, four consecutive warps: wgmma) meeting at one
// instruction.
template <int SIZE>
struct GroupState {
    int arrived = 0;
    const char* op = nullptr;
    WarpLane lanes[SIZE];
};
inline std::vector<GroupState<32>> g_warps;
inline std::vector<GroupState<128>> g_warpgroups;

// Park this lane at `op` until all SIZE lanes of its warp (or warpgroup) are there; the last
// one runs `compute(lanes)`.
template <int SIZE = 32, typename F>
inline void warp_collective(const char* op, const void* in, void* out, F&& compute) {
    if (!g_block->fibers_on) fail("warp instruction in a kernel launched without fibers");
    Block& b = *g_block;
    Fiber& f = *b.current;
    const std::size_t t = static_cast<std::size_t>(&f - b.fibers.data());
    // A warpgroup is four whole warps from a warp index that is a multiple of 4: a block may
    // end in a partial one (a warp-specialized kernel's producer warps) that issues none.
    if (SIZE == 32 ? b.fibers.size() % SIZE != 0 : (t / SIZE + 1) * SIZE > b.fibers.size()) {
        fail(SIZE == 32 ? "warp instruction in a block of partial warps"
                        : "warpgroup instruction from a partial warpgroup");
    }
    auto& groups = [&]() -> std::vector<GroupState<SIZE>>& {
        if constexpr (SIZE == 32) {
            return g_warps;
        } else {
            return g_warpgroups;
        }
    }();
    if (groups.size() != b.fibers.size() / SIZE) groups.assign(b.fibers.size() / SIZE, {});
    GroupState<SIZE>& w = groups[t / SIZE];
    if (w.arrived == 0) {
        w.op = op;
    } else if (w.op != op && std::strcmp(w.op, op) != 0) {  // literals are usually merged
        fail("lanes of a warp are at different warp-synchronous instructions");
    }
    w.lanes[t % SIZE] = {in, out};
    if (++w.arrived < SIZE) {
        f.state = kAtWarp;
        to_scheduler(f, false);
        return;  // the last lane has written this lane's results
    }
    compute(w.lanes);
    w.arrived = 0;
    for (std::size_t i = t / SIZE * SIZE; i < t / SIZE * SIZE + SIZE; ++i) {
        if (i != t) b.fibers[i].state = kRunnable;
    }
}

// --- numbers ------------------------------------------------------------------------------------
inline float half_bits_to_float(unsigned short bits) {
    _Float16 h;
    std::memcpy(&h, &bits, sizeof h);
    return static_cast<float>(h);
}
inline float bf16_bits_to_float(unsigned short bits) {
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}
// The tensor core reads only the 19 high bits of a .tf32 operand (sign, exponent, 10 bits).
inline float tf32_operand(unsigned int bits) { return __uint_as_float(bits & 0xFFFFE000u); }

// cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero; low 13 bits zero.
inline void ptx_cvt_rna_tf32_f32(unsigned int& out, float value) {
    const unsigned int u = __float_as_uint(value);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN stays NaN (masked, a NaN whose payload
        out = 0x7FFFFFFFu;                   // is in the low 13 bits became inf), as CUTLASS
        return;                              // converts it: the canonical NaN
    }
    if ((u & 0x7F800000u) == 0x7F800000u) {  // inf passes through
        out = u;
        return;
    }
    out = (u + 0x1000u) & 0xFFFFE000u;
}

// cvt.rn.bf16.f32: round to nearest even (NaN kept quiet).
inline void ptx_cvt_rn_bf16_f32(unsigned short& out, float value) {
    const unsigned int u = __float_as_uint(value);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        out = static_cast<unsigned short>((u >> 16) | 0x40);
        return;
    }
    out = static_cast<unsigned short>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// --- mma.sync -------------------------------------------------------------------------------------
// The float nearest s that is not farther from zero than s.
inline float round_toward_zero(double s) {
    float f = static_cast<float>(s);
    if (std::isfinite(f) && std::fabs(static_cast<double>(f)) > std::fabs(s))
        f = std::nextafter(f, 0.0f);
    return f;
}

// m16n8 f32 accumulator layout: c0,c1 at (g, 2t), (g, 2t+1); c2,c3 at (g+8, 2t), (g+8, 2t+1),
// with g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group).
struct MmaIn {
    unsigned int a[4], b[2];
    float c[4];
};

// s[i][j] += the products a[i][p] * b[j][p] (a: m x k, b: n x k), each sum in p order and in
// double. Products are exact in double; the callers round the sums toward zero, as tensor
// cores truncate their FP32 sums (Fasi et al., "Numerical behavior of NVIDIA tensor cores",
// 2021), a bias that grows with K when a kernel keeps accumulating into one register (3xTF32
// at K = 4608 measured 3.2e-5 on an H100 that way); round-to-nearest here hid that.
// It reads only the emulator's own arrays, so it is built without the sanitizers, which check
// kernels: instrumented, it was half of an emulated tensor-core kernel's run time.
__attribute__((no_sanitize("address", "undefined")))
inline void product_sums(const float* a, const float* b, int m, int n, int k, double* s) {
    for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
            double sum = s[i * n + j];
            for (int p = 0; p < k; ++p) sum += double(a[i * k + p]) * double(b[j * k + p]);
            s[i * n + j] = sum;
        }
    }
}

template <int K, typename ElemA, typename ElemB>
inline void mma_m16n8(const char* op, float* d[4], const MmaIn& in, ElemA elem_a, ElemB elem_b) {
    float* outs[4] = {d[0], d[1], d[2], d[3]};
    warp_collective(op, &in, outs, [&](WarpLane* lanes) {
        float A[16][K], B[8][K];  // B[n][k]
        double S[16][8];
        for (int lane = 0; lane < 32; ++lane) {
            const auto& v = *static_cast<const MmaIn*>(lanes[lane].in);
            const int g = lane / 4, t = lane % 4;
            for (int i = 0; i < 4; ++i) elem_a(A, v.a, g, t, i);
            for (int i = 0; i < 2; ++i) elem_b(B, v.b, g, t, i);
            S[g][2 * t] = v.c[0];
            S[g][2 * t + 1] = v.c[1];
            S[g + 8][2 * t] = v.c[2];
            S[g + 8][2 * t + 1] = v.c[3];
        }
        product_sums(&A[0][0], &B[0][0], 16, 8, K, &S[0][0]);
        for (int lane = 0; lane < 32; ++lane) {
            float** out = static_cast<float**>(lanes[lane].out);
            const int g = lane / 4, t = lane % 4;
            const int rows[4] = {g, g, g + 8, g + 8};
            const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
            for (int i = 0; i < 4; ++i) *out[i] = round_toward_zero(S[rows[i]][cols[i]]);
        }
    });
}

// .tf32 m16n8k8: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k=t, n=g), b1 (t+4, g).
inline void ptx_mma_sync_aligned_m16n8k8_row_col_f32_tf32_tf32_f32(
    float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
    unsigned a3, unsigned b0, unsigned b1, float c0, float c1, float c2, float c3) {
    const MmaIn in{{a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}};
    float* d[4] = {&d0, &d1, &d2, &d3};
    mma_m16n8<8>(
        "mma.m16n8k8.tf32", d, in,
        [](auto& A, const unsigned* a, int g, int t, int i) {
            A[g + 8 * (i & 1)][t + 4 * (i >> 1)] = tf32_operand(a[i]);
        },
        [](auto& B, const unsigned* b, int g, int t, int i) {
            B[g][t + 4 * i] = tf32_operand(b[i]);
        });
}

// 16-bit m16n8k16: register i of A holds (row g + 8*(i&1), cols 2t + 8*(i>>1) + {0, 1}), low
// half first; register i of B holds (k = 2t + 8i + {0, 1}, n = g).
template <float (*Cvt)(unsigned short)>
inline void mma_m16n8k16(const char* op, float& d0, float& d1, float& d2, float& d3,
                         const MmaIn& in) {
    float* d[4] = {&d0, &d1, &d2, &d3};
    mma_m16n8<16>(
        op, d, in,
        [](auto& A, const unsigned* a, int g, int t, int i) {
            for (int h = 0; h < 2; ++h) {
                A[g + 8 * (i & 1)][2 * t + 8 * (i >> 1) + h] =
                    Cvt(static_cast<unsigned short>(a[i] >> (16 * h)));
            }
        },
        [](auto& B, const unsigned* b, int g, int t, int i) {
            for (int h = 0; h < 2; ++h) {
                B[g][2 * t + 8 * i + h] = Cvt(static_cast<unsigned short>(b[i] >> (16 * h)));
            }
        });
}

inline void ptx_mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32(
    float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
    unsigned a3, unsigned b0, unsigned b1, float c0, float c1, float c2, float c3) {
    mma_m16n8k16<half_bits_to_float>("mma.m16n8k16.f16", d0, d1, d2, d3,
                                     {{a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}});
}

inline void ptx_mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(
    float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
    unsigned a3, unsigned b0, unsigned b1, float c0, float c1, float c2, float c3) {
    mma_m16n8k16<bf16_bits_to_float>("mma.m16n8k16.bf16", d0, d1, d2, d3,
                                     {{a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}});
}

// --- ldmatrix -----------------------------------------------------------------------------------
// .x{N}: lanes 8j..8j+7 give the 16-byte-aligned row addresses of 8x8 b16 matrix j < N; lane l
// receives in register j the pair (row l/4, cols 2(l%4), +1) of matrix j, or with .trans the
// pair (rows 2(l%4), +1; col l/4).
template <int N, bool Trans>
inline void ldmatrix(const char* op, unsigned* regs, unsigned long long address) {
    warp_collective(op, &address, regs, [](WarpLane* lanes) {
        unsigned short m[N][8][8];
        for (int j = 0; j < N; ++j) {
            for (int r = 0; r < 8; ++r) {
                const auto a = *static_cast<const unsigned long long*>(lanes[8 * j + r].in);
                std::memcpy(m[j][r], shared_host(a, 16, 16, "ldmatrix row outside shared memory"),
                            16);
            }
        }
        for (int lane = 0; lane < 32; ++lane) {
            auto* out = static_cast<unsigned*>(lanes[lane].out);
            const int g = lane / 4, t = lane % 4;
            for (int j = 0; j < N; ++j) {
                const unsigned lo = Trans ? m[j][2 * t][g] : m[j][g][2 * t];
                const unsigned hi = Trans ? m[j][2 * t + 1][g] : m[j][g][2 * t + 1];
                out[j] = lo | (hi << 16);
            }
        }
    });
}

#define EMU_LDMATRIX(suffix, n, trans, ...)                                                      \
    inline void ptx_ldmatrix_sync_aligned_m8n8_##suffix##_shared_b16(__VA_ARGS__,              \
                                                                      unsigned long long a) { \
        unsigned* regs[] = {EMU_LDMATRIX_REGS_##n};                                            \
        unsigned v[n];                                                                         \
        ldmatrix<n, trans>("ldmatrix." #suffix, v, a);                                         \
        for (int j = 0; j < n; ++j) *regs[j] = v[j];                                           \
    }
#define EMU_LDMATRIX_REGS_1 &r0
#define EMU_LDMATRIX_REGS_2 &r0, &r1
#define EMU_LDMATRIX_REGS_4 &r0, &r1, &r2, &r3
EMU_LDMATRIX(x1, 1, false, unsigned& r0)
EMU_LDMATRIX(x2, 2, false, unsigned& r0, unsigned& r1)
EMU_LDMATRIX(x4, 4, false, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3)
EMU_LDMATRIX(x1_trans, 1, true, unsigned& r0)
EMU_LDMATRIX(x2_trans, 2, true, unsigned& r0, unsigned& r1)
EMU_LDMATRIX(x4_trans, 4, true, unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3)

// --- cp.async -----------------------------------------------------------------------------------
// A landed copy is written through the generic proxy: wgmma (async proxy) may read it only
// after the writing thread's fence.proxy.async (see the wgmma section). translate.py defines
// EMU_USES_WGMMA for a file that has wgmma; no other tracks landings.
#ifndef EMU_USES_WGMMA
#define EMU_USES_WGMMA 0
#endif
inline void note_unfenced(unsigned char* dst, unsigned size);

struct AsyncCopy {
    unsigned char* dst;
    const unsigned char* src;
    unsigned size, src_size;
    long long group;  // -1 until committed
};
struct AsyncState {
    std::vector<AsyncCopy> copies;
    long long committed = 0;  // groups committed so far
};
inline std::vector<AsyncState> g_async;

inline AsyncState& my_async() {
    Block& b = *g_block;
    if (g_async.size() != b.fibers.size()) g_async.assign(b.fibers.size(), {});
    return g_async[static_cast<std::size_t>(b.current - b.fibers.data())];
}

inline void poison(void* p, std::size_t n, bool on) {
#if EMU_ASAN
    if (on) {
        ASAN_POISON_MEMORY_REGION(p, n);
    } else {
        ASAN_UNPOISON_MEMORY_REGION(p, n);
    }
#else
    (void)p, (void)n, (void)on;
#endif
}

inline void cp_async(unsigned long long dst, const void* src, unsigned size, unsigned src_size) {
    if (src_size > size) fail("cp.async src-size larger than cp-size");
    if (reinterpret_cast<std::uintptr_t>(src) % size != 0) fail("misaligned cp.async source");
    unsigned char* d = shared_host(dst, size, size, "cp.async destination outside shared memory");
    for (const AsyncCopy& c : my_async().copies) {
        if (c.dst < d + size && d < c.dst + c.size) fail("cp.async onto an in-flight destination");
    }
    std::memset(d, 0xFF, size);
    poison(d, size, true);
    my_async().copies.push_back({d, static_cast<const unsigned char*>(src), size, src_size, -1});
}

inline void ptx_cp_async_ca_shared_global(unsigned long long dst, const void* src, int size,
                                          unsigned src_size) {
    if (size != 4 && size != 8 && size != 16) fail("cp.async.ca size must be 4, 8 or 16");
    cp_async(dst, src, static_cast<unsigned>(size), src_size);
}
inline void ptx_cp_async_cg_shared_global(unsigned long long dst, const void* src, int size,
                                          unsigned src_size) {
    if (size != 16) fail("cp.async.cg size must be 16");
    cp_async(dst, src, 16, src_size);
}

inline void ptx_cp_async_commit_group() {
    AsyncState& s = my_async();
    for (AsyncCopy& c : s.copies) {
        if (c.group < 0) c.group = s.committed;
    }
    ++s.committed;
}

// Lands every committed copy of all but the newest `pending` groups.
inline void ptx_cp_async_wait_group(int pending) {
    AsyncState& s = my_async();
    std::vector<AsyncCopy> still;
    for (const AsyncCopy& c : s.copies) {
        if (c.group >= 0 && c.group < s.committed - pending) {
            poison(c.dst, c.size, false);
            // The source is read here, at completion: on a GPU any time in between.
            std::memcpy(c.dst, c.src, c.src_size);
            std::memset(c.dst + c.src_size, 0, c.size - c.src_size);
            note_unfenced(c.dst, c.size);
        } else {
            still.push_back(c);
        }
    }
    s.copies.swap(still);
}

inline void ptx_cp_async_wait_all() {
    ptx_cp_async_commit_group();
    ptx_cp_async_wait_group(0);
}

// --- mbarrier (sm_80+; the try_wait form sm_90) ----------------------------------------------
// An mbarrier is an 8-byte shared-memory object; the model keeps its state beside it, keyed by
// its host address: the arrivals a phase expects, those still pending, and the phase's
// parity. init sets the count; arrive counts one arrival, and the last of a phase completes it
// (the parity flips, the count starts again); try_wait.parity P, with the PTX ISA's meaning
// "the phase of parity P has completed", is true once the parity differs from P. An arriving
// thread yields until no other can run (but in the reverse schedule, where it goes on), so
// that a case's two schedules run producers as late and as early as a GPU could. A GPU's
// try_wait gives up after a while and the kernel loops; here the thread parks until it would
// be true (runtime.h kAtMbarrier), and a block whose every thread waits fails, naming the
// deadlock a GPU would hang in (unless the launch's schedule has kExpireWaits: then the waits
// time out, try_wait false, runtime.h expire_mbarrier_waits). Arriving at or waiting on
// memory no init made a barrier fails.
// The writes an arrival publishes are ordered by the model's one memory; what the model
// checks of them is cp.async's (landed only at the writer's wait_group) and wgmma's proxy
// fence (by the thread that landed them, before its arrival).
struct Mbarrier {
    unsigned count = 0, pending = 0, parity = 0;
};
inline std::unordered_map<const unsigned char*, Mbarrier> g_mbarriers;

inline Mbarrier& mbarrier_at(unsigned long long addr, const char* what) {
    const unsigned char* at = shared_host(addr, 8, 8, "mbarrier outside shared memory");
    auto found = g_mbarriers.find(at);
    if (found == g_mbarriers.end()) fail(what);
    return found->second;
}

inline void ptx_mbarrier_init_shared_cta_b64(unsigned long long addr, unsigned count) {
    if (count == 0 || count > (1u << 20) - 1) fail("mbarrier.init count outside 1 .. 2^20 - 1");
    unsigned char* at = shared_host(addr, 8, 8, "mbarrier outside shared memory");
    std::memset(at, 0, 8);  // opaque on a GPU; a generic write over it is a bug either way
    g_mbarriers[at] = {count, count, 0};
}

inline void ptx_mbarrier_arrive_shared_cta_b64(unsigned long long& state, unsigned long long addr) {
    Mbarrier& m = mbarrier_at(addr, "mbarrier.arrive on memory no mbarrier.init made a barrier");
    state = m.parity;  // the token of the phase arrived at
    if (--m.pending == 0) {
        m.parity ^= 1u;
        m.pending = m.count;
    }
    // Yield, and go on only once no other thread can: fibers run until they block, and a
    // producer that never blocked would otherwise fill every stage it may before a consumer
    // looked, hiding a consumer that reads a stage it did not wait for. So the arriving thread
    // falls as far behind as a GPU could let it (runtime.h `deferred`).
    if (g_block->fibers_on && g_block->defer_arrivals) {
        g_block->current->deferred = true;
        to_scheduler(*g_block->current, false);
    }
}

// Whether the phase of parity `parity` of mbarrier `m` (an Mbarrier: a map's node, which
// stays where it is while the map grows) has completed.
inline bool mbarrier_passed(const void* m, unsigned parity) {
    return static_cast<const Mbarrier*>(m)->parity != parity;
}

// `done` = 1 once the phase of parity `parity` has completed (parking this thread until then,
// or until time is let pass: then 0).
inline void ptx_mbarrier_try_wait_parity_shared_cta_b64(unsigned& done, unsigned long long addr,
                                                        unsigned parity) {
    const Mbarrier& m =
        mbarrier_at(addr, "mbarrier.try_wait on memory no mbarrier.init made a barrier");
    if (!mbarrier_passed(&m, parity & 1u)) {
        if (!g_block->fibers_on) fail("mbarrier wait in a kernel launched without fibers");
        Fiber& f = *g_block->current;
        f.state = kAtMbarrier;
        f.ready = &mbarrier_passed;
        f.waits_on = &m;
        f.parity = parity & 1u;
        to_scheduler(f, false);
    }
    done = mbarrier_passed(&m, parity & 1u) ? 1u : 0u;
}

// --- wgmma (sm_90a) -------------------------------------------------------------------------------
// wgmma.mma_async is a warpgroup instruction (128 lanes, four consecutive warps) whose A and B
// come from shared memory through 64-bit matrix descriptors and whose accumulators are the
// lanes' registers. It is asynchronous, and this model is too: at issue the product is
// computed from shared memory as it is then, each destination register is set to a NaN
// (kAccPoison) and the result is held back until the wgmma.wait_group that retires its commit
// group, which first checks that the shared memory it read is unchanged and that no lane wrote
// a destination register in between. So each of these fails or shows NaN:
// - reading the accumulators before the wait (NaN in the output);
// - refilling a stage that an in-flight wgmma reads (the check at the wait);
// - an mma_async without a wgmma.fence since the lane's last wait (checked at issue; the PTX
//   rule is "before the first wgmma, and after the registers were touched": stricter here);
// - operands that a cp.async landed but whose thread has not yet run fence.proxy.async
//   (checked at issue, per byte of dynamic shared memory read).
// Descriptors (PTX ISA, "Matrix Descriptor Format"): start address, leading byte offset
// (between core matrices adjacent in K) and stride byte offset (between 8-row groups), in
// 16-byte units at bits 0, 16 and 32; base offset bits 49-51, which must be zero here; and
// the layout type at bits 62-63: 0 (no swizzle) or 1 (128-byte swizzle), the two K-major
// layouts emulated. The 128-byte swizzle (PTX ISA, "Shared Memory Matrix Layout"; CUTLASS's
// Swizzle<3,4,3>) places row r's K at byte 128 * (r % 8) + SBO * (r / 8) past the start and
// then XORs address bits 4-6 with bits 7-9, so that the 16-byte chunk c of a row lands at
// chunk c ^ (r % 8) of the 128-byte row when the atom is 1024-byte aligned. The start address is
// read as an offset into the block's dynamic shared memory (the low 18 bits of a
// shared-window address, see cvta.to.shared above). Accumulator layout of m64nNk16 with f32
// results: lane l of warp w (of the warpgroup), g = l / 4, t = l % 4, register 4j + 2v + h
// holds row 16w + g + 8v, column 8j + 2t + h.
constexpr unsigned kAccPoison = 0x7FBADBADu;

struct WgmmaOp {
    long long group = -1;  // -1 until committed
    std::vector<float*> regs;
    std::vector<float> values, a, b;  // results; the operands as read at issue
    unsigned long long desc_a = 0, desc_b = 0;
    std::vector<const unsigned*> a_regs;  // A in registers (4 per lane): empty for A by descriptor
    std::vector<unsigned> a_bits;   // ... and their values at issue
    int n = 0;
    std::vector<float> (*read)(unsigned long long, int, bool) = nullptr;  // the operand reader
};
struct WgmmaState {
    std::vector<WgmmaOp> ops;  // in flight, oldest first
    long long committed = 0;
};

// Register -> its value after the newest of `ops` that writes it.
inline std::unordered_map<float*, float> newest_values(const std::vector<WgmmaOp>& ops) {
    std::unordered_map<float*, float> out;
    for (const WgmmaOp& op : ops) {
        for (std::size_t i = 0; i < op.regs.size(); ++i) out[op.regs[i]] = op.values[i];
    }
    return out;
}

// Whether every op of `ops` writes exactly `regs`, in the same order. Chained wgmma on one
// set of accumulators do: their registers then need no lookup (a lookup per register was
// most of an emulated wgmma kernel's run time).
inline bool all_write(const std::vector<WgmmaOp>& ops, const std::vector<float*>& regs) {
    for (const WgmmaOp& op : ops) {
        if (op.regs != regs) return false;
    }
    return true;
}
inline std::vector<WgmmaState> g_wgmma;                // per warpgroup
inline std::vector<char> g_wgmma_fenced;               // per thread
inline std::vector<std::vector<std::pair<unsigned char*, unsigned>>> g_unfenced;  // per thread
inline std::vector<int> g_unfenced_bytes;              // per byte of dynamic shared memory

inline std::size_t my_thread() {
    Block& b = *g_block;
    const std::size_t n = b.fibers.size();
    if (g_wgmma_fenced.size() != n) {
        g_wgmma_fenced.assign(n, 0);
        g_unfenced.assign(n, {});
        g_wgmma.assign((n + 127) / 128, {});
        g_unfenced_bytes.assign(b.dynamic_bytes, 0);
    }
    return static_cast<std::size_t>(b.current - b.fibers.data());
}

inline void note_unfenced(unsigned char* dst, unsigned size) {
    Block& b = *g_block;
    if (!EMU_USES_WGMMA || b.dynamic_shared == nullptr || dst < b.dynamic_shared ||
        dst >= b.dynamic_shared + b.dynamic_bytes) {
        return;  // wgmma reads dynamic shared memory only
    }
    g_unfenced[my_thread()].push_back({dst, size});
    for (unsigned i = 0; i < size; ++i) ++g_unfenced_bytes[dst - b.dynamic_shared + i];
}

inline void ptx_fence_proxy_async_shared_cta() {
    Block& b = *g_block;
    auto& mine = g_unfenced[my_thread()];
    for (const auto& [dst, size] : mine) {
        for (unsigned i = 0; i < size; ++i) --g_unfenced_bytes[dst - b.dynamic_shared + i];
    }
    mine.clear();
}

inline void ptx_wgmma_fence_sync_aligned() { g_wgmma_fenced[my_thread()] = 1; }

// The rows x K matrix a K-major descriptor (unswizzled or 128-byte swizzled) points at, as
// floats: K is 32 bytes of elements (k16 of a 16-bit type, k8 of tf32), two 16-byte chunks
// per row.
template <typename Bits, float (*Cvt)(Bits)>
inline std::vector<float> wgmma_operand(unsigned long long desc, int rows, bool at_issue) {
    constexpr int E = sizeof(Bits), K = 32 / E, CORE_K = 16 / E;
    const unsigned long long layout = desc >> 62;
    if (layout > 1) fail("wgmma: only unswizzled and 128-byte-swizzled descriptors are emulated");
    if (((desc >> 49) & 7u) != 0) fail("wgmma: a nonzero matrix base offset");
    const unsigned long long start = (desc & 0x3FFFu) << 4, lbo = ((desc >> 16) & 0x3FFFu) << 4,
                             sbo = ((desc >> 32) & 0x3FFFu) << 4;
    // The PTX ISA's matrix descriptor: a swizzled matrix whose start is not on its pattern's
    // boundary (1024 bytes for 128-byte swizzle) needs base offset (start >> 7) & 7, which
    // this model does not apply: refused rather than read under the wrong XOR. (The swizzle
    // below takes the offset into dynamic shared memory for the address, as hardware's is,
    // with dynamic shared memory on a 1024-byte boundary: __align__(1024) on sm_90a.)
    if (layout == 1 && ((start >> 7) & 7u) != 0) {
        fail("wgmma: a 128-byte-swizzled matrix starts off its 1024-byte pattern (base offset 0)");
    }
    std::vector<float> out(static_cast<std::size_t>(rows) * K);
    for (int r = 0; r < rows; ++r) {
        for (int k = 0; k < K; ++k) {
            unsigned long long offset;
            if (layout == 0) {
                offset = start + (r / 8) * sbo + (r % 8) * 16 + (k / CORE_K) * lbo +
                         (k % CORE_K) * E;
            } else {
                const unsigned long long linear = start + (r / 8) * sbo + (r % 8) * 128 + k * E;
                offset = linear ^ (((linear >> 7) & 7u) << 4);
            }
            const unsigned char* at = shared_host(((kDynamicSharedIndex + 1) << 32) | offset, E,
                                                  E, "wgmma operand outside dynamic shared memory");
            for (int i = 0; at_issue && i < E; ++i) {
                if (g_unfenced_bytes[offset + i]) {
                    fail("wgmma reads shared memory a cp.async wrote without fence.proxy.async");
                }
            }
            Bits bits;
            std::memcpy(&bits, at, E);
            out[static_cast<std::size_t>(r) * K + k] = Cvt(bits);
        }
    }
    return out;
}

template <int R>
struct WgmmaIn {
    float* d[R];
    unsigned long long desc_a, desc_b;  // desc_a 0 where A is in registers
    int imm[5];  // scale-d, scale-a, scale-b, trans-a, trans-b (tf32 has no trans: 0)
    const unsigned* a[4];  // A in registers (tf32: CUTLASS's ALayout_64x8), or null
};

// The 64 x 8 tf32 A operand the 128 lanes hold in registers: lane l of warp w, g = (l % 32) /
// 4, t = l % 4, register i is row 16w + g + 8 (i % 2), k t + 4 (i / 2) (the PTX ISA's register
// fragment of wgmma's A for .tf32, the m16n8k8 A fragment per warp).
template <typename Bits, float (*Cvt)(Bits), typename In>
inline std::vector<float> wgmma_register_a(WarpLane* lanes) {
    static_assert(sizeof(Bits) == 4, "A in registers is emulated for tf32 only");
    std::vector<float> out(64 * 8);
    for (int l = 0; l < 128; ++l) {
        const In& v = *static_cast<const In*>(lanes[l].in);
        const int w = l / 32, g = (l % 32) / 4, t = l % 4;
        for (int i = 0; i < 4; ++i) {
            out[(16 * w + g + 8 * (i % 2)) * 8 + t + 4 * (i / 2)] = Cvt(*v.a[i]);
        }
    }
    return out;
}

template <int N, typename Bits, float (*Cvt)(Bits)>
inline void wgmma_issue(const char* op, const WgmmaIn<N / 2>& in) {
    constexpr int R = N / 2, K = 32 / sizeof(Bits);
    const std::size_t me = my_thread();
    if (!g_wgmma_fenced[me]) fail("wgmma.mma_async without a wgmma.fence since the last wait");
    warp_collective<128>(op, &in, nullptr, [&](WarpLane* lanes) {
        const auto& first = *static_cast<const WgmmaIn<R>*>(lanes[0].in);
        for (int l = 0; l < 128; ++l) {
            const auto& v = *static_cast<const WgmmaIn<R>*>(lanes[l].in);
            if (v.desc_a != first.desc_a || v.desc_b != first.desc_b ||
                std::memcmp(v.imm, first.imm, sizeof v.imm) != 0) {
                fail("wgmma: lanes of a warpgroup give different descriptors or immediates");
            }
        }
        if (first.imm[1] != 1 || first.imm[2] != 1 || first.imm[3] != 0 || first.imm[4] != 0) {
            fail("wgmma: only unscaled, untransposed (K-major) operands are emulated");
        }
        WgmmaState& state = g_wgmma[me / 128];
        WgmmaOp rec;
        rec.n = N;
        rec.desc_a = first.desc_a;
        rec.desc_b = first.desc_b;
        rec.read = &wgmma_operand<Bits, Cvt>;
        if (first.a[0] != nullptr) {
            if constexpr (sizeof(Bits) == 4) {
                rec.a = wgmma_register_a<Bits, Cvt, WgmmaIn<R>>(lanes);
            }
            for (int l = 0; l < 128; ++l) {
                const auto& v = *static_cast<const WgmmaIn<R>*>(lanes[l].in);
                for (const unsigned* reg : v.a) {
                    rec.a_regs.push_back(reg);
                    rec.a_bits.push_back(*reg);
                }
            }
        } else {
            rec.a = wgmma_operand<Bits, Cvt>(first.desc_a, 64, true);
        }
        rec.b = wgmma_operand<Bits, Cvt>(first.desc_b, N, true);
        // Each accumulator's start (0, or its value after the newest op in flight that writes
        // it), then the sums, then each lane's results, held back until the wait.
        const auto slot = [](int l, int i) {
            const int w = l / 32, g = (l % 32) / 4, t = l % 4;
            return (16 * w + g + 8 * ((i / 2) % 2)) * N + 8 * (i / 4) + 2 * t + i % 2;
        };
        for (int l = 0; l < 128; ++l) {
            const auto& v = *static_cast<const WgmmaIn<R>*>(lanes[l].in);
            rec.regs.insert(rec.regs.end(), v.d, v.d + R);
        }
        const bool chained = all_write(state.ops, rec.regs);
        const std::unordered_map<float*, float> newest =
            chained ? std::unordered_map<float*, float>{} : newest_values(state.ops);
        const auto start = [&](int index) -> double {
            float* reg = rec.regs[index];
            if (!first.imm[0]) return 0.0;  // scale-d 0: D = A.B
            if (chained) return state.ops.empty() ? *reg : state.ops.back().values[index];
            const auto found = newest.find(reg);
            return found != newest.end() ? found->second : *reg;
        };
        std::vector<double> sums(static_cast<std::size_t>(64) * N);
        for (int l = 0, index = 0; l < 128; ++l) {
            for (int i = 0; i < R; ++i, ++index) sums[slot(l, i)] = start(index);
        }
        product_sums(rec.a.data(), rec.b.data(), 64, N, K, sums.data());
        for (int l = 0, index = 0; l < 128; ++l) {
            for (int i = 0; i < R; ++i, ++index) {
                rec.values.push_back(round_toward_zero(sums[slot(l, i)]));  // as mma.sync
                *rec.regs[index] = __uint_as_float(kAccPoison);
            }
        }
        state.ops.push_back(std::move(rec));
    });
}

#define EMU_WGMMA(n, kk, type, bits, cvt)                                                        \
    template <typename... Args>                                                                  \
    inline void ptx_wgmma_mma_async_sync_aligned_m64n##n##k##kk##_f32_##type##_##type(          \
        Args&&... args) {                                                                        \
        wgmma_forward<n, bits, cvt>("wgmma.m64n" #n "k" #kk "." #type,                          \
                                    std::forward_as_tuple(args...),                              \
                                    std::make_index_sequence<n / 2>{});                          \
    }

template <std::size_t FROM, typename Tuple, std::size_t... J>
inline void wgmma_immediates(int (&imm)[5], const Tuple& args, std::index_sequence<J...>) {
    ((imm[J] = static_cast<int>(std::get<FROM + J>(args))), ...);
}

// (d[0], ..., d[R-1], desc_a, desc_b, scale-d, scale-a, scale-b[, trans-a, trans-b]) ->
// WgmmaIn: 16-bit types take the two transposition immediates, tf32 none. With A in
// registers (tf32 only here): (d[0], ..., d[R-1], a0, a1, a2, a3, desc_b, scale-d, scale-a,
// scale-b).
template <int N, typename Bits, float (*Cvt)(Bits), typename Tuple, std::size_t... I>
inline void wgmma_forward(const char* op, Tuple&& args, std::index_sequence<I...>) {
    constexpr std::size_t R = N / 2, SIZE = std::tuple_size_v<std::decay_t<Tuple>>;
    constexpr bool REGISTER_A = sizeof(Bits) == 4 && SIZE == R + 8;
    constexpr std::size_t IMMS = SIZE - R - (REGISTER_A ? 5 : 2);
    static_assert(IMMS == (sizeof(Bits) == 2 ? 5 : 3), "wgmma operand count");
    WgmmaIn<R> in{{&std::get<I>(args)...}, 0, 0, {}, {}};
    if constexpr (REGISTER_A) {
        in.desc_b = static_cast<unsigned long long>(std::get<R + 4>(args));
        in.a[0] = &std::get<R>(args);
        in.a[1] = &std::get<R + 1>(args);
        in.a[2] = &std::get<R + 2>(args);
        in.a[3] = &std::get<R + 3>(args);
        wgmma_immediates<R + 5>(in.imm, args, std::make_index_sequence<IMMS>{});
    } else {
        in.desc_a = static_cast<unsigned long long>(std::get<R>(args));
        in.desc_b = static_cast<unsigned long long>(std::get<R + 1>(args));
        wgmma_immediates<R + 2>(in.imm, args, std::make_index_sequence<IMMS>{});
    }
    wgmma_issue<N, Bits, Cvt>(op, in);
}

EMU_WGMMA(128, 16, f16, unsigned short, half_bits_to_float)
EMU_WGMMA(128, 16, bf16, unsigned short, bf16_bits_to_float)
EMU_WGMMA(128, 8, tf32, unsigned int, tf32_operand)
EMU_WGMMA(96, 8, tf32, unsigned int, tf32_operand)  // A in registers: implicit_gemm_wgmma_nchw.cu
EMU_WGMMA(64, 8, tf32, unsigned int, tf32_operand)
EMU_WGMMA(8, 16, f16, unsigned short, half_bits_to_float)  // tests/cuda_emu/warp_kernels.cu
EMU_WGMMA(8, 8, tf32, unsigned int, tf32_operand)

inline void ptx_wgmma_commit_group_sync_aligned() {
    const std::size_t me = my_thread();
    warp_collective<128>("wgmma.commit_group", nullptr, nullptr, [&](WarpLane*) {
        WgmmaState& state = g_wgmma[me / 128];
        for (WgmmaOp& op : state.ops) {
            if (op.group < 0) op.group = state.committed;
        }
        ++state.committed;
    });
}

// Retires every committed group but the newest `pending`: checks, then writes, each
// destination register (its last result; one that a younger op still targets stays NaN).
inline void ptx_wgmma_wait_group_sync_aligned(int pending) {
    const std::size_t me = my_thread();
    warp_collective<128>("wgmma.wait_group", nullptr, nullptr, [&](WarpLane*) {
        WgmmaState& state = g_wgmma[me / 128];
        std::vector<WgmmaOp> landing, still;
        for (WgmmaOp& op : state.ops) {
            (op.group >= 0 && op.group < state.committed - pending ? landing : still)
                .push_back(std::move(op));
        }
        for (const WgmmaOp& op : landing) {
            const std::vector<float> a = op.a_regs.empty() ? op.read(op.desc_a, 64, false) : op.a;
            const std::vector<float> b = op.read(op.desc_b, op.n, false);
            if (std::memcmp(a.data(), op.a.data(), a.size() * sizeof(float)) != 0 ||
                std::memcmp(b.data(), op.b.data(), b.size() * sizeof(float)) != 0) {
                fail("shared memory read by a wgmma was overwritten before its wgmma.wait_group");
            }
            for (std::size_t i = 0; i < op.a_regs.size(); ++i) {
                if (*op.a_regs[i] != op.a_bits[i]) {
                    fail("a wgmma's A register was written while the wgmma was in flight");
                }
            }
            for (float* reg : op.regs) {
                if (__float_as_uint(*reg) != kAccPoison) {
                    fail("a wgmma accumulator register was written while the wgmma was in flight");
                }
            }
        }
        if (!landing.empty() && still.empty() && all_write(landing, landing.back().regs)) {
            const WgmmaOp& newest = landing.back();  // chained ops: the newest has every result
            for (std::size_t i = 0; i < newest.regs.size(); ++i) *newest.regs[i] = newest.values[i];
        } else {
            std::unordered_map<float*, float> final_values = newest_values(landing);
            for (const WgmmaOp& op : still) {
                for (float* reg : op.regs) final_values.erase(reg);
            }
            for (const auto& [reg, value] : final_values) *reg = value;
        }
        state.ops = std::move(still);
        for (std::size_t i = me / 128 * 128; i < me / 128 * 128 + 128; ++i) {
            g_wgmma_fenced[i] = 0;
        }
    });
}

inline void end_block_async(Block& b) {
    for (AsyncState& s : g_async) {
        if (!s.copies.empty()) fail("block ended with cp.async copies never waited for");
    }
    for (WgmmaState& s : g_wgmma) {
        if (!s.ops.empty()) fail("block ended with wgmma operations never waited for");
    }
    g_async.clear();
    g_mbarriers.clear();
    g_warps.clear();
    g_warpgroups.clear();
    g_wgmma.clear();
    g_wgmma_fenced.clear();
    g_unfenced.clear();
    g_unfenced_bytes.clear();
    (void)b;
}

}  // namespace emu

