// plan_slots: a batch's slot plan (plan_layout's numbering) in fixed shapes, no host sync.
// Reference: cpkv_runtime's torch backend, op "plan_slots" (outputs and status bits).
//
// Two kernels after a memset that sets the inverse rows and a scratch row past them to -1. The
// pairs of a batch (8 requests x 1,056 pages = 8,448) have two kinds of work. Per-pair work with
// no order between pairs runs on as many blocks as it takes, one pair per thread (plan_pairs):
// the `pages` output, each request's uses of each page counted in the inverse rows (a cell
// starts at -1: an atomicAdd that returns >= 0 found a duplicate), and each page's first
// read-only use recorded in the scratch row as pairs - flat index under atomicMax. A pair's
// status bits (bad page, duplicate) go to its own slot_table cell, which the second kernel reads
// before it writes the slot there. The numbering is a scan, so it stays in one block of 1,024
// threads (plan_number): pass 0 writes the lengths and sums the tokens; pass 2 takes the pairs
// tile by tile: the pairs that open a slot are numbered in scan order (a block-wide exclusive
// scan, carried from tile to tile) and write their slot; after a barrier, read-only pairs take
// the slot of their page's first use (always in this tile or an earlier one) and every used
// pair writes the inverse; pass 3 pads the unused slots. Cells other threads of the block wrote
// are read with __ldcg (L2, not L1).
#include "plan_slots.cuh"

namespace cpkv {
namespace {

using namespace plan_detail;

// Pass 1, one pair per thread.
template <typename PageT, typename LenT, bool kDedup>
__global__ void __launch_bounds__(kPairThreads) plan_pairs_kernel(PlanSlotsArgs a) {
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kPairThreads + threadIdx.x;
  if (f >= a.num_reqs * a.width) return;
  count_pair<kDedup>(a, f, load_pair<PageT, LenT>(a, f));
}

// Passes 0, 2 and 3 in one block, after plan_pairs (same stream).
template <typename PageT, typename LenT, bool kDedup>
__global__ void __launch_bounds__(kPlanThreads) plan_number_kernel(PlanSlotsArgs a) {
  number_slots<PageT, LenT, kDedup>(a);
}

template <typename PageT, typename LenT, bool kDedup>
cudaError_t launch_kernels(const PlanSlotsArgs& a, cudaStream_t stream) {
  const int64_t pairs = a.num_reqs * a.width;  // < 2^31 (the binding checks)
  if (pairs > 0) {
    const unsigned grid = static_cast<unsigned>((pairs + kPairThreads - 1) / kPairThreads);
    plan_pairs_kernel<PageT, LenT, kDedup><<<grid, kPairThreads, 0, stream>>>(a);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  plan_number_kernel<PageT, LenT, kDedup><<<1, kPlanThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

template <typename PageT, typename LenT>
cudaError_t launch_typed(const PlanSlotsArgs& a, cudaStream_t stream) {
  return a.dedup ? launch_kernels<PageT, LenT, true>(a, stream)
                 : launch_kernels<PageT, LenT, false>(a, stream);
}

}  // namespace

cudaError_t launch_plan_slots(const PlanSlotsArgs& a, cudaStream_t stream) {
  // -1 everywhere (0xFF bytes): the inverse's empty value (and the count plan_pairs starts from),
  // the first-use scratch's "none". It must land before plan_pairs' atomics, which no order
  // between blocks of one kernel could give; the memset also spreads over the whole GPU.
  const size_t inverse_bytes = static_cast<size_t>(a.num_reqs + 1) * a.num_pages * sizeof(int32_t);
  cudaError_t err = cudaMemsetAsync(a.inverse, 0xFF, inverse_bytes, stream);
  if (err != cudaSuccess) return err;
  if (a.pages_are_64) {
    return a.lens_are_64 ? launch_typed<int64_t, int64_t>(a, stream)
                         : launch_typed<int64_t, int32_t>(a, stream);
  }
  return a.lens_are_64 ? launch_typed<int32_t, int64_t>(a, stream)
                       : launch_typed<int32_t, int32_t>(a, stream);
}

}  // namespace cpkv
