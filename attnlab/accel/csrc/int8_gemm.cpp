// y = dequant(quant(x) Wq^T) + b: int8 linear layers for CPU inference on AVX2 (attnlab/accel/int8_gemm.py builds
// this file as it builds few_row_gemm.cpp, and calls its op, registered at the end, as torch.ops.attnlab.int8_gemm).
//
// Why a kernel of our own: PyTorch's dynamic int8 product (FBGEMM's, `quantized::linear_dynamic`) splits an
// encoder's small products (128 tokens x 256-1024 columns) poorly over two threads and quantizes its input in
// separate passes; on AVX2 without VNNI this kernel runs bert-mini's products closer to the 8-bit
// multiply-add's peak. Why: benchmarks/inference.py times whole forwards ("attnlab int8"; figures in
// docs/design_measurements.md).
//
// Quantization.
// - W (N, K): int8, symmetric, one scale per output row, |Wq| <= 127 (int8_gemm.py quantizes it).
// - x (M, K): each row asymmetric to 7 bits, at every call: lo = min(0, min x), hi = max(0, max x),
//   s = (hi - lo) / 127, z = round(-lo / s), xq = clamp(round(x / s) + z, 0, 127). 7 bits because a pair of
//   products (xq0 w0 + xq1 w1, what vpmaddubsw sums in int16) then stays within 2 * 127 * 127 < 32767: no
//   saturation, the int32 sums are exact. (FBGEMM's `reduce_range` is the same 7 bits, with one scale for
//   the whole tensor.)
// - y[m][n] = s_m * sw_n * (sum_k xq[m][k] Wq[n][k] - z_m * colsum_n) + b[n], colsum_n = sum_k Wq[n][k].
// The integer sums are exact, so a row's result depends neither on the other rows of the call nor on the
// thread count. With act = 1, y = GELU(...) (epilogue.h), for a feed-forward layer's first product.
//
// VNNI. Built with -DATTNLAB_VNNI (and -mavx512vnni -mavx512vl, or -mavxvnni) on a CPU that has the 8-bit
// dot product, the file becomes the op int8_gemm_vnni: vpdpbusd sums the 4 products of u8 x s8 straight into
// int32, so nothing saturates and x is quantized to 8 bits (levels 0-255 in the formulas above): half the
// quantization error, one instruction instead of three.
//
// Layout. Wq is copied into panels of 8 output columns and 4 k (K padded with zeros to a multiple of 4, N to
// a multiple of 8):   P[p][k4][j][i] = Wq[8p + j][4 k4 + i]   (32 bytes per k4: one AVX register).
// A tile: one 32-bit broadcast of 4 consecutive xq of a row against a panel's register gives, per column,
// vpmaddubsw -> two int16 pair sums, vpmaddwd with ones -> one int32 sum of 4 products, added to the
// accumulator.
#include <immintrin.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <tuple>
#include <vector>

#include "blocking.h"
#include "epilogue.h"
#include "ops.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef ATTNLAB_VNNI
#define ATTNLAB_INT8_OP "int8_gemm_vnni"
#else
#define ATTNLAB_INT8_OP "int8_gemm"
#endif

namespace {

#ifdef ATTNLAB_VNNI
constexpr int LEVELS = 255;  // 8-bit activations: vpdpbusd's int32 sums are exact

// acc + the sums of 4 products u8 x s8 per 32-bit lane
inline __m256i dot4(__m256i acc, __m256i xv, __m256i w) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, xv, w);
#else
    return _mm256_dpbusd_avx_epi32(acc, xv, w);
#endif
}
#else
constexpr int LEVELS = 127;  // 7-bit activations: vpmaddubsw's int16 pair sums do not saturate

inline __m256i dot4(__m256i acc, __m256i xv, __m256i w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(xv, w), _mm256_set1_epi16(1)));
}
#endif

