#include <limits>

#include "layout.h"
#include "ops.h"

namespace fp8ops {

bool below_work_limit(int64_t a, int64_t b, int64_t c) {
  if (a == 0 || b == 0 || c == 0) return true;
  return a < kMaxWorkItems && b < kMaxWorkItems / a && c < kMaxWorkItems / (a * b);
}

// Row stride of x viewed as [-1, K]; fails where that view would fail.
int64_t flattened_row_stride(const char* op, const Tensor& x) {
  const int64_t n = x.dim();
  int64_t row_stride = x.size(n - 1);
  int64_t inner = -1;  // innermost leading dim of size != 1 seen so far
  for (int64_t d = n - 2; d >= 0; --d) {
    if (x.size(d) == 0) return row_stride;  // empty: no row is read
    if (x.size(d) == 1) continue;
    if (inner < 0) {
      row_stride = x.stride(d);
    } else {
      FP8OPS_CHECK(x.stride(d) == x.stride(inner) * x.size(inner), op,
                   ": x's leading dims must be viewable as one dim (x.view(-1, K) fails for these strides); "
                   "call .contiguous() or reshape first");
    }
    inner = d;
  }
  return row_stride;
}

int64_t leading_rows(const Tensor& x) {
  int64_t M = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) M *= x.size(d);
  return M;
}

ScaleGeometry checked_per_token_scale_geometry(const char* op, int64_t M, int64_t S, ScaleLayout layout,
                                               int64_t pad_rows_to) {
  FP8OPS_CHECK(align_rows(M, pad_rows_to) >= 0, op, ": the padded row count align(M, pad_rows_to) = align(", M, ", ",
               pad_rows_to, ") must be below 2^31");
  ScaleGeometry geo = per_token_scale_geometry(M, S, layout, pad_rows_to);
  FP8OPS_CHECK(below_work_limit(geo.rows_padded, S), op,
               ": x has too many scale groups; at most 2^31 - 1 (padded rows times K / group_size) are supported");
  return geo;
}

PreparedGroupQuant prepare_per_token_group_quant(const Tensor& x, int64_t group_size, const std::string& scale_layout,
                                                 bool ue8m0, int64_t pad_rows_to, double eps) {
  const char* op = "per_token_group_quant";
  check_float_input(op, "x", x, /*allow_fp32=*/true);
  FP8OPS_CHECK(x.dim() >= 2, op, ": x must have at least 2 dims ([M, K] or [..., K]), got ", x.dim());
  const ScaleLayout layout = check_row_quant_args(op, group_size, scale_layout, pad_rows_to, eps);
  const int64_t K = x.size(x.dim() - 1);
  FP8OPS_CHECK(K % group_size == 0, op, ": x.size(-1) (K = ", K, ") must be a multiple of group_size (", group_size,
               ")");
  FP8OPS_CHECK(K == 0 || x.stride(x.dim() - 1) == 1, op, ": x's last dim must be contiguous (stride 1), got stride ",
               x.stride(x.dim() - 1));
  const int64_t M = leading_rows(x);
  const int64_t row_stride = flattened_row_stride(op, x);
  const int64_t S = K / group_size;
  const ScaleGeometry geo = checked_per_token_scale_geometry(op, M, S, layout, pad_rows_to);
  const int64_t Mp = geo.sizes[0];

  PreparedGroupQuant prep{new_contiguous(x, {Mp, K}, ScalarType::Float8_e4m3fn),
                          new_strided(x, geo.sizes, geo.strides, geo.storage_numel, geo.dtype),
                          {},
                          x.scalar_type()};
  GroupQuantParams& p = prep.params;
  p.x = x.const_data_ptr();
  p.x_stride_t = row_stride;
  p.x_stride_g = 0;
  p.q = static_cast<uint8_t*>(prep.q.mutable_data_ptr());
  p.scale = prep.scale.mutable_data_ptr();
  p.s_stride_t = geo.strides[0];
  p.s_stride_g = 0;
  p.s_stride_s = geo.strides[1];
  p.T = M;
  p.G = 1;
  p.D = K;
  p.T_q = Mp;
  p.T_s = geo.rows_padded;
  p.group_size = static_cast<int32_t>(group_size);
  p.S = static_cast<int32_t>(S);
  p.eps = static_cast<float>(eps);
  p.packed = layout == ScaleLayout::kColTmaPacked;
  p.ue8m0 = ue8m0 || p.packed;
  return prep;
}

