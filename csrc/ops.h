// Op entry points and the backend-independent preparation of each op: argument checks, output
// allocation and kernel parameters. The CPU and CUDA files only run kernels on what these return,
// so both backends validate and lay out outputs identically.
#pragma once

#include <optional>
#include <string>
#include <tuple>

#include "common.h"
#include "fp8ops/fused_quant.h"
#include "fp8ops/group_quant.h"
#include "fp8ops/indexer.h"
#include "fp8ops/pack_dequant.h"

namespace fp8ops {

struct PreparedGroupQuant {
  Tensor q;
  Tensor scale;
  GroupQuantParams params;
  ScalarType x_dtype;
};

PreparedGroupQuant prepare_per_token_group_quant(const Tensor& x, int64_t group_size, const std::string& scale_layout,
                                                 bool ue8m0, int64_t pad_rows_to, double eps);
PreparedGroupQuant prepare_group_major_quant(const Tensor& x, bool ue8m0, bool packed, double eps);

struct PreparedPack {
  Tensor out;
  PackUe8m0Params params;
};
PreparedPack prepare_pack_ue8m0(const Tensor& scale);

struct PreparedDequant {
  Tensor out;
  DequantParams params;
  ScalarType out_dtype;
};
PreparedDequant prepare_dequant(const Tensor& q, const Tensor& scale, int64_t group_size,
                                std::optional<ScalarType> out_dtype);

struct PreparedIndexer {
  Tensor q_out;
  Tensor weights_out;
  IndexerParams params;
  ScalarType dtype;
};
PreparedIndexer prepare_indexer_q_quant(const Tensor& q, const Tensor& weight, double weight_scale,
                                        const Tensor& cos_sin_cache, const Tensor& positions, bool rope_tail,
                                        bool rope_neox, bool hadamard, double eps);

struct PreparedSiluMulQuant {
  Tensor q;
  Tensor scale;
  SiluMulQuantParams params;
  ScalarType dtype;
};
PreparedSiluMulQuant prepare_silu_mul_quant(const Tensor& x, int64_t group_size, const std::string& scale_layout,
                                            bool ue8m0, int64_t pad_rows_to, double eps,
                                            const std::optional<Tensor>& masked_m);

struct PreparedRmsNormQuant {
  Tensor q;
  Tensor scale;
  RmsNormQuantParams params;
  ScalarType dtype;
};
PreparedRmsNormQuant prepare_rms_norm_quant(const Tensor& x, const Tensor& weight, double norm_eps,
                                            const std::optional<Tensor>& residual, int64_t group_size,
                                            const std::string& scale_layout, bool ue8m0, int64_t pad_rows_to,
                                            double eps);

struct PreparedBlockQuant {
  Tensor q;
  Tensor scale;
  BlockQuantParams params;
  ScalarType dtype;
};
PreparedBlockQuant prepare_block_quant(const Tensor& w, int64_t block_n, int64_t block_k, bool ue8m0, double eps);

// CPU reference kernels.
void run_group_quant_cpu(const PreparedGroupQuant& prep);
void run_pack_ue8m0_cpu(const PreparedPack& prep);
void run_dequant_cpu(const PreparedDequant& prep);
void run_indexer_cpu(const PreparedIndexer& prep);
void run_silu_mul_quant_cpu(const PreparedSiluMulQuant& prep);
void run_rms_norm_quant_cpu(const PreparedRmsNormQuant& prep);
void run_block_quant_cpu(const PreparedBlockQuant& prep);

// CUDA launchers: run on the current stream of the tensors' device, under a device guard.
void run_group_quant_cuda(const PreparedGroupQuant& prep);
void run_pack_ue8m0_cuda(const PreparedPack& prep);
void run_dequant_cuda(const PreparedDequant& prep);
void run_indexer_cuda(const PreparedIndexer& prep);
void run_silu_mul_quant_cuda(const PreparedSiluMulQuant& prep);
void run_rms_norm_quant_cuda(const PreparedRmsNormQuant& prep);
void run_block_quant_cuda(const PreparedBlockQuant& prep);

}  // namespace fp8ops
