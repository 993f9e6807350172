// Registers the per-op CUDA implementations as torch.library ops cpkv::<op>_cuda (the forward
// path's ops, planner included, are in binding_forward.cpp). Fake (meta) kernels are registered
// from Python (cpkv_kernels._cuda_ops) after the library loads.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "binding_util.h"

namespace cpkv {
namespace {

void build_inverse_cuda(const at::Tensor& slot_table, const at::Tensor& req_pages, int64_t num_pages,
                        const at::Tensor& inverse) {
  check_cuda(slot_table, "slot_table", inverse);
  check_cuda(req_pages, "req_pages", inverse);
  check_index(slot_table, "slot_table", false);
  check_index(req_pages, "req_pages", false);
  check_index(inverse, "inverse", false);
  TORCH_CHECK(slot_table.dim() == 2 && slot_table.sizes() == req_pages.sizes(),
              "slot_table and req_pages must both be (B, M)");
  TORCH_CHECK(inverse.dim() == 2 && inverse.size(0) == slot_table.size(0) &&
                  inverse.size(1) == num_pages,
              "inverse must be (B, num_pages)");
  TORCH_CHECK(slot_table.size(0) <= kMaxGridY, "at most ", kMaxGridY, " requests");
  const c10::cuda::CUDAGuard guard(inverse.device());
  BuildInverseArgs a{slot_table.data_ptr<int32_t>(), req_pages.data_ptr<int32_t>(),
                     inverse.data_ptr<int32_t>(),   slot_table.size(0),
                     slot_table.size(1),            num_pages};
  C10_CUDA_CHECK(launch_build_inverse(a, c10::cuda::getCurrentCUDAStream()));
}

void materialize_cuda(const at::Tensor& kv_pool, const at::Tensor& slot_page, const at::Tensor& out) {
  check_cuda(kv_pool, "kv_pool", out);
  check_cuda(slot_page, "slot_page", out);
  check_index(slot_page, "slot_page", false);
  TORCH_CHECK(kv_pool.dim() >= 2 && out.dim() == kv_pool.dim(), "kv_pool and out must be (n, P, *row)");
  TORCH_CHECK(out.sizes().slice(1) == kv_pool.sizes().slice(1), "out and kv_pool pages differ in shape");
  TORCH_CHECK(out.size(0) == slot_page.numel(), "out must have one page per slot");
  TORCH_CHECK(out.element_size() == kv_pool.element_size(), "out and kv_pool element sizes differ");
  const int64_t page_bytes = inner_bytes(kv_pool);
  TORCH_CHECK(page_bytes >= 0 && inner_bytes(out) == page_bytes, "pages must be contiguous");
  const c10::cuda::CUDAGuard guard(out.device());
  MaterializeArgs a{static_cast<const char*>(kv_pool.data_ptr()),
                    kv_pool.stride(0) * static_cast<int64_t>(kv_pool.element_size()),
                    kv_pool.size(0),
                    slot_page.data_ptr<int32_t>(),
                    static_cast<char*>(out.data_ptr()),
                    out.stride(0) * static_cast<int64_t>(out.element_size()),
                    out.size(0),
                    page_bytes};
  C10_CUDA_CHECK(launch_materialize(a, c10::cuda::getCurrentCUDAStream()));
}

void fill_current_cuda(const at::Tensor& dense, const at::Tensor& current_kv, const at::Tensor& token_req,
                       const at::Tensor& out_cache_loc, const at::Tensor& inverse, int64_t page_size) {
  check_cuda(current_kv, "current_kv", dense);
  check_cuda(token_req, "token_req", dense);
  check_cuda(out_cache_loc, "out_cache_loc", dense);
  check_cuda(inverse, "inverse", dense);
  check_index(token_req, "token_req", false);
  check_index(out_cache_loc, "out_cache_loc", true);
  check_index(inverse, "inverse", false);
  TORCH_CHECK(page_size > 0 && dense.dim() >= 2 && dense.size(1) == page_size,
              "dense must be (S, page_size, *row)");
  TORCH_CHECK(current_kv.dim() == dense.dim() - 1 &&
                  current_kv.sizes().slice(1) == dense.sizes().slice(2),
              "current_kv must be (T, *row) with dense's row shape");
  TORCH_CHECK(current_kv.element_size() == dense.element_size(), "current_kv and dense element sizes differ");
  TORCH_CHECK(token_req.numel() == current_kv.size(0) && out_cache_loc.numel() == current_kv.size(0),
              "token_req and out_cache_loc must have one entry per token");
  TORCH_CHECK(inverse.dim() == 2, "inverse must be (B, num_pages)");
  const int64_t page_bytes = inner_bytes(dense);
  const int64_t row_bytes = inner_bytes(current_kv);
  TORCH_CHECK(page_bytes >= 0 && row_bytes >= 0 && page_bytes == row_bytes * page_size,
              "dense pages and current_kv rows must be contiguous");
  const c10::cuda::CUDAGuard guard(dense.device());
  FillCurrentArgs a{static_cast<char*>(dense.data_ptr()),
                    dense.stride(0) * static_cast<int64_t>(dense.element_size()),
                    dense.size(0),
                    static_cast<const char*>(current_kv.data_ptr()),
                    current_kv.stride(0) * static_cast<int64_t>(current_kv.element_size()),
                    current_kv.size(0),
                    row_bytes,
                    token_req.data_ptr<int32_t>(),
                    out_cache_loc.data_ptr(),
                    out_cache_loc.scalar_type() == at::kLong,
                    inverse.data_ptr<int32_t>(),
                    inverse.size(0),
                    inverse.size(1),
                    page_size};
  C10_CUDA_CHECK(launch_fill_current(a, c10::cuda::getCurrentCUDAStream()));
}

void remap_locs_cuda(const at::Tensor& locs, const at::Tensor& req_id, const at::Tensor& inverse,
                     int64_t page_size, const at::Tensor& out) {
  const RemapArgs a = remap_args(locs, req_id, inverse, page_size, out);
  const c10::cuda::CUDAGuard guard(out.device());
  C10_CUDA_CHECK(launch_remap_locs(a, c10::cuda::getCurrentCUDAStream()));
}

void current_page_mask_cuda(const at::Tensor& req_pages, const at::Tensor& prefix_lens,
                            const at::Tensor& extend_lens, int64_t page_size, const at::Tensor& mask) {
  check_cuda(req_pages, "req_pages", mask);
  check_cuda(prefix_lens, "prefix_lens", mask);
  check_cuda(extend_lens, "extend_lens", mask);
  check_index(prefix_lens, "prefix_lens", true);
  check_index(extend_lens, "extend_lens", true);
  TORCH_CHECK(prefix_lens.scalar_type() == extend_lens.scalar_type(),
              "prefix_lens and extend_lens must share a dtype");
  TORCH_CHECK(page_size > 0, "page_size must be positive");
  TORCH_CHECK(req_pages.dim() == 2 && mask.sizes() == req_pages.sizes() && mask.scalar_type() == at::kBool &&
                  mask.is_contiguous(),
              "mask must be a contiguous bool (B, M)");
  TORCH_CHECK(prefix_lens.numel() == req_pages.size(0) && extend_lens.numel() == req_pages.size(0),
              "prefix_lens and extend_lens must be (B,)");
  TORCH_CHECK(req_pages.size(0) <= kMaxGridY, "at most ", kMaxGridY, " requests");
  const c10::cuda::CUDAGuard guard(mask.device());
  PageMaskArgs a{prefix_lens.data_ptr(),
                 extend_lens.data_ptr(),
                 prefix_lens.scalar_type() == at::kLong,
                 mask.data_ptr<bool>(),
                 req_pages.size(0),
                 req_pages.size(1),
                 page_size};
  C10_CUDA_CHECK(launch_current_page_mask(a, c10::cuda::getCurrentCUDAStream()));
}

}  // namespace
}  // namespace cpkv