// One row of x quantized into q (Kp bytes, the padding zeroed); returns scale and zero point.
void quantize_row(const float* x, int64_t K, int64_t Kp, uint8_t* q, float* scale, int32_t* zero) {
    __m256 vmin = _mm256_setzero_ps(), vmax = _mm256_setzero_ps();  // 0 is always in the range
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        const __m256 v = _mm256_loadu_ps(x + k);
        vmin = _mm256_min_ps(vmin, v);
        vmax = _mm256_max_ps(vmax, v);
    }
    alignas(32) float a[8], b[8];
    _mm256_store_ps(a, vmin);
    _mm256_store_ps(b, vmax);
    float lo = 0.f, hi = 0.f;
    for (int i = 0; i < 8; ++i) {
        lo = a[i] < lo ? a[i] : lo;
        hi = b[i] > hi ? b[i] : hi;
    }
    for (; k < K; ++k) {
        lo = x[k] < lo ? x[k] : lo;
        hi = x[k] > hi ? x[k] : hi;
    }
    float s = (hi - lo) / static_cast<float>(LEVELS);
    if (!(s > 0.f) || !std::isfinite(s)) s = 1.f;  // an all-zero row (or one with inf/nan: garbage in, out)
    int32_t z = static_cast<int32_t>(std::nearbyint(-lo / s));
    z = z < 0 ? 0 : (z > LEVELS ? LEVELS : z);
    *scale = s;
    *zero = z;
    const float inv = 1.f / s;
    const __m256 vinv = _mm256_set1_ps(inv);
    const __m256i vz = _mm256_set1_epi32(z);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i top = _mm256_set1_epi8(static_cast<char>(LEVELS));
    k = 0;
    for (; k + 32 <= K; k += 32) {  // 32 floats -> 32 bytes; round to nearest even, as nearbyint below
        __m256i i0 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv)), vz);
        __m256i i1 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8), vinv)), vz);
        __m256i i2 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 16), vinv)), vz);
        __m256i i3 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 24), vinv)), vz);
        // packs: int32 -> int16 -> uint8 (saturating: below 0 -> 0), lanes interleaved, then put in order
        const __m256i u = _mm256_packus_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k),
                            _mm256_min_epu8(_mm256_permutevar8x32_epi32(u, order), top));
    }
    for (; k < K; ++k) {
        int32_t v = static_cast<int32_t>(std::nearbyint(x[k] * inv)) + z;
        q[k] = static_cast<uint8_t>(v < 0 ? 0 : (v > LEVELS ? LEVELS : v));
    }
    for (; k < Kp; ++k) q[k] = 0;
}

// Rows [0, M) of q (row stride Kp) against panels [p0, p0 + NP): M * NP int32 accumulators (at most 12), then
// the float epilogue into y (row stride ldy).
template <int M, int NP>
void tile(int64_t Kp, const uint8_t* q, const float* xs, const int32_t* xz, const int8_t* P, int64_t p0,
          const int32_t* colsum, const float* ws, const float* bias, float* y, int64_t ldy, int64_t N, int act) {
    __m256i acc[M][NP];
    _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m)
        _Pragma("GCC unroll 8") for (int j = 0; j < NP; ++j) acc[m][j] = _mm256_setzero_si256();
    const int8_t* panel[NP];
    _Pragma("GCC unroll 8") for (int j = 0; j < NP; ++j) panel[j] = P + (p0 + j) * Kp * 8;
    for (int64_t k = 0; k < Kp; k += 4) {
        __m256i w[NP];
        _Pragma("GCC unroll 8") for (int j = 0; j < NP; ++j)
            w[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel[j] + k * 8));
        _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m) {
            int32_t four;
            __builtin_memcpy(&four, q + m * Kp + k, 4);
            const __m256i xv = _mm256_set1_epi32(four);
            _Pragma("GCC unroll 8") for (int j = 0; j < NP; ++j) acc[m][j] = dot4(acc[m][j], xv, w[j]);
        }
    }
    _Pragma("GCC unroll 8") for (int j = 0; j < NP; ++j) {
        const int64_t n0 = (p0 + j) * 8;
        const int64_t width = N - n0 < 8 ? N - n0 : 8;  // the last panel may hold fewer than 8 columns
        const __m256i cs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(colsum + n0));  // padded to 8
        const __m256 sw = _mm256_loadu_ps(ws + n0);
        const __m256 bv = bias != nullptr ? _mm256_loadu_ps(bias + n0) : _mm256_setzero_ps();
        _Pragma("GCC unroll 8") for (int m = 0; m < M; ++m) {
            const __m256i exact = _mm256_sub_epi32(acc[m][j], _mm256_mullo_epi32(_mm256_set1_epi32(xz[m]), cs));
            const __m256 r = _mm256_add_ps(
                _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(exact), _mm256_set1_ps(xs[m])), sw), bv);
            attnlab_epilogue::finish(y + m * ldy + n0, r, width, act);
        }
    }
}

