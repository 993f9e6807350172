// Argument checks and launch-argument builders shared by binding.cpp and binding_forward.cpp.
// Checks here are the last line of defence (TORCH_CHECK -> RuntimeError); the Python wrappers
// raise ValueError first.
#pragma once

#include <ATen/core/Tensor.h>

#include "cpkv_launch.h"

namespace cpkv {

constexpr int64_t kMaxGridY = 65535;

inline void check_cuda(const at::Tensor& t, const char* name, const at::Tensor& like) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor, got device ", t.device());
  TORCH_CHECK(t.device() == like.device(), name, " is on ", t.device(), " but expected ",
              like.device());
}

inline void check_index(const at::Tensor& t, const char* name, bool allow_int64) {
  TORCH_CHECK(t.scalar_type() == at::kInt || (allow_int64 && t.scalar_type() == at::kLong), name,
              " must be int32", allow_int64 ? " or int64" : "", ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// Bytes of one leading-dim row of t when every dim after the first is contiguous, else -1.
inline int64_t inner_bytes(const at::Tensor& t) {
  int64_t expected = 1;
  for (int64_t d = t.dim() - 1; d >= 1; --d) {
    if (t.size(d) != 1 && t.stride(d) != expected) return -1;
    expected *= t.size(d);
  }
  return expected * static_cast<int64_t>(t.element_size());
}

// remap_locs' launch arguments, checked (shared by remap_locs_cuda and layer_step_cuda).
inline RemapArgs remap_args(const at::Tensor& locs, const at::Tensor& req_id,
                            const at::Tensor& inverse, int64_t page_size, const at::Tensor& out) {
  check_cuda(locs, "locs", out);
  check_cuda(req_id, "req_id", out);
  check_cuda(inverse, "inverse", out);
  check_index(locs, "locs", true);
  check_index(req_id, "req_id", false);
  check_index(inverse, "inverse", false);
  check_index(out, "out", false);
  TORCH_CHECK(page_size > 0, "page_size must be positive");
  TORCH_CHECK(locs.dim() == 1 || locs.dim() == 2, "locs must be (N,) or (N, K)");
  TORCH_CHECK(out.sizes() == locs.sizes(), "out must have locs' shape");
  TORCH_CHECK(req_id.numel() == locs.size(0), "req_id must have one entry per row of locs");
  TORCH_CHECK(inverse.dim() == 2, "inverse must be (B, num_pages)");
  return RemapArgs{locs.data_ptr(),
                   locs.scalar_type() == at::kLong,
                   req_id.data_ptr<int32_t>(),
                   inverse.data_ptr<int32_t>(),
                   inverse.size(0),
                   inverse.size(1),
                   out.data_ptr<int32_t>(),
                   locs.size(0),
                   locs.dim() == 2 ? locs.size(1) : 1,
                   page_size};
}

}  // namespace cpkv
