// FSDP1's constructor on a module that is not on the device, with device_id and
// sync_module_states=True (read in torch/distributed/fsdp/_init_utils.py,
// _init_param_handle_from_module, and torch/csrc/distributed/c10d/comm.cpp): for each unit,
// innermost first,
//   1. _move_module_to_device (or a param_init_fn's to_empty on the meta device) puts each
//      parameter on the device, one tensor at a time;
//   2. _sync_module_params_and_buffers broadcasts them from rank 0 with
//      dist._broadcast_coalesced: buckets of PARAM_BROADCAST_BUCKET_SIZE = 250 MiB, a bucket
//      closing at the tensor that brings it to the limit (compute_bucket_assignment_by_size),
//      each flattened into a new tensor, at most two buckets in flight;
//   3. FlatParamHandle concatenates the parameters into the flat parameter (torch.cat);
//   4. shard() clones this rank's chunk and frees the flat parameter's storage (NO_SHARD keeps
//      the flat parameter);
//   5. the original parameters go when _init_param_handle_from_module returns: its
//      managed_params list holds them until then.
// The unit's buffers (a rotary table) are left out.
#include "replay/fsdp_init.hpp"

#include <memest/units.hpp>

#include <deque>
#include <numeric>

namespace memest::detail {
namespace {

/// PARAM_BROADCAST_BUCKET_SIZE in torch/distributed/fsdp/_init_utils.py.
constexpr u64 kBroadcastBucket = 250ULL << 20;
/// The buckets c10d's broadcast_coalesced keeps in flight (max_in_flight).
constexpr u64 kInFlight = 2;

enum FsdpSlot : std::uint32_t { shard, flat, bucket_a, bucket_b, first_tensor };
static_assert(shard == kFsdpShard);

// The buckets' sizes: consecutive tensors, a bucket closing once it holds the limit.
std::vector<u64> broadcast_buckets(const std::vector<u64>& tensors) {
  std::vector<u64> out;
  u64 open = 0;
  for (const u64 t : tensors) {
    open += t;
    if (open >= kBroadcastBucket) {
      out.push_back(open);
      open = 0;
    }
  }
  if (open > 0) out.push_back(open);
  return out;
}

void broadcast(const std::vector<u64>& tensors, std::vector<AllocEvent>& ev) {
  std::deque<std::uint32_t> in_flight;
  std::uint32_t next = bucket_a;
  for (const u64 bytes : broadcast_buckets(tensors)) {
    if (in_flight.size() >= kInFlight) {
      ev.push_back({in_flight.front(), 0});
      in_flight.pop_front();
    }
    ev.push_back({next, bytes});
    in_flight.push_back(next);
    next = next == bucket_a ? bucket_b : bucket_a;
  }
  for (const std::uint32_t s : in_flight) ev.push_back({s, 0});
}

}  // namespace

std::size_t fsdp1_unit_slots(const FsdpFlatParam& f) { return first_tensor + f.tensors.size(); }

std::vector<AllocEvent> fsdp1_unit_construction(const FsdpFlatParam& f) {
  std::vector<AllocEvent> ev;
  const auto n = static_cast<std::uint32_t>(f.tensors.size());
  for (std::uint32_t k = 0; k < n; ++k) ev.push_back({first_tensor + k, f.tensors[k]});
  broadcast(f.tensors, ev);
  const u64 bytes = std::accumulate(f.tensors.begin(), f.tensors.end(), u64{0});
  if (f.sharded) {
    ev.push_back({flat, bytes});
    ev.push_back({shard, f.shard_bytes});
    ev.push_back({flat, 0});
  } else {
    ev.push_back({shard, bytes});
  }
  for (std::uint32_t k = n; k-- > 0;) ev.push_back({first_tensor + k, 0});  // list_dealloc
  return ev;
}

}  // namespace memest::detail
