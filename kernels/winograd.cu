// Winograd F(MxM, 3x3) transforms (M = 2 or 4, alpha = M + 2); algorithms/cuda/winograd.py
// runs the GEMM between them with cuBLAS and documents the workspace:
//   u[p][k][c]  (p = xi*alpha + nu)  filter transform  G g G^T
//   v[p][c][t]  (t = (n*tiles_h + ty)*tiles_w + tx)  input transform  B^T d B
//   m[p][k][t]  = u[p] @ v[p]        (cuBLAS, one strided batch over the alpha^2 points)
//   y           = A^T m A per tile, cropped at the output's edge.
// The matrices are algorithms/winograd.py's (Lavin and Gray 2015). Each thread owns one
// tile; with the loops unrolled every coefficient is a compile-time constant, so the zeros
// and +-1 of B^T and A^T cost nothing. Element counts (c*t, k*t, k*c, and alpha^2 times
// each) are below 2^31 (the Python side checks), so int indexing cannot overflow.
#include "common.cuh"

template <int M>
struct Wino;

template <>
struct Wino<2> {
    static constexpr int ALPHA = 4;
    static __device__ __forceinline__ double bt(int i, int j) {
        constexpr double t[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
        return t[i][j];
    }
    static __device__ __forceinline__ double g(int i, int j) {
        constexpr double t[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
        return t[i][j];
    }
    static __device__ __forceinline__ double at(int i, int j) {
        constexpr double t[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
        return t[i][j];
    }
};

template <>
struct Wino<4> {
    static constexpr int ALPHA = 6;
    static __device__ __forceinline__ double bt(int i, int j) {
        constexpr double t[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0},
                                    {0, 4, -4, -1, 1, 0}, {0, -2, -1, 2, 1, 0},
                                    {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
        return t[i][j];
    }
    static __device__ __forceinline__ double g(int i, int j) {
        constexpr double t[6][3] = {{1.0 / 4, 0, 0},
                                    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                    {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                    {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                    {0, 0, 1}};
        return t[i][j];
    }
    static __device__ __forceinline__ double at(int i, int j) {
        constexpr double t[4][6] = {{1, 1, 1, 1, 1, 0},
                                    {0, 1, -1, 2, -2, 0},
                                    {0, 1, 1, 4, 4, 0},
                                    {0, 1, -1, 8, -8, 1}};
        return t[i][j];
    }
};

// u[p][k*C + c] = (G g G^T)[p] for the kc = K*C filters. Formed in double and rounded once
// (G has thirds and twelfths), as the CPU backend does; the filter is small. TF32 (float
// F(2x2) under math "tf32"): U and V are stored rounded to TF32 for cuBLAS's TF32 GEMM, which
// would otherwise truncate them.
template <typename T, int M, bool TF32 = false>
__global__ void __launch_bounds__(256)
    winograd_filter(const T* __restrict__ w, typename AccOf<T>::type* __restrict__ u, int kc) {
    typedef Wino<M> Wn;
    constexpr int A = Wn::ALPHA;
    typedef typename AccOf<T>::type Acc;
    for (unsigned int e = blockIdx.x * blockDim.x + threadIdx.x; e < static_cast<unsigned int>(kc);
         e += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(e);
        double g[3][3];
#pragma unroll
        for (int r = 0; r < 3; ++r) {
#pragma unroll
            for (int s = 0; s < 3; ++s) g[r][s] = load_acc(w + i * 9 + r * 3 + s);
        }
        double gg[A][3];  // G g
#pragma unroll
        for (int x = 0; x < A; ++x) {
#pragma unroll
            for (int s = 0; s < 3; ++s) {
                gg[x][s] = Wn::g(x, 0) * g[0][s] + Wn::g(x, 1) * g[1][s] + Wn::g(x, 2) * g[2][s];
            }
        }
#pragma unroll
        for (int x = 0; x < A; ++x) {
#pragma unroll
            for (int y = 0; y < A; ++y) {
                const double v = gg[x][0] * Wn::g(y, 0) + gg[x][1] * Wn::g(y, 1) +
                                 gg[x][2] * Wn::g(y, 2);
                u[(x * A + y) * kc + i] = tf32_stored<TF32>(static_cast<Acc>(v));
            }
        }
    }
}

// Which tile flat index t (< tiles) is: image n, tile row ty, tile column tx.
struct Tile {
    int n, ty, tx;
};
__device__ __forceinline__ Tile tile_of(int t, int tiles_h, int tiles_w, unsigned int tw_mul,
                                        unsigned int tw_shr, unsigned int th_mul,
                                        unsigned int th_shr) {
    const int row = fast_div(t, tw_mul, tw_shr);  // n * tiles_h + ty
    const int n = fast_div(row, th_mul, th_shr);
    return Tile{n, row - n * tiles_h, t - row * tiles_w};
}

// v[p][c*tiles + t] = (B^T d B)[p] for the alpha x alpha input tile d of channel c at tile t,
// read from x at (ty*M - pad_h, tx*M - pad_w) with zeros outside the image. total = C*tiles.
template <typename T, int M, bool TF32 = false>
__global__ void __launch_bounds__(256)
    winograd_input(const T* __restrict__ x, typename AccOf<T>::type* __restrict__ v, int C, int H,
                   int W, int pad_h, int pad_w, int tiles_h, int tiles_w, int tiles, int total,
                   unsigned int t_mul, unsigned int t_shr, unsigned int tw_mul, unsigned int tw_shr,
                   unsigned int th_mul, unsigned int th_shr) {
    typedef Wino<M> Wn;
    constexpr int A = Wn::ALPHA;
    typedef typename AccOf<T>::type Acc;
    for (unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
         e < static_cast<unsigned int>(total); e += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(e);
        const int c = fast_div(i, t_mul, t_shr);
        const Tile tl = tile_of(i - c * tiles, tiles_h, tiles_w, tw_mul, tw_shr, th_mul, th_shr);
        const T* plane = x + (static_cast<long long>(tl.n) * C + c) * H * W;
        const int h0 = tl.ty * M - pad_h;
        const int w0 = tl.tx * M - pad_w;
        Acc d[A][A];
#pragma unroll
        for (int r = 0; r < A; ++r) {
#pragma unroll
            for (int s = 0; s < A; ++s) {
                const int ih = h0 + r;
                const int iw = w0 + s;
                d[r][s] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? load_acc(plane + ih * W + iw)
                                                                   : Acc(0);
            }
        }
        Acc bd[A][A];  // B^T d
#pragma unroll
        for (int xi = 0; xi < A; ++xi) {
#pragma unroll
            for (int s = 0; s < A; ++s) {
                Acc sum = 0;
#pragma unroll
                for (int r = 0; r < A; ++r) sum += static_cast<Acc>(Wn::bt(xi, r)) * d[r][s];
                bd[xi][s] = sum;
            }
        }
#pragma unroll
        for (int xi = 0; xi < A; ++xi) {
#pragma unroll
            for (int nu = 0; nu < A; ++nu) {
                Acc sum = 0;
#pragma unroll
                for (int s = 0; s < A; ++s) sum += bd[xi][s] * static_cast<Acc>(Wn::bt(nu, s));
                v[(xi * A + nu) * total + i] = tf32_stored<TF32>(sum);
            }
        }
    }
}

// y tile = A^T m A for output channel k at tile t (m[p][k*tiles + t]), the M x M outputs that
// fall inside the P x Q output written to y (n, K, P, Q). total = K*tiles.
template <typename T, int M>
__global__ void __launch_bounds__(256)
    winograd_output(const typename AccOf<T>::type* __restrict__ m, T* __restrict__ y, int K, int P,
                    int Q, int tiles_h, int tiles_w, int tiles, int total, unsigned int t_mul,
                    unsigned int t_shr, unsigned int tw_mul, unsigned int tw_shr,
                    unsigned int th_mul, unsigned int th_shr) {
    typedef Wino<M> Wn;
    constexpr int A = Wn::ALPHA;
    typedef typename AccOf<T>::type Acc;
    for (unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
         e < static_cast<unsigned int>(total); e += gridDim.x * blockDim.x) {
        const int i = static_cast<int>(e);
        const int k = fast_div(i, t_mul, t_shr);
        const Tile tl = tile_of(i - k * tiles, tiles_h, tiles_w, tw_mul, tw_shr, th_mul, th_shr);
        Acc mm[A][A];
#pragma unroll
        for (int p = 0; p < A * A; ++p) mm[p / A][p % A] = m[p * total + i];
        Acc am[M][A];  // A^T m
#pragma unroll
        for (int r = 0; r < M; ++r) {
#pragma unroll
            for (int nu = 0; nu < A; ++nu) {
                Acc sum = 0;
#pragma unroll
                for (int xi = 0; xi < A; ++xi) sum += static_cast<Acc>(Wn::at(r, xi)) * mm[xi][nu];
                am[r][nu] = sum;
            }
        }
        T* out = y + (static_cast<long long>(tl.n) * K + k) * P * Q;
#pragma unroll
        for (int r = 0; r < M; ++r) {
#pragma unroll
            for (int s = 0; s < M; ++s) {
                const int oh = tl.ty * M + r;
                const int ow = tl.tx * M + s;
                if (oh < P && ow < Q) {
                    Acc sum = 0;
#pragma unroll
                    for (int nu = 0; nu < A; ++nu) sum += am[r][nu] * static_cast<Acc>(Wn::at(s, nu));
                    store_acc(out + oh * Q + ow, sum);
                }
            }
        }
    }
}