PreparedGroupQuant prepare_group_major_quant(const Tensor& x, bool ue8m0, bool packed, double eps) {
  const char* op = "group_major_quant";
  check_float_input(op, "x", x, /*allow_fp32=*/true);
  FP8OPS_CHECK(x.dim() == 3, op, ": x must be 3-D [T, G, D], got ", x.dim(), " dims");
  check_eps(op, eps);
  const int64_t T = x.size(0), G = x.size(1), D = x.size(2);
  constexpr int64_t kGroup = 128;
  FP8OPS_CHECK(D % kGroup == 0, op, ": x.size(2) (D = ", D, ") must be a multiple of 128");
  FP8OPS_CHECK(D == 0 || x.stride(2) == 1, op, ": x's last dim must be contiguous (stride 1), got stride ",
               x.stride(2));
  const int64_t S = D / kGroup;
  FP8OPS_CHECK(below_work_limit(align_up(T, 4), G, S), op,
               ": x has too many scale groups; at most 2^31 - 1 (align(T, 4) * G * D / 128) are supported");
  const ScaleGeometry geo = group_major_scale_geometry(T, G, S, packed);

  PreparedGroupQuant prep{new_contiguous(x, {T, G, D}, ScalarType::Float8_e4m3fn),
                          new_strided(x, geo.sizes, geo.strides, geo.storage_numel, geo.dtype),
                          {},
                          x.scalar_type()};
  GroupQuantParams& p = prep.params;
  p.x = x.const_data_ptr();
  p.x_stride_t = x.stride(0);
  p.x_stride_g = x.stride(1);
  p.q = static_cast<uint8_t*>(prep.q.mutable_data_ptr());
  p.scale = prep.scale.mutable_data_ptr();
  p.s_stride_t = geo.strides[0];
  p.s_stride_g = geo.strides[1];
  p.s_stride_s = geo.strides[2];
  p.T = T;
  p.G = G;
  p.D = D;
  p.T_q = T;
  p.T_s = geo.rows_padded;
  p.group_size = static_cast<int32_t>(kGroup);
  p.S = static_cast<int32_t>(S);
  p.eps = static_cast<float>(eps);
  p.packed = packed;
  p.ue8m0 = ue8m0 || packed;
  return prep;
}

PreparedPack prepare_pack_ue8m0(const Tensor& scale) {
  const char* op = "pack_ue8m0";
  FP8OPS_CHECK(scale.scalar_type() == ScalarType::Float, op, ": scale must be float32, got ",
               dtype_name(scale.scalar_type()));
  FP8OPS_CHECK(scale.is_cpu() || scale.is_cuda(), op, ": scale must be a CPU or CUDA tensor");
  FP8OPS_CHECK(scale.dim() == 2 || scale.dim() == 3, op, ": scale must be 2-D [M, S] or 3-D [B, M, S], got ",
               scale.dim(), " dims");
  const bool batched = scale.dim() == 3;
  const int64_t B = batched ? scale.size(0) : 1;
  const int64_t M = scale.size(scale.dim() - 2), S = scale.size(scale.dim() - 1);
  FP8OPS_CHECK(below_work_limit(B, align_up(M, 4), ceil_div(S, 4)), op,
               ": scale is too large; at most 2^31 - 1 packed words are supported");
  const ScaleGeometry geo = packed_scale_geometry(B, M, S, batched);
  PreparedPack prep{new_strided(scale, geo.sizes, geo.strides, geo.storage_numel, geo.dtype), {}};
  PackUe8m0Params& p = prep.params;
  p.in = static_cast<const float*>(scale.const_data_ptr());
  p.in_stride_b = batched ? scale.stride(0) : 0;
  p.in_stride_m = scale.stride(scale.dim() - 2);
  p.in_stride_s = scale.stride(scale.dim() - 1);
  p.out = static_cast<int32_t*>(prep.out.mutable_data_ptr());
  p.B = B;
  p.M = M;
  p.S = S;
  p.P = ceil_div(S, 4);
  p.Ma = geo.rows_padded;
  return prep;
}