// These ops write into tensors the caller passes and never sync with the host: safe inside
// CUDA-graph capture.
TORCH_LIBRARY_FRAGMENT(cpkv, m) {
  m.def("build_inverse_cuda(Tensor slot_table, Tensor req_pages, int num_pages, Tensor(a!) inverse) -> ()");
  m.def("materialize_cuda(Tensor kv_pool, Tensor slot_page, Tensor(a!) out) -> ()");
  m.def(
      "fill_current_cuda(Tensor(a!) dense, Tensor current_kv, Tensor token_req, Tensor out_cache_loc, "
      "Tensor inverse, int page_size) -> ()");
  m.def("remap_locs_cuda(Tensor locs, Tensor req_id, Tensor inverse, int page_size, Tensor(a!) out) -> ()");
  m.def(
      "current_page_mask_cuda(Tensor req_pages, Tensor prefix_lens, Tensor extend_lens, int page_size, "
      "Tensor(a!) mask) -> ()");
}

TORCH_LIBRARY_IMPL(cpkv, CUDA, m) {
  m.impl("build_inverse_cuda", &cpkv::build_inverse_cuda);
  m.impl("materialize_cuda", &cpkv::materialize_cuda);
  m.impl("fill_current_cuda", &cpkv::fill_current_cuda);
  m.impl("remap_locs_cuda", &cpkv::remap_locs_cuda);
  m.impl("current_page_mask_cuda", &cpkv::current_page_mask_cuda);
}
