// Results files: RunResult <-> HDF5 (C API, serial), layout in results.h.
//
// Reading order: write_results / read_results at the bottom, the per-group
// writers and readers above them, the row schemas at the top; the HDF5
// plumbing is hdf5_io.h's.
#include "results.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "check.h"
#include "hdf5_io.h"

namespace pb {

const VariantResult* RunResult::find_variant(const std::string& name) const {
  for (const VariantResult& variant : variants)
    if (variant.name == name) return &variant;
  return nullptr;
}

const Projection* VariantResult::projection(const std::string& link) const {
  for (const Projection& p : projections)
    if (p.link == link) return &p;
  return projections.empty() ? nullptr : &projections.front();
}

const char* bell_op_name(BellOpKind op) { return op == BellOpKind::wait ? "wait" : "ring"; }

void append_spans(VariantResult& variant, const std::vector<Span>& spans, const std::vector<BellOp>& bells) {
  const int64_t first_row = int64_t(variant.spans.size());
  for (const BellOp& bell : bells) {
    PB_CHECK(bell.span >= 0 && bell.span < int64_t(spans.size()),
             fmt::format("doorbell {} of rank {} names span {}, outside the {} spans it came with",
                         bell_op_name(bell.op), bell.rank, bell.span, spans.size()));
    BellOp shifted = bell;
    shifted.span += first_row;
    variant.bells.push_back(std::move(shifted));
  }
  variant.spans.insert(variant.spans.end(), spans.begin(), spans.end());
}

namespace {

using namespace h5;

// ---- records with a field list (results.h visit_fields): Span, BellOp, RankRep ----

// The HDF5 form of one field type: its in-memory type and bytes (strings:
// fixed kNameBytes fields, as every name in the tables).
struct FieldForm {
  hid_t type;
  size_t bytes;
};
template <class T>
FieldForm field_form() {
  if constexpr (std::is_same_v<T, int32_t>) return {H5T_NATIVE_INT32, 4};
  else if constexpr (std::is_same_v<T, int64_t>) return {H5T_NATIVE_INT64, 8};
  else if constexpr (std::is_same_v<T, uint64_t>) return {H5T_NATIVE_UINT64, 8};
  else if constexpr (std::is_same_v<T, double>) return {H5T_NATIVE_DOUBLE, 8};
  else if constexpr (std::is_same_v<T, BellOpKind>) return {H5T_NATIVE_INT8, 1};  // 0 wait, 1 ring
  else {
    static_assert(std::is_same_v<T, std::string>, "a record field of a type the results file has no form for");
    return {H5T_C_S1, size_t(kNameBytes)};
  }
}

// A record's table rows, laid out from its field list: the fields the file's
// schema version has, packed in order, so the same list reads every version
// (a field newer than the file keeps the record's default).
template <class Record>
class RecordTable {
 public:
  RecordTable(const char* what, int schema_version) : what_(what) {
    Record probe{};
    visit_fields(probe, [&](const char* name, auto& field, int since) {
      if (since > schema_version) return;
      const FieldForm form = field_form<std::decay_t<decltype(field)>>();
      fields_.push_back({name, row_bytes_, form});
      row_bytes_ += form.bytes;
    });
  }

  void write(const Node& group, const std::string& name, const std::vector<Record>& records) const {
    std::vector<char> rows(records.size() * row_bytes_);
    for (size_t i = 0; i < records.size(); ++i) {
      size_t f = 0;
      visit_fields(records[i], [&](const char* field_name, const auto& field, int) {
        if (f < fields_.size() && fields_[f].name == field_name) put(rows.data() + i * row_bytes_, fields_[f++], field);
      });
    }
    const CompoundType type = compound();
    write_table(group, name, type, records.size(), rows.data());
  }

  std::vector<Record> read(const Node& group, const std::string& name) const {
    const CompoundType type = compound();
    Dims dims;
    const std::vector<char> rows = read_table_bytes(group, name, type, row_bytes_, &dims);
    std::vector<Record> records(dims.at(0));
    for (size_t i = 0; i < records.size(); ++i) {
      size_t f = 0;
      visit_fields(records[i], [&](const char* field_name, auto& field, int) {
        if (f < fields_.size() && fields_[f].name == field_name) get(rows.data() + i * row_bytes_, fields_[f++], field);
      });
    }
    return records;
  }

 private:
  struct Field {
    std::string name;
    size_t offset;
    FieldForm form;
  };

