// The HDF5 plumbing of the results file (hdf5_io.h).
#include "hdf5_io.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "check.h"

namespace pb::h5 {

// ---- checked HDF5 calls ------------------------------------------------------

herr_t collect_error_description(unsigned, const H5E_error2_t* error, void* descriptions) {
  if (!error->desc || !*error->desc) return 0;
  std::string desc = error->desc;
  std::replace(desc.begin(), desc.end(), '\n', ' ');  // one line (a failed write's text holds a ctime() date)
  static_cast<std::vector<std::string>*>(descriptions)->push_back(desc);
  return 0;
}

// HDF5's own account of the last failure: the API-level message and the
// innermost one, e.g. "unable to open file (file signature not found)".
std::string hdf5_error_detail() {
  std::vector<std::string> descriptions;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error_description, &descriptions);
  if (descriptions.empty()) return "";
  if (descriptions.size() == 1) return ": " + descriptions.front();
  return ": " + descriptions.front() + " (" + descriptions.back() + ")";
}


// Before the first HDF5 call of the process: no library shutdown at exit. A
// write that fails (a full disk) leaves the file HDF5 could not flush open in
// the library, and HDF5 1.10's exit handler crashes closing it again, turning a
// named error into a segmentation fault. Every file we open is closed by a
// Handle, so the shutdown has nothing left to flush.
// Then, every time: we print our own messages; HDF5's automatic stack dump
// would only add noise.
void start_hdf5() {
  static const bool no_shutdown_at_exit = H5dont_atexit() >= 0;
  (void)no_shutdown_at_exit;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}



// ---- attributes --------------------------------------------------------------

Handle variable_string_type() {
  Handle type{PB_H5(H5Tcopy(H5T_C_S1)), H5Tclose};
  PB_H5(H5Tset_size(type, H5T_VARIABLE));
  PB_H5(H5Tset_cset(type, H5T_CSET_UTF8));
  return type;
}

Handle fixed_string_type(size_t bytes) {
  Handle type{PB_H5(H5Tcopy(H5T_C_S1)), H5Tclose};
  PB_H5(H5Tset_size(type, bytes));
  PB_H5(H5Tset_strpad(type, H5T_STR_NULLPAD));
  return type;
}

void write_scalar_attribute(hid_t object, const std::string& name, hid_t file_type, hid_t memory_type,
                            const void* value) {
  Handle space{PB_H5(H5Screate(H5S_SCALAR)), H5Sclose};
  Handle attribute{PB_H5(H5Acreate2(object, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT)),
                   H5Aclose};
  PB_H5(H5Awrite(attribute, memory_type, value));
}

// Fixed-length, NUL-padded UTF-8: nothing goes to HDF5's global heap, which
// HDF5 1.10 reads without checks (a damaged heap crashes the reader instead
// of failing the read).
void write_string_attribute(hid_t object, const std::string& name, const std::string& value) {
  Handle type = fixed_string_type(std::max<size_t>(value.size(), 1));
  PB_H5(H5Tset_cset(type, H5T_CSET_UTF8));
  write_scalar_attribute(object, name, type, type, value.c_str());
}

