// y = x W^T + b on a copy of W laid out for it: one decoding step's few rows, and an encoder's tokens in
// inference (attnlab/accel/few_row_gemm.py builds this file with torch.utils.cpp_extension, -O3 -mavx2 -mfma
// [-fopenmp], and calls its ops, registered at the end, as torch.ops.attnlab.*).
//
// Why a kernel of our own:
// - A step of 1-8 rows reads every weight once and does little with it, so it runs at the speed the weight
//   streams from memory. MKL, PyTorch's CPU BLAS, streams a float32 weight well below the memory's speed.
//   This kernel reads the weight once, in order, and keeps every partial sum in a register.
// - With more rows (an encoder's 128-4096 tokens) MKL packs the weight again at every call; this kernel's
//   copy is packed once.
// Why: benchmarks/gemm.py --small-rows and benchmarks/inference.py (figures in docs/design_measurements.md).
//
// Layout. W (N, K) is copied into panels of 8 output columns (the last one zero-padded):
//     P[p][k][j] = W[8p + j][k],   p < ceil(N / 8), k < K, j < 8
// so one panel is K * 8 contiguous floats, read front to back.
//
// Arithmetic. Output (m, n) is one lane of one AVX register: acc = 0; for k = 0 .. K-1:
// acc = fma(x[m][k], W[n][k], acc); then y = acc + b[n]. The same sequence of roundings whatever the number of
// rows, the tiling, the panels computed beside it or the number of threads: a row's result does not depend on
// the batch it is in or on the thread count (tests/accel/test_few_row_gemm.py checks both with torch.equal).
// With act = 1, y = GELU(acc + b[n]) (epilogue.h), for a feed-forward layer's first product.
#include <immintrin.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "blocking.h"
#include "epilogue.h"
#include "ops.h"
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
            attnlab_epilogue::finish(y + m * ldy + n0, _mm256_add_ps(acc[m][q], bv), width, act);
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

// The remainder of a tile column, 1-5 rows (M < 6), against NP panels; x and y with row strides ldx, ldy.
template <int NP>
void rest(int64_t M, int64_t K, int64_t N, const float* x, int64_t ldx, const float* P, int64_t p,
          const float* bias, float* y, int64_t ldy, int act) {
    switch (M) {
        case 1: tile<1, NP>(K, x, ldx, P, p, bias, y, ldy, N, act); break;
        case 2: tile<2, NP>(K, x, ldx, P, p, bias, y, ldy, N, act); break;
        case 3: tile<3, NP>(K, x, ldx, P, p, bias, y, ldy, N, act); break;
        case 4: tile<4, NP>(K, x, ldx, P, p, bias, y, ldy, N, act); break;
        case 5: tile<5, NP>(K, x, ldx, P, p, bias, y, ldy, N, act); break;
        default: break;
    }
}

// Rows [r0, r1) of x (row stride ldx) against panels [pb, pe) into y (row stride ldy), in tiles of 6 rows by
// 2 panels (12 accumulators: per k, 2 panel loads and 6 broadcasts feed 12 FMAs), rows in blocks of about
// 96 KiB of x (blocking.h). The arithmetic per output is the one above.
void many_rows(int64_t N, int64_t K, const float* x, int64_t ldx, const float* P, const float* bias, float* y,
               int64_t ldy, int64_t r0, int64_t r1, int64_t pb, int64_t pe, int act) {
    auto full = [&](int64_t m, int64_t p, auto np) {
        tile<6, decltype(np)::value>(K, x + m * ldx, ldx, P, p, bias, y + m * ldy, ldy, N, act);
    };
    auto part = [&](int64_t rows, int64_t m, int64_t p, auto np) {
        rest<decltype(np)::value>(rows, K, N, x + m * ldx, ldx, P, p, bias, y + m * ldy, ldy, act);
    };
    attnlab_blocking::blocked(r0, r1, pb, pe, attnlab_blocking::block_rows(4 * K, 98304), full, part);
}

