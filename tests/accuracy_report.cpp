// Writes the measured-vs-estimated tables of docs/accuracy.md (between their markers): the
// CPU training steps of tests/data/truth, the H200 steps of tests/data/truth_cuda, the published
// GPU runs of tests/data/gpu and the published serving logs of tests/data/inference. Usage:
// memest_accuracy_report [SOURCE_DIR]; truth_test, truth_cuda_test, gpu_cases_test and
// serve_cases_test fail when the file is stale.
#include "gpu_cases.hpp"
#include "serve_cases.hpp"
#include "truth_cuda_cases.hpp"

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
    const std::string serve = memest::serve_cases::serve_table(root);
    namespace t = memest::truth;
    namespace tc = memest::truth_cuda;
    const std::string with_cuda =
        t::with_table(t::with_table(doc.str(), table), tc::cuda_table(root), tc::kBegin, tc::kEnd);
    const std::string with_gpu =
        t::with_table(with_cuda, gpu, memest::gpu::kBegin, memest::gpu::kEnd);
    std::ofstream(doc_path, std::ios::binary)
        << t::with_table(with_gpu, serve, memest::serve_cases::kBegin, memest::serve_cases::kEnd);
    std::cout << "wrote " << doc_path << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "memest_accuracy_report: " << e.what() << "\n";
    return 1;
  }
}
