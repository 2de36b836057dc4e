// Results files: HDF5 round trip, overwrite protection, errors that name the file.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "check.h"
#include "results.h"
#include "temp_dir.h"

namespace {

using pb::test::TempDir;

pb::VariantResult make_variant(const std::string& name, int ranks, int reps, double scale) {
  pb::VariantResult variant;
  variant.name = name;
  variant.cuts = "land=on conv=off fmha=on lse_merge=on elementwise=off";
  variant.complete = name != "partial";
  for (int rep = 0; rep < reps; ++rep) {
    for (int rank = 0; rank < ranks; ++rank) {
      const int64_t first = int64_t(variant.spans.size());
      variant.spans.push_back({rep, rank, -1, "embed", "embed.gather", 3.5 * scale, 1e6, 0});
      variant.spans.push_back({rep, rank, 0, "gemm", "gemm.qkv", 120.25 * scale, 2e8, 4e11, 1, 3.75 * rank});
      variant.spans.push_back({rep, rank, 0, "fabric", "fabric.wait_window", 0.5, 0, 0});
      variant.spans.push_back({rep, rank, 0, "land", "land.q_band", 10.5 * scale + rep, 3e7, 1e6});
      const int peer = (rank + 1) % ranks;
      variant.bells.push_back({rep, rank, first + 2, pb::BellOpKind::wait, peer, 8 * peer + rank, "window",
                               0xfedcba9876543210ull + uint64_t(rep)});
      variant.bells.push_back({rep, rank, first + 3, pb::BellOpKind::ring, peer, 2 * ranks + rank, "released",
                               4096ull * uint64_t(rep + 1)});
      variant.rank_reps.push_back({rep, rank, 500.0 * scale + rep, 20.0 + rank, 1.5e9, 7.5e10});
    }
    variant.ttft_ms.push_back(100.0 * scale + 0.1 * rep);
  }
  pb::Projection projection;
  projection.link = "nvlink4";
  projection.link_source = "datasheet: H200 NVLink 4, 450 GB/s per direction";
  projection.rep = 1;
  projection.ttft_ms = 42.5 * scale;
  projection.reps = {{0, 41.0, 100.0, 1.25}, {1, 42.5, 100.1, std::nan("")}};
  projection.ranks = {{0, 30e3, 25e3, 4e3, 17.5e3, 20e3}, {1, 42.5e3, 40e3, 2e3, 2.5e3, 41e3}};
  projection.waits = {{0, 1, "window", 4e3, 10e3}, {1, 0, "released", 2e3, 1.5e3}};
  projection.path = {{1, 0, 0, 0, "gemm.qkv", 0, 120.25, -1, "", 0},
                     {6, 1, 1, 0, "fabric.wait_window", 120.25, 120.25, 0, "window", 7.5}};
  projection.timeline = {{0, 0, 3.5}, {1, 3.5, 123.75}};
  variant.projections.push_back(projection);
  projection.link = "measured";
  projection.link_source = "fabric spans as measured in the run";
  projection.waits.clear();
  projection.path.clear();
  variant.projections.push_back(projection);
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
  CHECK(a.stream == b.stream);
  CHECK(a.start_us == b.start_us);
}

void check_equal(const pb::BellOp& a, const pb::BellOp& b) {
  CHECK(a.rep == b.rep);
  CHECK(a.rank == b.rank);
  CHECK(a.span == b.span);
  CHECK(a.op == b.op);
  CHECK(a.peer == b.peer);
  CHECK(a.flag == b.flag);
  CHECK(a.kind == b.kind);
  CHECK(a.value == b.value);
}

// Equal, or both NaN.
bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void check_equal(const pb::Projection& a, const pb::Projection& b) {
  CHECK(a.link == b.link);
  CHECK(a.link_source == b.link_source);
  CHECK(a.rep == b.rep);
  CHECK(a.ttft_ms == b.ttft_ms);
  REQUIRE(a.reps.size() == b.reps.size());
  for (size_t i = 0; i < a.reps.size(); ++i) {
    CHECK(a.reps[i].rep == b.reps[i].rep);
    CHECK(a.reps[i].ttft_ms == b.reps[i].ttft_ms);
    CHECK(a.reps[i].serialized_ttft_ms == b.reps[i].serialized_ttft_ms);
    CHECK(same(a.reps[i].host_ms, b.reps[i].host_ms));
  }
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    CHECK(a.ranks[i].rank == b.ranks[i].rank);
    CHECK(a.ranks[i].end_us == b.ranks[i].end_us);
    CHECK(a.ranks[i].busy_us == b.ranks[i].busy_us);
    CHECK(a.ranks[i].wait_us == b.ranks[i].wait_us);
    CHECK(a.ranks[i].idle_us == b.ranks[i].idle_us);
    CHECK(a.ranks[i].path_compute_us == b.ranks[i].path_compute_us);
  }
  REQUIRE(a.waits.size() == b.waits.size());
  for (size_t i = 0; i < a.waits.size(); ++i) {
    CHECK(a.waits[i].rank == b.waits[i].rank);
    CHECK(a.waits[i].peer == b.waits[i].peer);
    CHECK(a.waits[i].kind == b.waits[i].kind);
    CHECK(a.waits[i].stall_us == b.waits[i].stall_us);
    CHECK(a.waits[i].path_us == b.waits[i].path_us);
  }
  REQUIRE(a.path.size() == b.path.size());
  for (size_t i = 0; i < a.path.size(); ++i) {
    CHECK(a.path[i].span == b.path[i].span);
    CHECK(a.path[i].rank == b.path[i].rank);
    CHECK(a.path[i].stream == b.path[i].stream);
    CHECK(a.path[i].layer == b.path[i].layer);
    CHECK(a.path[i].kernel == b.path[i].kernel);
    CHECK(a.path[i].start_us == b.path[i].start_us);
    CHECK(a.path[i].end_us == b.path[i].end_us);
    CHECK(a.path[i].peer == b.path[i].peer);
    CHECK(a.path[i].kind == b.path[i].kind);
    CHECK(a.path[i].waited_us == b.path[i].waited_us);
  }
  REQUIRE(a.timeline.size() == b.timeline.size());
  for (size_t i = 0; i < a.timeline.size(); ++i) {
    CHECK(a.timeline[i].span == b.timeline[i].span);
    CHECK(a.timeline[i].start_us == b.timeline[i].start_us);
    CHECK(a.timeline[i].end_us == b.timeline[i].end_us);
  }
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
  REQUIRE(a.bells.size() == b.bells.size());
  for (size_t i = 0; i < a.bells.size(); ++i) check_equal(a.bells[i], b.bells[i]);
  REQUIRE(a.projections.size() == b.projections.size());
  for (size_t i = 0; i < a.projections.size(); ++i) check_equal(a.projections[i], b.projections[i]);
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

// The number of filters on /variants/<v>/spans.
int span_filters(const std::string& path, const std::string& variant) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t dataset = H5Dopen2(file, ("variants/" + variant + "/spans").c_str(), H5P_DEFAULT);
  REQUIRE(dataset >= 0);
  const hid_t properties = H5Dget_create_plist(dataset);
  const int filters = H5Pget_nfilters(properties);
  H5Pclose(properties);
  H5Dclose(dataset);
  H5Fclose(file);
  return filters;
}