  CompoundType compound() const {
    CompoundType type(row_bytes_);
    for (const Field& f : fields_) {
      if (f.form.type == H5T_C_S1) type.add_name(f.name.c_str(), f.offset);
      else type.add(f.name.c_str(), f.offset, f.form.type);
    }
    return type;
  }

  template <class T>
  void put(char* row, const Field& f, const T& value) const {
    if constexpr (std::is_same_v<T, std::string>) {
      Name name;
      store_name(name, value, (what_ + " " + f.name).c_str());
      std::memcpy(row + f.offset, name, kNameBytes);
    } else if constexpr (std::is_same_v<T, BellOpKind>) {
      const int8_t op = int8_t(value);
      std::memcpy(row + f.offset, &op, 1);
    } else {
      std::memcpy(row + f.offset, &value, sizeof(T));
    }
  }

  template <class T>
  void get(const char* row, const Field& f, T& value) const {
    if constexpr (std::is_same_v<T, std::string>) {
      Name name;
      std::memcpy(name, row + f.offset, kNameBytes);
      value = load_name(name);
    } else if constexpr (std::is_same_v<T, BellOpKind>) {
      int8_t op = 0;
      std::memcpy(&op, row + f.offset, 1);
      PB_CHECK(op == 0 || op == 1, fmt::format("{}s: {} {} of a row; allowed: 0 (wait), 1 (ring)", what_, f.name, int(op)));
      value = BellOpKind(op);
    } else {
      std::memcpy(&value, row + f.offset, sizeof(T));
    }
  }

