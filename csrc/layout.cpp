#include "layout.h"

namespace fp8ops {

ScaleLayout parse_scale_layout(const char* op, const std::string& name) {
  if (name == "row") return ScaleLayout::kRow;
  if (name == "col") return ScaleLayout::kCol;
  if (name == "col_tma") return ScaleLayout::kColTma;
  if (name == "col_tma_packed") return ScaleLayout::kColTmaPacked;
  FP8OPS_CHECK(false, op, ": scale_layout must be one of 'row', 'col', 'col_tma', 'col_tma_packed', got '", name, "'");
  return ScaleLayout::kRow;
}

ScaleLayout check_row_quant_args(const char* op, int64_t group_size, const std::string& scale_layout,
                                 int64_t pad_rows_to, double eps) {
  check_group_size(op, group_size);
  const ScaleLayout layout = parse_scale_layout(op, scale_layout);
  FP8OPS_CHECK(pad_rows_to >= 1, op, ": pad_rows_to must be >= 1, got ", pad_rows_to);
  check_eps(op, eps);
  return layout;
}

ScaleGeometry per_token_scale_geometry(int64_t M, int64_t S, ScaleLayout layout, int64_t pad_rows_to) {
  const int64_t Mp = align_up(M, pad_rows_to);
  switch (layout) {
    case ScaleLayout::kRow: return {{Mp, S}, {S, 1}, Mp * S, ScalarType::Float, Mp};
    case ScaleLayout::kCol: return {{Mp, S}, {1, Mp}, Mp * S, ScalarType::Float, Mp};
    case ScaleLayout::kColTma: {
      const int64_t Ma = align_up(Mp, 4);
      return {{Mp, S}, {1, Ma}, Ma * S, ScalarType::Float, Ma};
    }
    case ScaleLayout::kColTmaPacked: {
      const int64_t Ma = align_up(Mp, 4), P = ceil_div(S, 4);
      return {{Mp, P}, {1, Ma}, Ma * P, ScalarType::Int, Ma};
    }
  }
  return {};
}

ScaleGeometry group_major_scale_geometry(int64_t T, int64_t G, int64_t S, bool packed) {
  const int64_t Ta = align_up(T, 4), C = packed ? ceil_div(S, 4) : S;
  return {{T, G, C}, {1, C * Ta, Ta}, G * C * Ta, packed ? ScalarType::Int : ScalarType::Float, Ta};
}

ScaleGeometry masked_scale_geometry(int64_t E, int64_t Mmax, int64_t S, ScaleLayout layout) {
  const int64_t Ma = align_up(Mmax, 4);
  if (layout == ScaleLayout::kRow) return {{E, Mmax, S}, {Mmax * S, S, 1}, E * Mmax * S, ScalarType::Float, Mmax};
  const bool packed = layout == ScaleLayout::kColTmaPacked;
  const int64_t C = packed ? ceil_div(S, 4) : S;
  return {{E, Mmax, C}, {C * Ma, 1, Ma}, E * C * Ma, packed ? ScalarType::Int : ScalarType::Float, Ma};
}

ScaleGeometry packed_scale_geometry(int64_t B, int64_t M, int64_t S, bool batched) {
  const int64_t Ma = align_up(M, 4), P = ceil_div(S, 4);
  if (!batched) return {{M, P}, {1, Ma}, Ma * P, ScalarType::Int, Ma};
  return {{B, M, P}, {P * Ma, 1, Ma}, B * P * Ma, ScalarType::Int, Ma};
}

}  // namespace fp8ops