PreparedDequant prepare_dequant(const Tensor& q, const Tensor& scale, int64_t group_size,
                                std::optional<ScalarType> out_dtype) {
  const char* op = "dequant";
  FP8OPS_CHECK(q.scalar_type() == ScalarType::Float8_e4m3fn, op, ": q must be float8_e4m3fn, got ",
               dtype_name(q.scalar_type()));
  FP8OPS_CHECK(q.is_cpu() || q.is_cuda(), op, ": q must be a CPU or CUDA tensor");
  const bool packed = scale.scalar_type() == ScalarType::Int;
  FP8OPS_CHECK(packed || scale.scalar_type() == ScalarType::Float, op,
               ": scale must be float32 or int32 (packed UE8M0), got ", dtype_name(scale.scalar_type()));
  check_same_device(op, "q", q, "scale", scale);
  FP8OPS_CHECK(q.dim() == 2 || q.dim() == 3, op, ": q must be 2-D or 3-D, got ", q.dim(), " dims");
  FP8OPS_CHECK(scale.dim() == q.dim(), op, ": scale must have q's rank (", q.dim(), "), got ", scale.dim());
  for (int64_t d = 0; d + 1 < q.dim(); ++d) {
    FP8OPS_CHECK(scale.size(d) == q.size(d), op, ": scale.size(", d, ") = ", scale.size(d), " must equal q.size(", d,
                 ") = ", q.size(d));
  }
  check_group_size(op, group_size);
  const int64_t K = q.size(q.dim() - 1);
  FP8OPS_CHECK(K % group_size == 0, op, ": q.size(-1) (K = ", K, ") must be a multiple of group_size (", group_size,
               ")");
  const int64_t S = K / group_size, C = packed ? ceil_div(S, 4) : S;
  FP8OPS_CHECK(scale.size(scale.dim() - 1) == C, op, ": scale.size(-1) must be ", C,
               packed ? " (ceil(K / group_size / 4), packed)" : " (K / group_size)", ", got ",
               scale.size(scale.dim() - 1));
  const ScalarType dt = out_dtype.value_or(ScalarType::Float);
  FP8OPS_CHECK(dt == ScalarType::Float || dt == ScalarType::BFloat16 || dt == ScalarType::Half, op,
               ": out_dtype must be float32, bfloat16 or float16, got ", dtype_name(dt));

  const bool batched = q.dim() == 3;
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < q.dim(); ++d) sizes.push_back(q.size(d));
  PreparedDequant prep{new_contiguous(q, sizes, dt), {}, dt};
  DequantParams& p = prep.params;
  p.q = static_cast<const uint8_t*>(q.const_data_ptr());
  p.q_stride_b = batched ? q.stride(0) : 0;
  p.q_stride_m = q.stride(q.dim() - 2);
  p.q_stride_k = q.stride(q.dim() - 1);
  p.scale = scale.const_data_ptr();
  p.s_stride_b = batched ? scale.stride(0) : 0;
  p.s_stride_m = scale.stride(scale.dim() - 2);
  p.s_stride_s = scale.stride(scale.dim() - 1);
  p.packed = packed;
  p.group_size = static_cast<int32_t>(group_size);
  p.out = prep.out.mutable_data_ptr();
  p.B = batched ? q.size(0) : 1;
  p.M = q.size(q.dim() - 2);
  p.K = K;
  return prep;
}

