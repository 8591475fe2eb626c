// The kernels' names for the dtypes of values that they quantize (csrc/kernels/common/params.h).
#pragma once

#include <ATen/ATen.h>

#include "../kernels/common/params.h"

namespace sdpa {

// fp16, bf16 or (anything else the checks let through) fp32.
inline InputType input_type(at::ScalarType dtype) {
  if (dtype == at::kHalf) return InputType::kFloat16;
  if (dtype == at::kBFloat16) return InputType::kBFloat16;
  return InputType::kFloat32;
}

}  // namespace sdpa
