#include "cli/cli.hpp"

#include <iostream>

int main(int argc, char** argv) { return memest::cli::run(argc, argv, std::cout, std::cerr); }
