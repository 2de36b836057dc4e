#include "sweep_file.h"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "check.h"
#include "hdf5_io.h"

namespace pb {

using namespace h5;

namespace {

struct PointRow {
  Name id;
  int64_t context;
  int32_t cp;
  Name precision;
  Name status;
};

CompoundType point_row_type() {
  CompoundType type(sizeof(PointRow));
  type.add_name("id", HOFFSET(PointRow, id))
      .add("context", HOFFSET(PointRow, context), H5T_NATIVE_INT64)
      .add("cp", HOFFSET(PointRow, cp), H5T_NATIVE_INT32)
      .add_name("precision", HOFFSET(PointRow, precision))
      .add_name("status", HOFFSET(PointRow, status));
  return type;
}

void check_record(const SweepPointRecord& p) {
  const auto statuses = sweep_status_names();
  PB_CHECK(std::find(statuses.begin(), statuses.end(), p.status) != statuses.end(),
           fmt::format("sweep point '{}': status '{}'; allowed: measured, planned, failed", p.id, p.status));
  PB_CHECK(!p.id.empty() && p.id.size() < kNameBytes && p.id.find('/') == std::string::npos,
           fmt::format("sweep point id '{}': 1 to {} characters, no '/'", p.id, kNameBytes - 1));
}

struct FamilyRow {
  Name variant;
  Name family;
  double ms;
  double calibrated_ms;
};

CompoundType family_row_type() {
  CompoundType type(sizeof(FamilyRow));
  type.add_name("variant", HOFFSET(FamilyRow, variant))
      .add_name("family", HOFFSET(FamilyRow, family))
      .add("ms", HOFFSET(FamilyRow, ms), H5T_NATIVE_DOUBLE)
      .add("calibrated_ms", HOFFSET(FamilyRow, calibrated_ms), H5T_NATIVE_DOUBLE);
  return type;
}

void delete_if_there(const Node& group, const std::string& name) {
  if (has_link(group, name)) PB_H5(H5Ldelete(group.id, name.c_str(), H5P_DEFAULT));
}

// The point's summary (sweep_file.h) in `scratch` at "p": its file copied in,
// the per-launch tables deleted, the families written.
void summarize_point(hid_t scratch, const std::string& point_file, const std::vector<SweepFamilyRow>& families) {
  Handle source{PB_H5(H5Fopen(point_file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose};
  PB_H5(H5Ocopy(source, ".", scratch, "p", H5P_DEFAULT, H5P_DEFAULT));
  const Node file{scratch, "/"};
  Handle p = open_group(file, "p");
  const Node point{p, "/p"};
  if (has_link(point, "variants")) {
    Handle variants = open_group(point, "variants");
    const Node variants_node{variants, "/p/variants"};
    for (const std::string& name : member_names(variants_node)) {
      Handle variant = open_group(variants_node, name);
      const Node variant_node{variant, variants_node.child(name)};
      for (const char* table : {"spans", "bells", "outputs"}) delete_if_there(variant_node, table);
      if (!has_link(variant_node, "projection")) continue;
      Handle projections = open_group(variant_node, "projection");
      const Node projections_node{projections, variant_node.child("projection")};
      for (const std::string& link : member_names(projections_node)) {
        Handle projection = open_group(projections_node, link);
        const Node projection_node{projection, projections_node.child(link)};
        for (const char* table : {"timeline", "path", "waits"}) delete_if_there(projection_node, table);
      }
    }
  }
  for (const char* table : {"telemetry", "cuts"}) delete_if_there(point, table);
  std::vector<FamilyRow> rows(families.size());
  for (size_t i = 0; i < families.size(); ++i) {
    store_name(rows[i].variant, families[i].variant, "sweep family row variant");
    store_name(rows[i].family, families[i].family, "sweep family row family");
    rows[i].ms = families[i].ms;
    rows[i].calibrated_ms = families[i].calibrated_ms;
  }
  write_table(point, "families", family_row_type(), rows);
}

constexpr const char* kTtftPrefix = "sweep_ttft_ms.";
constexpr const char* kEfficiencyPrefix = "sweep_efficiency.";

// The attributes "<prefix><variant>" of a point's group, by variant.
std::map<std::string, double> prefixed_numbers(const Node& node, const std::string& prefix) {
  std::map<std::string, double> out;
  for (const std::string& name : attribute_names(node))
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size())
      out[name.substr(prefix.size())] = read_f64_attribute(node, name);
  return out;
}

void write_prefixed_numbers(const Node& node, const std::string& prefix, const std::map<std::string, double>& values) {
  for (const std::string& name : attribute_names(node))
    if (name.rfind(prefix, 0) == 0) PB_H5(H5Adelete(node.id, name.c_str()));
  for (const auto& [variant, value] : values) write_f64_attribute(node.id, prefix + variant, value);
}

SweepPointRecord read_point(const Node& points, const std::string& id) {
  Handle group = open_group(points, id);
  const Node node{group, points.child(id)};
  SweepPointRecord p;
  p.id = id;
  p.context = read_i64_attribute(node, "sweep_context");
  p.cp = read_i32_attribute(node, "sweep_cp");
  p.precision = read_string_attribute(node, "sweep_precision");
  p.status = read_string_attribute(node, "sweep_status");
  p.error = read_string_attribute(node, "sweep_error");
  p.ttft_ms = prefixed_numbers(node, kTtftPrefix);
  p.efficiency = prefixed_numbers(node, kEfficiencyPrefix);
  check_record(p);
  return p;
}

std::vector<SweepPointRecord> read_points(const Node& root) {
  std::vector<SweepPointRecord> records;
  if (!has_link(root, "points")) return records;
  Handle points = open_group(root, "points");
  const Node node{points, "/points"};
  for (const std::string& id : member_names(node)) records.push_back(read_point(node, id));
  return records;
}

// Every point's efficiency from every point's TTFT.
void write_efficiencies(const Node& root, const std::vector<SweepPointRecord>& records) {
  const auto efficiency = parallel_efficiency(records);
  Handle points = open_group(root, "points");
  const Node points_node{points, "/points"};
  for (const SweepPointRecord& record : records) {
    Handle group = open_group(points_node, record.id);
    const auto found = efficiency.find(record.id);
    write_prefixed_numbers(Node{group, points_node.child(record.id)}, kEfficiencyPrefix,
                           found == efficiency.end() ? std::map<std::string, double>{} : found->second);
  }
}

void write_point_table(const Node& root, const std::vector<SweepPointRecord>& records) {
  if (has_link(root, "point_table")) PB_H5(H5Ldelete(root.id, "point_table", H5P_DEFAULT));
  std::vector<PointRow> rows(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    store_name(rows[i].id, records[i].id, "sweep point id");
    rows[i].context = records[i].context;
    rows[i].cp = records[i].cp;
    store_name(rows[i].precision, records[i].precision, "sweep point precision");
    store_name(rows[i].status, records[i].status, "sweep point status");
  }
  write_table(root, "point_table", point_row_type(), rows);
}

void add_point(const std::string& path, const SweepPointRecord& point, const std::string& point_file,
               const std::vector<SweepFamilyRow>& families, bool complete) {
  Handle file{PB_H5(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)), H5Fclose};
  const Node root{file, "/"};
  PB_CHECK(read_string_attribute(root, "kind") == "sweep", "not a sweep file (its kind is not 'sweep')");
  if (!has_link(root, "points")) create_group(root, "points", /*keep_creation_order=*/true);
  Handle points = open_group(root, "points");
  const Node points_node{points, "/points"};
  if (has_link(points_node, point.id)) PB_H5(H5Ldelete(points, point.id.c_str(), H5P_DEFAULT));
  if (point_file.empty()) {
    create_group(points_node, point.id);
  } else {  // summarized in memory, so the file takes only the summary
    Handle in_memory{PB_H5(H5Pcreate(H5P_FILE_ACCESS)), H5Pclose};
    PB_H5(H5Pset_fapl_core(in_memory, 1 << 20, /*backing_store=*/0));
    Handle scratch{PB_H5(H5Fcreate("sweep-point-scratch", H5F_ACC_TRUNC, H5P_DEFAULT, in_memory)), H5Fclose};
    summarize_point(scratch, point_file, families);
    PB_H5(H5Ocopy(scratch, "p", points, point.id.c_str(), H5P_DEFAULT, H5P_DEFAULT));
  }
  {
    Handle group = open_group(points_node, point.id);
    write_i64_attribute(group, "sweep_context", point.context);
    write_i32_attribute(group, "sweep_cp", point.cp);
    write_string_attribute(group, "sweep_precision", point.precision);
    write_string_attribute(group, "sweep_status", point.status);
    write_string_attribute(group, "sweep_error", point.error);
    write_prefixed_numbers(Node{group, points_node.child(point.id)}, kTtftPrefix, point.ttft_ms);
  }
  const std::vector<SweepPointRecord> records = read_points(root);
  write_point_table(root, records);
  write_efficiencies(root, records);
  if (H5Aexists(root.id, "complete") > 0) PB_H5(H5Adelete(root.id, "complete"));
  write_i32_attribute(root.id, "complete", complete ? 1 : 0);
}

}  // namespace

std::vector<std::string> sweep_status_names() { return {"measured", "planned", "failed"}; }

std::map<std::string, std::map<std::string, double>> parallel_efficiency(
    const std::vector<SweepPointRecord>& points) {
  // (context, precision, variant) -> the points with that variant's TTFT
  std::map<std::tuple<int64_t, std::string, std::string>, std::vector<const SweepPointRecord*>> groups;
  for (const SweepPointRecord& p : points)
    for (const auto& [variant, ms] : p.ttft_ms)
      if (ms > 0) groups[{p.context, p.precision, variant}].push_back(&p);
  std::map<std::string, std::map<std::string, double>> out;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    const std::string& variant = std::get<2>(key);
    const SweepPointRecord* first =
        *std::min_element(members.begin(), members.end(), [](const auto* a, const auto* b) { return a->cp < b->cp; });
    const double work = first->cp * first->ttft_ms.at(variant);
    for (const SweepPointRecord* p : members) out[p->id][variant] = work / (p->cp * p->ttft_ms.at(variant));
  }
  return out;
}

