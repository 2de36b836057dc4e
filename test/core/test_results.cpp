// Results files: HDF5 round trip, overwrite protection, errors that name the file.
#include <doctest/doctest.h>
#include <hdf5.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "check.h"
#include "results.h"

namespace {

// A fresh directory under the system temp dir, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pb-test-results-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

pb::VariantResult make_variant(const std::string& name, int ranks, int reps, double scale) {
  pb::VariantResult variant;
  variant.name = name;
  variant.cuts = "land=on conv=off fmha=on lse_merge=on elementwise=off";
  variant.complete = name != "partial";
  for (int rep = 0; rep < reps; ++rep) {
    for (int rank = 0; rank < ranks; ++rank) {
      variant.spans.push_back({rep, rank, -1, "embed", "embed.gather", 3.5 * scale, 1e6, 0});
      variant.spans.push_back({rep, rank, 0, "gemm", "gemm.qkv", 120.25 * scale, 2e8, 4e11});
      variant.spans.push_back({rep, rank, 0, "land", "land.q_band", 10.5 * scale + rep, 3e7, 1e6});
      variant.rank_reps.push_back({rep, rank, 500.0 * scale + rep, 20.0 + rank, 1.5e9, 7.5e10});
    }
    variant.ttft_ms.push_back(100.0 * scale + 0.1 * rep);
  }
  pb::Outputs& outputs = variant.outputs;
  outputs.ranks = ranks;
  outputs.layers = 3;
  for (int i = 0; i < ranks * 3; ++i) outputs.checksums.push_back(0xfedcba9876543210ull + uint64_t(i));
  outputs.sample_rows = 2;
  outputs.sample_cols = 4;
  for (int i = 0; i < ranks * 2 * 4; ++i) outputs.hidden_samples.push_back(0.25f * float(i) - 1.0f);
  outputs.last_logits = {0.5f, -2.0f, 7.25f, 1.0f, 3.0f};
  outputs.first_token = 2;
  return variant;
}

pb::RunResult make_run() {
  pb::RunResult run;
  run.kind = "run";
  run.complete = false;
  run.text["scenario_yaml"] = "model: k3\nlayers: 61\ncp: 8\n";
  run.text["git_sha"] = "0123456789abcdef";
  run.text["command_line"] = "prefill-bench run --scenario s.yaml";
  run.text["empty_note"] = "";
  run.numbers["copy_tbps"] = 4.125;
  run.numbers["gemm_tflops"] = 812.5;
  run.variants.push_back(make_variant("baseline", 2, 3, 1.0));
  run.variants.push_back(make_variant("all", 2, 3, 0.9));
  pb::BenchRow row;
  row.family = "land";
  row.kernel = "land.n12288";
  row.variant = "cut";
  row.shape = "16896x12288 of 12288";
  row.median_us = 41.5;
  row.min_us = 40.25;
  row.max_us = 44.0;
  row.bytes = 1.2e9;
  row.flops = 3.4e7;
  row.tbps = 3.9;
  row.tflops = 0.8;
  row.fraction = 0.81;
  row.speedup = 1.7;
  row.reps = 20;
  run.bench.push_back(row);
  return run;
}

void check_equal(const pb::Span& a, const pb::Span& b) {
  CHECK(a.rep == b.rep);
  CHECK(a.rank == b.rank);
  CHECK(a.layer == b.layer);
  CHECK(a.family == b.family);
  CHECK(a.kernel == b.kernel);
  CHECK(a.time_us == b.time_us);
  CHECK(a.bytes == b.bytes);
  CHECK(a.flops == b.flops);
}

void check_equal(const pb::RankRep& a, const pb::RankRep& b) {
  CHECK(a.rep == b.rep);
  CHECK(a.rank == b.rank);
  CHECK(a.wall_us == b.wall_us);
  CHECK(a.wait_us == b.wait_us);
  CHECK(a.fabric_bytes == b.fabric_bytes);
  CHECK(a.peak_mem_bytes == b.peak_mem_bytes);
}

void check_equal(const pb::Outputs& a, const pb::Outputs& b) {
  CHECK(a.ranks == b.ranks);
  CHECK(a.layers == b.layers);
  CHECK(a.checksums == b.checksums);
  CHECK(a.sample_rows == b.sample_rows);
  CHECK(a.sample_cols == b.sample_cols);
  CHECK(a.hidden_samples == b.hidden_samples);
  CHECK(a.last_logits == b.last_logits);
  CHECK(a.first_token == b.first_token);
}

void check_equal(const pb::VariantResult& a, const pb::VariantResult& b) {
  CHECK(a.name == b.name);
  CHECK(a.cuts == b.cuts);
  CHECK(a.complete == b.complete);
  REQUIRE(a.spans.size() == b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) check_equal(a.spans[i], b.spans[i]);
  REQUIRE(a.rank_reps.size() == b.rank_reps.size());
  for (size_t i = 0; i < a.rank_reps.size(); ++i) check_equal(a.rank_reps[i], b.rank_reps[i]);
  CHECK(a.ttft_ms == b.ttft_ms);
  check_equal(a.outputs, b.outputs);
}

void check_equal(const pb::BenchRow& a, const pb::BenchRow& b) {
  CHECK(a.family == b.family);
  CHECK(a.kernel == b.kernel);
  CHECK(a.variant == b.variant);
  CHECK(a.shape == b.shape);
  CHECK(a.median_us == b.median_us);
  CHECK(a.min_us == b.min_us);
  CHECK(a.max_us == b.max_us);
  CHECK(a.bytes == b.bytes);
  CHECK(a.flops == b.flops);
  CHECK(a.tbps == b.tbps);
  CHECK(a.tflops == b.tflops);
  CHECK(a.fraction == b.fraction);
  CHECK(a.speedup == b.speedup);
  CHECK(a.reps == b.reps);
}

void check_equal(const pb::RunResult& a, const pb::RunResult& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.complete == b.complete);
  CHECK(a.text == b.text);
  CHECK(a.numbers == b.numbers);
  REQUIRE(a.variants.size() == b.variants.size());
  for (size_t i = 0; i < a.variants.size(); ++i) check_equal(a.variants[i], b.variants[i]);
  REQUIRE(a.bench.size() == b.bench.size());
  for (size_t i = 0; i < a.bench.size(); ++i) check_equal(a.bench[i], b.bench[i]);
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const pb::Error& error) {
    return error.what();
  }
  return "";
}

}  // namespace

