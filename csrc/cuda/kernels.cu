// CUDA launchers: a device guard, the current stream of the tensors' device, dtype dispatch, and
// a check of every CUDA status. Validation and allocation happened in prepare.cpp.
#include <torch/csrc/stable/accelerator.h>

#include <array>
#include <atomic>

#include "../ops.h"
#include "../settings.h"
#include "fp8ops/block_quant.cuh"
#include "fp8ops/group_quant.cuh"
#include "fp8ops/indexer.cuh"
#include "fp8ops/pack_dequant.cuh"
#include "fp8ops/rms_norm_quant.cuh"
#include "fp8ops/silu_mul_quant.cuh"

namespace fp8ops {
namespace {

#define FP8OPS_CUDA_CHECK(expr, what)                                                                      \
  do {                                                                                                     \
    const cudaError_t err_ = (expr);                                                                       \
    FP8OPS_CHECK(err_ == cudaSuccess, what, ": CUDA error: ", cudaGetErrorString(err_), " (", #expr, ")"); \
  } while (0)

cudaStream_t current_stream(int32_t device) {
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device, &stream));
  return static_cast<cudaStream_t>(stream);
}

// A device attribute, read once per device (cudaDeviceGetAttribute is not free on a hot path).
template <cudaDeviceAttr kAttr>
int device_attribute(int32_t device, const char* what) {
  static std::array<std::atomic<int>, 64> cache{};
  if (device >= 0 && device < static_cast<int32_t>(cache.size())) {
    int n = cache[device].load(std::memory_order_relaxed);
    if (n > 0) return n;
  }
  int n = 0;
  FP8OPS_CUDA_CHECK(cudaDeviceGetAttribute(&n, kAttr, device), what);
  if (device >= 0 && device < static_cast<int32_t>(cache.size())) cache[device].store(n, std::memory_order_relaxed);
  return n;
}

template <typename T>
struct Type {
  using type = T;
};

// Calls launch with Type<T> for the CUDA element type T of dtype (bf16, fp16, else fp32).
template <typename F>
cudaError_t by_dtype(ScalarType dtype, F&& launch) {
  switch (dtype) {
    case ScalarType::BFloat16: return launch(Type<__nv_bfloat16>{});
    case ScalarType::Half: return launch(Type<__half>{});
    default: return launch(Type<float>{});
  }
}

int sm_count(int32_t device) { return device_attribute<cudaDevAttrMultiProcessorCount>(device, "sm_count"); }
int64_t l2_bytes(int32_t device) { return device_attribute<cudaDevAttrL2CacheSize>(device, "l2_bytes"); }

}  // namespace

void run_group_quant_cuda(const PreparedGroupQuant& prep) {
  const int32_t device = prep.q.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int sms = sm_count(device);
  const int64_t l2 = l2_bytes(device);
  const cudaError_t err = by_dtype(prep.x_dtype, [&](auto t) {
    return launch_group_quant<typename decltype(t)::type>(prep.params, sms, l2, stream, pdl_enabled());
  });
  FP8OPS_CUDA_CHECK(err, "group quantization kernel");
}

void run_pack_ue8m0_cuda(const PreparedPack& prep) {
  const int32_t device = prep.out.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  FP8OPS_CUDA_CHECK(launch_pack_ue8m0(prep.params, current_stream(device), pdl_enabled()), "pack_ue8m0 kernel");
}

void run_dequant_cuda(const PreparedDequant& prep) {
  const int32_t device = prep.out.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const cudaError_t err =
      by_dtype(prep.out_dtype, [&](auto t) { return launch_dequant<typename decltype(t)::type>(prep.params, stream); });
  FP8OPS_CUDA_CHECK(err, "dequant kernel");
}

