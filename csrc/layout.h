// The scale-layout contract of SPEC sections 2, 3 and 6, computed in one place for every backend.
// fp8ops/_layout.py is its Python twin (used by the fake kernels); tests hold the two equal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace fp8ops {

enum class ScaleLayout { kRow, kCol, kColTma, kColTmaPacked };

ScaleLayout parse_scale_layout(const char* op, const std::string& name);

// The arguments every row quantizer shares (per_token_group_quant, silu_mul_quant, rms_norm_quant),
// checked in this order: group_size, scale_layout (parsed and returned), pad_rows_to, eps.
ScaleLayout check_row_quant_args(const char* op, int64_t group_size, const std::string& scale_layout,
                                 int64_t pad_rows_to, double eps);

// Sizes, strides and storage of one scale tensor, and the rows the kernel writes.
struct ScaleGeometry {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_numel;
  ScalarType dtype;     // Float, or Int for packed UE8M0
  int64_t rows_padded;  // rows of the MN-major storage that are written (data then zero padding)
};

// per_token_group_quant: logical [Mp, S] (or [Mp, ceil(S/4)] packed), Mp = align(M, pad_rows_to).
ScaleGeometry per_token_scale_geometry(int64_t M, int64_t S, ScaleLayout layout, int64_t pad_rows_to);

// per_token_scale_geometry after checking (naming op) that the padded row count and the scale
// groups fit the kernels' 31-bit indices.
ScaleGeometry checked_per_token_scale_geometry(const char* op, int64_t M, int64_t S, ScaleLayout layout,
                                               int64_t pad_rows_to);

// group_major_quant: logical [T, G, S] strides (1, S*Ta, Ta), or [T, G, P] int32 when packed.
ScaleGeometry group_major_scale_geometry(int64_t T, int64_t G, int64_t S, bool packed);

// silu_mul_quant's masked mode: [E, Mmax, S] (row: strides (Mmax*S, S, 1); col_tma: (S*Ma, 1, Ma))
// or packed int32 [E, Mmax, P] strides (P*Ma, 1, Ma). `col` is not offered (the caller checks).
ScaleGeometry masked_scale_geometry(int64_t E, int64_t Mmax, int64_t S, ScaleLayout layout);

// pack_ue8m0: [M, P] strides (1, Ma), or [B, M, P] strides (P*Ma, 1, Ma).
ScaleGeometry packed_scale_geometry(int64_t B, int64_t M, int64_t S, bool batched);

}  // namespace fp8ops