void write_f64_attribute(hid_t object, const std::string& name, double value) {
  write_scalar_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

void write_i32_attribute(hid_t object, const std::string& name, int32_t value) {
  write_scalar_attribute(object, name, H5T_STD_I32LE, H5T_NATIVE_INT32, &value);
}

void write_i64_attribute(hid_t object, const std::string& name, int64_t value) {
  write_scalar_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

// A scalar attribute: one value (a read fills the whole attribute into one value's memory).
Handle open_attribute(const Node& node, const std::string& name) {
  PB_CHECK(PB_H5(H5Aexists(node.id, name.c_str())) > 0,
           fmt::format("missing attribute {} on {}", name, node.path));
  Handle attribute{PB_H5(H5Aopen(node.id, name.c_str(), H5P_DEFAULT)), H5Aclose};
  Handle space{PB_H5(H5Aget_space(attribute)), H5Sclose};
  const hssize_t values = PB_H5(H5Sget_simple_extent_npoints(space));
  PB_CHECK(values == 1, fmt::format("attribute {} on {} holds {} values, expected one", name, node.path, values));
  return attribute;
}

H5T_class_t attribute_class(hid_t attribute) {
  Handle type{PB_H5(H5Aget_type(attribute)), H5Tclose};
  return PB_H5(H5Tget_class(type));
}

// Reads variable- and fixed-length string attributes alike.
std::string read_string_attribute(const Node& node, const std::string& name) {
  Handle attribute = open_attribute(node, name);
  Handle stored_type{PB_H5(H5Aget_type(attribute)), H5Tclose};
  PB_CHECK(PB_H5(H5Tget_class(stored_type)) == H5T_STRING,
           fmt::format("attribute {} on {} is not a string", name, node.path));
  if (PB_H5(H5Tis_variable_str(stored_type)) > 0) {
    Handle type = variable_string_type();
    char* text = nullptr;
    PB_H5(H5Aread(attribute, type, &text));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const size_t bytes = H5Tget_size(stored_type);
  Handle type{PB_H5(H5Tcopy(stored_type)), H5Tclose};  // its character set as stored: no conversion
  std::string buffer(bytes, '\0');
  PB_H5(H5Aread(attribute, type, buffer.data()));
  return buffer.substr(0, strnlen(buffer.data(), bytes));
}


double read_f64_attribute(const Node& node, const std::string& name) {
  return read_number_attribute<double>(node, name, H5T_NATIVE_DOUBLE);
}
int32_t read_i32_attribute(const Node& node, const std::string& name) {
  return read_number_attribute<int32_t>(node, name, H5T_NATIVE_INT32);
}
int64_t read_i64_attribute(const Node& node, const std::string& name) {
  return read_number_attribute<int64_t>(node, name, H5T_NATIVE_INT64);
}

herr_t collect_attribute_name(hid_t, const char* name, const H5A_info_t*, void* names) {
  static_cast<std::vector<std::string>*>(names)->push_back(name);
  return 0;
}

std::vector<std::string> attribute_names(const Node& node) {
  std::vector<std::string> names;
  hsize_t position = 0;
  PB_H5(H5Aiterate2(node.id, H5_INDEX_NAME, H5_ITER_INC, &position, collect_attribute_name, &names));
  return names;
}

// ---- groups --------------------------------------------------------------------

Handle create_group(const Node& parent, const std::string& name, bool keep_creation_order) {
  Handle properties{PB_H5(H5Pcreate(H5P_GROUP_CREATE)), H5Pclose};
  if (keep_creation_order)
    PB_H5(H5Pset_link_creation_order(properties, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED));
  return Handle{PB_H5(H5Gcreate2(parent.id, name.c_str(), H5P_DEFAULT, properties, H5P_DEFAULT)), H5Gclose};
}

bool has_link(const Node& parent, const std::string& name) {
  return PB_H5(H5Lexists(parent.id, name.c_str(), H5P_DEFAULT)) > 0;
}

Handle open_group(const Node& parent, const std::string& name) {
  PB_CHECK(has_link(parent, name), fmt::format("missing group {}", parent.child(name)));
  return Handle{PB_H5(H5Gopen2(parent.id, name.c_str(), H5P_DEFAULT)), H5Gclose};
}

// The group's member names, in creation order when the group tracks it.
std::vector<std::string> member_names(const Node& group) {
  Handle properties{PB_H5(H5Gget_create_plist(group.id)), H5Pclose};
  unsigned order_flags = 0;
  PB_H5(H5Pget_link_creation_order(properties, &order_flags));
  const H5_index_t index = (order_flags & H5P_CRT_ORDER_INDEXED) ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  H5G_info_t info;
  PB_H5(H5Gget_info(group.id, &info));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length = PB_H5(H5Lget_name_by_idx(group.id, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(size_t(length) + 1, '\0');
    PB_H5(H5Lget_name_by_idx(group.id, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT));
    name.resize(size_t(length));
    names.push_back(name);
  }
  return names;
}

// ---- n-dimensional arrays ----------------------------------------------------


hsize_t element_count(const Dims& dims) {
  hsize_t count = 1;
  for (hsize_t d : dims) count *= d;
  return count;
}

// Arrays of at least this many bytes are stored chunked and deflated (with the
// shuffle filter) where the HDF5 library has deflate: a full-size run's spans
// and doorbells then fit in files of a few MB. Readers (this file, h5py) need
// nothing.
constexpr hsize_t kCompressFromBytes = 16384;
constexpr hsize_t kChunkBytes = hsize_t(1) << 20;

Handle dataset_properties(const Dims& dims, size_t element_bytes) {
  Handle properties{PB_H5(H5Pcreate(H5P_DATASET_CREATE)), H5Pclose};
  static const bool have_deflate = H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0;
  if (!have_deflate || dims.empty() || element_count(dims) * element_bytes < kCompressFromBytes) return properties;
  Dims chunk = dims;  // whole rows of the trailing dimensions, as many as fit
  const hsize_t row_bytes = element_count(chunk) / chunk[0] * element_bytes;
  chunk[0] = std::max<hsize_t>(1, std::min(chunk[0], kChunkBytes / std::max<hsize_t>(row_bytes, 1)));
  PB_H5(H5Pset_chunk(properties, int(chunk.size()), chunk.data()));
  PB_H5(H5Pset_shuffle(properties));
  PB_H5(H5Pset_deflate(properties, 4));
  return properties;
}

void write_dataset(const Node& group, const std::string& name, hid_t file_type, hid_t memory_type,
                   const Dims& dims, const void* data) {
  Handle space{PB_H5(H5Screate_simple(int(dims.size()), dims.data(), nullptr)), H5Sclose};
  Handle properties = dataset_properties(dims, H5Tget_size(file_type));
  Handle dataset{PB_H5(H5Dcreate2(group.id, name.c_str(), file_type, space, H5P_DEFAULT, properties,
                                  H5P_DEFAULT)),
                 H5Dclose};
  if (element_count(dims) > 0) PB_H5(H5Dwrite(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

Handle open_dataset(const Node& group, const std::string& name) {
  PB_CHECK(has_link(group, name), fmt::format("missing dataset {}", group.child(name)));
  return Handle{PB_H5(H5Dopen2(group.id, name.c_str(), H5P_DEFAULT)), H5Dclose};
}

// Deflate packs at most 1032:1 (zlib's limit) and a row in memory is at most
// twice its packed form on disk: 2048 bytes read per byte stored is the most
// an undamaged file can ask for. In floating point: dimensions that overflow
// 64 bits are refused too.
void check_declared_size(const Node& group, const std::string& name, hid_t dataset, const Dims& dims,
                         size_t element_bytes) {
  double declared = double(element_bytes);
  std::string shape;
  for (hsize_t d : dims) {
    declared *= double(d);
    shape += (shape.empty() ? "" : " x ") + std::to_string(d);
  }
  const hsize_t stored = H5Dget_storage_size(dataset);
  PB_CHECK(declared <= 2048.0 * double(stored),
           fmt::format("dataset {} declares {} elements ({:.3g} bytes to read) but the file stores {} bytes of it",
                       group.child(name), shape, declared, stored));
}

Dims dataset_dims(hid_t dataset) {
  Handle space{PB_H5(H5Dget_space(dataset)), H5Sclose};
  Dims dims(size_t(PB_H5(H5Sget_simple_extent_ndims(space))));
  PB_H5(H5Sget_simple_extent_dims(space, dims.data(), nullptr));
  return dims;
}


// ---- compound tables -------------------------------------------------------------


void store_name(Name& field, const std::string& value, const char* what) {
  PB_CHECK(value.size() <= size_t(kNameBytes),
           fmt::format("{} '{}' is {} bytes; results tables hold at most {}", what, value, value.size(),
                       kNameBytes));
  std::memset(field, 0, kNameBytes);
  std::memcpy(field, value.data(), value.size());
}

std::string load_name(const Name& field) { return std::string(field, strnlen(field, kNameBytes)); }





void write_table(const Node& group, const std::string& name, const CompoundType& row_type, size_t rows,
                 const void* data) {
  Handle file_type{PB_H5(H5Tcopy(row_type.memory_type())), H5Tclose};
  PB_H5(H5Tpack(file_type));  // no alignment padding on disk
  write_dataset(group, name, file_type, row_type.memory_type(), {rows}, data);
}

std::vector<char> read_table_bytes(const Node& group, const std::string& name, const CompoundType& row_type,
                                   size_t row_bytes, Dims* dims) {
  Handle dataset = open_dataset(group, name);
  *dims = dataset_dims(dataset);
  PB_CHECK(dims->size() == 1, fmt::format("dataset {} has {} dimensions, expected 1", group.child(name), dims->size()));
  check_declared_size(group, name, dataset, *dims, row_bytes);
  std::vector<char> rows(element_count(*dims) * row_bytes);
  if (!rows.empty()) PB_H5(H5Dread(dataset, row_type.memory_type(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()));
  return rows;
}

}  // namespace pb::h5
