// Private to the core: building a Step (include/memest/step.hpp) from a run.
#pragma once

#include <memest/activation.hpp>
#include <memest/parallel.hpp>
#include <memest/step.hpp>
#include <memest/units.hpp>

#include <array>
#include <initializer_list>
#include <utility>
#include <vector>

namespace memest::detail {

/// The model dimensions as symbols, named after the split that made them (a/t for the heads of
/// one tensor-parallel rank).
struct Dims {
  Sym h, a, k, d, dv, I, V, E, topk, Imoe, Ishared;
  explicit Dims(const ActivationInputs& in)
      : h(dim("h", in.h)),
        a(dim(in.t > 1 ? "a/t" : "a", in.a)),
        k(dim(in.t > 1 ? "kv/t" : "kv", in.k)),
        d(dim("d", in.d)),
        dv(dim("d_v", in.dv)),
        I(dim(in.t > 1 ? "I/t" : "I", in.I)),
        V(dim(in.t > 1 ? "V/t" : "V", in.V)),
        E(dim("E", in.experts)),
        topk(dim("top_k", in.topk)),
        Imoe(dim(in.t > 1 ? "I_moe/t" : "I_moe", in.I_moe)),
        Ishared(dim(in.t > 1 ? "I_shared/t" : "I_shared", in.I_shared)) {}
};

/// The rows the routed experts of one rank compute under a token dispatcher (alltoall, allgather,
/// torchtitan),
/// each `per_row` elements wide (a width, or a count): N x top_k (dropless, balanced), N x
/// top_k x c rounded up to whole elements per token (capacity factor c), or N x e x min(top_k,
/// E/e) (dropless, the worst case). `capacity_name` names the per-token product under a
/// capacity factor ("k*c*h"; a string literal).
Shape routed_rows(const ActivationInputs& in, Sym per_row, const char* capacity_name);

/// A tensor sized from its width and shape (Tensor::bytes, Tensor::mono).
Tensor make_tensor(std::string_view name, Part part, Scope scope, Slot slot, std::uint64_t width,
                   const Shape& shape, Batch batch = Batch::any);
/// `proto` sized from its width and shape (its bytes are ignored).
Tensor make_tensor(const Tensor& proto);

/// Sizes a tensor from its width and shape: Tensor::bytes and Tensor::mono.
void size_tensor(Tensor& t);

/// Appends a tensor; returns its index.
std::uint32_t add_tensor(Step& step, std::string_view name, Part part, Scope scope, Slot slot,
                         std::uint64_t width, const Shape& shape, Batch batch = Batch::any);
/// Appends `proto`, sized; returns its index.
std::uint32_t add_tensor(Step& step, const Tensor& proto);
/// Appends a tensor of `bytes` bytes at every (b, s): a scalar shape whose width is the whole
/// size, as add_tensor with shape({}) gives, without building the shape; returns its index.
std::uint32_t add_constant(Step& step, std::string_view name, Part part, Scope scope,
                           std::uint64_t bytes);

/// Where a norm sits, for the names of what it keeps.
enum class NormSite : std::uint8_t { input, post_attention, extra, qk, embedding, final };
/// The names of the tensors a norm keeps: RMSNorm's fp32 input, rsqrt and output cast back,
/// LayerNorm's input and its mean and rstd; Gemma's RMSNorm's fp32 (1 + weight).
struct NormNames {
  std::string_view fp32_input, rsqrt, output, ln_input, ln_stats, plus_one;
};
const NormNames& norm_names(NormSite site);

/// The names of what a LoRA adapter keeps (src/step/layer_graph.cpp): its dropout mask, the
/// dropped input, autocast's cast of its input, lora_A's output.
struct LoraNames {
  std::string_view mask, dropped, cast, lora_a_out, upcast;
};
/// The adapter on the linears that read the tensors of slot `site` (q_in, o_in, mlp_in, mlp).
const LoraNames& lora_names(Slot site);
/// Whether a tensor is one a LoRA adapter keeps.
bool is_lora_tensor(const Tensor& t);

/// The tensors one layer, the embedding, the head and the loss save for backward
/// (docs/activation-derivation.md §3, §5), with Step::saved listing them with their counts.
void add_saved_tensors(Step& step, const ActivationInputs& in);

/// Each tensor's bytes at one point (b, s), evaluated once: what one estimate reads instead of
/// compiling the moments to polynomials it would evaluate once. A size past 2^64 throws where it
/// is read, as Poly::at would, so a tensor no moment holds never throws; a tensor that does not
/// exist at the point (Tensor::exists_at) reads as 0 bytes and never throws. The values of a
/// step of up to kInline tensors live in the object itself (no allocation; not zeroed).
class TensorBytes {
 public:
  TensorBytes(const Step& step, const Basis& x);
  TensorBytes(const TensorBytes&) = delete;  // values_ points into the object
  TensorBytes& operator=(const TensorBytes&) = delete;
  std::uint64_t operator[](std::uint32_t tensor) const {
    const Value& v = values_[tensor];
    if (!v.fits) throw_size_overflow();
    return v.bytes;
  }
  /// Whether the tensor exists at the point (Tensor::exists_at).
  bool exists(std::uint32_t tensor) const { return values_[tensor].exists; }
  Part part(std::uint32_t tensor) const { return values_[tensor].part; }
  /// Adds an entry's bytes at the point to its part in `parts` and returns them: `count`
  /// copies, one rank's share when sharded (a size that does not depend on b or s: only model
  /// states are sharded); 0 for a tensor that does not exist at the point.
  std::uint64_t add_entry(const Entry& e, std::array<std::uint64_t, kPartCount>& parts) const {
    const Value& v = values_[e.tensor];
    std::uint64_t all = 0;
    if (__builtin_mul_overflow(v.bytes, e.count, &all) || !v.fits) throw_size_overflow();
    if (e.ranks > 1 && v.constant) all = shard(all, e.ranks);
    std::uint64_t& part = parts[static_cast<std::size_t>(v.part)];
    part = checked_add(part, all);
    return all;
  }