TEST_CASE("results: a large table is stored deflated and reads back the same; a small one is stored plain") {
  if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0) return;  // this HDF5 has no deflate: plain storage
  TempDir dir;
  pb::RunResult run;
  run.kind = "plan";
  pb::VariantResult big, small;
  big.name = "big";
  small.name = "small";
  for (int i = 0; i < 5000; ++i)  // 5000 rows of 10 fields: over the threshold, not a whole chunk
    big.spans.push_back({-1, i % 8, i % 93, "gemm", "gemm.q_a", 10.0 + i, 1e6 * i, 2e9 * i});
  small.spans.push_back({-1, 0, 3, "fmha", "fmha.dense", 88.0, 1e9, 2e12});
  run.variants = {big, small};
  const std::string path = dir.file("big.h5");
  pb::write_results(path, run, false);
  CHECK(span_filters(path, "big") == 2);  // shuffle, deflate
  CHECK(span_filters(path, "small") == 0);
  check_equal(pb::read_results(path), run);
}

TEST_CASE("results: a slimmed file keeps everything but the projections' timelines, and says so") {
  TempDir dir;
  pb::RunResult run = make_run();
  const size_t spans = run.variants[0].projections[0].timeline.size() + run.variants[0].projections[1].timeline.size();
  const std::string full = dir.file("full.h5"), slim = dir.file("slim.h5");
  pb::write_results(full, run, false);
  pb::drop_projection_timelines(run);
  for (const pb::VariantResult& v : run.variants)
    for (const pb::Projection& p : v.projections) CHECK(p.timeline.empty());
  CHECK(run.text.at("slimmed") == fmt::format("projection timelines dropped ({} spans); `trace` replays them",
                                              spans * run.variants.size()));
  pb::write_results(slim, run, false);
  check_equal(pb::read_results(slim), run);
  CHECK(std::filesystem::file_size(slim) < std::filesystem::file_size(full));
  const hid_t file = H5Fopen(slim.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const std::string name = "variants/" + run.variants[0].name + "/projection/measured/timeline";
  CHECK(H5Lexists(file, name.c_str(), H5P_DEFAULT) == 0);
  CHECK(H5Lexists(file, "variants", H5P_DEFAULT) > 0);
  H5Fclose(file);
  pb::drop_projection_timelines(run);  // nothing more to drop: the first note stays
  CHECK(run.text.at("slimmed").find(fmt::format("({} spans)", spans * run.variants.size())) != std::string::npos);
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

namespace {

// A schema 1 spans row: no stream.
struct SpanRowV1 {
  int32_t rep, rank, layer;
  char family[pb::kNameBytes], kernel[pb::kNameBytes];
  double time_us, bytes, flops;
};

hid_t span_row_v1_type() {
  const hid_t name = H5Tcopy(H5T_C_S1);
  H5Tset_size(name, pb::kNameBytes);
  H5Tset_strpad(name, H5T_STR_NULLPAD);
  const hid_t type = H5Tcreate(H5T_COMPOUND, sizeof(SpanRowV1));
  H5Tinsert(type, "rep", HOFFSET(SpanRowV1, rep), H5T_NATIVE_INT32);
  H5Tinsert(type, "rank", HOFFSET(SpanRowV1, rank), H5T_NATIVE_INT32);
  H5Tinsert(type, "layer", HOFFSET(SpanRowV1, layer), H5T_NATIVE_INT32);
  H5Tinsert(type, "family", HOFFSET(SpanRowV1, family), name);
  H5Tinsert(type, "kernel", HOFFSET(SpanRowV1, kernel), name);
  H5Tinsert(type, "time_us", HOFFSET(SpanRowV1, time_us), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "bytes", HOFFSET(SpanRowV1, bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(type, "flops", HOFFSET(SpanRowV1, flops), H5T_NATIVE_DOUBLE);
  H5Tclose(name);
  return type;
}

// Rewrites a file of the current schema as schema 1 wrote it: spans without
// the stream and start_us members, no bells, no projection group, schema_version 1.
void downgrade_to_schema_1(const std::string& path, const std::vector<std::string>& variants) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t type = span_row_v1_type();
  for (const std::string& name : variants) {
    const std::string spans_path = "/variants/" + name + "/spans";
    const hid_t spans = H5Dopen2(file, spans_path.c_str(), H5P_DEFAULT);
    REQUIRE(spans >= 0);
    const hid_t space = H5Dget_space(spans);
    const hssize_t rows = H5Sget_simple_extent_npoints(space);
    std::vector<SpanRowV1> data(static_cast<size_t>(rows));
    if (rows > 0) REQUIRE(H5Dread(spans, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0);
    H5Dclose(spans);
    REQUIRE(H5Ldelete(file, spans_path.c_str(), H5P_DEFAULT) >= 0);
    REQUIRE(H5Ldelete(file, ("/variants/" + name + "/bells").c_str(), H5P_DEFAULT) >= 0);
    H5Ldelete(file, ("/variants/" + name + "/projection").c_str(), H5P_DEFAULT);  // absent: fine
    const hid_t packed = H5Tcopy(type);
    H5Tpack(packed);
    const hid_t v1 = H5Dcreate2(file, spans_path.c_str(), packed, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(v1 >= 0);
    if (rows > 0) REQUIRE(H5Dwrite(v1, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()) >= 0);
    H5Dclose(v1);
    H5Tclose(packed);
    H5Sclose(space);
  }
  H5Tclose(type);
  const hid_t attribute = H5Aopen(file, "schema_version", H5P_DEFAULT);
  const int32_t one = 1;
  REQUIRE(H5Awrite(attribute, H5T_NATIVE_INT32, &one) >= 0);
  H5Aclose(attribute);
  H5Fclose(file);
}

}  // namespace

TEST_CASE("results: a schema 1 file reads with every span on stream 0, start unknown, no bells and no projections") {
  TempDir dir;
  const std::string path = dir.file("v1.h5");
  const pb::RunResult run = make_run();
  pb::write_results(path, run, false);
  downgrade_to_schema_1(path, {"baseline", "all"});

  const pb::RunResult back = pb::read_results(path);
  REQUIRE(back.variants.size() == run.variants.size());
  for (size_t v = 0; v < run.variants.size(); ++v) {
    const pb::VariantResult& want = run.variants[v];
    const pb::VariantResult& got = back.variants[v];
    REQUIRE(got.spans.size() == want.spans.size());
    for (size_t i = 0; i < want.spans.size(); ++i) {
      pb::Span expected = want.spans[i];
      expected.stream = 0;
      expected.start_us = -1;
      check_equal(got.spans[i], expected);
    }
    CHECK(got.bells.empty());
    CHECK(got.projections.empty());
    CHECK(got.ttft_ms == want.ttft_ms);
    check_equal(got.outputs, want.outputs);
  }
}

TEST_CASE("results: append_spans shifts the bells to rows of the variant's spans table") {
  pb::VariantResult variant;
  const std::vector<pb::Span> rank0 = {{0, 0, 0, "gemm", "gemm.wfu", 5, 0, 0},
                                       {0, 0, 0, "fabric", "fabric.publish_window", 1, 0, 0}};
  const std::vector<pb::Span> rank1 = {{0, 1, 0, "fabric", "fabric.wait_window", 0, 0, 0},
                                       {0, 1, 0, "gemm", "gemm.kv_b", 3, 0, 0}};
  pb::append_spans(variant, rank0, {{0, 0, 1, pb::BellOpKind::ring, 1, 0, "window", 4096}});
  pb::append_spans(variant, rank1, {{0, 1, 0, pb::BellOpKind::wait, 0, 0, "window", 4096}});
  REQUIRE(variant.spans.size() == 4);
  REQUIRE(variant.bells.size() == 2);
  CHECK(variant.bells[0].span == 1);
  CHECK(variant.bells[1].span == 2);
  CHECK(variant.spans[size_t(variant.bells[1].span)].kernel == "fabric.wait_window");

  const std::string message =
      error_of([&] { pb::append_spans(variant, rank1, {{0, 1, 2, pb::BellOpKind::wait, 0, 0, "window", 4096}}); });
  CHECK(message.find("span 2") != std::string::npos);
  CHECK(variant.spans.size() == 4);  // refused as a whole
}

TEST_CASE("results: a bell naming a span of another rank, or no span, is refused on write and on read") {
  TempDir dir;
  pb::RunResult run = make_run();
  const std::string path = dir.file("bells.h5");

  SUBCASE("another rank's span, on write") {
    run.variants[0].bells[0].span = 4;  // rank 1's first span; the bell is rank 0's
    const std::string message = error_of([&] { pb::write_results(path, run, false); });
    CHECK(message.find("/variants/baseline/bells row 0") != std::string::npos);
    CHECK(message.find("another rep or rank") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(path));
  }
  SUBCASE("outside the table, on read") {
    pb::write_results(path, run, false);
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    const hid_t bells = H5Dopen2(file, "/variants/all/bells", H5P_DEFAULT);
    const hid_t type = H5Tcreate(H5T_COMPOUND, sizeof(int64_t));
    H5Tinsert(type, "span", 0, H5T_NATIVE_INT64);
    std::vector<int64_t> spans(run.variants[1].bells.size());
    REQUIRE(H5Dread(bells, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, spans.data()) >= 0);
    spans[1] = 1000;
    REQUIRE(H5Dwrite(bells, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, spans.data()) >= 0);
    H5Tclose(type);
    H5Dclose(bells);
    H5Fclose(file);
    const std::string message = error_of([&] { pb::read_results(path); });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("/variants/all/bells row 1") != std::string::npos);
    CHECK(message.find("outside the") != std::string::npos);
  }
}

TEST_CASE("results: two projections over one link in a variant are refused") {
  TempDir dir;
  pb::RunResult run = make_run();
  run.variants[0].projections[1].link = run.variants[0].projections[0].link;
  const std::string message = error_of([&] { pb::write_results(dir.file("twice.h5"), run, false); });
  CHECK(message.find("two projections over link 'nvlink4'") != std::string::npos);
}
