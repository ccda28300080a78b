// The FFT convolution's kernels (algorithms/cuda/fft.py). Data movement around cuFFT:
//   fft_pad:       planes of (h, w) -> zero-filled (fh, fw) planes, element (a, b) placed at
//                  (off_h + a*dil_h, off_w + b*dil_w): the padded input (dil = 1, off = pad)
//                  and the dilated filter (off = 0) in one kernel; converts the storage type.
//   fft_transpose: (rows, cols) -> (cols, rows) of complex values, through 32x32 shared tiles,
//                  so that each frequency's channel reduction is a plain strided GEMM.
//   fft_crop:      y[plane][p][q] = scale * z[plane][p*str_h][q*str_w] (scale undoes cuFFT's
//                  unnormalised inverse), converting back to the storage type.
// Every element of each destination is written. Sizes must be < 2^31 elements.
// And the "fused" configuration's own transforms, for planes that fit N x N with N <= 32:
//   fft_fused_forward: planes placed as fft_pad places them, their 2-D DFTs in shared memory,
//                      written frequency-major (what pad + R2C + transpose produce), x's and
//                      the filter's in one launch;
//   fft_fused_inverse: frequency-major spectra to planes, inverse 2-D DFTs, crop, stride and
//                      scale (what transpose + C2R + crop do).
#include "common.cuh"

template <typename Tsrc, typename Tdst>
__global__ void __launch_bounds__(256)
    fft_pad(const Tsrc* __restrict__ src, Tdst* __restrict__ dst, int planes, int h, int w,
            int fh, int fw, int off_h, int off_w, int dil_h, int dil_w) {
    const int plane_size = fh * fw;
    const int total = planes * plane_size;
    // Unsigned counter: total < 2^31, so i + stride cannot wrap (a signed one could overflow).
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(u);
        const int plane = i / plane_size;
        const int rem = i - plane * plane_size;
        const int a = rem / fw;
        const int b = rem - a * fw;
        const int da = a - off_h;
        const int db = b - off_w;
        Tdst v = Tdst(0);
        if (da >= 0 && db >= 0 && da % dil_h == 0 && db % dil_w == 0) {
            const int sa = da / dil_h;
            const int sb = db / dil_w;
            if (sa < h && sb < w) {
                v = static_cast<Tdst>(load_acc(src + (static_cast<long long>(plane) * h + sa) * w + sb));
            }
        }
        dst[i] = v;
    }
}

template <typename Tc>
__global__ void __launch_bounds__(256)
    fft_transpose(const Tc* __restrict__ src, Tc* __restrict__ dst, int rows, int cols) {
    __shared__ Tc tile[32][33];  // +1 column: column reads hit 32 different banks
    const int c0 = blockIdx.x * 32;
    const int r0 = blockIdx.y * 32;
    // blockDim = (32, 8): each thread moves 4 elements in and 4 out.
#pragma unroll
    for (int i = 0; i < 32; i += 8) {
        const int r = r0 + threadIdx.y + i;
        const int c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[threadIdx.y + i][threadIdx.x] = src[static_cast<long long>(r) * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 32; i += 8) {
        const int c = c0 + threadIdx.y + i;
        const int r = r0 + threadIdx.x;
        if (r < rows && c < cols) dst[static_cast<long long>(c) * rows + r] = tile[threadIdx.x][threadIdx.y + i];
    }
}

template <typename Tsrc, typename Tdst>
__global__ void __launch_bounds__(256)
    fft_crop(const Tsrc* __restrict__ z, Tdst* __restrict__ y, int planes, int p_out, int q_out,
             int fh, int fw, int str_h, int str_w, Tsrc scale) {
    const int plane_size = p_out * q_out;
    const int total = planes * plane_size;
    // Unsigned counter: total < 2^31, so i + stride cannot wrap (a signed one could overflow).
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(u);
        const int plane = i / plane_size;
        const int rem = i - plane * plane_size;
        const int p = rem / q_out;
        const int q = rem - p * q_out;
        const Tsrc v = z[(static_cast<long long>(plane) * fh + p * str_h) * fw + q * str_w];
        store_acc(y + i, v * scale);
    }
}

