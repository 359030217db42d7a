// The order in which the kernels (few_row_gemm.cpp, int8_gemm.cpp) visit an output of many rows: blocks of rows
// that stay in L1/L2 while the panel pairs pass over them, in tiles of 6 rows by 2 panels (12 accumulators).
#pragma once
#include <cstdint>
#include <type_traits>

namespace attnlab_blocking {

template <int N>
using Const = std::integral_constant<int, N>;

// Rows [m0, m1) against NP panels from p: full(m, p, np) per 6 rows, then part(rows, m, p, np) for the
// remaining 1-5 (np a Const<1 or 2>, known at compile time).
template <int NP, class Full, class Part>
void rows_of(int64_t m0, int64_t m1, int64_t p, Full& full, Part& part) {
    int64_t m = m0;
    for (; m + 6 <= m1; m += 6) full(m, p, Const<NP>{});
    if (m < m1) part(m1 - m, m, p, Const<NP>{});
}

// Rows [r0, r1) against panels [pb, pe): blocks of `block` rows; in each, the panel pairs, then an odd last
// panel, each over the block's rows (rows_of).
template <class Full, class Part>
void blocked(int64_t r0, int64_t r1, int64_t pb, int64_t pe, int64_t block, Full full, Part part) {
    for (int64_t m0 = r0; m0 < r1; m0 += block) {
        const int64_t m1 = m0 + block < r1 ? m0 + block : r1;
        int64_t p = pb;
        for (; p + 2 <= pe; p += 2) rows_of<2>(m0, m1, p, full, part);
        if (p < pe) rows_of<1>(m0, m1, p, full, part);
    }
}

// Rows per block for a row of `bytes`: about `budget` bytes of them, a multiple of 6, at least 6.
inline int64_t block_rows(int64_t bytes, int64_t budget) {
    const int64_t rows = (budget / (bytes > 0 ? bytes : 1)) / 6 * 6;
    return rows < 6 ? 6 : rows;
}

}  // namespace attnlab_blocking