void add_sweep_point(const std::string& sweep_path, const SweepPointRecord& point, const std::string& point_file,
                     const std::vector<SweepFamilyRow>& families, bool complete) {
  check_record(point);
  start_hdf5();
  const std::string temporary = sweep_path + ".tmp";
  try {
    std::filesystem::copy_file(sweep_path, temporary, std::filesystem::copy_options::overwrite_existing);
    add_point(temporary, point, point_file, families, complete);
    std::filesystem::rename(temporary, sweep_path);
  } catch (const std::exception& error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error(fmt::format("adding point '{}' to the sweep file '{}': {}", point.id, sweep_path, error.what()));
  }
}

std::vector<SweepPointRecord> read_sweep_points(const std::string& sweep_path) {
  start_hdf5();
  try {
    PB_CHECK(std::filesystem::exists(sweep_path), "no such file");
    Handle file{PB_H5(H5Fopen(sweep_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)), H5Fclose};
    const Node root{file, "/"};
    PB_CHECK(read_string_attribute(root, "kind") == "sweep", "not a sweep file (its kind is not 'sweep')");
    return read_points(root);
  } catch (const Error& error) {
    throw Error(fmt::format("reading the sweep file '{}': {}", sweep_path, error.what()));
  }
}

}  // namespace pb