// y (M rows, row stride ldy) = x (M rows, row stride ldx) @ the panels P of a (N, K) matrix (the attention's
// rows live inside larger rows).
void strided_product(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* P, float* y,
                     int64_t ldy) {
    many_rows(N, K, x, ldx, P, nullptr, y, ldy, 0, M, 0, (N + 7) / 8, 0);
}

// Softmax of one row of scores in place: s[j] = exp(s[j] * scale + bias[j] - max) / sum for j < T, 0 for
// T <= j < T8 (the padding the next product reads).
void softmax_row(float* s, int64_t T, int64_t T8, float scale, const float* bias) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= T; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
        if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
        _mm256_storeu_ps(s + j, v);
        vmax = _mm256_max_ps(vmax, v);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float mx = -INFINITY;
    for (int i = 0; i < 8; ++i) mx = lanes[i] > mx ? lanes[i] : mx;
    for (; j < T; ++j) {
        s[j] = s[j] * scale + (bias != nullptr ? bias[j] : 0.f);
        mx = s[j] > mx ? s[j] : mx;
    }
    for (j = T; j < T8; ++j) s[j] = -INFINITY;  // exp -> 0
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (j = 0; j < T8; j += 8) {
        const __m256 e = attnlab_epilogue::exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    _mm256_store_ps(lanes, vsum);
    float sum = 0.f;
    for (int i = 0; i < 8; ++i) sum += lanes[i];
    const __m256 inv = _mm256_set1_ps(1.f / sum);
    for (j = 0; j < T8; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
}

// One work item of the attention: query rows [i0, i1) of head h of sequence b.
void attention_item(int64_t T, int64_t H, int64_t D, const float* qkv, const float* key_bias, float* out,
                    float scale, int64_t b, int64_t h, int64_t i0, int64_t i1, std::vector<float>& kp,
                    std::vector<float>& vp, std::vector<float>& scores) {
    const int64_t T8 = (T + 7) / 8 * 8, D8 = (D + 7) / 8 * 8, row = 3 * H * D;
    const float* base = qkv + b * T * row;
    // K (T, D) as panels of 8 keys: kp[p][d][j] = K[8p + j][d]; V^T (D, T) as panels of 8 dims: vp[p][j][i]
    kp.assign(static_cast<size_t>(T8 * D), 0.f);
    vp.assign(static_cast<size_t>(D8 * T8), 0.f);
    for (int64_t j = 0; j < T; ++j) {
        const float* k = base + j * row + H * D + h * D;
        const float* v = base + j * row + 2 * H * D + h * D;
        float* kpanel = kp.data() + (j / 8) * D * 8 + j % 8;
        for (int64_t d = 0; d < D; ++d) kpanel[d * 8] = k[d];
        for (int64_t d = 0; d < D; ++d) vp[(d / 8) * T8 * 8 + j * 8 + d % 8] = v[d];
    }
    const int64_t rows = i1 - i0;
    scores.resize(static_cast<size_t>(rows * T8));
    // scores = Q K^T (rows, T) ...
    strided_product(rows, T, D, base + i0 * row + h * D, row, kp.data(), scores.data(), T8);
    const float* bias = key_bias != nullptr ? key_bias + b * T : nullptr;
    for (int64_t r = 0; r < rows; ++r) softmax_row(scores.data() + r * T8, T, T8, scale, bias);
    // ... softmax, then out rows = P V, written into (B, T, H, D)
    strided_product(rows, D, T8, scores.data(), T8, vp.data(), out + ((b * T + i0) * H + h) * D, H * D);
}

// Rows [r0, r1) of y (M, N): y += residual, then, where gamma is given, LayerNorm over the row:
// (y - mean) / sqrt(var + eps) * gamma + beta (biased variance, two passes, as nn.LayerNorm).
void add_norm_rows(float* y, const float* residual, const float* gamma, const float* beta, float eps, int64_t N,
                   int64_t r0, int64_t r1) {
    for (int64_t m = r0; m < r1; ++m) {
        float* row = y + m * N;
        const float* res = residual + m * N;
        __m256 vsum = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= N; j += 8) {
            const __m256 v = _mm256_add_ps(_mm256_loadu_ps(row + j), _mm256_loadu_ps(res + j));
            _mm256_storeu_ps(row + j, v);
            vsum = _mm256_add_ps(vsum, v);
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, vsum);
        float sum = 0.f;
        for (int i = 0; i < 8; ++i) sum += lanes[i];
        for (; j < N; ++j) {
            row[j] += res[j];
            sum += row[j];
        }
        if (gamma == nullptr) continue;
        const float mean = sum / static_cast<float>(N);
        const __m256 vmean = _mm256_set1_ps(mean);
        __m256 vsq = _mm256_setzero_ps();
        for (j = 0; j + 8 <= N; j += 8) {
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(row + j), vmean);
            vsq = _mm256_fmadd_ps(d, d, vsq);
        }
        _mm256_store_ps(lanes, vsq);
        float sq = 0.f;
        for (int i = 0; i < 8; ++i) sq += lanes[i];
        for (; j < N; ++j) sq += (row[j] - mean) * (row[j] - mean);
        const float inv = 1.f / std::sqrt(sq / static_cast<float>(N) + eps);
        const __m256 vinv = _mm256_set1_ps(inv);
        for (j = 0; j + 8 <= N; j += 8) {
            const __m256 d = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmean), vinv);
            _mm256_storeu_ps(row + j, _mm256_fmadd_ps(d, _mm256_loadu_ps(gamma + j), _mm256_loadu_ps(beta + j)));
        }
        for (; j < N; ++j) row[j] = (row[j] - mean) * inv * gamma[j] + beta[j];
    }
}