struct Args {
    int64_t M, N, Kp;
    const uint8_t* q;
    const float* xs;
    const int32_t* xz;
    const int8_t* P;
    const int32_t* colsum;
    const float* ws;
    const float* bias;
    float* y;
    int act;
};

template <int NP>
void rest(const Args& a, int64_t rows, int64_t m, int64_t p) {
    const uint8_t* q = a.q + m * a.Kp;
    float* y = a.y + m * a.N;
    switch (rows) {
        case 1: tile<1, NP>(a.Kp, q, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias, y, a.N, a.N, a.act); break;
        case 2: tile<2, NP>(a.Kp, q, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias, y, a.N, a.N, a.act); break;
        case 3: tile<3, NP>(a.Kp, q, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias, y, a.N, a.N, a.act); break;
        case 4: tile<4, NP>(a.Kp, q, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias, y, a.N, a.N, a.act); break;
        case 5: tile<5, NP>(a.Kp, q, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias, y, a.N, a.N, a.act); break;
        default: break;
    }
}

// Rows [r0, r1) against panels [pb, pe): tiles of 6 rows by 2 panels, rows in blocks of about 24 KiB of q
// (blocking.h).
void rows_panels(const Args& a, int64_t r0, int64_t r1, int64_t pb, int64_t pe) {
    auto full = [&](int64_t m, int64_t p, auto np) {
        tile<6, decltype(np)::value>(a.Kp, a.q + m * a.Kp, a.xs + m, a.xz + m, a.P, p, a.colsum, a.ws, a.bias,
                                     a.y + m * a.N, a.N, a.N, a.act);
    };
    auto part = [&](int64_t rows, int64_t m, int64_t p, auto np) { rest<decltype(np)::value>(a, rows, m, p); };
    attnlab_blocking::blocked(r0, r1, pb, pe, attnlab_blocking::block_rows(a.Kp, 24576), full, part);
}

// Thread t of T: its share of the rows to quantize, then (after a barrier) of the panel pairs, or of the
// rows where there are too few panels.
void work(const Args& a, const float* x, int64_t K, uint8_t* q, float* xs, int32_t* xz, int64_t t, int64_t T,
          bool split_panels) {
    for (int64_t m = a.M * t / T; m < a.M * (t + 1) / T; ++m)
        quantize_row(x + m * K, K, a.Kp, q + m * a.Kp, xs + m, xz + m);
#ifdef _OPENMP
#pragma omp barrier
#endif
    const int64_t np = (a.N + 7) / 8;
    if (split_panels) {
        const int64_t pairs = (np + 1) / 2;
        const int64_t pb = 2 * (pairs * t / T), pe = 2 * (pairs * (t + 1) / T);
        rows_panels(a, 0, a.M, pb, pe < np ? pe : np);
    } else {
        const int64_t tiles = (a.M + 5) / 6;
        const int64_t r0 = 6 * (tiles * t / T), r1 = 6 * (tiles * (t + 1) / T);
        rows_panels(a, r0, r1 < a.M ? r1 : a.M, 0, np);
    }
}

// x (M, K) float32 row-major; P the panels of Wq (N, K) as above (Kp = K rounded up to 4); colsum and ws
// (N rounded up to 8, the padding 0), bias (N,) padded to 8 or null; y (M, N) row-major, written; act 0 (none)
// or 1 (GELU).
void int8_gemm(int64_t M, int64_t N, int64_t K, const float* x, const int8_t* P, const int32_t* colsum,
               const float* ws, const float* bias, float* y, int threads, int act) {
    const int64_t Kp = (K + 3) / 4 * 4;
    std::vector<uint8_t> q(static_cast<size_t>(M * Kp) + 32);
    std::vector<float> xs(static_cast<size_t>(M));
    std::vector<int32_t> xz(static_cast<size_t>(M));
    const Args a{M, N, Kp, q.data(), xs.data(), xz.data(), P, colsum, ws, bias, y, act};
    const int64_t pairs = ((N + 7) / 8 + 1) / 2;
#ifdef _OPENMP
    if (threads > 1 && (pairs >= 2 * threads || M >= 12 * threads)) {
        const bool split_panels = pairs >= 2 * threads;
#pragma omp parallel num_threads(threads)
        work(a, x, K, q.data(), xs.data(), xz.data(), omp_get_thread_num(), omp_get_num_threads(), split_panels);
        return;
    }
#endif
    (void)threads;
    work(a, x, K, q.data(), xs.data(), xz.data(), 0, 1, true);
}