 private:
  // No default member initializers: the inline array is left as it is until filled.
  struct Value {
    std::uint64_t bytes;  ///< 0 where the tensor does not exist
    bool fits;            ///< true where the tensor does not exist
    bool exists;
    bool constant;
    Part part;
  };
  static Value value_at(const Tensor& t, const Basis& x);
  static constexpr std::size_t kInline = 128;
  std::array<Value, kInline> inline_;
  std::vector<Value> heap_;  // a step of more than kInline tensors
  const Value* values_ = nullptr;
};

/// Sums of saved tensors at the point `x` that `bytes` was taken at, the ActivationBytes of
/// activation.hpp.
ActivationBytes saved_bytes(const Step& step, const ActivationInputs& in, const Basis& x,
                            const TensorBytes& bytes, Terms terms);

/// Which step a walk is of: the steady state, or the first step of a run (no step before it;
/// the optimizer creates its states in it). The timeline is a steady step.
enum class StepOf : std::uint8_t { steady, first };

/// Which walks build_step makes besides the steady one.
struct WalkOptions {
  /// The first step's own walk (Step::first), when gradients kept between steps make it differ.
  bool first_step = false;
  bool timeline = false;  ///< Step::timeline: every layer's moments, in step order
};

/// The whole step of a run: the saved tensors and every moment of the steady-state walk, and
/// those `options` asks for (src/step/walk.cpp).
Step build_step(const RunSpec& run, const ActivationInputs& in, const WalkOptions& options = {});
/// The same into `step`, whose vectors keep their storage: what `step` held before is gone.
void build_step_into(Step& step, const RunSpec& run, const ActivationInputs& in,
                     const WalkOptions& options = {});

}  // namespace memest::detail