// ---- The fused transforms ------------------------------------------------------------------
// A block of FUSED_THREADS threads takes P = FUSED_THREADS / N planes: one thread per plane
// row for the row transforms, one per plane column for the column transforms, each an N-point
// radix-2 FFT in registers (every index a constant once the loops unroll). Only the N/2 + 1
// columns a real plane's spectrum needs are kept: H2 per row.
constexpr int FUSED_THREADS = 128;

__host__ __device__ constexpr int fft_log2(int n) { return n <= 1 ? 0 : 1 + fft_log2(n / 2); }

// i's low `bits` bits reversed (bits <= 5). Shifts and masks only: with a loop here nvcc left
// some instances' indices unfolded, and their arrays in local memory.
__host__ __device__ constexpr int fft_bit_reverse(int i, int bits) {
    return (((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4)) >>
           (5 - bits);
}

// tw[j] = exp(-2 pi i j / N) for j < N / 2, computed by the block's first N / 2 threads
// (sincospif: within an ulp, where exp of a float angle would lose the FP32 accuracy).
template <int N>
__device__ __forceinline__ void fft_twiddles(float2* tw, int tid) {
    if (tid < N / 2) {
        float s, c;
        sincospif(2.0f * static_cast<float>(tid) / static_cast<float>(N), &s, &c);
        tw[tid] = float2{c, -s};
    }
}

// In-place DFT of a[0..N): sum_t a[t] exp(-+2 pi i f t / N) (INVERSE: +, unscaled). Each
// stage's butterflies indexed by one flat loop (lo, hi from i): with a loop per butterfly
// group and a swap per bit-reversed pair, nvcc kept the arrays in local memory (512 bytes of
// stack at N = 32).
template <int N, bool INVERSE>
__device__ __forceinline__ void fft_registers(float2 (&a)[N], const float2* tw) {
    static_assert(N >= 2 && N <= 32 && (N & (N - 1)) == 0, "N: a power of two up to 32");
    constexpr int BITS = fft_log2(N);
    float2 b[N];
#pragma unroll
    for (int i = 0; i < N; ++i) b[i] = a[fft_bit_reverse(i, BITS)];
#pragma unroll
    for (int stage = 0; stage < BITS; ++stage) {
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            const int half = 1 << stage;
            const int j = i & (half - 1);  // the butterfly's twiddle exp(-2 pi i j / (2 half))
            const int lo = ((i >> stage) << (stage + 1)) + j;
            const int hi = lo + half;
            const float2 w = tw[j * (N >> (stage + 1))];
            const float wy = INVERSE ? -w.y : w.y;
            const float2 u = b[lo];
            const float2 v = b[hi];
            const float2 t = float2{w.x * v.x - wy * v.y, w.x * v.y + wy * v.x};
            b[lo] = float2{u.x + t.x, u.y + t.y};
            b[hi] = float2{u.x - t.x, u.y - t.y};
        }
    }
#pragma unroll
    for (int i = 0; i < N; ++i) a[i] = b[i];
}

// A block's spectra in shared memory: plane p's frequency (u, v) at sp[p * SPAN + u * H2 + v].
// SPAN = N * H2 + 1, odd: the frequency-major loops read the P planes of one frequency at
// once, and a span that is a multiple of the 32 banks' 16 complex values made that a P-way
// conflict.
template <int N>
struct FusedShape {
    static constexpr int P = FUSED_THREADS / N;  // planes per block
    static constexpr int H2 = N / 2 + 1;         // columns a real plane's spectrum keeps
    static constexpr int SPAN = N * H2 + 1;      // shared-memory stride between planes
};

