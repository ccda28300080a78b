// im2col for a chunk of `nb` images starting at image n0: writes the column matrix
//   col[img][c][r][s][p][q]   (IMAGE_INNER false: forward, backward_data)
//   col[c][r][s][img][p][q]   (IMAGE_INNER true: backward_filter)
// (img < nb, c over all C channels). The first holds, for each image and group g, the
// (cg*R*S) x (P*Q) row-major matrix that the group's (kg x cg*R*S) filter multiplies. The
// second holds, per group, one (cg*R*S) x (nb*P*Q) row-major matrix: backward_filter's
// reduction index (img, pq) then has one stride, so cuBLAS sums dW over the whole chunk in a
// single GEMM instead of one GEMM per image. algorithms/cuda/im2col_gemm.py runs the GEMMs.
// Element i of col decomposes as i = (row, pq) with row = (img*C + c)*RS + rs, or
// row = (c*RS + rs)*nb + img image-inner, so either way consecutive threads write consecutive
// addresses and read consecutive (strided) pixels. Every element is written (zeros for
// padding). Total elements must be < 2^31.
//
// col2im is its adjoint for backward_data: given the image-outer column layout (filled with
// W^T dy by cuBLAS), each dx element of the chunk GATHERS the column entries that im2col
// would have copied from it: one per tap (r, s) whose output position is integral (not a
// stride hole) and in range. No atomics, a fixed summation order: deterministic.
//
// images_inner copies backward_filter's dy chunk [img][k][pq] to [k][img][pq], the matching
// layout of the GEMM's other operand; the merged configuration's copies (dy, yT back to y,
// and a pointwise layer's x and dx, whose image-inner column matrix that is) are the same.
//
// TF32 (float only, math "tf32"): the copies write their values rounded to TF32 (cvt.rna),
// and round_tf32 makes such copies of the caller's operands (w, backward_data's dy). cuBLAS
// then reads TF32 operands in CUBLAS_COMPUTE_32F_FAST_TF32, where its tensor cores would
// otherwise truncate FP32 ones (about 7.7e-4 relative error against 2.9e-4 rounded; math
// "tf32" allows 1e-3: benchmarks/tf32_error.py).
#include "common.cuh"

template <typename T, bool IMAGE_INNER, bool TF32 = false>
__global__ void __launch_bounds__(256)
    im2col(const T* __restrict__ x, T* __restrict__ col, CONV_SHAPE_STRUCT, int n0, int total,
           unsigned int pq_mul, unsigned int pq_shr, unsigned int q_mul, unsigned int q_shr,
           unsigned int rs_mul, unsigned int rs_shr, unsigned int s_mul, unsigned int s_shr,
           int nb, unsigned int nb_mul, unsigned int nb_shr) {
    CONV_SHAPE_FIELDS;
    const int RS = R * S;
    const int PQ = P * Q;
    const T* xn = x + static_cast<long long>(n0) * C * H * W;
    // Unsigned counter: total < 2^31, so i + stride cannot wrap (a signed one could overflow).
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(u);
        const int row = fast_div(i, pq_mul, pq_shr);
        const int pq = i - row * PQ;
        int plane;  // img * C + c
        int rs;
        if constexpr (IMAGE_INNER) {
            const int crs = fast_div(row, nb_mul, nb_shr);  // c * RS + rs
            const int img = row - crs * nb;
            const int c = fast_div(crs, rs_mul, rs_shr);
            rs = crs - c * RS;
            plane = img * C + c;  // < nb * C: the chunk's input has < 2^31 elements
        } else {
            plane = fast_div(row, rs_mul, rs_shr);
            rs = row - plane * RS;
        }
        const int p = fast_div(pq, q_mul, q_shr);
        const int q = pq - p * Q;
        const int r = fast_div(rs, s_mul, s_shr);
        const int s = rs - r * S;
        const int ih = tap_input(p, r, pad_h, str_h, dil_h);
        const int iw = tap_input(q, s, pad_w, str_w, dil_w);
        typename AccOf<T>::type v = 0;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            v = load_acc(xn + (static_cast<long long>(plane) * H + ih) * W + iw);
        }
        store_acc(col + i, tf32_stored<TF32>(v));
    }
}

