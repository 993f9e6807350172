// Output tensors carved from one allocation, for the per-forward ops that allocate their outputs
// (binding_forward.cpp's plan_slots_cuda, binding_shard.cpp's shard_plan_cuda).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "cpkv_launch.h"

namespace cpkv {

// One caching-allocator block shared by several tensors, freed when the last of them is: each
// tensor has its own storage over its own piece, so no two alias (as an op's outputs must not).
// Twelve separate allocations would cost the host an allocator round trip each, and their frees.
// The cost: Tensor.record_stream on these tensors is a silent no-op (the allocator skips storage it
// did not hand out itself), so a consumer on another stream must order itself with an event.
struct SharedBlock {
  c10::DataPtr data;
  std::atomic<int> refs{1};  // the carver's own reference, dropped when it returns
};

inline void release_block(void* ctx) {
  auto* block = static_cast<SharedBlock*>(ctx);
  if (block->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete block;
}

struct Piece {
  std::vector<int64_t> shape;
  int64_t reserve;  // elements set aside (>= the shape's; extra room is scratch)
  at::ScalarType dtype = at::kInt;
};

// One block of the current device cut into pieces, each on a 256-byte boundary (as cudaMalloc's):
// every piece's address, and a tensor over each piece that is asked for (a piece nobody returns,
// a kernel's workspace, needs no tensor: each costs the host a refcounted allocation). The block
// comes from the allocator torch uses for CUDA tensors (pluggable ones and CUDA-graph pools
// included) and lives while any of the tensors does.
struct Carved {
  std::vector<char*> at;           // each piece's first byte
  std::vector<at::Tensor> tensor;  // undefined where not asked for
  template <typename E>
  E* ptr(size_t i) const {
    return reinterpret_cast<E*>(at[i]);
  }
};

// ``wanted`` empty: a tensor over every piece.
inline Carved carve_some(c10::Device device, const std::vector<Piece>& pieces,
                         const std::vector<bool>& wanted) {
  constexpr int64_t kAlign = 256;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Piece& p : pieces) {
    offsets.push_back(total);
    const int64_t bytes = p.reserve * static_cast<int64_t>(c10::elementSize(p.dtype));
    total += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  auto* block = new SharedBlock;
  block->data = c10::cuda::CUDACachingAllocator::get()->allocate(
      static_cast<size_t>(std::max<int64_t>(total, 1)));
  struct Drop {
    SharedBlock* b;
    ~Drop() { release_block(b); }
  } drop{block};
  char* base = static_cast<char*>(block->data.get());
  Carved out;
  out.at.reserve(pieces.size());
  out.tensor.resize(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    out.at.push_back(base + offsets[i]);
    if (!wanted.empty() && !wanted[i]) continue;
    block->refs.fetch_add(1, std::memory_order_relaxed);
    out.tensor[i] = at::for_blob(base + offsets[i], pieces[i].shape)
                        .context(block, release_block)
                        .target_device(device)
                        .options(at::TensorOptions().dtype(pieces[i].dtype).device(device))
                        .make_tensor();
  }
  return out;
}

// plan_slots' pieces in output order; the inverse's piece holds one more row: the kernel's scratch.
inline std::vector<Piece> plan_pieces(int64_t bsz, int64_t width, int64_t num_pages,
                                      int64_t max_slots) {
  return {
      {{bsz, width}, bsz * width},                // pages
      {{bsz}, bsz},                               // prefix
      {{bsz}, bsz},                               // extend
      {{bsz}, bsz},                               // seq
      {{bsz}, bsz},                               // pages_used
      {{bsz, width}, bsz * width},                // slot_table
      {{max_slots}, max_slots},                   // slot_page
      {{max_slots}, max_slots},                   // slot_owner
      {{bsz, num_pages}, (bsz + 1) * num_pages},  // inverse, then the scratch row
      {{1}, 1},                                   // used_slots
      {{1}, 1},                                   // status
      {{3}, 3},                                   // info
  };
}

// plan_slots' launch arguments over plan_pieces' first twelve pieces at ``o`` (pages and lengths
// as given).
inline PlanSlotsArgs plan_args(const void* req_pages, bool pages_are_64, const void* prefix_lens,
                               const void* extend_lens, bool lens_are_64, int64_t bsz,
                               int64_t width, int64_t num_pages, int64_t max_slots,
                               int64_t page_size, bool dedup, const std::vector<char*>& o) {
  return PlanSlotsArgs{req_pages,
                       pages_are_64,
                       prefix_lens,
                       extend_lens,
                       lens_are_64,
                       bsz,
                       width,
                       num_pages,
                       max_slots,
                       page_size,
                       dedup,
                       reinterpret_cast<int32_t*>(o[0]),
                       reinterpret_cast<int32_t*>(o[1]),
                       reinterpret_cast<int32_t*>(o[2]),
                       reinterpret_cast<int32_t*>(o[3]),
                       reinterpret_cast<int32_t*>(o[4]),
                       reinterpret_cast<int32_t*>(o[5]),
                       reinterpret_cast<int32_t*>(o[6]),
                       reinterpret_cast<int32_t*>(o[7]),
                       reinterpret_cast<int32_t*>(o[8]),
                       reinterpret_cast<int32_t*>(o[9]),
                       reinterpret_cast<int32_t*>(o[10]),
                       reinterpret_cast<int32_t*>(o[11])};
}

}  // namespace cpkv
