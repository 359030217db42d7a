// What the kernels' custom ops (few_row_gemm.cpp, int8_gemm.cpp) share: the checks of the tensors the kernels
// read through raw pointers (a wrong size or type would read outside them), and the output's allocation.
// The ops are called from Python through torch.ops.attnlab (attnlab/accel/few_row_gemm.py, int8_gemm.py).
#pragma once
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace attnlab_ops {

// t as a kernel reads it: `dtype` on the CPU, contiguous (a copy where it is not). The dispatcher has already
// materialised a negated or zero tensor's values (its Negative and ZeroTensor fallbacks).
inline at::Tensor dense(const at::Tensor& t, c10::ScalarType dtype, const char* what) {
    TORCH_CHECK(t.scalar_type() == dtype && t.device().is_cpu(), what, ": expected a CPU ", c10::toString(dtype),
                " tensor, got ", t.scalar_type(), " on ", t.device());
    return t.contiguous();
}

// The optional `t` dense, of shape (n,), or an undefined tensor.
inline at::Tensor vector_or_none(const std::optional<at::Tensor>& t, int64_t n, c10::ScalarType dtype,
                                 const char* what) {
    if (!t.has_value() || !t->defined()) return at::Tensor();
    TORCH_CHECK(t->dim() == 1 && t->size(0) == n, what, ": expected (", n, ",), got ", t->sizes());
    return dense(*t, dtype, what);
}

template <class T>
inline const T* ptr_or_null(const at::Tensor& t) {
    return t.defined() ? t.data_ptr<T>() : nullptr;
}

// The rows of x (..., K): its leading dimensions' product (counted without x's elements: K may be 0).
inline int64_t rows_of(const at::Tensor& x) {
    int64_t rows = 1;
    for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
    return rows;
}

// An uninitialised float32 CPU tensor of x's leading dimensions and n columns.
inline at::Tensor output_for(const at::Tensor& x, int64_t n) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = n;
    return at::detail::empty_cpu(shape, at::kFloat, /*pin_memory=*/false, /*memory_format=*/std::nullopt);
}

}  // namespace attnlab_ops