// The custom op torch.ops.attnlab.int8_gemm, or int8_gemm_vnni (int8_gemm.py holds its fake implementation). The checks keep a
// wrong size or type from reading outside a tensor: every per-column tensor padded to whole panels.
at::Tensor int8_gemm_op(const at::Tensor& x_, const at::Tensor& panels, const at::Tensor& colsum_,
                        const at::Tensor& scale_, const std::optional<at::Tensor>& bias_, int64_t n, int64_t act) {
    const char* what = "attnlab::" ATTNLAB_INT8_OP;
    TORCH_CHECK(x_.dim() >= 1, what, ": x must have at least one dimension");
    const int64_t k = x_.size(-1);
    TORCH_CHECK(panels.dim() == 4 && panels.size(1) == (k + 3) / 4 && panels.size(2) == 8 && panels.size(3) == 4 &&
                    n >= 0 && panels.size(0) * 8 >= n && panels.is_contiguous(),
                what, ": panels ", panels.sizes(), " for x ", x_.sizes(), " and ", n, " columns");
    attnlab_ops::dense(panels, at::kChar, what);
    const int64_t n8 = panels.size(0) * 8;
    const at::Tensor x = attnlab_ops::dense(x_, at::kFloat, what);
    const at::Tensor colsum = attnlab_ops::vector_or_none(colsum_, n8, at::kInt, what);
    const at::Tensor scale = attnlab_ops::vector_or_none(scale_, n8, at::kFloat, what);
    const at::Tensor bias = attnlab_ops::vector_or_none(bias_, n8, at::kFloat, what);
    TORCH_CHECK(act == 0 || act == 1, what, ": act must be 0 or 1 (GELU), got ", act);
    at::Tensor y = attnlab_ops::output_for(x, n);
    int8_gemm(attnlab_ops::rows_of(x), n, k, x.data_ptr<float>(), panels.data_ptr<int8_t>(), colsum.data_ptr<int32_t>(),
              scale.data_ptr<float>(), attnlab_ops::ptr_or_null<float>(bias), y.data_ptr<float>(), at::get_num_threads(),
              static_cast<int>(act));
    return y;
}

// The quantization and the epilogue of this file's product, for a product computed elsewhere (oneDNN's u8 x s8
// GEMM, attnlab/accel/onednn_int8.py): quantize_rows gives each row of x (..., K) its levels q (..., K) uint8,
// scale (M,) and zero point (M,) as above; finish_rows turns out[m][n] = sw_n * sum_k q[m][k] Wq[n][k] (float32,
// in place) into s_m (out[m][n] - z_m * cw_n) + b[n] (+ GELU where act is 1), cw_n = sw_n * colsum_n.
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_rows_op(const at::Tensor& x_) {
    const char* what = "attnlab::" ATTNLAB_INT8_OP "_quantize_rows";
    TORCH_CHECK(x_.dim() >= 1, what, ": x must have at least one dimension");
    const at::Tensor x = attnlab_ops::dense(x_, at::kFloat, what);
    const int64_t K = x.size(-1), M = attnlab_ops::rows_of(x);
    at::Tensor q = at::detail::empty_cpu(x.sizes(), at::kByte, false, std::nullopt);
    at::Tensor scale = at::detail::empty_cpu({M}, at::kFloat, false, std::nullopt);
    at::Tensor zero = at::detail::empty_cpu({M}, at::kInt, false, std::nullopt);
    const float* xp = x.data_ptr<float>();
    uint8_t* qp = q.data_ptr<uint8_t>();
    float* sp = scale.data_ptr<float>();
    int32_t* zp = zero.data_ptr<int32_t>();
    at::parallel_for(0, M, 16, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) quantize_row(xp + m * K, K, K, qp + m * K, sp + m, zp + m);
    });
    return {q, scale, zero};
}