// The column transforms: thread (p, v) transforms column v of plane p along u.
template <int N, bool INVERSE>
__device__ __forceinline__ void fft_columns(float2* sp, const float2* tw, int tid) {
    using S = FusedShape<N>;
    if (tid < S::P * S::H2) {
        const int p = tid / S::H2;
        const int v = tid - p * S::H2;
        float2* column = sp + p * S::SPAN + v;
        float2 a[N];
#pragma unroll
        for (int u = 0; u < N; ++u) a[u] = column[u * S::H2];
        fft_registers<N, INVERSE>(a, tw);
#pragma unroll
        for (int u = 0; u < N; ++u) column[u * S::H2] = a[u];
    }
}

// Two transforms in one launch, x's (job 0) and the filter's (job 1): for each,
// spec[f * planes + plane] = DFT of the N x N plane at frequency f = u * H2 + v (v <= N / 2),
// the plane holding src's (h, w) plane with element (a, b) at (off_h + a * dil_h,
// off_w + b * dil_w) and zeros elsewhere (h, w, and those positions within N x N: the host
// checks). Grid: ceil(planes0 / P) + ceil(planes1 / P) blocks of FUSED_THREADS, job 0's
// first. One launch rather than two: each alone filled a fraction of the GPU (x's 256
// blocks of GoogLeNet's inception3b.5x5 ran at 12% occupancy, 7.6 us, then the filter's 768
// at 26%, 13.1 us, on an H200), and on a slow host a launch costs 10 us more.
template <typename T, int N>
__global__ void __launch_bounds__(FUSED_THREADS)
    fft_fused_forward(const T* __restrict__ src0, float2* __restrict__ spec0, int planes0,
                      int h0, int w0, int off_h0, int off_w0, int dil_h0, int dil_w0,
                      const T* __restrict__ src1, float2* __restrict__ spec1, int planes1,
                      int h1, int w1, int off_h1, int off_w1, int dil_h1, int dil_w1) {
    using S = FusedShape<N>;
    __shared__ float stage[S::P * N * N];  // the block's source planes as they are (h*w <= N*N)
    __shared__ float2 sp[S::P * S::SPAN];
    __shared__ float2 tw[N / 2];
    const int blocks0 = (planes0 + S::P - 1) / S::P;
    const bool first = static_cast<int>(blockIdx.x) < blocks0;  // the same for the whole block
    const T* const src = first ? src0 : src1;
    float2* const spec = first ? spec0 : spec1;
    const int planes = first ? planes0 : planes1;
    const int h = first ? h0 : h1, w = first ? w0 : w1;
    const int off_h = first ? off_h0 : off_h1, off_w = first ? off_w0 : off_w1;
    const int dil_h = first ? dil_h0 : dil_h1, dil_w = first ? dil_w0 : dil_w1;
    const int tid = threadIdx.x;
    const int plane0 = (first ? static_cast<int>(blockIdx.x) : blockIdx.x - blocks0) * S::P;
    const int count = min(S::P, planes - plane0);
    const int hw = h * w;
    fft_twiddles<N>(tw, tid);
    const T* block_src = src + static_cast<long long>(plane0) * hw;
    for (int i = tid; i < count * hw; i += FUSED_THREADS) stage[i] = load_acc(block_src + i);
    __syncthreads();
    {  // row u of plane p: real values, so the first H2 frequencies are all it keeps
        const int p = tid / N;
        const int u = tid - p * N;
        const int da = u - off_h;
        // Divisions only where there is a dilation: each costs tens of instructions, and
        // the row reads N values.
        const int sa = dil_h == 1 ? da : da / dil_h;
        const bool row = p < count && da >= 0 && (dil_h == 1 || da % dil_h == 0) && sa < h;
        const float* values = stage + (p * h + (row ? sa : 0)) * w;
        float2 a[N];
        if (dil_w == 1) {
#pragma unroll
            for (int v = 0; v < N; ++v) {
                const int b = v - off_w;
                const bool in = row && b >= 0 && b < w;
                a[v] = float2{in ? values[in ? b : 0] : 0.0f, 0.0f};
            }
        } else {
#pragma unroll
            for (int v = 0; v < N; ++v) {
                const int db = v - off_w;
                const bool in = row && db >= 0 && db % dil_w == 0 && db / dil_w < w;
                a[v] = float2{in ? values[in ? db / dil_w : 0] : 0.0f, 0.0f};
            }
        }
        fft_registers<N, false>(a, tw);
#pragma unroll
        for (int v = 0; v < S::H2; ++v) sp[p * S::SPAN + u * S::H2 + v] = a[v];
    }
    __syncthreads();
    fft_columns<N, false>(sp, tw, tid);
    __syncthreads();
    // Frequency-major: P consecutive planes per frequency, consecutive threads.
    for (int i = tid; i < N * S::H2 * S::P; i += FUSED_THREADS) {
        const int f = i / S::P;
        const int p = i - f * S::P;
        if (p < count) spec[static_cast<long long>(f) * planes + plane0 + p] = sp[p * S::SPAN + f];
    }
}

