// The forward path's CUDA ops: the per-forward plan (plan_slots_cuda, fill_sources_cuda) and the
// per-layer dense build (build_dense_cuda, and layer_step_cuda, which also remaps the top-k).
// They exist to keep host time down, so each is one dispatcher trip: the per-forward ops
// allocate their outputs here rather than taking them from Python (an allocation made while a
// CUDA graph captures comes from the graph's pool, so capture still works), and layer_step_cuda
// launches both per-layer kernels. Fake (meta) kernels: cpkv_kernels._cuda_ops.
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <tuple>
#include <vector>

#include "binding_carve.h"
#include "binding_util.h"

namespace cpkv {
namespace {

using T = at::Tensor;

// Streaming multiprocessors of a device, asked once per device (build_dense sizes its grid by it).
int sm_count(c10::DeviceIndex device) {
  static std::array<std::atomic<int>, 64> known{};  // 0 = not asked yet
  auto& slot = known.at(static_cast<size_t>(device));
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    slot.store(n, std::memory_order_relaxed);
  }
  return n;
}

// In the order of cpkv_runtime's Layout fields (the plan_slots contract in cpkv_runtime._backend).
using PlanOutputs = std::tuple<T, T, T, T, T, T, T, T, T, T, T, T>;

PlanOutputs plan_slots_cuda(const T& req_pages, const T& prefix_lens, const T& extend_lens,
                            int64_t page_size, int64_t num_pages, int64_t max_slots, bool dedup) {
  check_cuda(req_pages, "req_pages", req_pages);
  check_cuda(prefix_lens, "prefix_lens", req_pages);
  check_cuda(extend_lens, "extend_lens", req_pages);
  check_index(req_pages, "req_pages", true);
  check_index(prefix_lens, "prefix_lens", true);
  check_index(extend_lens, "extend_lens", true);
  TORCH_CHECK(prefix_lens.scalar_type() == extend_lens.scalar_type(),
              "prefix_lens and extend_lens must share a dtype");
  TORCH_CHECK(req_pages.dim() == 2, "req_pages must be (B, M)");
  const int64_t bsz = req_pages.size(0), width = req_pages.size(1);
  TORCH_CHECK(prefix_lens.dim() == 1 && prefix_lens.numel() == bsz && extend_lens.dim() == 1 &&
                  extend_lens.numel() == bsz,
              "prefix_lens and extend_lens must be (B,)");
  TORCH_CHECK(page_size > 0 && num_pages > 0 && max_slots >= 0,
              "page_size, num_pages > 0 and max_slots >= 0");
  TORCH_CHECK(bsz * width < (int64_t{1} << 31) && max_slots < (int64_t{1} << 31),
              "B * M and max_slots must be < 2^31");
  const c10::cuda::CUDAGuard guard(req_pages.device());
  const Carved c = carve_some(req_pages.device(), plan_pieces(bsz, width, num_pages, max_slots), {});
  const std::vector<T>& o = c.tensor;
  const PlanSlotsArgs a = plan_args(req_pages.data_ptr(), req_pages.scalar_type() == at::kLong,
                                    prefix_lens.data_ptr(), extend_lens.data_ptr(),
                                    prefix_lens.scalar_type() == at::kLong, bsz, width, num_pages,
                                    max_slots, page_size, dedup, c.at);
  C10_CUDA_CHECK(launch_plan_slots(a, c10::cuda::getCurrentCUDAStream()));
  return {o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9], o[10], o[11]};
}

T fill_sources_cuda(const T& token_req, const T& out_cache_loc, const T& inverse, int64_t page_size,
                    int64_t num_slots) {
  check_cuda(token_req, "token_req", inverse);
  check_cuda(out_cache_loc, "out_cache_loc", inverse);
  check_cuda(inverse, "inverse", inverse);
  check_index(token_req, "token_req", false);
  check_index(out_cache_loc, "out_cache_loc", true);
  check_index(inverse, "inverse", false);
  TORCH_CHECK(page_size > 0 && num_slots >= 0, "page_size > 0 and num_slots >= 0");
  TORCH_CHECK(inverse.dim() == 2, "inverse must be (B, num_pages)");
  TORCH_CHECK(token_req.dim() == 1 && out_cache_loc.dim() == 1 &&
                  token_req.numel() == out_cache_loc.numel(),
              "token_req and out_cache_loc must be (T,)");
  TORCH_CHECK(token_req.numel() < (int64_t{1} << 31), "at most 2^31 - 1 current rows");
  const c10::cuda::CUDAGuard guard(inverse.device());
  T sources = at::empty({num_slots, page_size}, inverse.options());
  FillSourcesArgs a{token_req.data_ptr<int32_t>(),
                    out_cache_loc.data_ptr(),
                    out_cache_loc.scalar_type() == at::kLong,
                    token_req.numel(),
                    inverse.data_ptr<int32_t>(),
                    inverse.size(0),
                    inverse.size(1),
                    page_size,
                    sources.data_ptr<int32_t>(),
                    num_slots};
  C10_CUDA_CHECK(launch_fill_sources(a, c10::cuda::getCurrentCUDAStream()));
  return sources;
}