TEST_CASE("results: every field survives an HDF5 round trip") {
  TempDir dir;
  const pb::RunResult run = make_run();
  const std::string path = dir.file("run.h5");
  pb::write_results(path, run, false);
  CHECK(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  check_equal(pb::read_results(path), run);
}

TEST_CASE("results: variant order is kept, not sorted by name") {
  TempDir dir;
  pb::RunResult run;
  run.variants.push_back(make_variant("zeta", 1, 1, 1.0));
  run.variants.push_back(make_variant("alpha", 1, 1, 1.0));
  pb::write_results(dir.file("order.h5"), run, false);
  const pb::RunResult back = pb::read_results(dir.file("order.h5"));
  REQUIRE(back.variants.size() == 2);
  CHECK(back.variants[0].name == "zeta");
  CHECK(back.variants[1].name == "alpha");
}

TEST_CASE("results: empty tables and a plan without outputs round-trip") {
  TempDir dir;
  pb::RunResult plan;
  plan.kind = "plan";
  pb::VariantResult empty;
  empty.name = "baseline";
  plan.variants.push_back(empty);
  pb::VariantResult planned;
  planned.name = "all";
  planned.spans.push_back({-1, 0, 3, "fmha", "fmha.dense", 88.0, 1e9, 2e12});
  plan.variants.push_back(planned);
  pb::write_results(dir.file("plan.h5"), plan, false);
  check_equal(pb::read_results(dir.file("plan.h5")), plan);

  pb::RunResult kernels;
  kernels.kind = "kernels";
  pb::write_results(dir.file("kernels.h5"), kernels, false);
  check_equal(pb::read_results(dir.file("kernels.h5")), kernels);
}

TEST_CASE("results: find_variant") {
  const pb::RunResult run = make_run();
  REQUIRE(run.find_variant("all") != nullptr);
  CHECK(run.find_variant("all")->name == "all");
  CHECK(run.find_variant("none") == nullptr);
}

TEST_CASE("results: an existing file is kept unless overwrite is asked for") {
  TempDir dir;
  const std::string path = dir.file("run.h5");
  pb::RunResult first = make_run();
  pb::write_results(path, first, false);

  pb::RunResult second = make_run();
  second.text["git_sha"] = "feedface";
  const std::string message = error_of([&] { pb::write_results(path, second, false); });
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find("--overwrite") != std::string::npos);
  CHECK(pb::read_results(path).text.at("git_sha") == "0123456789abcdef");

  pb::write_results(path, second, true);
  CHECK(pb::read_results(path).text.at("git_sha") == "feedface");
}

TEST_CASE("results: a name longer than the table field is an error, not a truncation") {
  TempDir dir;
  pb::RunResult run = make_run();
  run.variants[0].spans[0].kernel = std::string(pb::kNameBytes + 1, 'k');
  const std::string path = dir.file("long.h5");
  const std::string message = error_of([&] { pb::write_results(path, run, false); });
  CHECK(message.find("span kernel") != std::string::npos);
  CHECK(message.find(path) != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));

  run.variants[0].spans[0].kernel = std::string(pb::kNameBytes, 'k');  // exactly full: fine
  pb::write_results(path, run, false);
  CHECK(pb::read_results(path).variants[0].spans[0].kernel == run.variants[0].spans[0].kernel);
}

TEST_CASE("results: reading what is not a results file names the file") {
  TempDir dir;
  const std::string text_file = dir.file("notes.h5");
  std::ofstream(text_file) << "this is not HDF5\n";
  std::string message = error_of([&] { pb::read_results(text_file); });
  CHECK(message.find(text_file) != std::string::npos);
  CHECK(message.find("not an HDF5 file") != std::string::npos);

  const std::string missing = dir.file("missing.h5");
  message = error_of([&] { pb::read_results(missing); });
  CHECK(message.find(missing) != std::string::npos);
}

TEST_CASE("results: a wrong schema version or a missing dataset is named") {
  TempDir dir;
  const std::string path = dir.file("run.h5");
  pb::write_results(path, make_run(), false);

  SUBCASE("wrong schema_version") {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    const hid_t attribute = H5Aopen(file, "schema_version", H5P_DEFAULT);
    const int32_t future = pb::kSchemaVersion + 1;
    CHECK(H5Awrite(attribute, H5T_NATIVE_INT32, &future) >= 0);
    H5Aclose(attribute);
    H5Fclose(file);
    const std::string message = error_of([&] { pb::read_results(path); });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("schema_version") != std::string::npos);
  }
  SUBCASE("missing dataset") {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(H5Ldelete(file, "/variants/all/ttft_ms", H5P_DEFAULT) >= 0);
    H5Fclose(file);
    const std::string message = error_of([&] { pb::read_results(path); });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("missing dataset /variants/all/ttft_ms") != std::string::npos);
  }
  SUBCASE("missing schema_version") {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(H5Adelete(file, "schema_version") >= 0);
    H5Fclose(file);
    const std::string message = error_of([&] { pb::read_results(path); });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("missing attribute /schema_version") != std::string::npos);
  }
}
