// CPU reference kernels of silu_mul_quant, rms_norm_quant and block_quant: plain loops over the
// numerics the CUDA kernels use, in the same order (fused_quant.h), so the two agree bit for bit.
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstring>
#include <vector>

#include "../ops.h"
#include "elements.h"
#include "fp8ops/fused_quant.h"
#include "fp8ops/numerics.h"

namespace fp8ops {
namespace {

// Quantizes row (e, t) of a (D values; null for a padding row) into o: codes when write_q,
// scales always.
void quant_row(const RowQuantOut& o, int64_t e, int64_t t, const float* a, bool write_q) {
  for (int64_t s = 0; s < o.S; ++s) {
    const float* v = a ? a + s * o.group_size : nullptr;
    float scale = 0.0f;
    if (v) {
      float amax = 0.0f;
      for (int i = 0; i < o.group_size; ++i) amax = fmax_nonan(amax, finite_abs(v[i]));
      scale = group_scale(amax, o.eps, o.ue8m0);
    }
    if (write_q) {
      uint8_t* dst = o.q + (e * o.q_rows + t) * o.D + s * o.group_size;
      if (v) {
        const float r = 1.0f / scale;
        for (int i = 0; i < o.group_size; ++i) dst[i] = e4m3_bits_host(scaled_clamped(v[i], r));
      } else {
        std::memset(dst, 0, o.group_size);
      }
    }
    const int64_t word = row_scale_word(o, e, t, s);
    if (o.packed) {
      uint8_t* bytes = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(o.scale) + word);
      bytes[s & 3] = v ? static_cast<uint8_t>(ue8m0_exponent(scale)) : 0;
      if (s == o.S - 1) {
        for (int64_t j = (s & 3) + 1; j < 4; ++j) bytes[j] = 0;
      }
    } else {
      static_cast<float*>(o.scale)[word] = scale;
    }
  }
}

// Rows of the flat layout: data rows quantize a, rows T..T_q-1 are zero codes and scales, rows
// T_q..T_s-1 zero scales.
template <typename Fill>
void flat_rows(const RowQuantOut& o, int64_t T, int64_t T_q, int64_t T_s, int64_t D, Fill&& fill) {
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<float> a(D);
    for (int64_t t = begin; t < end; ++t) {
      if (t < T) fill(t, a.data());
      quant_row(o, 0, t, t < T ? a.data() : nullptr, t < T_q);
    }
  };
  torch::stable::parallel_for(0, T_s, std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(D, 1)), body);
}

template <typename T>
void silu_mul_row(const SiluMulQuantParams& p, int64_t e, int64_t t, float* a) {
  const int64_t base = e * p.x_stride_e + t * p.x_stride_t;
  for (int64_t k = 0; k < p.H; ++k) {
    const float g = load_float<T>(p.x, base + k), u = load_float<T>(p.x, base + p.H + k);
    a[k] = round_to<T>(mul_rn(round_to<T>(silu_fp32(g)), u));
  }
}

template <typename T>
void silu_mul_quant_typed(const SiluMulQuantParams& p) {
  const RowQuantOut& o = p.out;
  if (p.masked_m == nullptr) {
    flat_rows(o, p.T, p.T_q, p.T_s, p.H, [&](int64_t t, float* a) { silu_mul_row<T>(p, 0, t, a); });
    return;
  }
  for (int64_t i = 0; i < masked_pad_words(p); ++i) static_cast<uint32_t*>(o.scale)[masked_pad_word_offset(p, i)] = 0;
  auto body = [&](int64_t begin, int64_t end) {
    std::vector<float> a(p.H);
    for (int64_t e = begin; e < end; ++e) {
      for (int64_t t = 0; t < p.masked_m[e]; ++t) {
        silu_mul_row<T>(p, e, t, a.data());
        quant_row(o, e, t, a.data(), true);
      }
    }
  };
  torch::stable::parallel_for(0, p.E, 1, body);
}

// The sum of squares of a row r[0..D-1] in the order of fused_quant.h.
float row_sum_squares(const float* r, int64_t D) {
  const int64_t chunks = D / kChunkElems;
  const RowShape s = row_shape(chunks, kRmsChunksPerLane);
  const uint32_t W = s.lanes;
  std::vector<float> part(W, 0.0f), next(W);
  for (uint32_t j = 0; j < W; ++j) {
    float acc = 0.0f;
    for (int64_t c = j; c < chunks; c += W) {
      for (int i = 0; i < kChunkElems; ++i) acc = fma_rn(r[c * kChunkElems + i], r[c * kChunkElems + i], acc);
    }
    part[j] = acc;
  }
  for (uint32_t off = (W < 32 ? W : 32) / 2; off > 0; off >>= 1) {
    for (uint32_t j = 0; j < W; ++j) next[j] = add_rn(part[j], part[j ^ off]);
    part.swap(next);
  }
  if (W <= 32) return part[0];
  const uint32_t warps = W / 32;
  std::vector<float> w(warps), wn(warps);
  for (uint32_t i = 0; i < warps; ++i) w[i] = part[32 * i];
  for (uint32_t off = warps / 2; off > 0; off >>= 1) {
    for (uint32_t i = 0; i < warps; ++i) wn[i] = add_rn(w[i], w[i ^ off]);
    w.swap(wn);
  }
  return w[0];
}

