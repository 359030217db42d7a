// y = x W^T + b on a copy of W laid out for it: one decoding step's few rows, and an encoder's tokens in
// inference (attnlab/nn/few_row_gemm.py builds this file with g++ -O3 -mavx2 -mfma [-fopenmp] and calls it
// through ctypes).
//
// Why a kernel of our own:
// - A step of 1-8 rows reads every weight once and does little with it, so it runs at the speed the weight
//   streams from memory. MKL, PyTorch's CPU BLAS, streams a float32 weight at 6-8 GB/s for 2-8 rows on the
//   AMD EPYC these sessions run on (about 15 GB/s at one row), where the core reads 21 GB/s. This kernel
//   reads the weight once, in order, and keeps every partial sum in a register.
// - With more rows (an encoder's 128-4096 tokens) MKL packs the weight again at every call; this kernel's
//   copy is packed once. Whole encoder forwards with these products took 0.70-0.97x the time of PyTorch's
//   fused encoder layer on MKL's on that machine (bert-mini and bert-base, T=128; attnlab/nn/linear.py).
//
// Layout. W (N, K) is copied into panels of 8 output columns (the last one zero-padded):
//     P[p][k][j] = W[8p + j][k],   p < ceil(N / 8), k < K, j < 8
// so one panel is K * 8 contiguous floats, read front to back.
//
// Arithmetic. Output (m, n) is one lane of one AVX register: acc = 0; for k = 0 .. K-1:
// acc = fma(x[m][k], W[n][k], acc); then y = acc + b[n]. The same sequence of roundings whatever the number of
// rows, the tiling, the panels computed beside it or the number of threads: a row's result does not depend on
// the batch it is in or on the thread count (tests/test_few_row_gemm.py checks both with torch.equal).
// With act = 1, y = GELU(acc + b[n]) (gelu.h), for a feed-forward layer's first product.
#include <immintrin.h>
#include <cstdint>

#include "gelu.h"
#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

// Rows [0, M) of x (row stride ldx) against panels [p0, p0 + NP): M * NP accumulators, at most 12, so they,
// the NP panel vectors and the broadcast fit AVX2's 16 registers.
template <int M, int NP>
void tile(int64_t K, const float* x, int64_t ldx, const float* P, int64_t p0, const float* bias, float* y,
          int64_t ldy, int64_t N, int act) {
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
            __m256 r = _mm256_add_ps(acc[m][q], bv);
            if (act == 1) r = attnlab_gelu::gelu(r);
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
            int64_t pe, int act) {
    int64_t p = pb;
    for (; p + NP <= pe; p += NP) tile<M, NP>(K, x, K, P, p, bias, y, N, N, act);
    for (; p < pe; ++p) tile<M, 1>(K, x, K, P, p, bias, y, N, N, act);
}

void rows_panels(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias, float* y,
                 int64_t pb, int64_t pe, int act) {
    for (int64_t m0 = 0; m0 < M; m0 += 8) {  // 8 rows at a time
        const float* xm = x + m0 * K;
        float* ym = y + m0 * N;
        switch (M - m0 < 8 ? M - m0 : 8) {
            case 1: panels<1, 8>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 2: panels<2, 4>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 3: panels<3, 3>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 4: panels<4, 2>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 5: panels<5, 2>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 6: panels<6, 2>(K, N, xm, P, bias, ym, pb, pe, act); break;
            case 7: panels<7, 1>(K, N, xm, P, bias, ym, pb, pe, act); break;
            default: panels<8, 1>(K, N, xm, P, bias, ym, pb, pe, act); break;
        }
    }
}

// The remainder of a row block, 1-5 rows (M < 6), against NP panels.
template <int NP>
void rest(int64_t M, int64_t K, int64_t N, const float* x, const float* P, int64_t p, const float* bias,
          float* y, int act) {
    switch (M) {
        case 1: tile<1, NP>(K, x, K, P, p, bias, y, N, N, act); break;
        case 2: tile<2, NP>(K, x, K, P, p, bias, y, N, N, act); break;
        case 3: tile<3, NP>(K, x, K, P, p, bias, y, N, N, act); break;
        case 4: tile<4, NP>(K, x, K, P, p, bias, y, N, N, act); break;
        case 5: tile<5, NP>(K, x, K, P, p, bias, y, N, N, act); break;
        default: break;
    }
}

