// plan_slots' device passes, shared by its kernels (plan_slots.cu) and the sharded pool's plan
// (shard_plan.cu), which runs the same passes over pages it reads from req_to_token. See
// plan_slots.cu for the algorithm.
#pragma once

#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace plan_detail {


constexpr int kPairThreads = 256;  // plan_pairs: one pair per thread
constexpr int kPlanThreads = 1024;  // plan_number: the one block
constexpr int kPlanItems = 4;       // consecutive pairs per thread in the numbering pass
constexpr int kWarps = kPlanThreads / 32;

// Status bits (the contract in cpkv_runtime._backend).
constexpr int kNegative = 1, kTooLong = 2, kBadPage = 4, kDuplicate = 8, kCapacity = 16;

// floor(a / d) for d > 0. 64-bit division is a long software sequence on the GPU, and the
// numbering runs on one block, so operands that fit 32 bits (always, for valid input) take the
// 32-bit hardware path.
__device__ __forceinline__ int64_t floordiv(int64_t a, int64_t d) {
  if (a >= 0 && a <= INT32_MAX && d <= INT32_MAX) {
    return static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(d));
  }
  const int64_t q = a / d;
  return (a < 0 && q * d != a) ? q - 1 : q;
}

template <typename T>
__device__ __forceinline__ int64_t load_index(const void* p, int64_t i) {
  return static_cast<int64_t>(__ldg(static_cast<const T*>(p) + i));
}

struct Pair {
  bool used, valid, written;
  int64_t b, page;
};

template <typename PageT, typename LenT>
__device__ __forceinline__ Pair load_pair(const PlanSlotsArgs& a, int64_t f) {
  Pair p;
  p.b = floordiv(f, a.width);  // f < B * M < 2^31 (the bindings check)
  const int64_t j = f - p.b * a.width;
  p.page = load_index<PageT>(a.req_pages, f);
  const int64_t prefix = load_index<LenT>(a.prefix_lens, p.b);
  const int64_t extend = load_index<LenT>(a.extend_lens, p.b);
  p.used = j < floordiv(prefix + extend + a.page_size - 1, a.page_size);
  p.valid = p.used && p.page >= 0 && p.page < a.num_pages;
  p.written = p.used && extend > 0 && j >= floordiv(prefix, a.page_size);
  return p;
}