BuildDenseArgs build_dense_args(const T& kv_pool, const T& slot_page, const T& current_kv,
                                const T& sources, const std::optional<T>& used_slots, const T& out) {
  check_cuda(kv_pool, "kv_pool", out);
  check_cuda(slot_page, "slot_page", out);
  check_cuda(current_kv, "current_kv", out);
  check_cuda(sources, "sources", out);
  check_index(slot_page, "slot_page", false);
  check_index(sources, "sources", false);
  if (used_slots.has_value()) {
    check_cuda(*used_slots, "used_slots", out);
    check_index(*used_slots, "used_slots", false);
    TORCH_CHECK(used_slots->numel() == 1, "used_slots must hold one count");
  }
  TORCH_CHECK(kv_pool.dim() >= 2 && out.dim() == kv_pool.dim(), "kv_pool and out must be (n, P, *row)");
  TORCH_CHECK(out.sizes().slice(1) == kv_pool.sizes().slice(1), "out and kv_pool pages differ in shape");
  TORCH_CHECK(current_kv.dim() == out.dim() - 1 && current_kv.sizes().slice(1) == out.sizes().slice(2),
              "current_kv must be (T, *row) with out's row shape");
  TORCH_CHECK(out.element_size() == kv_pool.element_size() &&
                  out.element_size() == current_kv.element_size(),
              "kv_pool, current_kv and out element sizes differ");
  const int64_t slots = out.size(0), page_size = out.size(1);
  TORCH_CHECK(slot_page.numel() == slots, "slot_page must have one page per slot of out");
  TORCH_CHECK(sources.dim() == 2 && sources.size(0) == slots && sources.size(1) == page_size,
              "sources must be (S, P) like out's leading dims");
  const int64_t page_bytes = inner_bytes(kv_pool), row_bytes = inner_bytes(current_kv);
  TORCH_CHECK(page_bytes >= 0 && inner_bytes(out) == page_bytes && row_bytes >= 0 &&
                  page_bytes == row_bytes * page_size,
              "pages of kv_pool and out, and rows of current_kv, must be contiguous");
  return BuildDenseArgs{static_cast<const char*>(kv_pool.data_ptr()),
                        kv_pool.stride(0) * static_cast<int64_t>(kv_pool.element_size()),
                        kv_pool.size(0),
                        slot_page.data_ptr<int32_t>(),
                        static_cast<const char*>(current_kv.data_ptr()),
                        current_kv.stride(0) * static_cast<int64_t>(current_kv.element_size()),
                        current_kv.size(0),
                        sources.data_ptr<int32_t>(),
                        used_slots.has_value() ? used_slots->data_ptr<int32_t>() : nullptr,
                        static_cast<char*>(out.data_ptr()),
                        out.stride(0) * static_cast<int64_t>(out.element_size()),
                        slots,
                        page_size,
                        row_bytes,
                        sm_count(out.get_device())};
}

void build_dense_cuda(const T& kv_pool, const T& slot_page, const T& current_kv, const T& sources,
                      const std::optional<T>& used_slots, const T& out) {
  const BuildDenseArgs a = build_dense_args(kv_pool, slot_page, current_kv, sources, used_slots, out);
  const c10::cuda::CUDAGuard guard(out.device());
  C10_CUDA_CHECK(launch_build_dense(a, c10::cuda::getCurrentCUDAStream()));
}

void layer_step_cuda(const T& kv_pool, const T& slot_page, const T& current_kv, const T& sources,
                     const std::optional<T>& used_slots, const T& dense, const T& locs,
                     const T& row_req, const T& inverse, int64_t page_size, const T& dense_locs) {
  const BuildDenseArgs d = build_dense_args(kv_pool, slot_page, current_kv, sources, used_slots, dense);
  const RemapArgs r = remap_args(locs, row_req, inverse, page_size, dense_locs);
  check_cuda(dense_locs, "dense_locs", dense);
  TORCH_CHECK(page_size == d.page_size, "page_size must be dense's page size (dim 1)");
  const c10::cuda::CUDAGuard guard(dense.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  C10_CUDA_CHECK(launch_build_dense(d, stream));
  C10_CUDA_CHECK(launch_remap_locs(r, stream));
}

}  // namespace
}  // namespace cpkv

TORCH_LIBRARY_FRAGMENT(cpkv, m) {
  m.def(
      "plan_slots_cuda(Tensor req_pages, Tensor prefix_lens, Tensor extend_lens, int page_size, int num_pages, "
      "int max_slots, bool dedup) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
      "Tensor, Tensor, Tensor)");
  m.def(
      "fill_sources_cuda(Tensor token_req, Tensor out_cache_loc, Tensor inverse, int page_size, int num_slots) "
      "-> Tensor");
  m.def(
      "build_dense_cuda(Tensor kv_pool, Tensor slot_page, Tensor current_kv, Tensor sources, Tensor? used_slots, "
      "Tensor(a!) out) -> ()");
  m.def(
      "layer_step_cuda(Tensor kv_pool, Tensor slot_page, Tensor current_kv, Tensor sources, Tensor? used_slots, "
      "Tensor(a!) dense, Tensor locs, Tensor row_req, Tensor inverse, int page_size, Tensor(b!) dense_locs) -> ()");
}

TORCH_LIBRARY_IMPL(cpkv, CUDA, m) {
  m.impl("plan_slots_cuda", &cpkv::plan_slots_cuda);
  m.impl("fill_sources_cuda", &cpkv::fill_sources_cuda);
  m.impl("build_dense_cuda", &cpkv::build_dense_cuda);
  m.impl("layer_step_cuda", &cpkv::layer_step_cuda);
}
