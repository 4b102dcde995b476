// The PyTorch side shared by every op: stable-ABI tensor helpers, argument checks and the output
// allocation through PyTorch's allocator (the caching allocator on CUDA).
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// torch 2.11's stable headers have only the header-only TORCH_ERROR_CODE_CHECK; later releases add
// this variant, which also carries torch's error message. Both throw on a failed shim call.
#ifndef STABLE_TORCH_ERROR_CODE_CHECK
#define STABLE_TORCH_ERROR_CODE_CHECK(call) TORCH_ERROR_CODE_CHECK(call)
#endif

namespace fp8ops {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;

template <typename... Args>
std::string message(const Args&... args) {
  std::ostringstream oss;
  (oss << ... << args);
  return oss.str();
}

// Raises a RuntimeError whose text is the fp8ops message alone (no C++ function or source path);
// fp8ops/_checks.py raises the same texts from the fake kernels.
#define FP8OPS_CHECK(cond, ...)                                                        \
  do {                                                                                 \
    if (!(cond)) throw std::runtime_error(::fp8ops::message("fp8ops: ", __VA_ARGS__)); \
  } while (0)

inline int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }
inline int64_t ceil_div(int64_t n, int64_t a) { return (n + a - 1) / a; }

// Row counts and scale-group counts that the kernels index with 31 bits.
constexpr int64_t kMaxRows = int64_t(1) << 31;

// align(n, a) for 0 <= n and 1 <= a, or -1 when it is kMaxRows or more (so never overflows).
inline int64_t align_rows(int64_t n, int64_t a) {
  if (n >= kMaxRows || a >= kMaxRows) return n == 0 ? 0 : -1;
  const int64_t r = align_up(n, a);
  return r >= kMaxRows ? -1 : r;
}

const char* dtype_name(ScalarType t);
int32_t aoti_dtype(ScalarType t);

// A fresh tensor of `sizes` and `strides` on `like`'s device, backed by a storage of exactly
// `storage_numel` elements (so a padded layout owns its padding).
Tensor new_strided(const Tensor& like, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                   int64_t storage_numel, ScalarType dtype);

// Contiguous tensor of `sizes`.
Tensor new_contiguous(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype);

// Kernels index groups and packed words with 31-bit integers.
constexpr int64_t kMaxWorkItems = int64_t(1) << 31;

// Whether a * b * c < kMaxWorkItems, for non-negative factors, without overflowing.
bool below_work_limit(int64_t a, int64_t b, int64_t c = 1);

// Row stride of x viewed as [-1, K]; fails (naming op) where that view would fail.
int64_t flattened_row_stride(const char* op, const Tensor& x);

// The product of x's leading dims (the rows of x viewed as [-1, K]).
int64_t leading_rows(const Tensor& x);

// Argument checks shared by the ops: each names the op and the argument.
void check_float_input(const char* op, const char* arg, const Tensor& t, bool allow_fp32);
void check_eps(const char* op, double eps);
void check_group_size(const char* op, int64_t group_size);
void check_same_device(const char* op, const char* arg_a, const Tensor& a, const char* arg_b, const Tensor& b);

}  // namespace fp8ops
