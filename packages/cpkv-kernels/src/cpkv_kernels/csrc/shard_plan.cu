// shard_plan: one forward's scratch plan for a page-interleaved sharded KV pool
// (logical page l on rank l % N as local page l // N), in fixed shapes, no host sync.
// Reference: cpkv_runtime's torch backend, op "shard_plan" (_torch_shard.py).
//
// It is plan_slots' passes (plan_slots.cuh) in two kernels after the inverse's memset:
// shard_pairs (one pair per thread) reads each request's page from req_to_token at the page's
// first position, lands the host's numbers (from the kernel's parameters when they fit) and runs
// pass 1; shard_number (one block of 1,024 threads) numbers the slots (passes 0, 2, 3), sorting
// each slot it opens into its gather category as it goes (gathered on rank r = page % N, or not
// gathered: known from the opening pair alone) and counting the categories, and then orders the
// slots for the gather, because a stable order is a scan: tile by tile in slot order, the rank
// of a slot among its warp's slots of the same category comes from __match_any_sync, the warps'
// counts are scanned per category by one thread each and carried from tile to tile, and the
// all-gather's block (the largest run) is known on the device. shard_place (one thread per
// output element) then gives each slot its scratch page, this rank's send list, and each
// current token its request, scratch row and local pool row. Four launches (a memset and three
// kernels) from one host call, and none waits for the host's read of the counts (separate
// kernels for the pages, the numbering and the order, a pinned copy and a second call after the
// read took six launches, a copy and two calls). A pass of its own that marked the gathered
// slots after the numbering cost the one block a second walk over every pair.
#include "cpkv_common.cuh"
#include "cpkv_launch.h"
#include "plan_slots.cuh"

#include <algorithm>