void run_indexer_cuda(const PreparedIndexer& prep) {
  const int32_t device = prep.q_out.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int sms = sm_count(device);
  const int64_t l2 = l2_bytes(device);
  const cudaError_t err = prep.dtype == ScalarType::BFloat16
                              ? launch_indexer_q_quant<__nv_bfloat16>(prep.params, sms, l2, stream, pdl_enabled())
                              : launch_indexer_q_quant<__half>(prep.params, sms, l2, stream, pdl_enabled());
  FP8OPS_CUDA_CHECK(err, "indexer_q_quant kernel");
}

void run_silu_mul_quant_cuda(const PreparedSiluMulQuant& prep) {
  const int32_t device = prep.q.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int sms = sm_count(device);
  const int64_t l2 = l2_bytes(device);
  const cudaError_t err = by_dtype(prep.dtype, [&](auto t) {
    return launch_silu_mul_quant<typename decltype(t)::type>(prep.params, sms, l2, stream, pdl_enabled());
  });
  FP8OPS_CUDA_CHECK(err, "silu_mul_quant kernel");
}

void run_rms_norm_quant_cuda(const PreparedRmsNormQuant& prep) {
  const int32_t device = prep.q.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const int sms = sm_count(device);
  const cudaError_t err = by_dtype(prep.dtype, [&](auto t) {
    return launch_rms_norm_quant<typename decltype(t)::type>(prep.params, sms, stream, pdl_enabled());
  });
  FP8OPS_CUDA_CHECK(err, "rms_norm_quant kernel");
}

void run_block_quant_cuda(const PreparedBlockQuant& prep) {
  const int32_t device = prep.q.get_device_index();
  torch::stable::accelerator::DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const cudaError_t err = by_dtype(prep.dtype, [&](auto t) {
    return launch_block_quant<typename decltype(t)::type>(prep.params, stream, pdl_enabled());
  });
  FP8OPS_CUDA_CHECK(err, "block_quant kernel");
}

}  // namespace fp8ops

// silu_mul_quant's activation a = T(T(silu(g)) * u) on the device for n values (a multiple of 8)
// of dtype 0 bf16, 1 fp16, 2 fp32, as a kernel's path computes it (path 0: the flat kernels' SiLU,
// 1: the masked kernel's shortcut, 2: the bf16 table of large flat grids), on the given stream:
// the GPU tests hold each to the CPU reference over every 16-bit gate. Returns the CUDA status.
FP8OPS_C_API int fp8ops_silu_mul_cuda(const void* gate, const void* up, void* a, int64_t n, int64_t dtype, int64_t path,
                                      void* stream) {
  using fp8ops::ScalarType;
  const ScalarType type = dtype == 0 ? ScalarType::BFloat16 : dtype == 1 ? ScalarType::Half : ScalarType::Float;
  return fp8ops::by_dtype(type, [&](auto t) {
    return fp8ops::launch_silu_mul_values<typename decltype(t)::type>(gate, up, a, n, static_cast<int>(path),
                                                                      static_cast<cudaStream_t>(stream));
  });
}

// rms_norm_quant.cuh's rms_inverse_sweep_kernel over the fp32 bit patterns [lo, hi) for divisor D
// (8 to kRmsMaxD, with the kernels' rms_divisor_reciprocal), adding the count of results that
// differ from the correctly rounded ops to the device counter at count (a uint64), on the given
// stream: the GPU tests sweep rms_norm_quant's inverse with it. Returns the CUDA status.
FP8OPS_C_API int fp8ops_rms_inverse_sweep_cuda(int64_t D, float norm_eps, int64_t part, int64_t lo, int64_t hi,
                                               void* count, void* stream) {
  if (lo < 0 || hi < 0) return cudaErrorInvalidValue;
  return fp8ops::launch_rms_inverse_sweep(D, norm_eps, static_cast<int>(part), static_cast<uint64_t>(lo),
                                          static_cast<uint64_t>(hi), static_cast<unsigned long long*>(count),
                                          static_cast<cudaStream_t>(stream));
}
