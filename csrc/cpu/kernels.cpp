// CPU reference kernels: plain loops over the same numerics header the CUDA kernels use, so the
// two agree bit for bit. Compiled with -ffp-contract=off: no multiply-add is fused behind our back.
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstring>

#include "../ops.h"
#include "elements.h"
#include "fp8ops/numerics.h"

namespace fp8ops {
namespace {

template <typename T>
void group_quant_rows(const GroupQuantParams& p, int64_t row_begin, int64_t row_end) {
  float v[128];
  for (int64_t rg = row_begin; rg < row_end; ++rg) {
    const int64_t t = rg / p.G, g = rg % p.G;
    for (int64_t s = 0; s < p.S; ++s) {
      const int64_t x_off = t * p.x_stride_t + g * p.x_stride_g + s * p.group_size;
      float scale = 0.0f;  // padding rows keep a zero scale and zero codes
      if (t < p.T) {
        float amax = 0.0f;
        for (int i = 0; i < p.group_size; ++i) {
          v[i] = load_float<T>(p.x, x_off + i);
          amax = fmax_nonan(amax, finite_abs(v[i]));
        }
        scale = group_scale(amax, p.eps, p.ue8m0 || p.packed);
      }
      if (t < p.T_q) {
        uint8_t* dst = p.q + rg * p.D + s * p.group_size;
        if (t < p.T) {
          const float r = 1.0f / scale;
          for (int i = 0; i < p.group_size; ++i) dst[i] = e4m3_bits_host(scaled_clamped(v[i], r));
        } else {
          std::memset(dst, 0, p.group_size);
        }
      }
      const int64_t word = scale_word_offset(p, t, g, s);
      if (p.packed) {
        uint8_t* bytes = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(p.scale) + word);
        bytes[s & 3] = t < p.T ? static_cast<uint8_t>(ue8m0_exponent(scale)) : 0;
        if (s == p.S - 1) {
          for (int64_t j = (s & 3) + 1; j < 4; ++j) bytes[j] = 0;
        }
      } else {
        static_cast<float*>(p.scale)[word] = scale;
      }
    }
  }
}

template <typename T>
void dequant_rows(const DequantParams& p, int64_t row_begin, int64_t row_end) {
  for (int64_t bm = row_begin; bm < row_end; ++bm) {
    const int64_t b = bm / p.M, m = bm % p.M;
    for (int64_t k = 0; k < p.K; ++k) {
      const uint8_t c = p.q[b * p.q_stride_b + m * p.q_stride_m + k * p.q_stride_k];
      store_elem<T>(p.out, bm * p.K + k, e4m3_to_float(c) * dequant_scale(p, b, m, k / p.group_size));
    }
  }
}

// Rows per parallel task: about 64 Ki elements of work each.
int64_t grain_rows(int64_t row_elems) {
  return std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(1, row_elems));
}

}  // namespace

void run_group_quant_cpu(const PreparedGroupQuant& prep) {
  const GroupQuantParams& p = prep.params;
  const int64_t rows = p.T_s * p.G;
  if (rows == 0 || p.S == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    switch (prep.x_dtype) {
      case ScalarType::BFloat16: group_quant_rows<c10::BFloat16>(p, b, e); break;
      case ScalarType::Half: group_quant_rows<c10::Half>(p, b, e); break;
      default: group_quant_rows<float>(p, b, e); break;
    }
  };
  torch::stable::parallel_for(0, rows, grain_rows(p.D), body);
}

void run_pack_ue8m0_cpu(const PreparedPack& prep) {
  const PackUe8m0Params& p = prep.params;
  // Validate everything before writing anything.
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t s = 0; s < p.S; ++s) {
        const float v = p.in[b * p.in_stride_b + m * p.in_stride_m + s * p.in_stride_s];
        FP8OPS_CHECK(is_packable_scale(v), "pack_ue8m0: scale[", b, ", ", m, ", ", s, "] = ", v,
                     " is neither 0 nor a power of two in [2^-126, 2^127]; only UE8M0 scales can be packed");
      }
    }
  }
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t pw = 0; pw < p.P; ++pw) {
      for (int64_t m = 0; m < p.Ma; ++m) {
        uint32_t word = 0;
        for (int64_t j = 0; j < 4 && m < p.M; ++j) {
          const int64_t s = 4 * pw + j;
          if (s < p.S) word |= pack_byte(p.in[b * p.in_stride_b + m * p.in_stride_m + s * p.in_stride_s]) << (8 * j);
        }
        p.out[(b * p.P + pw) * p.Ma + m] = static_cast<int32_t>(word);
      }
    }
  }
}

