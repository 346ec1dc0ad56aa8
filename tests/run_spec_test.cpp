#include <memest/error.hpp>
#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <span>
#include <string_view>

using namespace memest;

namespace {

// Each name parses to the value at its position, and the value prints as that name.
template <typename Enum, typename Parse, typename Name>
void round_trips(std::span<const std::string_view> names, Parse parse, Name name) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    CHECK(parse(names[i]) == static_cast<Enum>(i));
    CHECK(name(static_cast<Enum>(i)) == names[i]);
  }
}

// The same for an enum whose names are only parsed.
template <typename Enum, typename Parse>
void parses(std::span<const std::string_view> names, Parse parse) {
  for (std::size_t i = 0; i < names.size(); ++i) CHECK(parse(names[i]) == static_cast<Enum>(i));
}

}  // namespace

TEST_CASE("run enums: each name table matches its enum", "[run_spec]") {
  round_trips<Attention>(attention_names(), parse_attention, attention_name);
  round_trips<Recompute>(recompute_names(), parse_recompute, recompute_name);
  round_trips<Device>(device_names(), parse_device, device_name);
  round_trips<Allocator>(allocator_names(), parse_allocator, allocator_name);
  round_trips<Loss>(loss_names(), parse_loss, loss_name);
  parses<QloraInit>(qlora_init_names(), parse_qlora_init);
  round_trips<ModelLoading>(model_loading_names(), parse_model_loading, model_loading_name);
  parses<TransformerImpl>(transformer_impl_names(), parse_transformer_impl);
  parses<ModelCode>(model_code_names(), parse_model_code);
  CHECK(attention_name(Attention::flash) == "flash");
  CHECK(loss_name(Loss::chunked_tokens) == "chunked-tokens");
}

TEST_CASE("run enums: an unknown name lists the accepted ones", "[run_spec]") {
  CHECK_THROWS_WITH(parse_attention("fa2"),
                    "unknown attention implementation \"fa2\" (expected one of: eager, sdpa, "
                    "flash)");
  CHECK_THROWS_WITH(parse_recompute("some"),
                    "unknown recompute policy \"some\" (expected one of: none, selective, full, "
                    "op)");
  CHECK_THROWS_AS(parse_model_code("megatron"), Error);
}
