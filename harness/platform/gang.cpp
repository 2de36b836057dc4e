#include "gang.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

#include "check.h"

namespace pb {

namespace {

void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(std::string(what) + ": " + std::string(msg, len));
  }
}

// A byte writer / reader for the few record types that cross ranks.
class Writer {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put(const std::string& s) {
    put(uint32_t(s.size()));
    bytes_ += s;
  }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  template <class T>
  void get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    PB_CHECK(pos_ + sizeof(T) <= bytes_.size(), "truncated record from another rank");
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
  }
  void get(std::string& s) {
    uint32_t n = 0;
    get(n);
    PB_CHECK(pos_ + n <= bytes_.size(), "truncated record from another rank");
    s.assign(bytes_.data() + pos_, n);
    pos_ += n;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
};

}  // namespace

Gang::Gang(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    mpi_check(MPI_Init(argc, argv), "MPI_Init");
    owns_mpi_ = true;
  }
  // Errors come back as codes (checked), not as MPI's default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  mpi_check(MPI_Comm_rank(local, &local_rank_), "MPI_Comm_rank(local)");
  mpi_check(MPI_Comm_size(local, &local_size_), "MPI_Comm_size(local)");
  MPI_Comm_free(&local);
  char name[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(name, &len);
  host_.assign(name, len);
  set_error_context("rank " + std::to_string(rank_) + " on " + host_);  // the prefix of fail()'s message
}

Gang::~Gang() {
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

std::string Gang::describe() const {
  return "rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " on host " + host_ + " (local " +
         std::to_string(local_rank_) + "/" + std::to_string(local_size_) + ")";
}

std::string Gang::broadcast(const std::string& from_root) const {
  uint64_t n = is_root() ? from_root.size() : 0;
  mpi_check(MPI_Bcast(&n, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast(size)");
  std::string out = is_root() ? from_root : std::string(n, '\0');
  if (n) mpi_check(MPI_Bcast(out.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

std::vector<std::string> Gang::gather(const std::string& mine) const {
  int n = int(mine.size());
  PB_CHECK(mine.size() < (size_t(1) << 31), "gather: record over 2 GiB");
  std::vector<int> sizes(is_root() ? size_ : 0), offsets;
  mpi_check(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather(size)");
  std::string all;
  if (is_root()) {
    size_t total = 0;
    for (int s : sizes) {
      offsets.push_back(int(total));
      total += size_t(s);
    }
    PB_CHECK(total < (size_t(1) << 31), "gather: records over 2 GiB in all");
    all.resize(total);
  }
  mpi_check(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
                        MPI_COMM_WORLD),
            "MPI_Gatherv");
  std::vector<std::string> out;
  for (int r = 0; is_root() && r < size_; ++r) out.push_back(all.substr(offsets[r], sizes[r]));
  return out;
}

void Gang::barrier() const { mpi_check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

void Gang::fail(const std::string& message, int code) const {
  std::fprintf(stderr, "[rank %d on %s] error: %s\n", rank_, host_.c_str(), message.c_str());
  std::fflush(stderr);
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  if (owns_mpi_) MPI_Finalize();
  std::exit(code);
}

namespace {

// A record list as bytes: its count, then each record's fields (visit_fields, results.h).
template <class Record>
std::string pack_records(const std::vector<Record>& records) {
  Writer w;
  w.put(uint64_t(records.size()));
  for (const Record& record : records) visit_fields(record, [&](const char*, const auto& field, int) { w.put(field); });
  return w.take();
}

template <class Record>
std::vector<Record> unpack_records(const std::string& bytes, const char* what) {
  Reader r(bytes);
  uint64_t n = 0;
  r.get(n);
  PB_CHECK(n <= bytes.size(), std::string("a ") + what + " record from another rank counts more records than bytes");
  std::vector<Record> records(n);
  for (Record& record : records) visit_fields(record, [&](const char*, auto& field, int) { r.get(field); });
  PB_CHECK(r.done(), std::string("trailing bytes in a ") + what + " record from another rank");
  return records;
}

}  // namespace

std::string pack_spans(const std::vector<Span>& spans) { return pack_records(spans); }
std::vector<Span> unpack_spans(const std::string& bytes) { return unpack_records<Span>(bytes, "span"); }
std::string pack_bells(const std::vector<BellOp>& bells) { return pack_records(bells); }
std::vector<BellOp> unpack_bells(const std::string& bytes) { return unpack_records<BellOp>(bytes, "doorbell"); }
std::string pack_rank_reps(const std::vector<RankRep>& reps) { return pack_records(reps); }
std::vector<RankRep> unpack_rank_reps(const std::string& bytes) { return unpack_records<RankRep>(bytes, "rank"); }

}  // namespace pb
