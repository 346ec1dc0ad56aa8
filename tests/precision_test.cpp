#include <memest/error.hpp>
#include <memest/precision.hpp>

#include <catch2/catch.hpp>

using namespace memest;

TEST_CASE("precision presets follow their mechanism", "[precision]") {
  SECTION("amp keeps an fp32 model and adds fp16 working copies") {
    auto p = precision_preset("amp");
    REQUIRE(p.param == Dtype::fp32);
    REQUIRE(p.working == Dtype::fp16);
    REQUIRE_FALSE(p.master);
    REQUIRE(p.grad == Dtype::fp32);
    REQUIRE(p.state == Dtype::fp32);
    REQUIRE(p.activation == Dtype::fp16);
    REQUIRE(p.autocast);
  }
  SECTION("mixed-bf16 keeps bf16 model and grads with fp32 master weights and states") {
    auto p = precision_preset("mixed-bf16");
    REQUIRE(p.param == Dtype::bf16);
    REQUIRE(p.master == Dtype::fp32);
    REQUIRE(p.grad == Dtype::bf16);
    REQUIRE(p.state == Dtype::fp32);
    REQUIRE_FALSE(p.working);
  }
  SECTION("Megatron's variant keeps fp32 main_grad") {
    auto p = precision_preset("mixed-bf16-fp32grad");
    REQUIRE(p.grad == Dtype::fp32);
    REQUIRE(p.param == Dtype::bf16);
  }
  SECTION("pure bf16 has no master copy") {
    auto p = precision_preset("bf16");
    REQUIRE_FALSE(p.master);
    REQUIRE(p.state == Dtype::bf16);
  }
}

TEST_CASE("every preset name parses", "[precision]") {
  for (auto name : precision_names()) {
    CAPTURE(name);
    REQUIRE(precision_preset(name).name == name);
  }
  REQUIRE_THROWS_WITH(
      precision_preset("apex"),
      Catch::StartsWith("unknown precision policy \"apex\" (expected one of: fp32, amp"));
}

TEST_CASE("overrides replace single categories", "[precision]") {
  PrecisionOverrides o;
  o.grad = Dtype::fp16;
  o.state = Dtype::fp16;
  o.master = std::optional<Dtype>{};
  auto p = apply_overrides(precision_preset("mixed"), o);
  REQUIRE(p.name == "mixed+overrides");
  REQUIRE(p.grad == Dtype::fp16);
  REQUIRE(p.state == Dtype::fp16);
  REQUIRE_FALSE(p.master);
  REQUIRE(apply_overrides(precision_preset("fp32"), {}).name == "fp32");
  REQUIRE_FALSE(parse_optional_dtype("none"));
  REQUIRE(parse_optional_dtype("fp16") == Dtype::fp16);
  REQUIRE_THROWS_WITH(parse_optional_dtype("half"),
                      Catch::StartsWith("unknown dtype \"half\" (expected none or"));
}
