// What the kernels (few_row_gemm.cpp, int8_gemm.cpp) do with 8 finished outputs: the optional activation and
// the store of a possibly partial panel.
//
// GELU(x) = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) on 8 floats: applied to each output while it is still in
// a register saves a pass over the (T, 4H) feed-forward activations. exp_nonpositive also serves the
// attention's softmax (few_row_gemm.cpp).
//
// erf: Abramowitz and Stegun, Handbook of Mathematical Functions, formula 7.1.26 (|error| <= 1.5e-7):
//   erf(u) = 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-u^2),  t = 1 / (1 + p u),  u >= 0,
// odd in u. exp(y) for y in [-87, 0]: y = n ln 2 + r with |r| <= ln 2 / 2, exp(r) by its Taylor series to r^6
// (relative error < 2e-7 there), times 2^n built in the exponent bits. So |GELU error| <= ~2e-7 (1 + |x|):
// not bit for bit PyTorch's (another erf), within float32 rounding of the exact function for |x| <~ 1.
#pragma once
#include <immintrin.h>
#include <cstdint>

namespace attnlab_epilogue {

inline __m256 exp_nonpositive(__m256 y) {  // exp(y), y <= 0; 0 below -87 (where float32's exp is < 1.7e-38)
    const __m256 live = _mm256_cmp_ps(y, _mm256_set1_ps(-87.f), _CMP_GE_OQ);
    y = _mm256_max_ps(y, _mm256_set1_ps(-87.f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(y, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), y);  // ln 2 in two parts: exact n * hi
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.f / 720.f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), live);
}

inline __m256 gelu(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));  // x / sqrt(2)
    const __m256 a = _mm256_andnot_ps(sign, u);                                   // |u|
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), a,
                                                                        _mm256_set1_ps(1.f)));
    __m256 poly = _mm256_set1_ps(1.061405429f);
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-1.453152027f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
    poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
    poly = _mm256_mul_ps(poly, t);
    // 1 - erf(|u|) = poly exp(-u^2): for x < 0, 1 + erf(u) is that directly (no cancellation)
    const __m256 tail = _mm256_mul_ps(poly, exp_nonpositive(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)));
    const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 one_plus_erf = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.f), tail), tail, negative);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_plus_erf);
}

// r (+ GELU where act is 1) into y[0 .. width), width <= 8 (the last panel may hold fewer columns).
inline void finish(float* y, __m256 r, int64_t width, int act) {
    if (act == 1) r = gelu(r);
    if (width == 8) {
        _mm256_storeu_ps(y, r);
    } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, r);
        for (int64_t j = 0; j < width; ++j) y[j] = t[j];
    }
}

}  // namespace attnlab_epilogue