// Exclusive prefix sum of one int per thread over the block; *total gets the block's sum.
__device__ __forceinline__ int block_exclusive_sum(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kWarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    if (lane < kWarps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int prefix = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
  *total = warp_sums[kWarps - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return prefix;
}

// Pass 1 for pair f (one thread each): `pages`, use counts (duplicates), first read-only uses, and the
// pair's status bits in its slot_table cell (plan_number overwrites it with the slot).
template <bool kDedup>
__device__ __forceinline__ void count_pair(const PlanSlotsArgs& a, int64_t f, const Pair& p) {
  const int64_t pairs = a.num_reqs * a.width;
  a.pages[f] = p.used ? static_cast<int32_t>(p.page) : -1;
  int32_t bits = p.used && !p.valid ? kBadPage : 0;
  if (p.valid) {
    if (atomicAdd(a.inverse + p.b * a.num_pages + p.page, 1) >= 0) {
      bits |= kDuplicate;  // the cell started at -1: an earlier use was counted
    }
    if (kDedup && !p.written) {
      int32_t* scratch = a.inverse + a.num_reqs * a.num_pages;
      atomicMax(scratch + p.page, static_cast<int32_t>(pairs - f));
    }
  }
  a.slot_table[f] = bits;
}

// What number_slots tells its caller of each slot it opens (within capacity): nothing here;
// shard_plan sorts the slot for the gather there (its category), while the pair is in registers.
struct IgnoreOpened {
  __device__ __forceinline__ void operator()(int64_t /*slot*/, int64_t /*f*/, const Pair&) const {}
};

// Passes 0, 2 and 3 in one block of kPlanThreads, after pass 1 (an earlier kernel).
// on_opened(slot, f, pair) runs for every slot the block opens that fits the capacity.
template <typename PageT, typename LenT, bool kDedup, typename OnOpened = IgnoreOpened>
__device__ __forceinline__ void number_slots(const PlanSlotsArgs& a,
                                             const OnOpened& on_opened = OnOpened{}) {
  __shared__ int warp_sums[kWarps];
  __shared__ int status;
  __shared__ unsigned long long tokens;
  if (threadIdx.x == 0) status = 0, tokens = 0;
  __syncthreads();
  const int64_t bsz = a.num_reqs, pairs = a.num_reqs * a.width, S = a.max_slots;
  const int32_t* scratch = a.inverse + bsz * a.num_pages;

  for (int64_t b = threadIdx.x; b < bsz; b += kPlanThreads) {  // pass 0: lengths
    const int64_t prefix = load_index<LenT>(a.prefix_lens, b);
    const int64_t extend = load_index<LenT>(a.extend_lens, b);
    const int64_t seq = prefix + extend, used = floordiv(seq + a.page_size - 1, a.page_size);
    a.prefix[b] = static_cast<int32_t>(prefix);
    a.extend[b] = static_cast<int32_t>(extend);
    a.seq[b] = static_cast<int32_t>(seq);
    a.pages_used[b] = static_cast<int32_t>(used);
    if (prefix < 0 || extend < 0) atomicOr(&status, kNegative);
    if (used > a.width) atomicOr(&status, kTooLong);
    atomicAdd(&tokens, static_cast<unsigned long long>(extend));  // wraps like int64 addition
  }
  constexpr int64_t kTile = static_cast<int64_t>(kPlanThreads) * kPlanItems;

  int64_t carry = 0;  // pass 2: slots in scan order, then shared slots and the inverse
  for (int64_t t0 = 0; t0 < pairs; t0 += kTile) {
    const int64_t f0 = t0 + static_cast<int64_t>(threadIdx.x) * kPlanItems;  // blocked items
    Pair p[kPlanItems];
    bool opens[kPlanItems];
    int64_t first[kPlanItems];
    int32_t slot[kPlanItems];
    int count = 0;
#pragma unroll
    for (int u = 0; u < kPlanItems; ++u) {
      opens[u] = false;
      first[u] = f0 + u;
      const int64_t f = f0 + u;
      if (f >= pairs) continue;
      p[u] = load_pair<PageT, LenT>(a, f);
      const int32_t bits = __ldcg(a.slot_table + f);  // plan_pairs' status bits for this pair
      if (bits != 0) atomicOr(&status, bits);
      if (!p[u].valid) continue;
      if (kDedup && !p[u].written) first[u] = pairs - __ldcg(scratch + p[u].page);
      opens[u] = first[u] == f;  // written pairs (and all pairs without dedup) open their own
      count += opens[u];
    }
    int tile_total = 0;
    int64_t next = carry + block_exclusive_sum(count, warp_sums, &tile_total);
#pragma unroll
    for (int u = 0; u < kPlanItems; ++u) {
      if (!opens[u]) continue;
      const bool fits = next < S;
      slot[u] = fits ? static_cast<int32_t>(next) : -1;
      a.slot_table[f0 + u] = slot[u];
      if (fits) {
        a.slot_page[next] = static_cast<int32_t>(p[u].page);
        a.slot_owner[next] = p[u].written ? static_cast<int32_t>(p[u].b) : -1;
        on_opened(next, f0 + u, p[u]);
      }
      ++next;
    }
    __syncthreads();  // this tile's opening slots are visible to the read-only pairs that share
#pragma unroll
    for (int u = 0; u < kPlanItems; ++u) {
      const int64_t f = f0 + u;
      if (f >= pairs) continue;
      if (!opens[u]) {  // a pair that shares a slot (first < f, opened already), or is unused
        slot[u] = p[u].valid ? __ldcg(a.slot_table + first[u]) : -1;
        a.slot_table[f] = slot[u];
      }
      if (p[u].valid) a.inverse[p[u].b * a.num_pages + p[u].page] = slot[u];
    }
    carry += tile_total;
  }
  for (int64_t s = carry + threadIdx.x; s < S; s += kPlanThreads) {  // pass 3: padding slots
    a.slot_page[s] = -1;
    a.slot_owner[s] = -1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t used = static_cast<int32_t>(carry);
    const int32_t bits = status | (carry > S ? kCapacity : 0);
    a.used_slots[0] = a.info[0] = used;
    a.status[0] = a.info[1] = bits;
    a.info[2] = static_cast<int32_t>(static_cast<int64_t>(tokens));
  }
}

}  // namespace plan_detail
}  // namespace cpkv
