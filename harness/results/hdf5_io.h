// The results file's HDF5 plumbing (the C API, serial), apart from the
// schemas (results.cpp): checked calls, self-closing handles, attributes,
// groups, n-dimensional arrays, compound tables. Every call is checked; a
// failure is a pb::Error with HDF5's own account of it.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "check.h"
#include "results.h"

namespace pb::h5 {

// HDF5's own account of the last failure: ": <the API message> (<the innermost>)", or "".
std::string hdf5_error_detail();

// Every HDF5 call returns a negative hid_t / herr_t / htri_t / ssize_t on failure.
template <typename Status>
Status h5_checked(Status status, const char* expr, const char* file, int line) {
  if (status < 0) throw_error(file, line, std::string("HDF5 call failed: ") + expr + hdf5_error_detail());
  return status;
}
#define PB_H5(expr) h5_checked((expr), #expr, __FILE__, __LINE__)

// Before the first HDF5 call of the process (see hdf5_io.cpp).
void start_hdf5();

// An HDF5 identifier that closes itself.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), closer_(other.closer_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  ~Handle() {
    if (id_ >= 0) closer_(id_);
  }
  operator hid_t() const { return id_; }
  // Closes now and checks: closing the file flushes it, so that can fail.
  void close() {
    const hid_t id = std::exchange(id_, -1);
    PB_H5(closer_(id));
  }

 private:
  hid_t id_;
  Closer closer_;
};

// A group, dataset or file, with its path inside the file for messages.
struct Node {
  hid_t id;
  std::string path;  // "/variants/all"
  std::string child(const std::string& name) const { return (path == "/" ? "/" : path + "/") + name; }
};


Handle variable_string_type();
Handle fixed_string_type(size_t bytes);

// Scalar attributes; strings fixed-length, NUL-padded UTF-8.
void write_string_attribute(hid_t object, const std::string& name, const std::string& value);
void write_f64_attribute(hid_t object, const std::string& name, double value);
void write_i32_attribute(hid_t object, const std::string& name, int32_t value);
void write_i64_attribute(hid_t object, const std::string& name, int64_t value);
Handle open_attribute(const Node& node, const std::string& name);
H5T_class_t attribute_class(hid_t attribute);
// Variable- and fixed-length string attributes alike.
std::string read_string_attribute(const Node& node, const std::string& name);
template <typename T>
T read_number_attribute(const Node& node, const std::string& name, hid_t memory_type) {
  Handle attribute = open_attribute(node, name);
  const H5T_class_t type_class = attribute_class(attribute);
  PB_CHECK(type_class == H5T_INTEGER || type_class == H5T_FLOAT,
           fmt::format("attribute {} on {} is not a number", name, node.path));
  T value{};
  PB_H5(H5Aread(attribute, memory_type, &value));
  return value;
}

double read_f64_attribute(const Node& node, const std::string& name);
int32_t read_i32_attribute(const Node& node, const std::string& name);
int64_t read_i64_attribute(const Node& node, const std::string& name);
std::vector<std::string> attribute_names(const Node& node);

Handle create_group(const Node& parent, const std::string& name, bool keep_creation_order = false);
bool has_link(const Node& parent, const std::string& name);
Handle open_group(const Node& parent, const std::string& name);
// The group's member names, in creation order when the group tracks it.
std::vector<std::string> member_names(const Node& group);

using Dims = std::vector<hsize_t>;

hsize_t element_count(const Dims& dims);
// Arrays of 16 KiB or more are chunked and deflated where the library has deflate.
void write_dataset(const Node& group, const std::string& name, hid_t file_type, hid_t memory_type,
                   const Dims& dims, const void* data);
Handle open_dataset(const Node& group, const std::string& name);
Dims dataset_dims(hid_t dataset);
// Before a read allocates what a dataset declares: a results file stores every
// element, so a declared size far beyond what the file stores for it (a damaged
// dimension, chunks never written) is an error naming the dataset, not an allocation.
void check_declared_size(const Node& group, const std::string& name, hid_t dataset, const Dims& dims,
                         size_t element_bytes);
// Reads a whole dataset of `rank` dimensions; its shape goes to *dims.
template <typename T>
std::vector<T> read_dataset(const Node& group, const std::string& name, hid_t memory_type, size_t rank,
                            Dims* dims) {
  Handle dataset = open_dataset(group, name);
  *dims = dataset_dims(dataset);
  PB_CHECK(dims->size() == rank, fmt::format("dataset {} has {} dimensions, expected {}", group.child(name),
                                             dims->size(), rank));
  check_declared_size(group, name, dataset, *dims, sizeof(T));
  std::vector<T> values(element_count(*dims));
  if (!values.empty()) PB_H5(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
  return values;
}

using Name = char[kNameBytes];

// Stores `value` NUL-padded into a fixed name field; longer than kNameBytes is an error naming `what`.
void store_name(Name& field, const std::string& value, const char* what);
std::string load_name(const Name& field);

// Builds the in-memory compound type of a table row, member by member.
class CompoundType {
 public:
  explicit CompoundType(size_t row_bytes) : type_{PB_H5(H5Tcreate(H5T_COMPOUND, row_bytes)), H5Tclose} {}
  CompoundType& add(const char* name, size_t offset, hid_t member_type) {
    PB_H5(H5Tinsert(type_, name, offset, member_type));
    return *this;
  }
  CompoundType& add_name(const char* name, size_t offset) { return add(name, offset, fixed_string_type(kNameBytes)); }
  hid_t memory_type() const { return type_; }

 private:
  Handle type_;
};

// A table of `rows` rows laid out by `row_type` (packed on disk), from / into raw bytes.
void write_table(const Node& group, const std::string& name, const CompoundType& row_type, size_t rows,
                 const void* data);
std::vector<char> read_table_bytes(const Node& group, const std::string& name, const CompoundType& row_type,
                                   size_t row_bytes, Dims* dims);

template <typename Row>
void write_table(const Node& group, const std::string& name, const CompoundType& row_type,
                 const std::vector<Row>& rows) {
  Handle file_type{PB_H5(H5Tcopy(row_type.memory_type())), H5Tclose};
  PB_H5(H5Tpack(file_type));  // no alignment padding on disk
  write_dataset(group, name, file_type, row_type.memory_type(), {rows.size()}, rows.data());
}

template <typename Row>
std::vector<Row> read_table(const Node& group, const std::string& name, const CompoundType& row_type) {
  Dims dims;
  return read_dataset<Row>(group, name, row_type.memory_type(), 1, &dims);
}

}  // namespace pb::h5
