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

__device__ __forceinline__ void store_acc(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_acc(double* p, double v) { *p = v; }
__device__ __forceinline__ void store_acc(half_t* p, float v) {
    unsigned short b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(v));
    p->bits = b;
}

// One 16-byte store of 4 floats to a 16-byte-aligned global address. Written in PTX because
// NVVM split a plain float4 store into 4 scalar stores inside the implicit-GEMM epilogue.
__device__ __forceinline__ void store_float4(float* p, float a, float b, float c, float d) {
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
                 "f"(d)
                 : "memory");
}

// n / d for 0 <= n, d < 2^31 with a multiply and a shift; (mul, shift) come from
// algorithms.cuda._loader.fastdiv(d), which tests/test_cuda_index_math.py checks.
__device__ __forceinline__ int fast_div(int n, unsigned int mul, unsigned int shift) {
    const unsigned int un = static_cast<unsigned int>(n);
    return static_cast<int>((__umulhi(un, mul) + un) >> shift);
}

// The shape of a convolution, in the order algorithms.cuda._loader.shape_args() passes it.
#define CONV_SHAPE_PARAMS                                                                  \
    int N, int C, int H, int W, int K, int R, int S, int P, int Q, int pad_h, int pad_w,  \
        int str_h, int str_w, int dil_h, int dil_w, int groups
