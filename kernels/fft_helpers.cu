// Data movement around cuFFT for the FFT convolution (algorithms/cuda/fft.py):
//   fft_pad:       planes of (h, w) -> zero-filled (fh, fw) planes, element (a, b) placed at
//                  (off_h + a*dil_h, off_w + b*dil_w): the padded input (dil = 1, off = pad)
//                  and the dilated filter (off = 0) in one kernel; converts the storage type.
//   fft_transpose: (rows, cols) -> (cols, rows) of complex values, through 32x32 shared tiles,
//                  so that each frequency's channel reduction is a plain strided GEMM.
//   fft_crop:      y[plane][p][q] = scale * z[plane][p*str_h][q*str_w] (scale undoes cuFFT's
//                  unnormalised inverse), converting back to the storage type.
// Every element of each destination is written. Sizes must be < 2^31 elements.
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
