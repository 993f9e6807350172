// Host-side launch interface between binding.cpp (torch) and the .cu files (plain CUDA).
// Pointers are raw device pointers; strides are in bytes unless named *_elems.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

namespace cpkv {

struct BuildInverseArgs {
  const int32_t* slot_table;  // (B, M)
  const int32_t* req_pages;   // (B, M)
  int32_t* inverse;           // (B, num_pages), written
  int64_t num_reqs;
  int64_t max_pages;
  int64_t num_pages;
};

struct MaterializeArgs {
  const char* pool;        // (num_pages, page_bytes) rows, stride pool_stride
  int64_t pool_stride;
  int64_t num_pages;
  const int32_t* slot_page;  // (S,)
  char* dense;               // (S, page_bytes) rows, stride dense_stride, written
  int64_t dense_stride;
  int64_t num_slots;
  int64_t page_bytes;
};

struct FillCurrentArgs {
  char* dense;  // (S, P * row_bytes), stride dense_stride, written
  int64_t dense_stride;
  int64_t num_slots;
  const char* src;  // (T, row_bytes), stride src_stride
  int64_t src_stride;
  int64_t num_tokens;
  int64_t row_bytes;
  const int32_t* token_req;  // (T,)
  const void* loc;           // (T,) int32 or int64
  bool loc_is_64;
  const int32_t* inverse;  // (B, num_pages)
  int64_t num_reqs;
  int64_t num_pages;
  int64_t page_size;
};

struct RemapArgs {
  const void* locs;  // (N, K) int32 or int64, contiguous
  bool locs_is_64;
  const int32_t* req_id;  // (N,)
  const int32_t* inverse;  // (B, num_pages)
  int64_t num_reqs;
  int64_t num_pages;
  int32_t* out;  // (N, K), written
  int64_t rows;
  int64_t cols;
  int64_t page_size;
};

// The mask is keyed by (request, page index), never by page value: req_pages' shape is all the
// kernel needs, so its values (and dtype) are never read.
struct PageMaskArgs {
  const void* prefix_lens;  // (B,) int32 or int64 (same dtype as extend_lens)
  const void* extend_lens;  // (B,)
  bool lens_is_64;
  bool* mask;  // (B, M), written
  int64_t num_reqs;
  int64_t max_pages;
  int64_t page_size;
};

// The slot plan of a batch: every output its own int32 tensor (the binding allocates them; the
// contract and field order are cpkv_runtime._backend's plan_slots).
struct PlanSlotsArgs {
  const void* req_pages;    // (B, M) int32 or int64
  bool pages_are_64;
  const void* prefix_lens;  // (B,) int32 or int64 (same dtype as extend_lens)
  const void* extend_lens;  // (B,)
  bool lens_are_64;
  int64_t num_reqs;
  int64_t width;  // M
  int64_t num_pages;
  int64_t max_slots;  // S
  int64_t page_size;
  bool dedup;
  int32_t* pages;       // (B, M), written
  int32_t* prefix;      // (B,), written
  int32_t* extend;      // (B,), written
  int32_t* seq;         // (B,), written
  int32_t* pages_used;  // (B,), written
  int32_t* slot_table;  // (B, M), written
  int32_t* slot_page;   // (S,), written
  int32_t* slot_owner;  // (S,), written
  int32_t* inverse;     // (B + 1, num_pages), written; row B is scratch
  int32_t* used_slots;  // (1,), written
  int32_t* status;      // (1,), written
  int32_t* info;        // (3,) = (used_slots, status, tokens), written
};

// The current row fill_current writes into each dense row (-1: none), for build_dense.
struct FillSourcesArgs {
  const int32_t* token_req;  // (T,)
  const void* loc;           // (T,) int32 or int64
  bool loc_is_64;
  int64_t num_tokens;
  const int32_t* inverse;  // (B, num_pages)
  int64_t num_reqs;
  int64_t num_pages;
  int64_t page_size;
  int32_t* sources;  // (S, P), written
  int64_t num_slots;
};

// materialize + fill_current in one pass: each dense row from its source row, else its pool page.
struct BuildDenseArgs {
  const char* pool;  // (num_pages, P * row_bytes) rows, stride pool_stride
  int64_t pool_stride;
  int64_t num_pages;
  const int32_t* slot_page;  // (S,)
  const char* src;           // (T, row_bytes), stride src_stride
  int64_t src_stride;
  int64_t num_tokens;
  const int32_t* sources;     // (S, P)
  const int32_t* used_slots;  // (1,) or nullptr: slots from used_slots[0] on are not visited
  char* dense;                // (S, P * row_bytes), stride dense_stride, written
  int64_t dense_stride;
  int64_t num_slots;
  int64_t page_size;
  int64_t row_bytes;
  int sm_count;  // the grid is one wave of blocks that loop (the row count lives on the device)
};

// shard_plan (binding_shard.cpp): plan_slots' passes over pages read from req_to_token, then the
// order in which a page-interleaved sharded pool gathers the slots. Contract:
// cpkv_runtime._backend. The host's numbers (prefix, extend, ext_start, kept: 3B + 1 + K int64)
// travel inline in the first kernel's parameters when they fit, else by one copy to `staged`.
constexpr int kShardInline = 240;  // 1,928 bytes of parameters
struct ShardInline {
  int64_t v[kShardInline];
};

struct ShardPlanArgs {
  PlanSlotsArgs plan;        // req_pages = plan.pages (written by the first kernel), int64 lens
  const void* req_to_token;  // (rows, cols) int32 or int64 token locations
  bool r2t_is_64;
  int64_t r2t_rows;
  int64_t r2t_cols;
  const void* req_pool_indices;  // (B,) int32 or int64
  bool rpi_is_64;
  int64_t num_kept;      // K
  bool inline_host;      // the host numbers are in ShardInline (else already in staged)
  int64_t* staged;       // (3B + 1 + K,) int64: prefix, extend, ext_start, kept
  int64_t* ext_start;    // (B + 1,), written
  int64_t* rows;         // (B,), written: 0 .. B - 1
  int64_t* kept;         // (K,), written
  int64_t shard_size;    // N <= kMaxShards
  int32_t* category;     // (S,) workspace: each slot's gather category (owner rank, or N)
  int32_t* order;        // (S,), written
  int32_t* spos;         // (S,), written
  int32_t* host;         // (3 + N,), written: status, used slots, g_0 .. g_{N-1}, block
  // The placement (pass "place", after the order; block is the largest g_r - g_{r-1}).
  const void* loc;  // (T,) int32 or int64 current-token locations
  bool loc_is_64;
  int64_t num_tokens;
  int64_t shard_rank;
  int64_t write_base;
  int64_t trash_page;
  int64_t* slot_scratch;  // (S + 1,), written
  int32_t* send_pages;    // (S,), written: this rank's run, then 0
  int64_t* token_req;     // (T,), written
  int64_t* cur_rows;      // (T,), written
  int64_t* local_rows;    // (T,), written
};

constexpr int64_t kMaxShards = 64;

cudaError_t launch_build_inverse(const BuildInverseArgs& a, cudaStream_t stream);
cudaError_t launch_materialize(const MaterializeArgs& a, cudaStream_t stream);
cudaError_t launch_fill_current(const FillCurrentArgs& a, cudaStream_t stream);
cudaError_t launch_remap_locs(const RemapArgs& a, cudaStream_t stream);
cudaError_t launch_current_page_mask(const PageMaskArgs& a, cudaStream_t stream);
cudaError_t launch_plan_slots(const PlanSlotsArgs& a, cudaStream_t stream);
cudaError_t launch_fill_sources(const FillSourcesArgs& a, cudaStream_t stream);
cudaError_t launch_build_dense(const BuildDenseArgs& a, cudaStream_t stream);
cudaError_t launch_shard_plan(const ShardPlanArgs& a, const ShardInline& host_numbers,
                              cudaStream_t stream);

// Widest power-of-two word (<= 16 bytes) dividing every value (byte widths, strides, addresses).
inline int word_bytes(std::initializer_list<uint64_t> values) {
  uint64_t acc = 16;
  for (uint64_t v : values) {
    while (acc > 1 && v % acc != 0) acc >>= 1;
  }
  return static_cast<int>(acc);
}

// launch(std::integral_constant<int, BYTES>{}) for BYTES = word_bytes(values): the one copy of
// the word-width dispatch of the kernels that move rows as opaque words.
template <typename Launch>
cudaError_t by_word(std::initializer_list<uint64_t> values, Launch&& launch) {
  switch (word_bytes(values)) {
    case 16: return launch(std::integral_constant<int, 16>{});
    case 8: return launch(std::integral_constant<int, 8>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    default: return launch(std::integral_constant<int, 1>{});
  }
}

inline int page_shift_of(int64_t page_size) {
  if (page_size <= 0 || (page_size & (page_size - 1)) != 0) return -1;
  int s = 0;
  while ((int64_t{1} << s) < page_size) ++s;
  return s;
}

}  // namespace cpkv
