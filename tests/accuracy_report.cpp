// Writes the measured-vs-estimated tables of docs/accuracy.md (between their markers): the
// CPU training steps of tests/data/truth and the published GPU runs of tests/data/gpu.
// Usage: memest_accuracy_report [SOURCE_DIR]; truth_test fails when the file is stale.
#include "gpu_cases.hpp"

#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  try {
    const std::string root = argc > 1 ? argv[1] : MEMEST_SOURCE_DIR;
    const std::string doc_path = root + "/docs/accuracy.md";
    std::ifstream in(doc_path);
    std::stringstream doc;
    doc << in.rdbuf();
    const std::string table = memest::truth::accuracy_table(root + "/tests/data/truth/cases.jsonl");
    const std::string gpu = memest::gpu::gpu_table(root);
    std::ofstream(doc_path, std::ios::binary) << memest::truth::with_table(
        memest::truth::with_table(doc.str(), table), gpu, memest::gpu::kBegin, memest::gpu::kEnd);
    std::cout << "wrote " << doc_path << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "memest_accuracy_report: " << e.what() << "\n";
    return 1;
  }
}