// y[plane][p][q] = scale * (inverse DFT of the plane's spectrum)[p * str_h][q * str_w], the
// spectrum read frequency-major, spec[f * planes + plane], f = u * H2 + v: the half a real
// plane's spectrum needs (the rest by conjugate symmetry, as C2R takes it; the imaginary parts
// of columns 0 and N / 2 drop out of the real part). (p_out - 1) * str_h < N and likewise for q
// (the host checks). Grid: ceil(planes / P) blocks of FUSED_THREADS.
template <typename T, int N>
__global__ void __launch_bounds__(FUSED_THREADS)
    fft_fused_inverse(const float2* __restrict__ spec, T* __restrict__ y, int planes, int p_out,
                      int q_out, int str_h, int str_w, float scale) {
    using S = FusedShape<N>;
    __shared__ float2 sp[S::P * S::SPAN];
    __shared__ float out[S::P * N * N];  // the block's output planes (p_out * q_out <= N * N)
    __shared__ float2 tw[N / 2];
    const int tid = threadIdx.x;
    const int plane0 = blockIdx.x * S::P;
    const int count = min(S::P, planes - plane0);
    fft_twiddles<N>(tw, tid);
    for (int i = tid; i < N * S::H2 * S::P; i += FUSED_THREADS) {
        const int f = i / S::P;
        const int p = i - f * S::P;
        sp[p * S::SPAN + f] = p < count ? spec[static_cast<long long>(f) * planes + plane0 + p]
                                        : float2{0.0f, 0.0f};
    }
    __syncthreads();
    fft_columns<N, true>(sp, tw, tid);
    __syncthreads();
    {  // output row r of plane p: row r * str_h of the inverse, every str_w-th value
        const int p = tid / N;
        const int r = tid - p * N;
        if (p < count && r < p_out) {
            const float2* row = sp + p * S::SPAN + r * str_h * S::H2;
            float2 a[N];
#pragma unroll
            for (int v = 0; v < N; ++v) {
                const float2 z = row[v < S::H2 ? v : N - v];
                a[v] = v < S::H2 ? z : float2{z.x, -z.y};
            }
            fft_registers<N, true>(a, tw);
            float* dst = out + (p * p_out + r) * q_out;
            if (str_w == 1) {  // no division per value
#pragma unroll
                for (int v = 0; v < N; ++v) {
                    if (v < q_out) dst[v] = a[v].x * scale;
                }
            } else {
#pragma unroll
                for (int v = 0; v < N; ++v) {
                    if (v % str_w == 0 && v / str_w < q_out) dst[v / str_w] = a[v].x * scale;
                }
            }
        }
    }
    __syncthreads();
    const int pq = p_out * q_out;
    T* block_y = y + static_cast<long long>(plane0) * pq;
    for (int i = tid; i < count * pq; i += FUSED_THREADS) store_acc(block_y + i, out[i]);
}