namespace cpkv {
namespace {

using plan_detail::floordiv;

constexpr int kPairsThreads = 256;
constexpr int kOrderThreads = plan_detail::kPlanThreads;
constexpr int kOrderWarps = kOrderThreads / 32;
constexpr int kPlaceThreads = 256;

__device__ __forceinline__ int64_t load_any(const void* p, bool is_64, int64_t i) {
  return is_64 ? static_cast<int64_t>(__ldg(static_cast<const int64_t*>(p) + i))
               : static_cast<int64_t>(__ldg(static_cast<const int32_t*>(p) + i));
}

// Pair f's page: req_to_token[req_pool_indices[b], j * P] // P for j < ceil(seq_b / P), -1 past
// that. A read outside req_to_token or a negative page gives -1, a page past int32 gives
// INT32_MAX: pass 1 reports either as a bad page. Threads past the pairs land the host numbers.
__global__ void __launch_bounds__(kPairsThreads)
    shard_pairs_kernel(ShardPlanArgs a, const __grid_constant__ ShardInline host) {
  const PlanSlotsArgs& pa = a.plan;
  const int64_t bsz = pa.num_reqs, f = static_cast<int64_t>(blockIdx.x) * kPairsThreads + threadIdx.x;
  const int64_t staged_len = 3 * bsz + 1 + a.num_kept;
  auto value = [&](int64_t i) { return a.inline_host ? host.v[i] : a.staged[i]; };
  if (f < staged_len) {
    const int64_t v = value(f);
    if (a.inline_host) a.staged[f] = v;
    if (f >= 2 * bsz && f <= 3 * bsz) a.ext_start[f - 2 * bsz] = v;
    if (f > 3 * bsz) a.kept[f - 3 * bsz - 1] = v;
  }
  if (f < bsz) a.rows[f] = f;
  if (f >= bsz * pa.width) return;
  plan_detail::Pair p;
  p.b = floordiv(f, pa.width);  // f < B * M < 2^31 (the binding checks)
  const int64_t j = f - p.b * pa.width;
  const int64_t prefix = value(p.b), extend = value(bsz + p.b);
  p.used = j < floordiv(prefix + extend + pa.page_size - 1, pa.page_size);
  p.page = -1;
  if (p.used) {
    const int64_t row = load_any(a.req_pool_indices, a.rpi_is_64, p.b), col = j * pa.page_size;
    if (row >= 0 && row < a.r2t_rows && col < a.r2t_cols) {
      const int64_t page = floordiv(load_any(a.req_to_token, a.r2t_is_64, row * a.r2t_cols + col),
                                    pa.page_size);
      p.page = page < 0 ? -1 : (page < INT32_MAX ? page : INT32_MAX);
    }
  }
  p.valid = p.used && p.page >= 0 && p.page < pa.num_pages;
  p.written = p.used && extend > 0 && j >= floordiv(prefix, pa.page_size);
  plan_detail::count_pair<true>(pa, f, p);
}

__global__ void __launch_bounds__(kOrderThreads) shard_number_kernel(ShardPlanArgs a) {
  __shared__ int start[kMaxShards + 1];  // per category: count, then run start
  __shared__ int carry[kMaxShards + 1];  // per category: slots numbered so far
  __shared__ int warp_count[kOrderWarps][kMaxShards + 1];
  const PlanSlotsArgs& pa = a.plan;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = static_cast<int>(a.shard_size), cats = n + 1;
  for (int c = tid; c < cats; c += kOrderThreads) start[c] = 0, carry[c] = 0;
  __syncthreads();
  // Each slot's category as the numbering opens it: a slot is gathered when some request reads
  // history through it (its page j < ceil(prefix / P)). That is every read-only slot (a pair
  // that does not write is history: j < floor(prefix / P), or the request extends by nothing)
  // and a written slot whose page also holds the prefix's last rows. Gathered: the rank that
  // owns the page (page % N); else N. The counts come with it, in shared memory.
  auto sort_opened = [&](int64_t slot, int64_t f, const plan_detail::Pair& p) {
    bool gathered = !p.written;
    if (!gathered) {
      const int64_t j = f - p.b * pa.width;
      gathered = j < floordiv(a.staged[p.b] + pa.page_size - 1, pa.page_size);
    }
    const int c = gathered ? static_cast<int32_t>(p.page) % n : n;  // a valid page < 2^31
    a.category[slot] = c;
    atomicAdd(&start[c], 1);
  };
  plan_detail::number_slots<int32_t, int64_t, true>(pa, sort_opened);
  __syncthreads();  // the categories and info are the block's own writes: read via L2

  const int64_t S = pa.max_slots;
  const int32_t used_raw = __ldcg(pa.info + 0), status = __ldcg(pa.info + 1);
  const int64_t used = (status == 0 && used_raw <= S) ? used_raw : 0;  // bad input: identity
  if (tid == 0) {
    int run = 0, block = 0;
    for (int c = 0; c < cats; ++c) {
      const int count = used > 0 ? start[c] : 0;
      start[c] = run;
      run += count;
      if (c < n) a.host[2 + c] = run, block = max(block, count);  // gathered, ranks 0..c
    }
    a.host[0] = status;
    a.host[1] = used_raw;
    a.host[2 + n] = block;  // the all-gather's pages per rank: the largest run
  }
  __syncthreads();
  for (int64_t t0 = 0; t0 < used; t0 += kOrderThreads) {  // the same trip count in every thread
    for (int i = tid; i < kOrderWarps * cats; i += kOrderThreads) warp_count[i / cats][i % cats] = 0;
    const int64_t s = t0 + tid;
    const int c = s < used ? __ldcg(a.category + s) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, c);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    __syncthreads();
    if (c >= 0 && rank == 0) warp_count[warp][c] = __popc(peers);
    __syncthreads();
    if (tid < cats) {  // exclusive scan over the warps, carried from tile to tile
      int run = carry[tid];
      for (int w = 0; w < kOrderWarps; ++w) {
        const int count = warp_count[w][tid];
        warp_count[w][tid] = run;
        run += count;
      }
      carry[tid] = run;
    }
    __syncthreads();
    if (c >= 0) {
      const int pos = start[c] + warp_count[warp][c] + rank;
      a.order[pos] = static_cast<int32_t>(s);
      a.spos[s] = pos;
    }
    __syncthreads();  // warp_count is cleared by the next tile
  }
  for (int64_t s = used + tid; s < S; s += kOrderThreads) {  // padding slots keep their place
    a.order[s] = static_cast<int32_t>(s);
    a.spos[s] = static_cast<int32_t>(s);
  }
}

// Scratch page of the slot at gather position pos: rank r's run [g_{r-1}, g_r) goes to
// r * block + (pos - g_{r-1}); the rest (not gathered) to write_base + (pos - g_{N-1}).
__device__ __forceinline__ int64_t scratch_page(const ShardPlanArgs& a, int64_t pos,
                                                int64_t block) {
  int64_t begin = 0;
  for (int64_t r = 0; r < a.shard_size; ++r) {
    const int64_t end = a.host[2 + r];
    if (pos < end) return r * block + (pos - begin);
    begin = end;
  }
  return a.write_base + (pos - begin);
}

// After shard_number: one thread per output element (slot_scratch, send_pages, then tokens).
__global__ void __launch_bounds__(kPlaceThreads) shard_place_kernel(ShardPlanArgs a) {
  const int64_t S = a.plan.max_slots, n = a.shard_size, block = a.host[2 + n];
  int64_t i = static_cast<int64_t>(blockIdx.x) * kPlaceThreads + threadIdx.x;
  const int64_t used = a.host[0] == 0 ? a.host[1] : 0;
  if (i <= S) {  // slot_scratch, entry S (= index -1) the trash page
    a.slot_scratch[i] = i < used ? scratch_page(a, a.spos[i], block) : a.trash_page;
    return;
  }
  i -= S + 1;
  if (i < S) {  // send_pages: this rank's run of gathered slots, as local pages, then 0
    const int64_t begin = a.shard_rank == 0 ? 0 : a.host[1 + a.shard_rank];
    const int64_t owned = a.host[2 + a.shard_rank] - begin;
    a.send_pages[i] = i < owned ? a.plan.slot_page[a.order[begin + i]] / static_cast<int32_t>(n) : 0;
    return;
  }
  const int64_t t = i - S;
  if (t >= a.num_tokens) return;
  const int64_t bsz = a.plan.num_reqs, num_pages = a.plan.num_pages;
  int64_t lo = 0, hi = bsz;  // the request: the number of b with ext_start[b + 1] <= t
  while (lo < hi) {
    const int64_t mid = (lo + hi) >> 1;
    if (a.ext_start[mid + 1] <= t) lo = mid + 1; else hi = mid;
  }
  const int64_t loc = load_any(a.loc, a.loc_is_64, t);
  const int64_t page = floordiv(loc, a.plan.page_size), offset = loc - page * a.plan.page_size;
  int64_t slot = -1;
  if (lo < bsz && page >= 0 && page < num_pages) slot = a.plan.inverse[lo * num_pages + page];
  const int64_t where = (slot >= 0 && slot < used) ? scratch_page(a, a.spos[slot], block) : a.trash_page;
  a.token_req[t] = lo;
  a.cur_rows[t] = where * a.plan.page_size + offset;
  a.local_rows[t] = (page >= 0 && page % n == a.shard_rank)
                        ? (page / n) * a.plan.page_size + offset
                        : offset;
}

}  // namespace

cudaError_t launch_shard_plan(const ShardPlanArgs& a, const ShardInline& host_numbers,
                              cudaStream_t stream) {
  const PlanSlotsArgs& pa = a.plan;
  // -1 everywhere in the inverse and the scratch row past it (as launch_plan_slots does).
  const size_t inverse_bytes = static_cast<size_t>(pa.num_reqs + 1) * pa.num_pages * sizeof(int32_t);
  cudaError_t err = cudaMemsetAsync(pa.inverse, 0xFF, inverse_bytes, stream);
  if (err != cudaSuccess) return err;
  const int64_t work = std::max(pa.num_reqs * pa.width, 3 * pa.num_reqs + 1 + a.num_kept);
  const unsigned grid = static_cast<unsigned>((work + kPairsThreads - 1) / kPairsThreads);
  shard_pairs_kernel<<<grid, kPairsThreads, 0, stream>>>(a, host_numbers);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  shard_number_kernel<<<1, kOrderThreads, 0, stream>>>(a);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t outputs = 2 * pa.max_slots + 1 + a.num_tokens;
  shard_place_kernel<<<static_cast<unsigned>((outputs + kPlaceThreads - 1) / kPlaceThreads),
                       kPlaceThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace cpkv