PreparedIndexer prepare_indexer_q_quant(const Tensor& q, const Tensor& weight, double weight_scale,
                                        const Tensor& cos_sin_cache, const Tensor& positions, bool rope_tail,
                                        bool rope_neox, bool hadamard, double eps) {
  const char* op = "indexer_q_quant";
  check_float_input(op, "q", q, /*allow_fp32=*/false);
  FP8OPS_CHECK(q.dim() == 3, op, ": q must be 3-D [B, H, 128], got ", q.dim(), " dims");
  const int64_t B = q.size(0), H = q.size(1);
  FP8OPS_CHECK(q.size(2) == kIndexerHeadDim, op, ": q's head dim must be 128, got ", q.size(2));
  FP8OPS_CHECK(q.stride(2) == 1 && (H <= 1 || q.stride(1) == kIndexerHeadDim), op,
               ": q's last two dims must be contiguous (strides (128, 1)), got (", q.stride(1), ", ", q.stride(2), ")");
  FP8OPS_CHECK(weight.scalar_type() == q.scalar_type(), op, ": weight must have q's dtype (",
               dtype_name(q.scalar_type()), "), got ", dtype_name(weight.scalar_type()));
  FP8OPS_CHECK(weight.dim() == 2 && weight.size(0) == B && weight.size(1) == H, op, ": weight must be [B, H] = [", B,
               ", ", H, "]");
  FP8OPS_CHECK(cos_sin_cache.scalar_type() == ScalarType::Float, op, ": cos_sin_cache must be float32, got ",
               dtype_name(cos_sin_cache.scalar_type()));
  FP8OPS_CHECK(cos_sin_cache.dim() == 2 && cos_sin_cache.size(1) == 2 * kIndexerRopePairs, op,
               ": cos_sin_cache must be [max_pos, 64] (cos(32) | sin(32)), got width ",
               cos_sin_cache.dim() == 2 ? cos_sin_cache.size(1) : -1);
  FP8OPS_CHECK(cos_sin_cache.stride(1) == 1, op, ": cos_sin_cache's last dim must be contiguous");
  const ScalarType pt = positions.scalar_type();
  FP8OPS_CHECK(pt == ScalarType::Int || pt == ScalarType::Long, op, ": positions must be int32 or int64, got ",
               dtype_name(pt));
  FP8OPS_CHECK(positions.dim() == 1 && positions.size(0) == B, op, ": positions must be [B] = [", B, "]");
  check_same_device(op, "q", q, "weight", weight);
  check_same_device(op, "q", q, "cos_sin_cache", cos_sin_cache);
  check_same_device(op, "q", q, "positions", positions);
  check_eps(op, eps);
  FP8OPS_CHECK(B * H == 0 || cos_sin_cache.size(0) > 0, op, ": cos_sin_cache has no positions");
  FP8OPS_CHECK(std::isfinite(weight_scale), op, ": weight_scale must be finite");
  FP8OPS_CHECK(B * H < kMaxWorkItems, op, ": B * H (", B * H, ") must be below 2^31");

  PreparedIndexer prep{new_contiguous(q, {B, H, kIndexerHeadDim}, ScalarType::Float8_e4m3fn),
                       new_contiguous(q, {B, H, 1}, ScalarType::Float),
                       {},
                       q.scalar_type()};
  IndexerParams& p = prep.params;
  p.q = q.const_data_ptr();
  p.q_stride_b = q.stride(0);
  p.weight = weight.const_data_ptr();
  p.w_stride_b = weight.stride(0);
  p.w_stride_h = weight.stride(1);
  p.weight_scale = static_cast<float>(weight_scale);
  p.cos_sin = static_cast<const float*>(cos_sin_cache.const_data_ptr());
  p.cs_stride_pos = cos_sin_cache.stride(0);
  p.max_pos = cos_sin_cache.size(0);
  p.positions = positions.const_data_ptr();
  p.pos_stride = positions.stride(0);
  p.pos_int64 = pt == ScalarType::Long;
  p.rope_tail = rope_tail;
  p.rope_neox = rope_neox;
  p.hadamard = hadamard;
  p.eps = static_cast<float>(eps);
  p.q_out = static_cast<uint8_t*>(prep.q_out.mutable_data_ptr());
  p.w_out = static_cast<float*>(prep.weights_out.mutable_data_ptr());
  p.B = B;
  p.H = H;
  return prep;
}

}  // namespace fp8ops
