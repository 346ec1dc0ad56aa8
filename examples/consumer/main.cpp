// Uses memest as a library: the bytes of fp32 AdamW training of a 7B parameter count, and of
// Llama-2-7B (a preset embedded in the library) under bf16 mixed precision.
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>

#include <iostream>

int main() {
  memest::RunSpec run;
  run.model = memest::model_from_count(7'000'000'000);
  run.precision = memest::precision_preset("fp32");
  run.optimizer.kind = memest::OptimizerKind::adamw;
  std::cout << "7B fp32 adamw: " << memest::estimate(run).total_bytes << " bytes\n";

  run.model = memest::load_model_preset("llama-2-7b");
  run.precision = memest::precision_preset("mixed-bf16");
  std::cout << "llama-2-7b parameters: " << memest::estimate(run).params << "\n";
  return 0;
}
