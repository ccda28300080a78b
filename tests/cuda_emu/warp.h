// Warp-level PTX for the CPU execution model of runtime.h: mma.sync, ldmatrix, cp.async.
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
struct WarpState {
    int arrived = 0;
    const char* op = nullptr;
    WarpLane lanes[32];
};
inline std::vector<WarpState> g_warps;

// Park this lane at `op` until all 32 lanes are there; the last one runs `compute(lanes)`.
template <typename F>
inline void warp_collective(const char* op, const void* in, void* out, F&& compute) {
    if (EMU_NO_BARRIERS) fail("warp instruction in a kernel built without fibers");
    Block& b = *g_block;
    Fiber& f = *b.current;
    const std::size_t t = static_cast<std::size_t>(&f - b.fibers.data());
    if (b.fibers.size() % 32 != 0) fail("warp instruction in a block of partial warps");
    if (g_warps.size() != b.fibers.size() / 32) g_warps.assign(b.fibers.size() / 32, {});
    WarpState& w = g_warps[t / 32];
    if (w.arrived == 0) {
        w.op = op;
    } else if (std::strcmp(w.op, op) != 0) {
        fail("lanes of a warp are at different warp-synchronous instructions");
    }
    w.lanes[t % 32] = {in, out};
    if (++w.arrived < 32) {
        f.state = kAtWarp;
        to_scheduler(f, false);
        return;  // the last lane has written this lane's results
    }
    compute(w.lanes);
    w.arrived = 0;
    for (std::size_t i = t / 32 * 32; i < t / 32 * 32 + 32; ++i) {
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
    if ((u & 0x7F800000u) == 0x7F800000u) {  // inf and NaN pass through
        out = u & 0xFFFFE000u;
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

template <int K, typename ElemA, typename ElemB>
inline void mma_m16n8(const char* op, float* d[4], const MmaIn& in, ElemA elem_a, ElemB elem_b) {
    float* outs[4] = {d[0], d[1], d[2], d[3]};
    warp_collective(op, &in, outs, [&](WarpLane* lanes) {
        float A[16][K], B[K][8], C[16][8];
        for (int lane = 0; lane < 32; ++lane) {
            const auto& v = *static_cast<const MmaIn*>(lanes[lane].in);
            const int g = lane / 4, t = lane % 4;
            for (int i = 0; i < 4; ++i) elem_a(A, v.a, g, t, i);
            for (int i = 0; i < 2; ++i) elem_b(B, v.b, g, t, i);
            C[g][2 * t] = v.c[0];
            C[g][2 * t + 1] = v.c[1];
            C[g + 8][2 * t] = v.c[2];
            C[g + 8][2 * t + 1] = v.c[3];
        }
        for (int lane = 0; lane < 32; ++lane) {
            float** out = static_cast<float**>(lanes[lane].out);
            const int g = lane / 4, t = lane % 4;
            const int rows[4] = {g, g, g + 8, g + 8};
            const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
            for (int i = 0; i < 4; ++i) {
                // Products are exact and summed in double, then rounded toward zero: tensor
                // cores truncate their FP32 sums (Fasi et al., "Numerical behavior of NVIDIA
                // tensor cores", 2021), a bias that grows with K when a kernel keeps
                // accumulating into one register (3xTF32 at K = 4608 measured 3.2e-5 on an
                // H100 that way). Round-to-nearest here hid that.
                double s = C[rows[i]][cols[i]];
                for (int k = 0; k < K; ++k) s += double(A[rows[i]][k]) * double(B[k][cols[i]]);
                *out[i] = round_toward_zero(s);
            }
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
            B[t + 4 * i][g] = tf32_operand(b[i]);
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
                B[2 * t + 8 * i + h][g] = Cvt(static_cast<unsigned short>(b[i] >> (16 * h)));
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

inline void end_block_async(Block& b) {
    for (AsyncState& s : g_async) {
        if (!s.copies.empty()) fail("block ended with cp.async copies never waited for");
    }
    g_async.clear();
    g_warps.clear();
    (void)b;
}

}  // namespace emu