void run_dequant_cpu(const PreparedDequant& prep) {
  const DequantParams& p = prep.params;
  const int64_t rows = p.B * p.M;
  if (rows == 0 || p.K == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    switch (prep.out_dtype) {
      case ScalarType::BFloat16: dequant_rows<c10::BFloat16>(p, b, e); break;
      case ScalarType::Half: dequant_rows<c10::Half>(p, b, e); break;
      default: dequant_rows<float>(p, b, e); break;
    }
  };
  torch::stable::parallel_for(0, rows, grain_rows(p.K), body);
}

namespace {

template <typename T>
void indexer_rows(const IndexerParams& p, int64_t begin, int64_t end) {
  float v[kIndexerHeadDim];
  for (int64_t bh = begin; bh < end; ++bh) {
    const int64_t b = bh / p.H, h = bh % p.H;
    const T* src = static_cast<const T*>(p.q) + b * p.q_stride_b + h * kIndexerHeadDim;
    for (int k = 0; k < kIndexerHeadDim; ++k) v[k] = static_cast<float>(src[k]);
    const float* cs = p.cos_sin + indexer_position(p, b) * p.cs_stride_pos;
    float* rope = v + (p.rope_tail ? kIndexerHeadDim - kIndexerRopeDim : 0);
    for (int i = 0; i < kIndexerRopePairs; ++i) {
      float& a = p.rope_neox ? rope[i] : rope[2 * i];
      float& c = p.rope_neox ? rope[i + kIndexerRopePairs] : rope[2 * i + 1];
      rope_pair(a, c, cs[i], cs[kIndexerRopePairs + i]);
    }
    if (p.hadamard) {
      for (const int hh : kIndexerHadamardStages) {
        for (int j = 0; j < kIndexerHeadDim; ++j) {
          if (j & hh) continue;
          const float lower = v[j], upper = v[j + hh];
          v[j] = butterfly_lower(lower, upper);
          v[j + hh] = butterfly_upper(lower, upper);
        }
      }
    }
    float amax = 0.0f;
    for (int k = 0; k < kIndexerHeadDim; ++k) amax = fmax_nonan(amax, finite_abs(v[k]));
    const float scale = group_scale(indexer_amax(amax, p.hadamard), p.eps, false);
    const float m = indexer_multiplier(1.0f / scale, p.hadamard);
    uint8_t* dst = p.q_out + bh * kIndexerHeadDim;
    for (int k = 0; k < kIndexerHeadDim; ++k) dst[k] = e4m3_bits_host(scaled_clamped(v[k], m));
    const float w = static_cast<float>(static_cast<const T*>(p.weight)[b * p.w_stride_b + h * p.w_stride_h]);
    p.w_out[bh] = indexer_weight(w, p.weight_scale, scale);
  }
}

}  // namespace

void run_indexer_cpu(const PreparedIndexer& prep) {
  const IndexerParams& p = prep.params;
  // Validate every position before writing anything.
  for (int64_t b = 0; b < p.B && p.H > 0; ++b) {
    const int64_t pos = indexer_position(p, b);
    FP8OPS_CHECK(pos >= 0 && pos < p.max_pos, "indexer_q_quant: positions[", b, "] = ", pos,
                 " is outside the cos_sin_cache's [0, ", p.max_pos, ")");
  }
  const int64_t rows = p.B * p.H;
  if (rows == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    if (prep.dtype == ScalarType::BFloat16) {
      indexer_rows<c10::BFloat16>(p, b, e);
    } else {
      indexer_rows<c10::Half>(p, b, e);
    }
  };
  torch::stable::parallel_for(0, rows, 64, body);
}

}  // namespace fp8ops
