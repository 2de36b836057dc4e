// Writes the gate's test files (test/support/synthetic_results.h) into the
// folder given as the argument, replacing any there; the cli.gate_* tests run
// `prefill-bench compare --baseline` on them.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "results.h"
#include "synthetic_results.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_gate_files <folder>\n");
    return 2;
  }
  try {
    std::filesystem::create_directories(argv[1]);
    for (const auto& [name, run] : pb::test::gate_files())
      pb::write_results((std::filesystem::path(argv[1]) / name).string(), run, /*overwrite=*/true);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "write_gate_files: %s\n", error.what());
    return 2;
  }
  std::printf("wrote the gate's test files into %s\n", argv[1]);
  return 0;
}
