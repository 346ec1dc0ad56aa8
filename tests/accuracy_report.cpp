// Writes the measured-vs-estimated table of docs/accuracy.md (between its table markers).
// Usage: memest_accuracy_report [SOURCE_DIR]; truth_test fails when the file is stale.
#include "truth_cases.hpp"

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
    std::ofstream(doc_path, std::ios::binary) << memest::truth::with_table(doc.str(), table);
    std::cout << "wrote " << doc_path << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "memest_accuracy_report: " << e.what() << "\n";
    return 1;
  }
}
