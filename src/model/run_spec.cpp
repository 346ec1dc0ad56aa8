#include "base/names.hpp"

#include <memest/run_spec.hpp>

#include <array>

namespace memest {
namespace {

constexpr std::array<std::string_view, 3> kAttentionNames = {"eager", "sdpa", "flash"};
constexpr std::array<std::string_view, 4> kRecomputeNames = {"none", "selective", "full", "op"};
constexpr std::array<std::string_view, 2> kDeviceNames = {"cuda", "cpu"};
constexpr std::array<std::string_view, 2> kAllocatorNames = {"none", "cuda"};
constexpr std::array<std::string_view, 5> kLossNames = {"hf", "vocab-parallel", "chunked",
                                                        "chunked-tokens", "hf-upcast"};
constexpr std::array<std::string_view, 3> kQloraInitNames = {"none", "whole", "chunked"};
constexpr std::array<std::string_view, 2> kTransformerImplNames = {"local", "transformer_engine"};
constexpr std::array<std::string_view, 2> kModelCodeNames = {"hf", "litgpt"};
// The pairs are named as the list a user writes: torchtune's QLoRA builders do both.
constexpr std::array<std::string_view, 8> kModelLoadingNames = {"none",
                                                                "layer-clones",
                                                                "nf4-whole",
                                                                "nf4-chunked",
                                                                "layer-clones,nf4-whole",
                                                                "layer-clones,nf4-chunked",
                                                                "fsdp-sync",
                                                                "full"};

}  // namespace

std::span<const std::string_view> attention_names() { return kAttentionNames; }
Attention parse_attention(std::string_view t) {
  return detail::parse_enum<Attention>(kAttentionNames, t, "attention implementation");
}
std::string_view attention_name(Attention a) {
  return kAttentionNames[static_cast<std::size_t>(a)];
}
std::span<const std::string_view> recompute_names() { return kRecomputeNames; }
Recompute parse_recompute(std::string_view t) {
  return detail::parse_enum<Recompute>(kRecomputeNames, t, "recompute policy");
}
std::string_view recompute_name(Recompute r) {
  return kRecomputeNames[static_cast<std::size_t>(r)];
}
std::span<const std::string_view> device_names() { return kDeviceNames; }
Device parse_device(std::string_view t) {
  return detail::parse_enum<Device>(kDeviceNames, t, "device");
}
std::string_view device_name(Device d) { return kDeviceNames[static_cast<std::size_t>(d)]; }
std::span<const std::string_view> allocator_names() { return kAllocatorNames; }
Allocator parse_allocator(std::string_view t) {
  return detail::parse_enum<Allocator>(kAllocatorNames, t, "allocator");
}
std::string_view allocator_name(Allocator a) {
  return kAllocatorNames[static_cast<std::size_t>(a)];
}

std::span<const std::string_view> loss_names() { return kLossNames; }
Loss parse_loss(std::string_view t) { return detail::parse_enum<Loss>(kLossNames, t, "loss"); }
std::string_view loss_name(Loss l) { return kLossNames[static_cast<std::size_t>(l)]; }

std::span<const std::string_view> qlora_init_names() { return kQloraInitNames; }
QloraInit parse_qlora_init(std::string_view t) {
  return detail::parse_enum<QloraInit>(kQloraInitNames, t, "QLoRA quantisation");
}
std::span<const std::string_view> transformer_impl_names() { return kTransformerImplNames; }
TransformerImpl parse_transformer_impl(std::string_view t) {
  return detail::parse_enum<TransformerImpl>(kTransformerImplNames, t,
                                             "transformer implementation");
}
std::span<const std::string_view> model_code_names() { return kModelCodeNames; }
ModelCode parse_model_code(std::string_view t) {
  return detail::parse_enum<ModelCode>(kModelCodeNames, t, "model code");
}

std::span<const std::string_view> model_loading_names() { return kModelLoadingNames; }
ModelLoading parse_model_loading(std::string_view t) {
  return detail::parse_enum<ModelLoading>(kModelLoadingNames, t, "model loading");
}
std::string_view model_loading_name(ModelLoading m) {
  return kModelLoadingNames[static_cast<std::size_t>(m)];
}
QloraInit nf4_init(ModelLoading m) {
  switch (m) {
    case ModelLoading::nf4_whole:
    case ModelLoading::layer_clones_nf4_whole:
      return QloraInit::whole;
    case ModelLoading::nf4_chunked:
    case ModelLoading::layer_clones_nf4_chunked:
      return QloraInit::chunked;
    default:
      return QloraInit::none;
  }
}
bool clones_layers(ModelLoading m) {
  return m == ModelLoading::layer_clones || m == ModelLoading::layer_clones_nf4_whole ||
         m == ModelLoading::layer_clones_nf4_chunked;
}

}  // namespace memest
