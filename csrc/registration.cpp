// The whole public API: every schema of the fp8ops namespace, and its CPU and CUDA kernels.
// Fake (meta) kernels are registered from Python, in fp8ops/_fake.py.
#include <torch/csrc/stable/library.h>

#include "ops.h"

namespace fp8ops {
namespace {

template <void (*Run)(const PreparedGroupQuant&)>
std::tuple<Tensor, Tensor> per_token_group_quant(Tensor x, int64_t group_size, std::string scale_layout, bool ue8m0,
                                                 int64_t pad_rows_to, double eps) {
  PreparedGroupQuant prep = prepare_per_token_group_quant(x, group_size, scale_layout, ue8m0, pad_rows_to, eps);
  Run(prep);
  return {prep.q, prep.scale};
}

template <void (*Run)(const PreparedGroupQuant&)>
std::tuple<Tensor, Tensor> group_major_quant(Tensor x, bool ue8m0, bool packed, double eps) {
  PreparedGroupQuant prep = prepare_group_major_quant(x, ue8m0, packed, eps);
  Run(prep);
  return {prep.q, prep.scale};
}

template <void (*Run)(const PreparedPack&)>
Tensor pack_ue8m0(Tensor scale) {
  PreparedPack prep = prepare_pack_ue8m0(scale);
  Run(prep);
  return prep.out;
}

template <void (*Run)(const PreparedDequant&)>
Tensor dequant(Tensor q, Tensor scale, int64_t group_size, std::optional<ScalarType> out_dtype) {
  PreparedDequant prep = prepare_dequant(q, scale, group_size, out_dtype);
  Run(prep);
  return prep.out;
}

template <void (*Run)(const PreparedIndexer&)>
std::tuple<Tensor, Tensor> indexer_q_quant(Tensor q, Tensor weight, double weight_scale, Tensor cos_sin_cache,
                                           Tensor positions, bool rope_tail, bool rope_neox, bool hadamard,
                                           double eps) {
  PreparedIndexer prep =
      prepare_indexer_q_quant(q, weight, weight_scale, cos_sin_cache, positions, rope_tail, rope_neox, hadamard, eps);
  Run(prep);
  return {prep.q_out, prep.weights_out};
}

template <void (*Run)(const PreparedSiluMulQuant&)>
std::tuple<Tensor, Tensor> silu_mul_quant(Tensor x, int64_t group_size, std::string scale_layout, bool ue8m0,
                                          int64_t pad_rows_to, double eps, std::optional<Tensor> masked_m) {
  PreparedSiluMulQuant prep = prepare_silu_mul_quant(x, group_size, scale_layout, ue8m0, pad_rows_to, eps, masked_m);
  Run(prep);
  return {prep.q, prep.scale};
}

template <void (*Run)(const PreparedRmsNormQuant&)>
std::tuple<Tensor, Tensor> rms_norm_quant(Tensor x, Tensor weight, double norm_eps, std::optional<Tensor> residual,
                                          int64_t group_size, std::string scale_layout, bool ue8m0, int64_t pad_rows_to,
                                          double eps) {
  PreparedRmsNormQuant prep =
      prepare_rms_norm_quant(x, weight, norm_eps, residual, group_size, scale_layout, ue8m0, pad_rows_to, eps);
  Run(prep);
  return {prep.q, prep.scale};
}

template <void (*Run)(const PreparedBlockQuant&)>
std::tuple<Tensor, Tensor> block_quant(Tensor w, int64_t block_n, int64_t block_k, bool ue8m0, double eps) {
  PreparedBlockQuant prep = prepare_block_quant(w, block_n, block_k, ue8m0, eps);
  Run(prep);
  return {prep.q, prep.scale};
}

}  // namespace
}  // namespace fp8ops

STABLE_TORCH_LIBRARY(fp8ops, m) {
  m.def(
      "per_token_group_quant(Tensor x, int group_size=128, str scale_layout=\"row\", bool ue8m0=False, "
      "int pad_rows_to=1, float eps=1e-10) -> (Tensor q, Tensor scale)");
  m.def(
      "group_major_quant(Tensor x, bool ue8m0=False, bool packed=False, float eps=1e-10) -> (Tensor q, Tensor scale)");
  m.def(
      "indexer_q_quant(Tensor q, Tensor weight, float weight_scale, Tensor cos_sin_cache, Tensor positions, "
      "bool rope_tail=True, bool rope_neox=False, bool hadamard=True, float eps=1e-4) -> (Tensor q_fp8, Tensor "
      "weights_out)");
  m.def("pack_ue8m0(Tensor scale) -> Tensor");
  m.def("dequant(Tensor q, Tensor scale, int group_size=128, ScalarType? out_dtype=None) -> Tensor");
  m.def(
      "silu_mul_quant(Tensor x, int group_size=128, str scale_layout=\"row\", bool ue8m0=False, int pad_rows_to=1, "
      "float eps=1e-10, Tensor? masked_m=None) -> (Tensor q, Tensor scale)");
  m.def(
      "rms_norm_quant(Tensor x, Tensor weight, float norm_eps=1e-6, Tensor(a!)? residual=None, int group_size=128, "
      "str scale_layout=\"row\", bool ue8m0=False, int pad_rows_to=1, float eps=1e-10) -> (Tensor q, Tensor scale)");
  m.def(
      "block_quant(Tensor w, int block_n=128, int block_k=128, bool ue8m0=False, float eps=1e-10) -> (Tensor q, "
      "Tensor scale)");
}

STABLE_TORCH_LIBRARY_IMPL(fp8ops, CPU, m) {
  using namespace fp8ops;
  m.impl("per_token_group_quant", TORCH_BOX(&per_token_group_quant<run_group_quant_cpu>));
  m.impl("group_major_quant", TORCH_BOX(&group_major_quant<run_group_quant_cpu>));
  m.impl("indexer_q_quant", TORCH_BOX(&indexer_q_quant<run_indexer_cpu>));
  m.impl("pack_ue8m0", TORCH_BOX(&pack_ue8m0<run_pack_ue8m0_cpu>));
  m.impl("dequant", TORCH_BOX(&dequant<run_dequant_cpu>));
  m.impl("silu_mul_quant", TORCH_BOX(&silu_mul_quant<run_silu_mul_quant_cpu>));
  m.impl("rms_norm_quant", TORCH_BOX(&rms_norm_quant<run_rms_norm_quant_cpu>));
  m.impl("block_quant", TORCH_BOX(&block_quant<run_block_quant_cpu>));
}

STABLE_TORCH_LIBRARY_IMPL(fp8ops, CUDA, m) {
  using namespace fp8ops;
  m.impl("per_token_group_quant", TORCH_BOX(&per_token_group_quant<run_group_quant_cuda>));
  m.impl("group_major_quant", TORCH_BOX(&group_major_quant<run_group_quant_cuda>));
  m.impl("indexer_q_quant", TORCH_BOX(&indexer_q_quant<run_indexer_cuda>));
  m.impl("pack_ue8m0", TORCH_BOX(&pack_ue8m0<run_pack_ue8m0_cuda>));
  m.impl("dequant", TORCH_BOX(&dequant<run_dequant_cuda>));
  m.impl("silu_mul_quant", TORCH_BOX(&silu_mul_quant<run_silu_mul_quant_cuda>));
  m.impl("rms_norm_quant", TORCH_BOX(&rms_norm_quant<run_rms_norm_quant_cuda>));
  m.impl("block_quant", TORCH_BOX(&block_quant<run_block_quant_cuda>));
}
