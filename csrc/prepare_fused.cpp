// Preparation of the fused ops (silu_mul_quant, rms_norm_quant) and block_quant: checks, output
// allocation and kernel parameters, shared by the CPU and CUDA backends.
#include <array>
#include <limits>

#include "fp8ops/rms_norm_quant_launch.h"
#include "layout.h"
#include "ops.h"

namespace fp8ops {
namespace {

// Where a row kernel writes: q rows of D codes (q_rows per expert), scales with strides
// (expert, row, group or packed word) in words.
RowQuantOut row_out(Tensor& q, Tensor& scale, int64_t q_rows, const std::array<int64_t, 3>& strides, int64_t D,
                    int64_t group_size, double eps, ScaleLayout layout, bool ue8m0) {
  RowQuantOut o{};
  o.q = static_cast<uint8_t*>(q.mutable_data_ptr());
  o.q_rows = q_rows;
  o.scale = scale.mutable_data_ptr();
  o.s_stride_e = strides[0];
  o.s_stride_t = strides[1];
  o.s_stride_s = strides[2];
  o.D = D;
  o.group_size = static_cast<int32_t>(group_size);
  o.S = static_cast<int32_t>(D / group_size);
  o.eps = static_cast<float>(eps);
  o.packed = layout == ScaleLayout::kColTmaPacked;
  o.ue8m0 = ue8m0 || o.packed;
  return o;
}

// The per-token output of M rows of D codes (flat silu_mul_quant, rms_norm_quant): q [Mp, D]
// and the scale in `layout`, with the kernels' row counts.
struct FlatOut {
  Tensor q, scale;
  RowQuantOut out;
  int64_t T_q, T_s;
};

FlatOut flat_out(const char* op, const Tensor& like, int64_t M, int64_t D, int64_t group_size, ScaleLayout layout,
                 bool ue8m0, int64_t pad_rows_to, double eps) {
  const ScaleGeometry geo = checked_per_token_scale_geometry(op, M, D / group_size, layout, pad_rows_to);
  const int64_t Mp = geo.sizes[0];
  FlatOut f{new_contiguous(like, {Mp, D}, ScalarType::Float8_e4m3fn),
            new_strided(like, geo.sizes, geo.strides, geo.storage_numel, geo.dtype),
            {},
            Mp,
            geo.rows_padded};
  f.out = row_out(f.q, f.scale, Mp, {0, geo.strides[0], geo.strides[1]}, D, group_size, eps, layout, ue8m0);
  return f;
}

}  // namespace

PreparedSiluMulQuant prepare_silu_mul_quant(const Tensor& x, int64_t group_size, const std::string& scale_layout,
                                            bool ue8m0, int64_t pad_rows_to, double eps,
                                            const std::optional<Tensor>& masked_m) {
  const char* op = "silu_mul_quant";
  check_float_input(op, "x", x, /*allow_fp32=*/true);
  const bool masked = masked_m.has_value();
  if (masked) {
    FP8OPS_CHECK(x.dim() == 3, op, ": with masked_m, x must be 3-D [E, Mmax, 2H], got ", x.dim(), " dims");
  } else {
    FP8OPS_CHECK(x.dim() >= 2, op, ": x must have at least 2 dims ([M, 2H] or [..., 2H]), got ", x.dim());
  }
  const ScaleLayout layout = check_row_quant_args(op, group_size, scale_layout, pad_rows_to, eps);
  const int64_t K2 = x.size(x.dim() - 1);
  FP8OPS_CHECK(K2 % (2 * group_size) == 0, op, ": x.size(-1) / 2 (H, the gate and up widths) must be a multiple of ",
               "group_size (", group_size, "); x.size(-1) = ", K2);
  FP8OPS_CHECK(K2 == 0 || x.stride(x.dim() - 1) == 1, op, ": x's last dim must be contiguous (stride 1), got stride ",
               x.stride(x.dim() - 1));
  const int64_t H = K2 / 2, S = H / group_size;

  PreparedSiluMulQuant prep{};
  prep.dtype = x.scalar_type();
  SiluMulQuantParams& p = prep.params;
  p.x = x.const_data_ptr();
  p.H = H;
  if (!masked) {
    const int64_t M = leading_rows(x);
    p.x_stride_t = flattened_row_stride(op, x);
    FlatOut f = flat_out(op, x, M, H, group_size, layout, ue8m0, pad_rows_to, eps);
    prep.q = f.q;
    prep.scale = f.scale;
    p.out = f.out;
    p.x_stride_e = 0;
    p.masked_m = nullptr;
    p.E = 1;
    p.T = M;
    p.T_q = f.T_q;
    p.T_s = f.T_s;
    return prep;
  }
  const Tensor& m = *masked_m;
  FP8OPS_CHECK(m.scalar_type() == ScalarType::Int, op, ": masked_m must be int32, got ", dtype_name(m.scalar_type()));
  const int64_t E = x.size(0), Mmax = x.size(1);
  FP8OPS_CHECK(m.dim() == 1 && m.size(0) == E, op, ": masked_m must be [E] = [", E, "]");
  check_same_device(op, "x", x, "masked_m", m);
  FP8OPS_CHECK(m.stride(0) == 1 || E <= 1, op, ": masked_m must be contiguous");
  FP8OPS_CHECK(pad_rows_to == 1, op, ": pad_rows_to must be 1 with masked_m, got ", pad_rows_to);
  FP8OPS_CHECK(layout != ScaleLayout::kCol, op,
               ": scale_layout 'col' is not offered with masked_m (use 'row', 'col_tma' or 'col_tma_packed')");
  FP8OPS_CHECK(E <= 1024, op, ": with masked_m, at most 1024 experts are supported, got ", E);
  FP8OPS_CHECK(below_work_limit(E, align_up(Mmax, 4), S), op,
               ": x has too many scale groups; at most 2^31 - 1 (E * align(Mmax, 4) * H / group_size) are supported");
  const ScaleGeometry geo = masked_scale_geometry(E, Mmax, S, layout);
  prep.q = new_contiguous(x, {E, Mmax, H}, ScalarType::Float8_e4m3fn);
  prep.scale = new_strided(x, geo.sizes, geo.strides, geo.storage_numel, geo.dtype);
  p.x_stride_e = x.stride(0);
  p.x_stride_t = x.stride(1);
  p.masked_m = static_cast<const int32_t*>(m.const_data_ptr());
  p.E = E;
  p.T = p.T_q = p.T_s = Mmax;
  p.out = row_out(prep.q, prep.scale, Mmax, {geo.strides[0], geo.strides[1], geo.strides[2]}, H, group_size, eps,
                  layout, ue8m0);
  return prep;
}

PreparedRmsNormQuant prepare_rms_norm_quant(const Tensor& x, const Tensor& weight, double norm_eps,
                                            const std::optional<Tensor>& residual, int64_t group_size,
                                            const std::string& scale_layout, bool ue8m0, int64_t pad_rows_to,
                                            double eps) {
  const char* op = "rms_norm_quant";
  check_float_input(op, "x", x, /*allow_fp32=*/true);
  FP8OPS_CHECK(x.dim() >= 2, op, ": x must have at least 2 dims ([M, D] or [..., D]), got ", x.dim());
  const int64_t D = x.size(x.dim() - 1);
  FP8OPS_CHECK(weight.scalar_type() == x.scalar_type(), op, ": weight must have x's dtype (",
               dtype_name(x.scalar_type()), "), got ", dtype_name(weight.scalar_type()));
  FP8OPS_CHECK(weight.dim() == 1 && weight.size(0) == D, op, ": weight must be [D] = [", D, "]");
  FP8OPS_CHECK(D <= 1 || weight.stride(0) == 1, op, ": weight must be contiguous");
  check_same_device(op, "x", x, "weight", weight);
  if (residual.has_value()) {
    const Tensor& r = *residual;
    FP8OPS_CHECK(r.scalar_type() == x.scalar_type(), op, ": residual must have x's dtype (",
                 dtype_name(x.scalar_type()), "), got ", dtype_name(r.scalar_type()));
    bool same_shape = r.dim() == x.dim();
    for (int64_t d = 0; same_shape && d < x.dim(); ++d) same_shape = r.size(d) == x.size(d);
    FP8OPS_CHECK(same_shape, op, ": residual must have x's shape");
    check_same_device(op, "x", x, "residual", r);
    FP8OPS_CHECK(D == 0 || r.stride(r.dim() - 1) == 1, op,
                 ": residual's last dim must be contiguous (stride 1), got stride ", r.stride(r.dim() - 1));
  }
  FP8OPS_CHECK(
      std::isfinite(norm_eps) && norm_eps >= 0.0 && norm_eps <= static_cast<double>(std::numeric_limits<float>::max()),
      op, ": norm_eps must be finite, >= 0 and representable in float32, got ", norm_eps);
  const ScaleLayout layout = check_row_quant_args(op, group_size, scale_layout, pad_rows_to, eps);
  FP8OPS_CHECK(D % group_size == 0, op, ": x.size(-1) (D = ", D, ") must be a multiple of group_size (", group_size,
               ")");
  FP8OPS_CHECK(D <= kRmsMaxD, op, ": x.size(-1) (D = ", D, ") must be at most ", kRmsMaxD);
  FP8OPS_CHECK(D == 0 || x.stride(x.dim() - 1) == 1, op, ": x's last dim must be contiguous (stride 1), got stride ",
               x.stride(x.dim() - 1));
  const int64_t M = leading_rows(x);
  PreparedRmsNormQuant prep{};
  prep.dtype = x.scalar_type();
  RmsNormQuantParams& p = prep.params;
  p.x = x.const_data_ptr();
  p.x_stride = flattened_row_stride(op, x);
  p.residual = nullptr;
  p.r_stride = 0;
  if (residual.has_value()) {
    p.r_stride = flattened_row_stride(op, *residual);
    p.residual = residual->mutable_data_ptr();
  }
  FlatOut f = flat_out(op, x, M, D, group_size, layout, ue8m0, pad_rows_to, eps);
  prep.q = f.q;
  prep.scale = f.scale;
  p.out = f.out;
  p.weight = weight.const_data_ptr();
  p.norm_eps = static_cast<float>(norm_eps);
  p.D_f = static_cast<float>(D);
  p.D_recip = rms_divisor_reciprocal(D);
  p.T = M;
  p.T_q = f.T_q;
  p.T_s = f.T_s;
  return prep;
}

PreparedBlockQuant prepare_block_quant(const Tensor& w, int64_t block_n, int64_t block_k, bool ue8m0, double eps) {
  const char* op = "block_quant";
  check_float_input(op, "w", w, /*allow_fp32=*/true);
  FP8OPS_CHECK(w.dim() == 2 || w.dim() == 3, op, ": w must be 2-D [N, K] or 3-D [E, N, K], got ", w.dim(), " dims");
  FP8OPS_CHECK(block_n == kBlockQuantTile && block_k == kBlockQuantTile, op,
               ": block_n and block_k must be 128 (128 x 128 blocks), got ", block_n, " x ", block_k);
  check_eps(op, eps);
  const bool batched = w.dim() == 3;
  const int64_t E = batched ? w.size(0) : 1, N = w.size(w.dim() - 2), K = w.size(w.dim() - 1);
  FP8OPS_CHECK(K <= 1 || w.stride(w.dim() - 1) == 1, op, ": w's last dim must be contiguous (stride 1), got stride ",
               w.stride(w.dim() - 1));
  const int64_t NB = ceil_div(N, kBlockQuantTile), KB = ceil_div(K, kBlockQuantTile);
  FP8OPS_CHECK(E <= 65535 && NB <= 65535, op, ": w has too many blocks: at most 65535 experts and 65535 row blocks");
  std::vector<int64_t> qs, ss;
  if (batched) qs.push_back(E), ss.push_back(E);
  qs.push_back(N), qs.push_back(K);
  ss.push_back(NB), ss.push_back(KB);
  PreparedBlockQuant prep{
      new_contiguous(w, qs, ScalarType::Float8_e4m3fn), new_contiguous(w, ss, ScalarType::Float), {}, w.scalar_type()};
  BlockQuantParams& p = prep.params;
  p.w = w.const_data_ptr();
  p.w_stride_e = batched ? w.stride(0) : 0;
  p.w_stride_n = w.stride(w.dim() - 2);
  p.q = static_cast<uint8_t*>(prep.q.mutable_data_ptr());
  p.scale = static_cast<float*>(prep.scale.mutable_data_ptr());
  p.E = E;
  p.N = N;
  p.K = K;
  p.NB = NB;
  p.KB = KB;
  p.eps = static_cast<float>(eps);
  p.ue8m0 = ue8m0;
  return prep;
}

}  // namespace fp8ops