// dst[k][img][pq] = src[n0 + img][k][pq] for img < nb: element i of dst decomposes as
// i = (row, pq) with row = k * nb + img, so writes are consecutive and reads run along pq.
// Total (nb * K * PQ, at most y's size) must be < 2^31.
template <typename T, bool TF32 = false>
__global__ void __launch_bounds__(256)
    images_inner(const T* __restrict__ src, T* __restrict__ dst, int K, int PQ, int nb, int n0,
                 int total, unsigned int pq_mul, unsigned int pq_shr, unsigned int nb_mul,
                 unsigned int nb_shr) {
    const T* sn = src + static_cast<long long>(n0) * K * PQ;
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(u);
        const int row = fast_div(i, pq_mul, pq_shr);
        const int pq = i - row * PQ;
        const int k = fast_div(row, nb_mul, nb_shr);
        const int img = row - k * nb;
        dst[i] = tf32_stored<TF32>(sn[(img * K + k) * PQ + pq]);
    }
}

// dst[i] = src[start + i] rounded to TF32, i < total (< 2^31, as start + total).
__global__ void __launch_bounds__(256)
    round_tf32(const float* __restrict__ src, float* __restrict__ dst, int start, int total) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        dst[u] = tf32_stored<true>(src[start + u]);
    }
}

// round_tf32 over two ranges in one launch (w and the first chunk's x or dy): dst1[i] =
// src1[start1 + i] for i < total1, then dst2[j] = src2[start2 + j] for j < total2, rounded
// to TF32 (total1 + total2 < 2^31). One launch less per run, where a run's host time is
// mostly its launches.
__global__ void __launch_bounds__(256)
    round_tf32_pair(const float* __restrict__ src1, float* __restrict__ dst1,
                    const float* __restrict__ src2, float* __restrict__ dst2, int start1,
                    int total1, int start2, int total2) {
    const unsigned int first = static_cast<unsigned int>(total1);
    const unsigned int total = first + static_cast<unsigned int>(total2);
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < total;
         u += gridDim.x * blockDim.x) {
        if (u < first) {
            dst1[u] = tf32_stored<true>(src1[start1 + u]);
        } else {
            dst2[u - first] = tf32_stored<true>(src2[start2 + (u - first)]);
        }
    }
}

// At least 4 blocks per SM: with the thread count alone ptxas capped this kernel at 32
// registers and spilled; 64 fit its tap loops.
//
// IMAGE_INNER reads the column layout [c][r][s][img][p][q] of the chunk's nb images instead
// (the whole-batch "chunk=all-merged" configuration, whose one GEMM writes it).
template <typename T, bool IMAGE_INNER = false>
__global__ void __launch_bounds__(256, 4)
    col2im(const T* __restrict__ col, T* __restrict__ dx, CONV_SHAPE_STRUCT, int n0, int total,
           unsigned int hw_mul, unsigned int hw_shr, unsigned int w_mul, unsigned int w_shr,
           int nb, unsigned int c_mul, unsigned int c_shr) {
    CONV_SHAPE_FIELDS;
    const int RS = R * S;
    const int PQ = P * Q;
    T* dxn = dx + static_cast<long long>(n0) * C * H * W;
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(u);
        const int plane = fast_div(i, hw_mul, hw_shr);  // img * C + c
        const int hw = i - plane * (H * W);
        const int ih = fast_div(hw, w_mul, w_shr);
        const int iw = hw - ih * W;
        // This plane's rows of the column matrix, and the distance between two taps' rows.
        const T* cp;
        long long tap_rows;
        if constexpr (IMAGE_INNER) {
            const int img = fast_div(plane, c_mul, c_shr);
            const int c = plane - img * C;
            cp = col + (static_cast<long long>(c) * RS * nb + img) * PQ;
            tap_rows = static_cast<long long>(nb) * PQ;
        } else {
            cp = col + static_cast<long long>(plane) * RS * PQ;
            tap_rows = PQ;
        }
        typename AccOf<T>::type acc = 0;
        for (int r = 0; r < R; ++r) {
            const int p = tap_output(ih, r, pad_h, str_h, dil_h, P);
            if (p < 0) continue;
            for (int s = 0; s < S; ++s) {
                const int q = tap_output(iw, s, pad_w, str_w, dil_w, Q);
                if (q >= 0) acc += load_acc(cp + (r * S + s) * tap_rows + p * Q + q);
            }
        }
        store_acc(dxn + i, acc);
    }
}

// float16 backward_filter: cuBLAS sums dW over the batch in a float32 workspace (so no
// partial sum is rounded to float16); this rounds the finished sum to storage once.
template <typename T>
__global__ void __launch_bounds__(256)
    round_to_storage(const float* __restrict__ src, T* __restrict__ dst, int total) {
    for (unsigned int u = blockIdx.x * blockDim.x + threadIdx.x; u < static_cast<unsigned int>(total);
         u += gridDim.x * blockDim.x) {
        store_acc(dst + u, src[u]);
    }
}