template <typename T>
void rms_norm_quant_typed(const RmsNormQuantParams& p) {
  const int64_t D = p.out.D;
  flat_rows(p.out, p.T, p.T_q, p.T_s, D, [&](int64_t t, float* y) {
    for (int64_t k = 0; k < D; ++k) {
      float r = load_float<T>(p.x, t * p.x_stride + k);
      if (p.residual != nullptr) {
        r = round_to<T>(add_rn(r, load_float<T>(p.residual, t * p.r_stride + k)));
        if constexpr (std::is_same_v<T, float>) r = r != r ? bits_float(kCanonicalNanF32) : r;
        store_elem<T>(p.residual, t * p.r_stride + k, r);
      }
      y[k] = r;
    }
    const float inv = rms_inverse(row_sum_squares(y, D), static_cast<float>(D), p.norm_eps);
    for (int64_t k = 0; k < D; ++k) y[k] = round_to<T>(mul_rn(mul_rn(y[k], inv), load_float<T>(p.weight, k)));
  });
}

template <typename T>
void block_quant_typed(const BlockQuantParams& p) {
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t e = b / (p.NB * p.KB), nb = b / p.KB % p.NB, kb = b % p.KB;
      const int64_t n0 = nb * kBlockQuantTile, k0 = kb * kBlockQuantTile;
      const int64_t n1 = std::min(p.N, n0 + kBlockQuantTile), k1 = std::min(p.K, k0 + kBlockQuantTile);
      float amax = 0.0f;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = k0; k < k1; ++k) {
          amax = fmax_nonan(amax, finite_abs(load_float<T>(p.w, e * p.w_stride_e + n * p.w_stride_n + k)));
        }
      }
      const float scale = group_scale(amax, p.eps, p.ue8m0), r = 1.0f / scale;
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t k = k0; k < k1; ++k) {
          const float v = load_float<T>(p.w, e * p.w_stride_e + n * p.w_stride_n + k);
          p.q[(e * p.N + n) * p.K + k] = e4m3_bits_host(scaled_clamped(v, r));
        }
      }
      p.scale[b] = scale;
    }
  };
  torch::stable::parallel_for(0, p.E * p.NB * p.KB, 1, body);
}

template <template <typename> class F, typename... Args>
void dispatch_dtype(ScalarType dtype, Args&&... args) {
  switch (dtype) {
    case ScalarType::BFloat16: F<c10::BFloat16>::run(args...); break;
    case ScalarType::Half: F<c10::Half>::run(args...); break;
    default: F<float>::run(args...); break;
  }
}

template <typename T>
struct SiluRun {
  static void run(const SiluMulQuantParams& p) { silu_mul_quant_typed<T>(p); }
};
template <typename T>
struct RmsRun {
  static void run(const RmsNormQuantParams& p) { rms_norm_quant_typed<T>(p); }
};
template <typename T>
struct BlockRun {
  static void run(const BlockQuantParams& p) { block_quant_typed<T>(p); }
};

}  // namespace

void run_silu_mul_quant_cpu(const PreparedSiluMulQuant& prep) {
  const SiluMulQuantParams& p = prep.params;
  if (p.masked_m != nullptr) {
    // Validate every count before writing anything.
    for (int64_t e = 0; e < p.E; ++e) {
      FP8OPS_CHECK(p.masked_m[e] >= 0 && p.masked_m[e] <= p.T_q, "silu_mul_quant: masked_m[", e, "] = ", p.masked_m[e],
                   " is outside [0, Mmax] = [0, ", p.T_q, "]");
    }
  }
  if (p.H == 0) return;
  dispatch_dtype<SiluRun>(prep.dtype, p);
}

void run_rms_norm_quant_cpu(const PreparedRmsNormQuant& prep) {
  if (prep.params.out.D == 0) return;
  dispatch_dtype<RmsRun>(prep.dtype, prep.params);
}

void run_block_quant_cpu(const PreparedBlockQuant& prep) {
  if (prep.params.E * prep.params.N * prep.params.K == 0) return;
  dispatch_dtype<BlockRun>(prep.dtype, prep.params);
}

}  // namespace fp8ops