// A residual sub-layer's output product and merge in one call: y = x W^T + b + residual, then, where gamma
// is given (post-LN), LayerNorm(y) * gamma + beta with `eps`; beta must be given with gamma. residual and y
// (M, N) row-major. The threads split the panels for the product, then the rows for the merge.
void product_add_norm(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias,
                      const float* residual, const float* gamma, const float* beta, float eps, float* y,
                      int threads) {
    const int64_t np = (N + 7) / 8, pairs = (np + 1) / 2;
#ifdef _OPENMP
    if (threads > 1 && pairs >= 2 * threads && M >= threads) {
#pragma omp parallel num_threads(threads)
        {
            const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
            const int64_t pb = 2 * (pairs * t / T), pe = 2 * (pairs * (t + 1) / T);
            many_rows(N, K, x, K, P, bias, y, N, 0, M, pb, pe < np ? pe : np, 0);
#pragma omp barrier
            add_norm_rows(y, residual, gamma, beta, eps, N, M * t / T, M * (t + 1) / T);
        }
        return;
    }
#endif
    (void)threads;
    many_rows(N, K, x, K, P, bias, y, N, 0, M, 0, np, 0);
    add_norm_rows(y, residual, gamma, beta, eps, N, 0, M);
}

// softmax(Q K^T * scale + key_bias) V for every head: qkv (B, T, 3, H, D) contiguous (the stacked query/key/
// value product), key_bias (B, T) additive or null, out (B, T, H, D), written. Items of (sequence, head, 64
// query rows) split over `threads` OpenMP threads. Each item's arithmetic does not depend on the others.
void attention(int64_t B, int64_t T, int64_t H, int64_t D, const float* qkv, const float* key_bias, float* out,
               float scale, int threads) {
    // one item per head and sequence (K and V packed once), its query rows split only where there are fewer
    // heads and sequences than threads
    const int64_t heads = B * H > 0 ? B * H : 1, want = threads > heads ? (threads + heads - 1) / heads : 1;
    const int64_t block = T > 0 ? (T + want - 1) / want : 1, blocks = T > 0 ? (T + block - 1) / block : 0;
    const int64_t items = B * H * blocks;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads > 1 && items > 1 ? threads : 1)
