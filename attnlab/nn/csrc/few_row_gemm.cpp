// y = x W^T + b for a few rows of x: one decoding step's products (attnlab/nn/few_row_gemm.py builds this
// file with g++ -O3 -mavx2 -mfma [-fopenmp] and calls it through ctypes).
//
// Why a kernel of our own: a step of 1-8 rows reads every weight once and does little with it, so it runs
// at the speed the weight streams from memory. MKL, PyTorch's CPU BLAS, streams a float32 weight at 6-8 GB/s
// for 2-8 rows on the AMD EPYC these sessions run on (about 15 GB/s at one row), where the core reads 21 GB/s.
// This kernel reads the weight once, in order, from a copy laid out for it, and keeps every partial sum in
// a register.
//
// Layout. W (N, K) is copied into panels of 8 output columns (the last one zero-padded):
//     P[p][k][j] = W[8p + j][k],   p < ceil(N / 8), k < K, j < 8
// so one panel is K * 8 contiguous floats, read front to back.
//
// Arithmetic. Output (m, n) is one lane of one AVX register: acc = 0; for k = 0 .. K-1:
// acc = fma(x[m][k], W[n][k], acc); then y = acc + b[n]. The same sequence of roundings whatever the number of
// rows, the panels computed beside it or the number of threads: a row's result does not depend on the batch
// it is in or on the thread count (tests/test_few_row_gemm.py checks both with torch.equal).
#include <immintrin.h>
#include <cstdint>
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// Rows [0, M) of x (row stride ldx) against panels [p0, p0 + NP): M * NP accumulators, at most 12, so they,
// the NP panel vectors and the broadcast fit AVX2's 16 registers.
template <int M, int NP>
void tile(int64_t K, const float* x, int64_t ldx, const float* P, int64_t p0, const float* bias, float* y,
          int64_t ldy, int64_t N) {
    __m256 acc[M][NP];
    _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m)
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; ++q) acc[m][q] = _mm256_setzero_ps();
    const float* panel[NP];
    _Pragma("GCC unroll 8") for (int q = 0; q < NP; ++q) panel[q] = P + (p0 + q) * K * 8;
    for (int64_t k = 0; k < K; ++k) {
        __m256 w[NP];
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; ++q) w[q] = _mm256_loadu_ps(panel[q] + k * 8);
        _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m) {
            const __m256 xv = _mm256_broadcast_ss(x + m * ldx + k);
            _Pragma("GCC unroll 8") for (int q = 0; q < NP; ++q) acc[m][q] = _mm256_fmadd_ps(xv, w[q], acc[m][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int q = 0; q < NP; ++q) {
        const int64_t n0 = (p0 + q) * 8;
        const int64_t width = N - n0 < 8 ? N - n0 : 8;  // the last panel may hold fewer than 8 columns
        alignas(32) float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (bias != nullptr)
            for (int64_t j = 0; j < width; ++j) b[j] = bias[n0 + j];
        const __m256 bv = _mm256_load_ps(b);
        _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m) {
            const __m256 r = _mm256_add_ps(acc[m][q], bv);
            if (width == 8) {
                _mm256_storeu_ps(y + m * ldy + n0, r);
            } else {
                alignas(32) float t[8];
                _mm256_store_ps(t, r);
                for (int64_t j = 0; j < width; ++j) y[m * ldy + n0 + j] = t[j];
            }
        }
    }
}

// Panels [pb, pe) for M rows, NP panels at a time (more panels side by side for fewer rows: enough independent
// accumulators to hide the FMA latency).
template <int M, int NP>
void panels(int64_t K, int64_t N, const float* x, const float* P, const float* bias, float* y, int64_t pb,
            int64_t pe) {
    int64_t p = pb;
    for (; p + NP <= pe; p += NP) tile<M, NP>(K, x, K, P, p, bias, y, N, N);
    for (; p < pe; ++p) tile<M, 1>(K, x, K, P, p, bias, y, N, N);
}

void rows_panels(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias, float* y,
                 int64_t pb, int64_t pe) {
    for (int64_t m0 = 0; m0 < M; m0 += 8) {  // 8 rows at a time
        const float* xm = x + m0 * K;
        float* ym = y + m0 * N;
        switch (M - m0 < 8 ? M - m0 : 8) {
            case 1: panels<1, 8>(K, N, xm, P, bias, ym, pb, pe); break;
            case 2: panels<2, 4>(K, N, xm, P, bias, ym, pb, pe); break;
            case 3: panels<3, 3>(K, N, xm, P, bias, ym, pb, pe); break;
            case 4: panels<4, 2>(K, N, xm, P, bias, ym, pb, pe); break;
            case 5: panels<5, 2>(K, N, xm, P, bias, ym, pb, pe); break;
            case 6: panels<6, 2>(K, N, xm, P, bias, ym, pb, pe); break;
            case 7: panels<7, 1>(K, N, xm, P, bias, ym, pb, pe); break;
            default: panels<8, 1>(K, N, xm, P, bias, ym, pb, pe); break;
        }
    }
}

}  // namespace

extern "C" {

// Bumped with any change of the arguments' meaning; few_row_gemm.py refuses a library that disagrees.
int attnlab_few_row_gemm_version() { return 1; }

// x (M, K) row-major, P the panels of W (N, K) as above, bias (N,) or null, y (M, N) row-major, written.
// The panels are split evenly over `threads` OpenMP threads (PyTorch's own runtime when it is loaded).
void attnlab_few_row_gemm(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias,
                          float* y, int threads) {
    const int64_t np = (N + 7) / 8;
#ifdef _OPENMP
    if (threads > 1 && np >= 2 * threads) {
#pragma omp parallel num_threads(threads)
        {
            const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            rows_panels(M, N, K, x, P, bias, y, np * t / T, np * (t + 1) / T);
        }
        return;
    }
#endif
    (void)threads;
    rows_panels(M, N, K, x, P, bias, y, 0, np);
}

}  // extern "C"
