// Division by a run-time divisor with a multiply and a shift (round-up method), for the per-group
// index math of memory-bound kernels, where a 32- or 64-bit division would cost more than the work.
// Valid for dividends below 2^31; launchers check that bound.
#pragma once

#include <cstdint>

namespace fp8ops {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 1;
  uint32_t shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(uint32_t d) : divisor(d) {
    while ((1ull << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>(((1ull << 32) * ((1ull << shift) - d)) / d + 1);
  }

  __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, multiplier) + n) >> shift; }
};

}  // namespace fp8ops