void finish_rows_op(const at::Tensor& out, const at::Tensor& scale_, const at::Tensor& zero_, const at::Tensor& cw_,
                          const std::optional<at::Tensor>& bias_, int64_t act) {
    const char* what = "attnlab::" ATTNLAB_INT8_OP "_finish_rows";
    TORCH_CHECK(out.dim() >= 1 && out.is_contiguous() && out.scalar_type() == at::kFloat && out.device().is_cpu(),
                what, ": out must be a contiguous float32 CPU tensor, got ", out.scalar_type(), " ", out.sizes());
    const int64_t N = out.size(-1), M = attnlab_ops::rows_of(out);
    TORCH_CHECK(scale_.numel() == M && zero_.numel() == M, what, ": expected ", M, " row scales and zero points");
    const at::Tensor scale = attnlab_ops::dense(scale_, at::kFloat, what);
    const at::Tensor zero = attnlab_ops::dense(zero_, at::kInt, what);
    const at::Tensor cw = attnlab_ops::vector_or_none(cw_, N, at::kFloat, what);
    TORCH_CHECK(cw.defined(), what, ": cw is required");
    const at::Tensor bias = attnlab_ops::vector_or_none(bias_, N, at::kFloat, what);
    TORCH_CHECK(act == 0 || act == 1, what, ": act must be 0 or 1 (GELU), got ", act);
    float* y = out.data_ptr<float>();
    const float* s = scale.data_ptr<float>();
    const int32_t* z = zero.data_ptr<int32_t>();
    const float* c = cw.data_ptr<float>();
    const float* b = attnlab_ops::ptr_or_null<float>(bias);
    at::parallel_for(0, M, 8, [&](int64_t m0, int64_t m1) {
        for (int64_t m = m0; m < m1; ++m) {
            float* row = y + m * N;
            const __m256 vs = _mm256_set1_ps(s[m]), vsz = _mm256_set1_ps(-s[m] * static_cast<float>(z[m]));
            int64_t n = 0;
            for (; n < N; n += 8) {
                const int64_t width = N - n < 8 ? N - n : 8;
                alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tc[8] = {0, 0, 0, 0, 0, 0, 0, 0},
                                  tb[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                __m256 v, vc, vb = _mm256_setzero_ps();
                if (width == 8) {
                    v = _mm256_loadu_ps(row + n);
                    vc = _mm256_loadu_ps(c + n);
                    if (b != nullptr) vb = _mm256_loadu_ps(b + n);
                } else {
                    for (int64_t j = 0; j < width; ++j) {
                        t[j] = row[n + j];
                        tc[j] = c[n + j];
                        tb[j] = b != nullptr ? b[n + j] : 0.f;
                    }
                    v = _mm256_load_ps(t);
                    vc = _mm256_load_ps(tc);
                    vb = _mm256_load_ps(tb);
                }
                const __m256 r = _mm256_fmadd_ps(vsz, vc, _mm256_fmadd_ps(v, vs, vb));
                attnlab_epilogue::finish(row + n, r, width, static_cast<int>(act));
            }
        }
    });
}

// Bumped with any change of the ops' meaning; int8_gemm.py refuses a library that disagrees.
int64_t int8_gemm_version() { return 3; }

}  // namespace

TORCH_LIBRARY_FRAGMENT(attnlab, m) {  // a fragment: few_row_gemm.cpp's library adds its ops to the namespace
    m.def(ATTNLAB_INT8_OP "(Tensor x, Tensor panels, Tensor colsum, Tensor scale, Tensor? bias, int n, int act) -> Tensor");
    m.def(ATTNLAB_INT8_OP "_version() -> int", &int8_gemm_version);
    m.def(ATTNLAB_INT8_OP "_quantize_rows(Tensor x) -> (Tensor, Tensor, Tensor)");
    m.def(ATTNLAB_INT8_OP "_finish_rows(Tensor(a!) out, Tensor scale, Tensor zero, Tensor cw, Tensor? bias, int act) -> ()");
}

TORCH_LIBRARY_IMPL(attnlab, CPU, m) {
    m.impl(ATTNLAB_INT8_OP, &int8_gemm_op);
    m.impl(ATTNLAB_INT8_OP "_quantize_rows", &quantize_rows_op);
    m.impl(ATTNLAB_INT8_OP "_finish_rows", &finish_rows_op);
}
