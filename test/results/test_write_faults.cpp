// Faults while writing a results file (harness/results/results.h: the writer
// goes through <path>.tmp and a rename). Each fault is a named error naming
// the file; the file that was there before is untouched and no <path>.tmp is
// left behind. The faults are made in ways that hold when the tests run as
// root (who writes through any permission bits): a folder that is a regular
// file, a destination taken by a folder, and a disk that fills (the file-size
// limit RLIMIT_FSIZE: past it every write fails with EFBIG, as on a full disk).
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "check.h"
#include "error_of.h"
#include "results.h"
#include "synthetic_results.h"
#include "temp_dir.h"

namespace {

using pb::test::contains;
using pb::test::error_of;
using pb::test::TempDir;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A run large enough that it cannot fit under a small file-size limit.
pb::RunResult large_run() {
  pb::RunResult run = pb::test::synthetic_run(1.0);
  for (pb::VariantResult& v : run.variants) {
    const std::vector<pb::Span> spans = v.spans;
    for (int copy = 0; copy < 20; ++copy) v.spans.insert(v.spans.end(), spans.begin(), spans.end());
  }
  return run;
}

// While alive: writes past `bytes` in any file fail with EFBIG (SIGXFSZ ignored), as on a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*saved_handler_)(int) = SIG_DFL;
};

}  // namespace

TEST_CASE("write faults: the disk fills mid-write: a named error, the earlier file intact, no .tmp left") {
  TempDir dir;
  const std::string path = dir.file("run.h5");
  pb::RunResult earlier = pb::test::synthetic_run(1.0);
  earlier.text["note"] = "the earlier file";
  pb::write_results(path, earlier, false);
  const std::string earlier_bytes = bytes_of(path);
  const pb::RunResult big = large_run();

  std::string message;
  {
    const FileSizeLimit full(16 * 1024);
    message = error_of([&] { pb::write_results(path, big, /*overwrite=*/true); });
  }
  INFO(message);
  CHECK(contains(message, "writing results file '" + path));
  CHECK(contains(message, "File too large"));
  CHECK(bytes_of(path) == earlier_bytes);
  CHECK(pb::read_results(path).text.at("note") == "the earlier file");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  pb::write_results(path, big, true);  // room again: the same write succeeds
  CHECK(pb::read_results(path).variants.at(0).spans.size() == big.variants.at(0).spans.size());
}

TEST_CASE("write faults: the disk is already full: a named error before any byte lands") {
  TempDir dir;
  const std::string path = dir.file("run.h5");
  std::string message;
  {
    const FileSizeLimit full(0);
    message = error_of([&] { pb::write_results(path, pb::test::synthetic_run(1.0), false); });
  }
  INFO(message);
  CHECK(contains(message, "writing results file '" + path));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("write faults: an output folder that cannot take files: named before the run, and by the writer") {
  TempDir dir;
  const std::string plain = dir.file("plain");
  std::ofstream(plain) << "a regular file, not a folder\n";
  for (const auto& [path, reason] : {std::pair<std::string, std::string>{plain + "/run.h5", "Not a directory"},
                                     {dir.file("missing/run.h5"), "No such file or directory"}}) {
    CAPTURE(path);
    std::string message = error_of([&] { pb::check_results_path(path, false); });
    CHECK(contains(message, "results file '" + path + "': its folder cannot take a new file: " + reason));
    message = error_of([&] { pb::write_results(path, pb::test::synthetic_run(1.0), true); });
    CHECK(contains(message, "results file '" + path + "': its folder cannot take a new file: " + reason));
  }
  CHECK(bytes_of(plain) == "a regular file, not a folder\n");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path), {}) == 1);  // no scratch file left
}

TEST_CASE("write faults: the output's name taken by a folder: the rename fails, named; the folder and its files stay") {
  TempDir dir;
  const std::string path = dir.file("run.h5");
  std::filesystem::create_directory(path);
  std::ofstream(path + "/inside.txt") << "kept\n";
  const std::string message = error_of([&] { pb::write_results(path, pb::test::synthetic_run(1.0), true); });
  INFO(message);
  CHECK(contains(message, path));
  CHECK(bytes_of(path + "/inside.txt") == "kept\n");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}
