// The sharded pool's per-forward op shard_plan_cuda: the batch's pages, its slot plan, the
// gather order and the placement (scratch pages, send list, the current tokens' rows) in one
// dispatcher trip, the host's numbers in the first kernel's parameters, every output and
// workspace in one allocation (binding_carve.h). Fake (meta) kernel: cpkv_kernels._cuda_ops.
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <vector>

#include "binding_carve.h"
#include "binding_util.h"

namespace cpkv {
namespace {

using T = at::Tensor;

std::vector<T> shard_plan_cuda(const T& req_to_token, const T& req_pool_indices,
                               const T& out_cache_loc, at::IntArrayRef lens, at::IntArrayRef kept,
                               int64_t width, int64_t page_size, int64_t num_pages,
                               int64_t max_slots, int64_t shard_size, int64_t shard_rank,
                               int64_t write_base, int64_t trash_page, bool with_layout) {
  check_cuda(req_to_token, "req_to_token", req_to_token);
  check_cuda(req_pool_indices, "req_pool_indices", req_to_token);
  check_cuda(out_cache_loc, "out_cache_loc", req_to_token);
  check_index(req_to_token, "req_to_token", true);
  check_index(req_pool_indices, "req_pool_indices", true);
  check_index(out_cache_loc, "out_cache_loc", true);
  TORCH_CHECK(out_cache_loc.dim() == 1, "out_cache_loc must be (T,)");
  TORCH_CHECK(req_to_token.dim() == 2, "req_to_token must be (rows, cols)");
  TORCH_CHECK(lens.size() % 2 == 0, "lens must hold B prefix lengths then B extend lengths");
  const int64_t bsz = static_cast<int64_t>(lens.size()) / 2;
  const int64_t nkept = static_cast<int64_t>(kept.size());
  TORCH_CHECK(req_pool_indices.dim() == 1 && req_pool_indices.numel() == bsz,
              "req_pool_indices must be (B,), B = len(lens) / 2");
  TORCH_CHECK(page_size > 0 && num_pages > 0 && width >= 0 && max_slots >= 0,
              "page_size, num_pages > 0 and width, max_slots >= 0");
  TORCH_CHECK(shard_size >= 1 && shard_size <= kMaxShards && shard_rank >= 0 &&
                  shard_rank < shard_size,
              "shard_rank must be in [0, shard_size), shard_size in [1, ", kMaxShards, "]");
  TORCH_CHECK(bsz * width < (int64_t{1} << 31) && max_slots < (int64_t{1} << 31),
              "B * width and max_slots must be < 2^31");
  const c10::Device device = req_to_token.device();
  const c10::cuda::CUDAGuard guard(device);

  const int64_t staged_len = 3 * bsz + 1 + nkept;
  std::vector<Piece> pieces = plan_pieces(bsz, width, num_pages, max_slots);
  pieces.push_back({{max_slots}, max_slots});                // 12: order
  pieces.push_back({{max_slots}, max_slots});                // 13: spos
  pieces.push_back({{3 + shard_size}, 3 + shard_size});      // 14: host numbers
  pieces.push_back({{bsz + 1}, bsz + 1, at::kLong});         // 15: ext_start
  pieces.push_back({{bsz}, bsz, at::kLong});                 // 16: rows
  pieces.push_back({{nkept}, nkept, at::kLong});             // 17: kept
  pieces.push_back({{staged_len}, staged_len, at::kLong});   // 18: the host's numbers
  pieces.push_back({{max_slots}, max_slots});                // 19: category (workspace)
  const int64_t tokens = out_cache_loc.numel();
  pieces.push_back({{max_slots + 1}, max_slots + 1, at::kLong});  // 20: slot_scratch
  pieces.push_back({{max_slots}, max_slots});                      // 21: send_pages
  pieces.push_back({{tokens}, tokens, at::kLong});                 // 22: token_req
  pieces.push_back({{tokens}, tokens, at::kLong});                 // 23: cur_rows
  pieces.push_back({{tokens}, tokens, at::kLong});                 // 24: local_rows
  // The tensors returned (the forward's, then the layout's when asked for); the rest are
  // workspace the kernels address by pointer.
  const std::vector<int> lean{14, 8, 16, 17, 20, 21, 22, 23, 24};
  const std::vector<int> layout{12, 13, 15, 6, 0, 1, 2, 3, 4, 5, 7, 9, 10, 11};
  std::vector<bool> wanted(pieces.size(), false);
  for (const int i : lean) wanted[i] = true;
  if (with_layout) {
    for (const int i : layout) wanted[i] = true;
  }
  const Carved o = carve_some(device, pieces, wanted);

  // The host's numbers: prefix, extend, ext_start, kept. Inline in the first kernel's
  // parameters when they fit (no copy, no pinned buffer), else one pinned non-blocking copy.
  ShardInline inline_numbers;
  const bool fits = staged_len <= kShardInline;
  T staged;
  int64_t* h = inline_numbers.v;
  if (!fits) {
    staged = at::empty({staged_len}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
    h = staged.data_ptr<int64_t>();
  }
  int64_t run = 0;
  for (int64_t b = 0; b < bsz; ++b) {
    h[b] = lens[b];
    h[bsz + b] = lens[bsz + b];
    h[2 * bsz + b] = run;
    run += lens[bsz + b];
  }
  h[3 * bsz] = run;
  for (int64_t k = 0; k < nkept; ++k) h[3 * bsz + 1 + k] = kept[k];
  int64_t* up = o.ptr<int64_t>(18);
  if (!fits) {  // copy_ from pinned memory is asynchronous and keeps the host block until it ran
    at::from_blob(up, {staged_len}, at::TensorOptions().dtype(at::kLong).device(device))
        .copy_(staged, /*non_blocking=*/true);
  }
  PlanSlotsArgs plan = plan_args(o.at[0], false, up, up + bsz, true, bsz, width, num_pages,
                                 max_slots, page_size, /*dedup=*/true, o.at);
  ShardPlanArgs a{plan,
                  req_to_token.data_ptr(),
                  req_to_token.scalar_type() == at::kLong,
                  req_to_token.size(0),
                  req_to_token.size(1),
                  req_pool_indices.data_ptr(),
                  req_pool_indices.scalar_type() == at::kLong,
                  nkept,
                  fits,
                  up,
                  o.ptr<int64_t>(15),
                  o.ptr<int64_t>(16),
                  o.ptr<int64_t>(17),
                  shard_size,
                  o.ptr<int32_t>(19),
                  o.ptr<int32_t>(12),
                  o.ptr<int32_t>(13),
                  o.ptr<int32_t>(14),
                  out_cache_loc.data_ptr(),
                  out_cache_loc.scalar_type() == at::kLong,
                  tokens,
                  shard_rank,
                  write_base,
                  trash_page,
                  o.ptr<int64_t>(20),
                  o.ptr<int32_t>(21),
                  o.ptr<int64_t>(22),
                  o.ptr<int64_t>(23),
                  o.ptr<int64_t>(24)};
  C10_CUDA_CHECK(launch_shard_plan(a, inline_numbers, c10::cuda::getCurrentCUDAStream()));
  // What the forward needs first; the layout's other tensors only when asked (each returned
  // tensor costs the host a Python object).
  std::vector<T> out;
  for (const int i : lean) out.push_back(o.tensor[i]);
  if (with_layout) {
    for (const int i : layout) out.push_back(o.tensor[i]);
  }
  return out;
}

}  // namespace
}  // namespace cpkv

TORCH_LIBRARY_FRAGMENT(cpkv, m) {
  m.def(
      "shard_plan_cuda(Tensor req_to_token, Tensor req_pool_indices, Tensor out_cache_loc, int[] lens, "
      "int[] kept, int width, int page_size, int num_pages, int max_slots, int shard_size, int shard_rank, "
      "int write_base, int trash_page, bool with_layout) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(cpkv, CUDA, m) {
  m.impl("shard_plan_cuda", &cpkv::shard_plan_cuda);
}