// More rows (an encoder's tokens): rows [r0, r1) against panels [pb, pe), in tiles of 6 rows by 2 panels
// (12 accumulators: per k, 2 panel loads and 6 broadcasts feed 12 FMAs). Rows go in blocks of about 96 KiB
// of x, which stay in L2 while the panel pairs pass over them; a pair (16 columns x K) stays in L1/L2 while
// the block's tiles run. The arithmetic per output is the one above.
void many_rows(int64_t N, int64_t K, const float* x, const float* P, const float* bias, float* y, int64_t r0,
               int64_t r1, int64_t pb, int64_t pe, int act) {
    int64_t block = (24576 / (K > 0 ? K : 1)) / 6 * 6;
    if (block < 6) block = 6;
    for (int64_t m0 = r0; m0 < r1; m0 += block) {
        const int64_t m1 = m0 + block < r1 ? m0 + block : r1;
        int64_t p = pb;
        for (; p + 2 <= pe; p += 2) {
            int64_t m = m0;
            for (; m + 6 <= m1; m += 6) tile<6, 2>(K, x + m * K, K, P, p, bias, y + m * N, N, N, act);
            rest<2>(m1 - m, K, N, x + m * K, P, p, bias, y + m * N, act);
        }
        if (p < pe) {  // an odd panel at the end
            int64_t m = m0;
            for (; m + 6 <= m1; m += 6) tile<6, 1>(K, x + m * K, K, P, p, bias, y + m * N, N, N, act);
            rest<1>(m1 - m, K, N, x + m * K, P, p, bias, y + m * N, act);
        }
    }
}

}  // namespace

extern "C" {

// Bumped with any change of the arguments' meaning; few_row_gemm.py refuses a library that disagrees.
int attnlab_few_row_gemm_version() { return 2; }

// x (M, K) row-major, P the panels of W (N, K) as above, bias (N,) or null, y (M, N) row-major, written;
// act 0 (none) or 1 (GELU).
// The panels (or, for more than 8 rows and few panels, the rows) are split evenly over `threads` OpenMP
// threads (PyTorch's own runtime when it is loaded).
void attnlab_few_row_gemm(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias,
                          float* y, int threads, int act) {
    const int64_t np = (N + 7) / 8;
    if (M > 8) {
#ifdef _OPENMP
        const int64_t pairs = (np + 1) / 2;
        if (threads > 1 && pairs >= 2 * threads) {  // the threads split the panel pairs, each takes every row
#pragma omp parallel num_threads(threads)
            {
                const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
                const int64_t pb = 2 * (pairs * t / T), pe = 2 * (pairs * (t + 1) / T);
                many_rows(N, K, x, P, bias, y, 0, M, pb, pe < np ? pe : np, act);
            }
            return;
        }
        if (threads > 1 && M >= 12 * threads) {  // few panels: the threads split the rows, 6 at a time
#pragma omp parallel num_threads(threads)
            {
                const int64_t t = omp_get_thread_num(), T = omp_get_num_threads(), tiles = (M + 5) / 6;
                const int64_t r0 = 6 * (tiles * t / T), r1 = 6 * (tiles * (t + 1) / T);
                many_rows(N, K, x, P, bias, y, r0, r1 < M ? r1 : M, 0, np, act);
            }
            return;
        }
#endif
        many_rows(N, K, x, P, bias, y, 0, M, 0, np, act);
        return;
    }
#ifdef _OPENMP
    if (threads > 1 && np >= 2 * threads) {
#pragma omp parallel num_threads(threads)
        {
            const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            rows_panels(M, N, K, x, P, bias, y, np * t / T, np * (t + 1) / T, act);
        }
        return;
    }
#endif
    (void)threads;
    rows_panels(M, N, K, x, P, bias, y, 0, np, act);
}

}  // extern "C"
