#include "common.h"

#include <algorithm>
#include <limits>

namespace fp8ops {

const char* dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return "bfloat16";
    case ScalarType::Half: return "float16";
    case ScalarType::Float: return "float32";
    case ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
    case ScalarType::Int: return "int32";
    case ScalarType::Double: return "float64";
    case ScalarType::Long: return "int64";
    case ScalarType::Short: return "int16";
    case ScalarType::Char: return "int8";
    case ScalarType::Byte: return "uint8";
    case ScalarType::Bool: return "bool";
    case ScalarType::Float8_e5m2: return "float8_e5m2";
    case ScalarType::ComplexFloat: return "complex64";
    case ScalarType::ComplexDouble: return "complex128";
    default: return "an unsupported dtype";
  }
}

int32_t aoti_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return aoti_torch_dtype_bfloat16();
    case ScalarType::Half: return aoti_torch_dtype_float16();
    case ScalarType::Float: return aoti_torch_dtype_float32();
    case ScalarType::Float8_e4m3fn: return aoti_torch_dtype_float8_e4m3fn();
    case ScalarType::Int: return aoti_torch_dtype_int32();
    default: FP8OPS_CHECK(false, "internal error: no allocation dtype for ", dtype_name(t));
  }
  return 0;
}

Tensor new_strided(const Tensor& like, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                   int64_t storage_numel, ScalarType dtype) {
  int32_t device_type = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
  const int32_t device_index = like.get_device_index();
  AtenTensorHandle storage = nullptr;
  const int64_t storage_size[1] = {storage_numel};
  const int64_t storage_stride[1] = {1};
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, storage_size, storage_stride, aoti_dtype(dtype),
                                                         device_type, device_index, &storage));
  Tensor owner(storage);
  AtenTensorHandle view = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch__reinterpret_tensor(storage, static_cast<int64_t>(sizes.size()),
                                                               sizes.data(), strides.data(), 0, &view));
  return Tensor(view);
}

Tensor new_contiguous(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype) {
  // torch's contiguous strides: empty dims count as size 1.
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1, numel = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
    numel *= sizes[i];
  }
  return new_strided(like, sizes, strides, numel, dtype);
}

void check_float_input(const char* op, const char* arg, const Tensor& t, bool allow_fp32) {
  const ScalarType d = t.scalar_type();
  const bool ok = d == ScalarType::BFloat16 || d == ScalarType::Half || (allow_fp32 && d == ScalarType::Float);
  FP8OPS_CHECK(ok, op, ": ", arg, allow_fp32 ? " must be bfloat16, float16 or float32" : " must be bfloat16 or float16",
               ", got ", dtype_name(d));
  FP8OPS_CHECK(t.is_cpu() || t.is_cuda(), op, ": ", arg, " must be a CPU or CUDA tensor");
}

void check_eps(const char* op, double eps) {
  // eps * C must be a normal fp32 number, and eps itself finite in fp32.
  FP8OPS_CHECK(std::isfinite(eps) && eps >= 1e-30 && eps <= static_cast<double>(std::numeric_limits<float>::max()), op,
               ": eps must be finite, >= 1e-30 and representable in float32, got ", eps);
}

void check_group_size(const char* op, int64_t group_size) {
  FP8OPS_CHECK(group_size == 32 || group_size == 64 || group_size == 128, op,
               ": group_size must be 32, 64 or 128, got ", group_size);
}

void check_same_device(const char* op, const char* arg_a, const Tensor& a, const char* arg_b, const Tensor& b) {
  int32_t ta = 0, tb = 0;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(a.get(), &ta));
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(b.get(), &tb));
  FP8OPS_CHECK(ta == tb && a.get_device_index() == b.get_device_index(), op, ": ", arg_a, " and ", arg_b,
               " must be on the same device");
}

}  // namespace fp8ops
