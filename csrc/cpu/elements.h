// Element access of the CPU reference kernels: bf16, fp16 or fp32 values read as floats, and floats
// written back rounded to nearest even with NaN as the canonical quiet NaN (as the CUDA kernels
// write it).
#pragma once

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace fp8ops {

template <typename T>
float load_float(const void* base, int64_t i) {
  return static_cast<float>(static_cast<const T*>(base)[i]);
}

template <typename T>
void store_elem(void* base, int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>) {
    static_cast<float*>(base)[i] = v;
  } else {
    const uint16_t nan = std::is_same_v<T, c10::BFloat16> ? 0x7FC0 : 0x7E00;
    const uint16_t bits = v != v ? nan : T(v).x;
    std::memcpy(static_cast<uint16_t*>(base) + i, &bits, 2);
  }
}

// v rounded to T (identity for fp32; NaN stays NaN).
template <typename T>
float round_to(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return v != v ? v : static_cast<float>(T(v));
  }
}

}  // namespace fp8ops