  std::string what_;  // "span", "doorbell", "rank rep": messages
  std::vector<Field> fields_;
  size_t row_bytes_ = 0;
};

RecordTable<Span> span_table(int schema_version = kSchemaVersion) { return {"span", schema_version}; }
RecordTable<BellOp> bell_table() { return {"doorbell", kSchemaVersion}; }
RecordTable<RankRep> rank_rep_table(int schema_version = kSchemaVersion) { return {"rank rep", schema_version}; }

CompoundType telemetry_row_type() {
  CompoundType type(sizeof(TelemetrySample));
  type.add("rank", HOFFSET(TelemetrySample, rank), H5T_NATIVE_INT32)
      .add("t_ms", HOFFSET(TelemetrySample, t_ms), H5T_NATIVE_DOUBLE)
      .add("sm_mhz", HOFFSET(TelemetrySample, sm_mhz), H5T_NATIVE_DOUBLE)
      .add("mem_mhz", HOFFSET(TelemetrySample, mem_mhz), H5T_NATIVE_DOUBLE)
      .add("power_w", HOFFSET(TelemetrySample, power_w), H5T_NATIVE_DOUBLE)
      .add("temp_c", HOFFSET(TelemetrySample, temp_c), H5T_NATIVE_DOUBLE)
      .add("reasons", HOFFSET(TelemetrySample, reasons), H5T_NATIVE_UINT64);
  return type;
}

// The projection's tables: ProjectedRep, RankProjection and ProjectedSpan are
// plain structs (their own row types); ProjectedWait and PathStep have rows.
CompoundType projected_rep_row_type() {
  CompoundType type(sizeof(ProjectedRep));
  type.add("rep", HOFFSET(ProjectedRep, rep), H5T_NATIVE_INT32)
      .add("ttft_ms", HOFFSET(ProjectedRep, ttft_ms), H5T_NATIVE_DOUBLE)
      .add("serialized_ttft_ms", HOFFSET(ProjectedRep, serialized_ttft_ms), H5T_NATIVE_DOUBLE)
      .add("host_ms", HOFFSET(ProjectedRep, host_ms), H5T_NATIVE_DOUBLE);
  return type;
}

CompoundType rank_projection_row_type() {
  CompoundType type(sizeof(RankProjection));
  type.add("rank", HOFFSET(RankProjection, rank), H5T_NATIVE_INT32)
      .add("end_us", HOFFSET(RankProjection, end_us), H5T_NATIVE_DOUBLE)
      .add("busy_us", HOFFSET(RankProjection, busy_us), H5T_NATIVE_DOUBLE)
      .add("wait_us", HOFFSET(RankProjection, wait_us), H5T_NATIVE_DOUBLE)
      .add("idle_us", HOFFSET(RankProjection, idle_us), H5T_NATIVE_DOUBLE)
      .add("path_compute_us", HOFFSET(RankProjection, path_compute_us), H5T_NATIVE_DOUBLE);
  return type;
}

CompoundType projected_span_row_type() {
  CompoundType type(sizeof(ProjectedSpan));
  type.add("span", HOFFSET(ProjectedSpan, span), H5T_NATIVE_INT64)
      .add("start_us", HOFFSET(ProjectedSpan, start_us), H5T_NATIVE_DOUBLE)
      .add("end_us", HOFFSET(ProjectedSpan, end_us), H5T_NATIVE_DOUBLE);
  return type;
}

struct ProjectedWaitRow {
  int32_t rank, peer;
  Name kind;
  double stall_us, path_us;
};

CompoundType projected_wait_row_type() {
  CompoundType type(sizeof(ProjectedWaitRow));
  type.add("rank", HOFFSET(ProjectedWaitRow, rank), H5T_NATIVE_INT32)
      .add("peer", HOFFSET(ProjectedWaitRow, peer), H5T_NATIVE_INT32)
      .add_name("kind", HOFFSET(ProjectedWaitRow, kind))
      .add("stall_us", HOFFSET(ProjectedWaitRow, stall_us), H5T_NATIVE_DOUBLE)
      .add("path_us", HOFFSET(ProjectedWaitRow, path_us), H5T_NATIVE_DOUBLE);
  return type;
}

ProjectedWaitRow to_row(const ProjectedWait& wait) {
  ProjectedWaitRow row{wait.rank, wait.peer, {}, wait.stall_us, wait.path_us};
  store_name(row.kind, wait.kind, "projected wait kind");
  return row;
}

ProjectedWait from_row(const ProjectedWaitRow& row) {
  return ProjectedWait{row.rank, row.peer, load_name(row.kind), row.stall_us, row.path_us};
}

struct PathStepRow {
  int64_t span;
  int32_t rank, stream, layer;
  Name kernel;
  double start_us, end_us;
  int32_t peer;
  Name kind;
  double waited_us;
};

CompoundType path_step_row_type() {
  CompoundType type(sizeof(PathStepRow));
  type.add("span", HOFFSET(PathStepRow, span), H5T_NATIVE_INT64)
      .add("rank", HOFFSET(PathStepRow, rank), H5T_NATIVE_INT32)
      .add("stream", HOFFSET(PathStepRow, stream), H5T_NATIVE_INT32)
      .add("layer", HOFFSET(PathStepRow, layer), H5T_NATIVE_INT32)
      .add_name("kernel", HOFFSET(PathStepRow, kernel))
      .add("start_us", HOFFSET(PathStepRow, start_us), H5T_NATIVE_DOUBLE)
      .add("end_us", HOFFSET(PathStepRow, end_us), H5T_NATIVE_DOUBLE)
      .add("peer", HOFFSET(PathStepRow, peer), H5T_NATIVE_INT32)
      .add_name("kind", HOFFSET(PathStepRow, kind))
      .add("waited_us", HOFFSET(PathStepRow, waited_us), H5T_NATIVE_DOUBLE);
  return type;
}

PathStepRow to_row(const PathStep& step) {
  PathStepRow row{step.span, step.rank, step.stream, step.layer, {}, step.start_us, step.end_us, step.peer, {},
                  step.waited_us};
  store_name(row.kernel, step.kernel, "path step kernel");
  store_name(row.kind, step.kind, "path step kind");
  return row;
}

PathStep from_row(const PathStepRow& row) {
  return PathStep{row.span,       row.rank,   row.stream, row.layer,           load_name(row.kernel),
                  row.start_us,   row.end_us, row.peer,   load_name(row.kind), row.waited_us};
}

// BenchRow <-> one row of /bench.
struct BenchTableRow {
  Name family, kernel, variant, shape;
  double median_us, min_us, max_us, bytes, flops, tbps, tflops, fraction, speedup;
  int32_t reps;
  int64_t wrong;
  double error, error_floor;
};

CompoundType bench_row_type(int schema_version = kSchemaVersion) {
  CompoundType type(sizeof(BenchTableRow));
  type.add_name("family", HOFFSET(BenchTableRow, family))
      .add_name("kernel", HOFFSET(BenchTableRow, kernel))
      .add_name("variant", HOFFSET(BenchTableRow, variant))
      .add_name("shape", HOFFSET(BenchTableRow, shape))
      .add("median_us", HOFFSET(BenchTableRow, median_us), H5T_NATIVE_DOUBLE)
      .add("min_us", HOFFSET(BenchTableRow, min_us), H5T_NATIVE_DOUBLE)
      .add("max_us", HOFFSET(BenchTableRow, max_us), H5T_NATIVE_DOUBLE)
      .add("bytes", HOFFSET(BenchTableRow, bytes), H5T_NATIVE_DOUBLE)
      .add("flops", HOFFSET(BenchTableRow, flops), H5T_NATIVE_DOUBLE)
      .add("tbps", HOFFSET(BenchTableRow, tbps), H5T_NATIVE_DOUBLE)
      .add("tflops", HOFFSET(BenchTableRow, tflops), H5T_NATIVE_DOUBLE)
      .add("fraction", HOFFSET(BenchTableRow, fraction), H5T_NATIVE_DOUBLE)
      .add("speedup", HOFFSET(BenchTableRow, speedup), H5T_NATIVE_DOUBLE)
      .add("reps", HOFFSET(BenchTableRow, reps), H5T_NATIVE_INT32);
  if (schema_version >= 4)
    type.add("wrong", HOFFSET(BenchTableRow, wrong), H5T_NATIVE_INT64)
        .add("error", HOFFSET(BenchTableRow, error), H5T_NATIVE_DOUBLE)
        .add("error_floor", HOFFSET(BenchTableRow, error_floor), H5T_NATIVE_DOUBLE);
  return type;
}

BenchTableRow to_row(const BenchRow& bench) {
  BenchTableRow row{{}, {}, {}, {}, bench.median_us, bench.min_us, bench.max_us, bench.bytes, bench.flops,
                    bench.tbps, bench.tflops, bench.fraction, bench.speedup, bench.reps, bench.wrong, bench.error,
                    bench.error_floor};
  store_name(row.family, bench.family, "bench family");
  store_name(row.kernel, bench.kernel, "bench kernel");
  store_name(row.variant, bench.variant, "bench variant");
  store_name(row.shape, bench.shape, "bench shape");
  return row;
}

BenchRow from_row(const BenchTableRow& row) {
  BenchRow bench;
  bench.family = load_name(row.family);
  bench.kernel = load_name(row.kernel);
  bench.variant = load_name(row.variant);
  bench.shape = load_name(row.shape);
  bench.median_us = row.median_us;
  bench.min_us = row.min_us;
  bench.max_us = row.max_us;
  bench.bytes = row.bytes;
  bench.flops = row.flops;
  bench.tbps = row.tbps;
  bench.tflops = row.tflops;
  bench.fraction = row.fraction;
  bench.speedup = row.speedup;
  bench.reps = row.reps;
  bench.wrong = row.wrong;
  bench.error = row.error;
  bench.error_floor = row.error_floor;
  return bench;
}

// CutRecord <-> one row of /cuts.
struct CutTableRow {
  Name name, family, prerequisite, exactness, bench_family;
  double floor;
  int32_t seed, needs_fp8;
};

CompoundType cut_row_type() {
  CompoundType type(sizeof(CutTableRow));
  type.add_name("name", HOFFSET(CutTableRow, name))
      .add_name("family", HOFFSET(CutTableRow, family))
      .add_name("prerequisite", HOFFSET(CutTableRow, prerequisite))
      .add_name("exactness", HOFFSET(CutTableRow, exactness))
      .add_name("bench_family", HOFFSET(CutTableRow, bench_family))
      .add("floor", HOFFSET(CutTableRow, floor), H5T_NATIVE_DOUBLE)
      .add("seed", HOFFSET(CutTableRow, seed), H5T_NATIVE_INT32)
      .add("needs_fp8", HOFFSET(CutTableRow, needs_fp8), H5T_NATIVE_INT32);
  return type;
}

CutTableRow to_row(const CutRecord& cut) {
  CutTableRow row{{}, {}, {}, {}, {}, cut.floor, cut.seed, cut.needs_fp8};
  store_name(row.name, cut.name, "cut name");
  store_name(row.family, cut.family, "cut family");
  store_name(row.prerequisite, cut.prerequisite, "cut prerequisite");
  store_name(row.exactness, cut.exactness, "cut exactness");
  store_name(row.bench_family, cut.bench_family, "cut bench family");
  return row;
}

CutRecord from_row(const CutTableRow& row) {
  CutRecord cut;
  cut.name = load_name(row.name);
  cut.family = load_name(row.family);
  cut.prerequisite = load_name(row.prerequisite);
  cut.exactness = load_name(row.exactness);
  cut.bench_family = load_name(row.bench_family);
  cut.floor = row.floor;
  cut.seed = row.seed;
  cut.needs_fp8 = row.needs_fp8;
  return cut;
}

template <typename Row, typename Item>
std::vector<Row> to_rows(const std::vector<Item>& items) {
  std::vector<Row> rows;
  rows.reserve(items.size());
  for (const Item& item : items) rows.push_back(to_row(item));
  return rows;
}

template <typename Item, typename Row>
std::vector<Item> from_rows(const std::vector<Row>& rows) {
  std::vector<Item> items;
  items.reserve(rows.size());
  for (const Row& row : rows) items.push_back(from_row(row));
  return items;
}

// ---- root attributes: the reserved ones, then text and numbers -------------------

const std::set<std::string>& reserved_root_attributes() {
  static const std::set<std::string> names = {"schema_version", "kind", "complete"};
  return names;
}

void check_root_keys(const RunResult& result) {
  for (const auto& [key, value] : result.text) {
    PB_CHECK(!key.empty() && !reserved_root_attributes().count(key),
             fmt::format("text entry '{}' cannot be a root attribute (empty or reserved name)", key));
    PB_CHECK(!result.numbers.count(key), fmt::format("'{}' is both a text and a number entry", key));
  }
  for (const auto& [key, value] : result.numbers)
    PB_CHECK(!key.empty() && !reserved_root_attributes().count(key),
             fmt::format("number entry '{}' cannot be a root attribute (empty or reserved name)", key));
}

void write_root_attributes(const Node& root, const RunResult& result) {
  check_root_keys(result);
  write_i32_attribute(root.id, "schema_version", kSchemaVersion);
  write_string_attribute(root.id, "kind", result.kind);
  write_i32_attribute(root.id, "complete", result.complete ? 1 : 0);
  for (const auto& [key, value] : result.text) write_string_attribute(root.id, key, value);
  for (const auto& [key, value] : result.numbers) write_f64_attribute(root.id, key, value);
}

// The file's schema version, one this build reads.
int32_t read_schema_version(const Node& root) {
  PB_CHECK(PB_H5(H5Aexists(root.id, "schema_version")) > 0,
           "missing attribute /schema_version: not a prefill-bench results file");
  const int32_t version = read_i32_attribute(root, "schema_version");
  PB_CHECK(version >= kOldestReadableSchemaVersion && version <= kSchemaVersion,
           fmt::format("schema_version is {}, this build reads versions {} to {}", version,
                       kOldestReadableSchemaVersion, kSchemaVersion));
  return version;
}

// Every non-reserved root attribute: strings into text, numbers into numbers.
void read_root_attributes(const Node& root, RunResult* result) {
  result->kind = read_string_attribute(root, "kind");
  result->complete = read_i32_attribute(root, "complete") != 0;
  for (const std::string& name : attribute_names(root)) {
    if (reserved_root_attributes().count(name)) continue;
    Handle attribute{PB_H5(H5Aopen(root.id, name.c_str(), H5P_DEFAULT)), H5Aclose};
    const H5T_class_t type_class = attribute_class(attribute);
    if (type_class == H5T_STRING)
      result->text[name] = read_string_attribute(root, name);
    else if (type_class == H5T_FLOAT || type_class == H5T_INTEGER)
      result->numbers[name] = read_f64_attribute(root, name);
  }
}

// ---- /variants/<name>/outputs ----------------------------------------------------

void check_output_sizes(const Outputs& outputs) {
  PB_CHECK(outputs.checksums.size() == size_t(outputs.ranks) * size_t(outputs.layers),
           fmt::format("outputs: {} checksums for {} ranks x {} layers", outputs.checksums.size(), outputs.ranks,
                       outputs.layers));
  PB_CHECK(outputs.hidden_samples.size() ==
               size_t(outputs.ranks) * size_t(outputs.sample_rows) * size_t(outputs.sample_cols),
           fmt::format("outputs: {} hidden samples for {} ranks x {} rows x {} cols", outputs.hidden_samples.size(),
                       outputs.ranks, outputs.sample_rows, outputs.sample_cols));
}

void write_outputs(const Node& variant, const Outputs& outputs) {
  check_output_sizes(outputs);
  Handle group = create_group(variant, "outputs");
  const Node node{group, variant.child("outputs")};
  const hsize_t ranks = hsize_t(outputs.ranks);
  write_dataset(node, "checksums", H5T_STD_U64LE, H5T_NATIVE_UINT64, {ranks, hsize_t(outputs.layers)},
                outputs.checksums.data());
  write_dataset(node, "hidden_samples", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                {ranks, hsize_t(outputs.sample_rows), hsize_t(outputs.sample_cols)}, outputs.hidden_samples.data());
  write_dataset(node, "last_logits", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {outputs.last_logits.size()},
                outputs.last_logits.data());
  write_i64_attribute(node.id, "first_token", outputs.first_token);
}

Outputs read_outputs(const Node& variant) {
  Handle group = open_group(variant, "outputs");
  const Node node{group, variant.child("outputs")};
  Outputs outputs;
  Dims dims;
  outputs.checksums = read_dataset<uint64_t>(node, "checksums", H5T_NATIVE_UINT64, 2, &dims);
  outputs.ranks = int32_t(dims[0]);
  outputs.layers = int32_t(dims[1]);
  outputs.hidden_samples = read_dataset<float>(node, "hidden_samples", H5T_NATIVE_FLOAT, 3, &dims);
  PB_CHECK(dims[0] == hsize_t(outputs.ranks),
           fmt::format("{}/hidden_samples has {} ranks, checksums {}", node.path, dims[0], outputs.ranks));
  outputs.sample_rows = int32_t(dims[1]);
  outputs.sample_cols = int32_t(dims[2]);
  outputs.last_logits = read_dataset<float>(node, "last_logits", H5T_NATIVE_FLOAT, 1, &dims);
  outputs.first_token = read_i64_attribute(node, "first_token");
  return outputs;
}

// ---- /variants/<name>/projection/<link> ---------------------------------------------

void check_projection_links(const std::vector<Projection>& projections) {
  std::set<std::string> links;
  for (const Projection& projection : projections) {
    PB_CHECK(!projection.link.empty() && projection.link != "." && projection.link.find('/') == std::string::npos,
             fmt::format("projection link '{}' cannot be an HDF5 group name", projection.link));
    PB_CHECK(links.insert(projection.link).second,
             fmt::format("two projections over link '{}' in one variant", projection.link));
  }
}

void write_projection(const Node& parent, const Projection& projection) {
  Handle group = create_group(parent, projection.link);
  const Node node{group, parent.child(projection.link)};
  write_string_attribute(node.id, "link_source", projection.link_source);
  write_i32_attribute(node.id, "rep", projection.rep);
  write_f64_attribute(node.id, "ttft_ms", projection.ttft_ms);
  write_table(node, "reps", projected_rep_row_type(), projection.reps);
  write_table(node, "ranks", rank_projection_row_type(), projection.ranks);
  write_table(node, "waits", projected_wait_row_type(), to_rows<ProjectedWaitRow>(projection.waits));
  write_table(node, "path", path_step_row_type(), to_rows<PathStepRow>(projection.path));
  if (!projection.timeline.empty()) write_table(node, "timeline", projected_span_row_type(), projection.timeline);
}

Projection read_projection(const Node& parent, const std::string& link) {
  Handle group = open_group(parent, link);
  const Node node{group, parent.child(link)};
  Projection projection;
  projection.link = link;
  projection.link_source = read_string_attribute(node, "link_source");
  projection.rep = read_i32_attribute(node, "rep");
  projection.ttft_ms = read_f64_attribute(node, "ttft_ms");
  projection.reps = read_table<ProjectedRep>(node, "reps", projected_rep_row_type());
  projection.ranks = read_table<RankProjection>(node, "ranks", rank_projection_row_type());
  projection.waits = from_rows<ProjectedWait>(read_table<ProjectedWaitRow>(node, "waits", projected_wait_row_type()));
  projection.path = from_rows<PathStep>(read_table<PathStepRow>(node, "path", path_step_row_type()));
  if (has_link(node, "timeline"))  // a slimmed file has none (drop_projection_timelines)
    projection.timeline = read_table<ProjectedSpan>(node, "timeline", projected_span_row_type());
  return projection;
}

void write_projections(const Node& variant, const std::vector<Projection>& projections) {
  if (projections.empty()) return;
  check_projection_links(projections);
  Handle group = create_group(variant, "projection", /*keep_creation_order=*/true);
  const Node node{group, variant.child("projection")};
  for (const Projection& projection : projections) write_projection(node, projection);
}

std::vector<Projection> read_projections(const Node& variant) {
  if (!has_link(variant, "projection")) return {};
  Handle group = open_group(variant, "projection");
  const Node node{group, variant.child("projection")};
  std::vector<Projection> projections;
  for (const std::string& link : member_names(node)) projections.push_back(read_projection(node, link));
  return projections;
}

// ---- /variants/<name> ------------------------------------------------------------

void check_variant_name(const std::string& name) {
  PB_CHECK(!name.empty() && name != "." && name.find('/') == std::string::npos,
           fmt::format("variant name '{}' cannot be an HDF5 group name", name));
}

// Every bell names a span row of its own rep and rank.
void check_bell_spans(const Node& variant_node, const VariantResult& variant) {
  for (size_t i = 0; i < variant.bells.size(); ++i) {
    const BellOp& bell = variant.bells[i];
    const bool inside = bell.span >= 0 && bell.span < int64_t(variant.spans.size());
    PB_CHECK(inside && variant.spans[size_t(bell.span)].rep == bell.rep &&
                 variant.spans[size_t(bell.span)].rank == bell.rank,
             fmt::format("{}/bells row {} (rep {}, rank {}) names span {}, {}", variant_node.path, i, bell.rep,
                         bell.rank, bell.span,
                         inside ? "a span of another rep or rank"
                                : fmt::format("outside the {} rows of spans", variant.spans.size())));
  }
}

// Every projected timeline row names a span row (trace draws that span).
void check_timeline_spans(const Node& variant_node, const VariantResult& variant) {
  for (const Projection& projection : variant.projections)
    for (size_t i = 0; i < projection.timeline.size(); ++i) {
      const int64_t span = projection.timeline[i].span;
      PB_CHECK(span >= 0 && span < int64_t(variant.spans.size()),
               fmt::format("{}/projection/{}/timeline row {} names span {}, outside the {} rows of spans",
                           variant_node.path, projection.link, i, span, variant.spans.size()));
    }
}

void write_variant(const Node& variants, const VariantResult& variant) {
  check_variant_name(variant.name);
  Handle group = create_group(variants, variant.name);
  const Node node{group, variants.child(variant.name)};
  write_string_attribute(node.id, "cuts", variant.cuts);
  write_i32_attribute(node.id, "complete", variant.complete ? 1 : 0);
  span_table().write(node, "spans", variant.spans);
  check_bell_spans(node, variant);
  bell_table().write(node, "bells", variant.bells);
  rank_rep_table().write(node, "rank_reps", variant.rank_reps);
  write_dataset(node, "ttft_ms", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {variant.ttft_ms.size()},
                variant.ttft_ms.data());
  write_outputs(node, variant.outputs);
  write_projections(node, variant.projections);
}

VariantResult read_variant(const Node& variants, const std::string& name, int32_t schema_version) {
  Handle group = open_group(variants, name);
  const Node node{group, variants.child(name)};
  VariantResult variant;
  variant.name = name;
  variant.cuts = read_string_attribute(node, "cuts");
  variant.complete = read_i32_attribute(node, "complete") != 0;
  variant.spans = span_table(schema_version).read(node, "spans");  // before version 3: start_us -1
  if (schema_version >= 2) {
    variant.bells = bell_table().read(node, "bells");
    check_bell_spans(node, variant);
    variant.projections = read_projections(node);
    check_timeline_spans(node, variant);
  }
  variant.rank_reps = rank_rep_table(schema_version).read(node, "rank_reps");  // before 3: clocks NaN
  Dims dims;
  variant.ttft_ms = read_dataset<double>(node, "ttft_ms", H5T_NATIVE_DOUBLE, 1, &dims);
  variant.outputs = read_outputs(node);
  return variant;
}

// ---- whole files ---------------------------------------------------------------------

void write_file(const std::string& path, const RunResult& result) {
  // The 1.8 format or later: checksummed metadata (results.h).
  Handle access{PB_H5(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose};
  PB_H5(H5Pset_libver_bounds(access, H5F_LIBVER_V18, H5F_LIBVER_LATEST));
  Handle file{PB_H5(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access)), H5Fclose};
  const Node root{file, "/"};
  write_root_attributes(root, result);
  {
    Handle variants = create_group(root, "variants", /*keep_creation_order=*/true);
    for (const VariantResult& variant : result.variants) write_variant(Node{variants, "/variants"}, variant);
  }
  if (result.kind == "kernels" || !result.bench.empty())
    write_table(root, "bench", bench_row_type(), to_rows<BenchTableRow>(result.bench));
  if (!result.telemetry.empty()) write_table(root, "telemetry", telemetry_row_type(), result.telemetry);
  if (!result.cuts.empty()) write_table(root, "cuts", cut_row_type(), to_rows<CutTableRow>(result.cuts));
  file.close();
}

RunResult read_file(const std::string& path) {
  PB_CHECK(std::filesystem::exists(path), "no such file");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  PB_CHECK(id >= 0, "not an HDF5 file, or unreadable" + hdf5_error_detail());
  Handle file{id, H5Fclose};
  const Node root{file, "/"};
  const int32_t version = read_schema_version(root);
  RunResult result;
  read_root_attributes(root, &result);
  Handle variants = open_group(root, "variants");
  const Node variants_node{variants, "/variants"};
  for (const std::string& name : member_names(variants_node))
    result.variants.push_back(read_variant(variants_node, name, version));
  if (has_link(root, "bench")) {
    std::vector<BenchTableRow> rows = read_table<BenchTableRow>(root, "bench", bench_row_type(version));
    if (version < 4)
      for (BenchTableRow& row : rows) row.wrong = -1, row.error = row.error_floor = kNoValue;
    result.bench = from_rows<BenchRow>(rows);
  }
  if (has_link(root, "cuts")) result.cuts = from_rows<CutRecord>(read_table<CutTableRow>(root, "cuts", cut_row_type()));
  if (has_link(root, "telemetry"))
    result.telemetry = read_table<TelemetrySample>(root, "telemetry", telemetry_row_type());
  return result;
}

// Puts the file's name in front of any error raised while handling it.
template <typename Body>
auto naming_the_file(const char* doing, const std::string& path, Body body) {
  try {
    return body();
  } catch (const Error& error) {
    throw Error(fmt::format("{} results file '{}': {}", doing, path, error.what()));
  }
}

}  // namespace

bool BenchRow::failed() const {
  if (wrong > 0) return true;
  return !std::isnan(error_floor) && !(error <= error_floor);
}

void drop_projection_timelines(RunResult& result) {
  size_t dropped = 0;
  for (VariantResult& variant : result.variants)
    for (Projection& projection : variant.projections) {
      dropped += projection.timeline.size();
      projection.timeline.clear();
    }
  if (dropped > 0)
    result.text["slimmed"] = fmt::format("projection timelines dropped ({} spans); `trace` replays them", dropped);
}

void check_results_path(const std::string& path, bool overwrite) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (fs::is_symlink(link)) {  // one that stays in its folder names a file there; the rename replaces the link
    const fs::path folder = fs::weakly_canonical(fs::absolute(fs::path(path)).parent_path(), ec);
    const fs::path target = fs::weakly_canonical(fs::absolute(fs::path(path)), ec);
    PB_CHECK(!ec && target.parent_path() == folder,
             fmt::format("results file '{}' is a symbolic link out of its folder (to '{}'): name the file itself",
                         path, target.string()));
  }
  const fs::file_status st = fs::status(path, ec);
  PB_CHECK(!fs::exists(st) || fs::is_regular_file(st),
           fmt::format("results file '{}' is not a regular file ({}): a results path is a regular file or a new name",
                       path, fs::is_directory(st) ? "a directory" : fs::is_fifo(st) ? "a FIFO"
                                                  : fs::is_character_file(st) || fs::is_block_file(st) ? "a device"
                                                                                                       : "not a file"));
  PB_CHECK(overwrite || !fs::exists(st),
           fmt::format("results file '{}' already exists: pass --overwrite or choose another output", path));
  // The folder takes a new file: a missing or unwritable folder is named now,
  // not after a long run. A scratch name of its own leaves <path>.tmp alone.
  std::string probe = path + ".check-XXXXXX";
  const int fd = mkstemp(probe.data());
  PB_CHECK(fd >= 0, fmt::format("results file '{}': its folder cannot take a new file: {}", path,
                                std::strerror(errno)));
  ::close(fd);
  std::remove(probe.c_str());
}

void write_results(const std::string& path, const RunResult& result, bool overwrite) {
  check_results_path(path, overwrite);
  start_hdf5();
  const std::string temporary = path + ".tmp";
  naming_the_file("writing", temporary, [&] {
    try {
      write_file(temporary, result);
    } catch (...) {
      std::remove(temporary.c_str());
      throw;
    }
  });
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) std::remove(temporary.c_str());
  PB_CHECK(!error, fmt::format("cannot rename '{}' to '{}': {}", temporary, path, error.message()));
}

std::string gpu_name(const RunResult& run) {
  const auto found = run.text.find("gpus");
  if (found == run.text.end()) return "";
  std::string line = found->second.substr(0, found->second.find('\n'));
  const size_t colon = line.find(": ");
  if (colon != std::string::npos) line = line.substr(colon + 2);
  return line.substr(0, line.find(" GPU-"));
}

double positive_number(const RunResult& run, const std::string& key) {
  const auto found = run.numbers.find(key);
  return found == run.numbers.end() || !(found->second > 0) ? kNoValue : found->second;
}

RunResult read_results(const std::string& path) {
  start_hdf5();
  return naming_the_file("reading", path, [&] { return read_file(path); });
}

}  // namespace pb
