// The KDA pieces of the CP schedule (schedule.h kda_pieces, docs/design.md §3
// "KDA across ranks"): each piece's conv carry and state fold, checked with
// exact non-commuting arithmetic against the sequential walk.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "schedule.h"

using namespace pb;

namespace {

// Exact arithmetic for the fold: 2 x 2 matrices mod a prime (they do not commute, so an order mistake shows).
constexpr int64_t kPrime = 1000003;
struct Mat {
  int64_t a[2][2] = {{0, 0}, {0, 0}};
  static Mat identity() {
    Mat m;
    m.a[0][0] = m.a[1][1] = 1;
    return m;
  }
  Mat operator*(const Mat& o) const {
    Mat m;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        m.a[i][j] = (a[i][0] * o.a[0][j] + a[i][1] * o.a[1][j]) % kPrime;
    return m;
  }
  Mat operator+(const Mat& o) const {
    Mat m;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) m.a[i][j] = (a[i][j] + o.a[i][j]) % kPrime;
    return m;
  }
  bool operator==(const Mat& o) const {
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        if (a[i][j] != o.a[i][j]) return false;
    return true;
  }
};

struct Package {
  Mat M = Mat::identity(), D;  // S_out = S_in M + D
};

}  // namespace

TEST_CASE("KDA pieces: contiguous folds the upstream ranks; zigzag folds the packages before each piece, in token order") {
  std::mt19937_64 rng(7);
  for (Layout layout : {Layout::contiguous, Layout::zigzag})
    for (int cp = 1; cp <= 16; ++cp) {
      CAPTURE(layout_name(layout));
      CAPTURE(cp);
      // A chunk's affine step, random; the true state entering each chunk by the sequential walk.
      std::vector<Package> chunk(2 * cp);
      for (auto& c : chunk)
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) c.M.a[i][j] = int64_t(rng() % kPrime), c.D.a[i][j] = int64_t(rng() % kPrime);
      std::vector<Mat> entering(2 * cp + 1);
      for (int c = 0; c < 2 * cp; ++c) entering[c + 1] = entering[c] * chunk[c].M + chunk[c].D;
      std::map<PieceRef, KdaPiece> all;
      std::map<PieceRef, Package> package;
      for (int r = 0; r < cp; ++r)
        for (const KdaPiece& p : kda_pieces(layout, cp, r)) {
          all[p.self] = p;
          Package pk;
          for (int c = p.first_chunk; c <= p.last_chunk; ++c) pk = {pk.M * chunk[c].M, pk.D * chunk[c].M + chunk[c].D};
          package[p.self] = pk;
        }
      std::set<int> covered;
      for (const auto& [ref, p] : all) {
        CAPTURE(ref.rank);
        CAPTURE(ref.piece);
        for (int c = p.first_chunk; c <= p.last_chunk; ++c) CHECK(covered.insert(c).second);
        // local rows: the piece's chunks in the rank's order
        const std::vector<int> chunks = rank_chunks(layout, cp, ref.rank);
        CHECK(chunks[p.parts.begin] == p.first_chunk);
        CHECK(chunks[p.parts.end - 1] == p.last_chunk);
        // the fold gives the state entering the piece
        Mat s;
        for (size_t i = 0; i < p.fold.size(); ++i) {
          const Package& pk = package.at(p.fold[i]);
          s = i == 0 ? pk.D : s * pk.M + pk.D;
          if (i > 0) CHECK(all.at(p.fold[i - 1]).last_chunk + 1 == all.at(p.fold[i]).first_chunk);  // token order
        }
        CHECK(s == entering[p.first_chunk]);
        CHECK(p.fold.size() == size_t(std::count_if(all.begin(), all.end(), [&](const auto& e) {
                return e.second.first_chunk < p.first_chunk;
              })));
        // the halo: the piece ending right before it, or none at the sequence start
        if (p.first_chunk == 0) CHECK(p.halo.rank == -1);
        else CHECK(all.at(p.halo).last_chunk + 1 == p.first_chunk);
      }
      CHECK(int(covered.size()) == 2 * cp);
      // mirrors: package readers and halo readers are exactly the ranks whose pieces use them
      for (const auto& [ref, p] : all) {
        std::set<int> readers, halo_readers;
        bool folded = false;
        for (const auto& [other_ref, other] : all) {
          for (const PieceRef& f : other.fold)
            if (f == ref) {
              folded = true;
              if (other_ref.rank != ref.rank) readers.insert(other_ref.rank);
            }
          if (other.halo == ref && other_ref.rank != ref.rank) halo_readers.insert(other_ref.rank);
        }
        CHECK(p.package == folded);
        CHECK(std::vector<int>(readers.begin(), readers.end()) == p.package_readers);
        CHECK(std::vector<int>(halo_readers.begin(), halo_readers.end()) == p.halo_readers);
      }
      for (int r = 0; r < cp; ++r) {
        const std::vector<KdaPiece> mine = kda_pieces(layout, cp, r);
        // a later piece continues the earlier piece's fold: its list, then that piece, then more
        if (mine.size() == 2) {
          const auto& a = mine[0].fold;
          const auto& b = mine[1].fold;
          REQUIRE(b.size() > a.size());
          CHECK(std::equal(a.begin(), a.end(), b.begin()));
          CHECK(b[a.size()] == mine[0].self);
        }
        if (layout == Layout::contiguous) {
          REQUIRE(mine.size() == 1);
          CHECK(mine[0].fold.size() == size_t(r));
          for (int j = 0; j < r; ++j) CHECK(mine[0].fold[j] == (PieceRef{j, 0}));
          CHECK(mine[0].halo.rank == r - 1);
          CHECK(mine[0].package == (r < cp - 1));
        } else {
          CHECK(mine.size() == (r == cp - 1 ? 1u : 2u));  // chunks cp - 1 and cp are adjacent
        }
      }
    }
  // zigzag cp4: rank 1 holds chunks 1 and 6. Its first piece folds rank 0's chunk 0; its second folds
  // chunks 0..5: rank 0's, its own chunk 1, rank 2's chunk 2, rank 3's chunks 3-4, rank 2's chunk 5.
  const std::vector<KdaPiece> r1 = kda_pieces(Layout::zigzag, 4, 1);
  REQUIRE(r1.size() == 2);
  CHECK(r1[0].fold == std::vector<PieceRef>{{0, 0}});
  CHECK(r1[1].fold == std::vector<PieceRef>{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {2, 1}});
  CHECK(r1[0].halo == (PieceRef{0, 0}));
  CHECK(r1[1].halo == (PieceRef{2, 1}));
  CHECK(r1[0].package_readers == std::vector<int>{0, 2, 3});
  CHECK(r1[1].package_readers == std::vector<int>{0});
  CHECK(r1[0].halo_readers == std::vector<int>{2});
  CHECK(r1[1].halo_readers == std::vector<int>{0});
  const std::vector<KdaPiece> r0 = kda_pieces(Layout::zigzag, 4, 0);
  CHECK_FALSE(r0[1].package);  // chunk 7 ends the sequence: nobody folds it
}