#endif
    {
        std::vector<float> kp, vp, scores;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t it = 0; it < items; ++it) {
            const int64_t b = it / (H * blocks), h = (it / blocks) % H, i0 = (it % blocks) * block;
            attention_item(T, H, D, qkv, key_bias, out, scale, b, h, i0, i0 + block < T ? i0 + block : T, kp,
                           vp, scores);
        }
    }
    (void)threads;
}

// x (M, K) row-major, P the panels of W (N, K) as above, bias (N,) or null, y (M, N) row-major, written;
// act 0 (none) or 1 (GELU).
// The panels (or, for more than 8 rows and few panels, the rows) are split evenly over `threads` OpenMP
// threads (PyTorch's own runtime when it is loaded).
void few_row_gemm(int64_t M, int64_t N, int64_t K, const float* x, const float* P, const float* bias, float* y,
                  int threads, int act) {
    const int64_t np = (N + 7) / 8;
    if (M > 8) {
#ifdef _OPENMP
        const int64_t pairs = (np + 1) / 2;
        if (threads > 1 && pairs >= 2 * threads) {  // the threads split the panel pairs, each takes every row
#pragma omp parallel num_threads(threads)
            {
                const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
                const int64_t pb = 2 * (pairs * t / T), pe = 2 * (pairs * (t + 1) / T);
                many_rows(N, K, x, K, P, bias, y, N, 0, M, pb, pe < np ? pe : np, act);
            }
            return;
        }
        if (threads > 1 && M >= 12 * threads) {  // few panels: the threads split the rows, 6 at a time
#pragma omp parallel num_threads(threads)
            {
                const int64_t t = omp_get_thread_num(), T = omp_get_num_threads(), tiles = (M + 5) / 6;
                const int64_t r0 = 6 * (tiles * t / T), r1 = 6 * (tiles * (t + 1) / T);
                many_rows(N, K, x, K, P, bias, y, N, r0, r1 < M ? r1 : M, 0, np, act);
            }
            return;
        }
#endif
        many_rows(N, K, x, K, P, bias, y, N, 0, M, 0, np, act);
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

}  // namespace

// The custom ops torch.ops.attnlab.* (few_row_gemm.py holds their fake implementations, the output shapes
// for torch.compile and export). The checks below keep a wrong size or type from reading outside a tensor.

namespace {

using attnlab_ops::dense;
using attnlab_ops::ptr_or_null;
using attnlab_ops::vector_or_none;

// x (..., K) float32, panels (ceil(N / 8), K, 8) of W (N, K): x as the kernel reads it.
at::Tensor product_input(const at::Tensor& x, const at::Tensor& panels, int64_t n, const char* what) {
    TORCH_CHECK(x.dim() >= 1, what, ": x must have at least one dimension");
    TORCH_CHECK(panels.dim() == 3 && panels.size(2) == 8 && panels.size(1) == x.size(-1) && n >= 0 &&
                    panels.size(0) * 8 >= n && panels.is_contiguous(),
                what, ": panels ", panels.sizes(), " for x ", x.sizes(), " and ", n, " columns");
    dense(panels, at::kFloat, what);
    return dense(x, at::kFloat, what);
}

at::Tensor few_row_gemm_op(const at::Tensor& x_, const at::Tensor& panels, const std::optional<at::Tensor>& bias_,
                           int64_t n, int64_t act) {
    const at::Tensor x = product_input(x_, panels, n, "attnlab::few_row_gemm");
    const at::Tensor bias = vector_or_none(bias_, n, at::kFloat, "attnlab::few_row_gemm bias");
    TORCH_CHECK(act == 0 || act == 1, "attnlab::few_row_gemm: act must be 0 or 1 (GELU), got ", act);
    at::Tensor y = attnlab_ops::output_for(x, n);
    few_row_gemm(attnlab_ops::rows_of(x), n, x.size(-1), x.data_ptr<float>(), panels.data_ptr<float>(),
                 ptr_or_null<float>(bias), y.data_ptr<float>(), at::get_num_threads(), static_cast<int>(act));
    return y;
}

at::Tensor product_add_norm_op(const at::Tensor& x_, const at::Tensor& panels, const std::optional<at::Tensor>& bias_,
                               const at::Tensor& residual_, const std::optional<at::Tensor>& gamma_,
                               const std::optional<at::Tensor>& beta_, double eps) {
    const char* what = "attnlab::product_add_norm";
    TORCH_CHECK(residual_.dim() == x_.dim() && x_.dim() >= 1, what, ": residual ", residual_.sizes(), " for x ",
                x_.sizes());
    const int64_t n = residual_.size(-1);
    const at::Tensor x = product_input(x_, panels, n, what);
    for (int64_t i = 0; i + 1 < x.dim(); ++i)
        TORCH_CHECK(residual_.size(i) == x.size(i), what, ": residual ", residual_.sizes(), " for x ", x.sizes());
    const at::Tensor residual = dense(residual_, at::kFloat, what);
    const at::Tensor bias = vector_or_none(bias_, n, at::kFloat, what);
    const at::Tensor gamma = vector_or_none(gamma_, n, at::kFloat, what);
    const at::Tensor beta = vector_or_none(beta_, n, at::kFloat, what);
    TORCH_CHECK(gamma.defined() == beta.defined(), what, ": the LayerNorm's weight and bias go together");
    at::Tensor y = attnlab_ops::output_for(x, n);
    product_add_norm(attnlab_ops::rows_of(x), n, x.size(-1), x.data_ptr<float>(), panels.data_ptr<float>(),
                     ptr_or_null<float>(bias), residual.data_ptr<float>(), ptr_or_null<float>(gamma),
                     ptr_or_null<float>(beta), static_cast<float>(eps), y.data_ptr<float>(), at::get_num_threads());
    return y;
}

at::Tensor attention_op(const at::Tensor& qkv_, int64_t heads, const std::optional<at::Tensor>& key_bias_) {
    const char* what = "attnlab::attention";
    TORCH_CHECK(qkv_.dim() == 3 && heads > 0 && qkv_.size(2) % (3 * heads) == 0, what, ": qkv ", qkv_.sizes(),
                " for ", heads, " heads ((B, T, 3 * H * D) expected)");
    const at::Tensor qkv = dense(qkv_, at::kFloat, what);
    const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / (3 * heads);
    at::Tensor key_bias;
    if (key_bias_.has_value() && key_bias_->defined()) {
        TORCH_CHECK(key_bias_->dim() == 2 && key_bias_->size(0) == b && key_bias_->size(1) == t, what,
                    ": key_bias ", key_bias_->sizes(), ", expected (", b, ", ", t, ")");
        key_bias = dense(*key_bias_, at::kFloat, what);
    }
    at::Tensor out = at::detail::empty_cpu({b, t, heads * d}, at::kFloat, false, std::nullopt);
    const float scale = d ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))) : 1.f;
    attention(b, t, heads, d, qkv.data_ptr<float>(), ptr_or_null<float>(key_bias), out.data_ptr<float>(), scale,
              at::get_num_threads());
    return out;
}

// Bumped with any change of the ops' meaning; few_row_gemm.py refuses a library that disagrees.
int64_t few_row_gemm_version() { return 5; }

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnlab, m) {  // a fragment: int8_gemm.cpp's library adds its ops to the namespace
    m.def("few_row_gemm(Tensor x, Tensor panels, Tensor? bias, int n, int act) -> Tensor");
    m.def("product_add_norm(Tensor x, Tensor panels, Tensor? bias, Tensor residual, Tensor? gamma, Tensor? beta, "
          "float eps) -> Tensor");
    m.def("attention(Tensor qkv, int heads, Tensor? key_bias) -> Tensor");
    m.def("few_row_gemm_version() -> int", &few_row_gemm_version);
}

TORCH_LIBRARY_IMPL(attnlab, CPU, m) {
    m.impl("few_row_gemm", &few_row_gemm_op);
    m.impl("product_add_norm", &product_add_norm_op);
    m.impl("attention", &attention_op);
}
