// Plain C++ float64 reference of the KDA core; the convention, shapes, the
// chunked algorithm and its stability argument are in kda_ref.h.
#include "kda_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "check.h"

namespace pb::ref {
namespace {

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline size_t sz(int64_t x) { return static_cast<size_t>(x); }

void check_shape(const KdaShape& s, const char* who) {
  PB_CHECK(s.tokens >= 0 && s.heads >= 1 && s.dk >= 1 && s.dv >= 1,
           std::string(who) + ": bad shape (tokens >= 0, heads, dk, dv >= 1)");
}

// The state of one head, value-major [dv, dk], copied in from S_in (or zeros).
void load_state(const double* S_in, int h, int dk, int dv, std::vector<double>& P) {
  const size_t n = sz(int64_t(dv) * dk);
  P.assign(n, 0.0);
  if (S_in != nullptr) std::copy(S_in + h * n, S_in + (h + 1) * n, P.begin());
}

// Everything of one chunk of one head that does not depend on the entry state.
struct Chunk {
  int n = 0;
  std::vector<double> b;      // [n, dk]  cumulative log-decay b_r
  std::vector<double> L;      // [n, n]   strictly lower: β_r Σ_c k_r k_i e^{b_r−b_i}
  std::vector<double> A;      // [n, n]   (I + L)^{-1}, unit lower triangular
  std::vector<double> Aqk;    // [n, n]   lower incl. diagonal: Σ_c q_r k_i e^{b_r−b_i}
  std::vector<double> W;      // [n, dk]  A diag(β) (K ∘ e^{b})
  std::vector<double> Ut;     // [n, dv]  Ũ = A diag(β) V
  std::vector<double> Khat;   // [n, dk]  K ∘ e^{b_{n−1} − b}
  std::vector<double> gamma;  // [dk]     e^{b_{n−1}}
  std::vector<double> U;      // [n, dv]  scratch: Ũ − W S0ᵀ
};

// Tokens t0 .. t0+n−1 of head h. q may be null (no Aqk then).
void build_chunk(const double* q, const double* k, const double* v, const double* la,
                 const double* beta, const KdaShape& s, int h, int64_t t0, int n, Chunk& c) {
  const int H = s.heads, dk = s.dk, dv = s.dv;
  auto kr = [&](int r) { return k + ((t0 + r) * H + h) * dk; };
  auto qr = [&](int r) { return q + ((t0 + r) * H + h) * dk; };
  auto vr = [&](int r) { return v + ((t0 + r) * H + h) * dv; };
  auto lar = [&](int r) { return la + ((t0 + r) * H + h) * dk; };
  auto br = [&](int r) { return beta[(t0 + r) * H + h]; };

  c.n = n;
  c.b.assign(sz(int64_t(n) * dk), 0.0);
  for (int r = 0; r < n; ++r)
    for (int ch = 0; ch < dk; ++ch)
      c.b[sz(r) * dk + ch] = (r > 0 ? c.b[sz(r - 1) * dk + ch] : 0.0) + lar(r)[ch];
  auto b = [&](int r) { return c.b.data() + sz(r) * dk; };

  // L (strictly lower) and Aqk (lower, with the diagonal); decays as e^{b_r − b_i}, i ≤ r.
  c.L.assign(sz(int64_t(n) * n), 0.0);
  c.Aqk.assign(q != nullptr ? sz(int64_t(n) * n) : 0, 0.0);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i <= r; ++i) {
      double kk = 0.0, qk = 0.0;
      for (int ch = 0; ch < dk; ++ch) {
        const double d = std::exp(b(r)[ch] - b(i)[ch]);
        if (i < r) kk += kr(r)[ch] * kr(i)[ch] * d;
        if (q != nullptr) qk += qr(r)[ch] * kr(i)[ch] * d;
      }
      if (i < r) c.L[sz(r) * n + i] = br(r) * kk;
      if (q != nullptr) c.Aqk[sz(r) * n + i] = qk;
    }
  }

  // A = (I + L)^{-1} by forward substitution: A[r][j] = −Σ_{j≤i<r} L[r][i] A[i][j].
  c.A.assign(sz(int64_t(n) * n), 0.0);
  for (int r = 0; r < n; ++r) {
    c.A[sz(r) * n + r] = 1.0;
    for (int j = 0; j < r; ++j) {
      double acc = 0.0;
      for (int i = j; i < r; ++i) acc += c.L[sz(r) * n + i] * c.A[sz(i) * n + j];
      c.A[sz(r) * n + j] = -acc;
    }
  }

  // W = A diag(β) (K ∘ e^{b}),  Ũ = A diag(β) V.
  c.W.assign(sz(int64_t(n) * dk), 0.0);
  c.Ut.assign(sz(int64_t(n) * dv), 0.0);
  for (int r = 0; r < n; ++r) {
    double* w = c.W.data() + sz(r) * dk;
    double* ut = c.Ut.data() + sz(r) * dv;
    for (int i = 0; i <= r; ++i) {
      const double a = c.A[sz(r) * n + i] * br(i);
      for (int ch = 0; ch < dk; ++ch) w[ch] += a * (kr(i)[ch] * std::exp(b(i)[ch]));
      for (int j = 0; j < dv; ++j) ut[j] += a * vr(i)[j];
    }
  }

  // Γ = e^{b_{n−1}},  K̂ = K ∘ e^{b_{n−1} − b}.
  c.gamma.assign(sz(dk), 0.0);
  c.Khat.assign(sz(int64_t(n) * dk), 0.0);
  for (int ch = 0; ch < dk; ++ch) c.gamma[ch] = std::exp(b(n - 1)[ch]);
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < dk; ++ch)
      c.Khat[sz(i) * dk + ch] = kr(i)[ch] * std::exp(b(n - 1)[ch] - b(i)[ch]);
}

// The chunk applied to the state P [dv, dk] of head h (in place); o rows of
// the chunk written when o is non-null (then the chunk was built with q).
void apply_chunk(const double* q, const KdaShape& s, int h, int64_t t0, double scale, Chunk& c,
                 std::vector<double>& P, double* o) {
  const int H = s.heads, dk = s.dk, dv = s.dv, n = c.n;
  // U = Ũ − W S0ᵀ.
  c.U.assign(sz(int64_t(n) * dv), 0.0);
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < dv; ++j) {
      double ws = 0.0;
      for (int ch = 0; ch < dk; ++ch) ws += P[sz(j) * dk + ch] * c.W[sz(r) * dk + ch];
      c.U[sz(r) * dv + j] = c.Ut[sz(r) * dv + j] - ws;
    }
  // o_r = scale (S0 (q_r ∘ e^{b_r}) + Σ_{i≤r} Aqk[r,i] u_i).
  if (o != nullptr) {
    std::vector<double> qt(sz(dk));
    for (int r = 0; r < n; ++r) {
      const double* qr = q + ((t0 + r) * H + h) * dk;
      for (int ch = 0; ch < dk; ++ch) qt[ch] = qr[ch] * std::exp(c.b[sz(r) * dk + ch]);
      double* orow = o + ((t0 + r) * H + h) * dv;
      for (int j = 0; j < dv; ++j) {
        double inter = 0.0, intra = 0.0;
        for (int ch = 0; ch < dk; ++ch) inter += P[sz(j) * dk + ch] * qt[ch];
        for (int i = 0; i <= r; ++i) intra += c.Aqk[sz(r) * n + i] * c.U[sz(i) * dv + j];
        orow[j] = scale * (inter + intra);
      }
    }
  }
  // S_next = S0 Γ + Uᵀ K̂.
  for (int j = 0; j < dv; ++j)
    for (int ch = 0; ch < dk; ++ch) {
      double acc = 0.0;
      for (int i = 0; i < n; ++i) acc += c.U[sz(i) * dv + j] * c.Khat[sz(i) * dk + ch];
      P[sz(j) * dk + ch] = c.gamma[ch] * P[sz(j) * dk + ch] + acc;
    }
}

double chunks_of(int64_t tokens, int chunk) { return double((tokens + chunk - 1) / chunk); }

}  // namespace

double kda_default_scale(int dk) {
  PB_CHECK(dk >= 1, "kda_default_scale: dk must be positive");
  return 1.0 / std::sqrt(double(dk));
}

void kda_gates(const float* g, const float* beta_pre, const float* A_log, const float* dt_bias,
               int64_t tokens, int heads, int dk, double* log_alpha, double* beta) {
  PB_CHECK(tokens >= 0 && heads >= 1 && dk >= 1, "ref::kda_gates: bad shape");
  for (int64_t t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      if (log_alpha != nullptr) {
        const double a = std::exp(double(A_log[h]));
        for (int c = 0; c < dk; ++c) {
          const int64_t col = int64_t(h) * dk + c;
          const double x = a * (double(g[t * heads * dk + col]) + double(dt_bias[col]));
          log_alpha[t * heads * dk + col] = -kKdaDecayBound * sigmoid(x);
        }
      }
      if (beta != nullptr) beta[t * heads + h] = sigmoid(double(beta_pre[t * heads + h]));
    }
}

void kda_l2norm(const float* x, int64_t rows, int d, double* out) {
  PB_CHECK(rows >= 0 && d >= 1, "ref::kda_l2norm: bad shape");
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int c = 0; c < d; ++c) ss += double(x[r * d + c]) * double(x[r * d + c]);
    const double inv = 1.0 / std::sqrt(ss + kKdaL2Eps);
    for (int c = 0; c < d; ++c) out[r * d + c] = double(x[r * d + c]) * inv;
  }
}

void kda_sequential(const double* q, const double* k, const double* v, const double* log_alpha,
                    const double* beta, const KdaShape& s, double scale, const double* S_in,
                    double* o, double* S_out) {
  check_shape(s, "ref::kda_sequential");
  const int H = s.heads, dk = s.dk, dv = s.dv;
  std::vector<double> P, X(sz(int64_t(dv) * dk)), alpha(sz(dk)), u(sz(dv));
  std::vector<std::vector<double>> finals(sz(H));
  for (int h = 0; h < H; ++h) {
    load_state(S_in, h, dk, dv, P);
    for (int64_t t = 0; t < s.tokens; ++t) {
      const double* kt = k + (t * H + h) * dk;
      const double* vt = v + (t * H + h) * dv;
      const double* lat = log_alpha + (t * H + h) * dk;
      const double bt = beta[t * H + h];
      for (int c = 0; c < dk; ++c) alpha[c] = std::exp(lat[c]);
      // X = S_{t−1} Diag(α);  S_t = X (I − β k kᵀ) + β v kᵀ = X + β (v − X k) kᵀ.
      for (int j = 0; j < dv; ++j) {
        double xk = 0.0;
        for (int c = 0; c < dk; ++c) {
          X[sz(j) * dk + c] = P[sz(j) * dk + c] * alpha[c];
          xk += X[sz(j) * dk + c] * kt[c];
        }
        u[j] = bt * (vt[j] - xk);
      }
      for (int j = 0; j < dv; ++j)
        for (int c = 0; c < dk; ++c) P[sz(j) * dk + c] = X[sz(j) * dk + c] + u[j] * kt[c];
      if (o != nullptr) {
        const double* qt = q + (t * H + h) * dk;
        double* ot = o + (t * H + h) * dv;
        for (int j = 0; j < dv; ++j) {
          double acc = 0.0;
          for (int c = 0; c < dk; ++c) acc += P[sz(j) * dk + c] * qt[c];
          ot[j] = scale * acc;
        }
      }
    }
    finals[h] = P;  // written after every head read S_in: S_in may alias S_out
  }
  if (S_out != nullptr)
    for (int h = 0; h < H; ++h) std::copy(finals[h].begin(), finals[h].end(), S_out + h * finals[h].size());
}

void kda_chunked(const double* q, const double* k, const double* v, const double* log_alpha,
                 const double* beta, const KdaShape& s, double scale, int chunk, const double* S_in,
                 double* o, double* S_out) {
  check_shape(s, "ref::kda_chunked");
  PB_CHECK(chunk >= 1, "ref::kda_chunked: chunk must be positive");
  PB_CHECK(o == nullptr || q != nullptr, "ref::kda_chunked: o needs q");
  const int H = s.heads, dk = s.dk, dv = s.dv;
  std::vector<double> P;
  std::vector<std::vector<double>> finals(sz(H));
  Chunk c;
  for (int h = 0; h < H; ++h) {
    load_state(S_in, h, dk, dv, P);
    for (int64_t t0 = 0; t0 < s.tokens; t0 += chunk) {
      const int n = int(std::min<int64_t>(chunk, s.tokens - t0));
      build_chunk(o != nullptr ? q : nullptr, k, v, log_alpha, beta, s, h, t0, n, c);
      apply_chunk(q, s, h, t0, scale, c, P, o);
    }
    finals[h] = P;
  }
  if (S_out != nullptr)
    for (int h = 0; h < H; ++h) std::copy(finals[h].begin(), finals[h].end(), S_out + h * finals[h].size());
}

void kda_package(const double* k, const double* v, const double* log_alpha, const double* beta,
                 const KdaShape& s, int chunk, double* M, double* D) {
  check_shape(s, "ref::kda_package");
  PB_CHECK(chunk >= 1, "ref::kda_package: chunk must be positive");
  const int H = s.heads, dk = s.dk, dv = s.dv;
  std::vector<double> P, Mh(sz(int64_t(dk) * dk)), MW;
  Chunk c;
  for (int h = 0; h < H; ++h) {
    load_state(nullptr, h, dk, dv, P);
    std::fill(Mh.begin(), Mh.end(), 0.0);
    for (int a = 0; a < dk; ++a) Mh[sz(a) * dk + a] = 1.0;
    for (int64_t t0 = 0; t0 < s.tokens; t0 += chunk) {
      const int n = int(std::min<int64_t>(chunk, s.tokens - t0));
      build_chunk(nullptr, k, v, log_alpha, beta, s, h, t0, n, c);
      // M ← M Γ − (M Wᵀ) K̂   (M Wᵀ [dk, n]).
      MW.assign(sz(int64_t(dk) * n), 0.0);
      for (int a = 0; a < dk; ++a)
        for (int r = 0; r < n; ++r) {
          double acc = 0.0;
          for (int ch = 0; ch < dk; ++ch) acc += Mh[sz(a) * dk + ch] * c.W[sz(r) * dk + ch];
          MW[sz(a) * n + r] = acc;
        }
      for (int a = 0; a < dk; ++a)
        for (int ch = 0; ch < dk; ++ch) {
          double acc = 0.0;
          for (int r = 0; r < n; ++r) acc += MW[sz(a) * n + r] * c.Khat[sz(r) * dk + ch];
          Mh[sz(a) * dk + ch] = Mh[sz(a) * dk + ch] * c.gamma[ch] - acc;
        }
      // D ← D Tc + Ũᵀ K̂: the zero-state forward, no outputs.
      apply_chunk(nullptr, s, h, t0, 0.0, c, P, nullptr);
    }
    if (M != nullptr) std::copy(Mh.begin(), Mh.end(), M + h * Mh.size());
    if (D != nullptr) std::copy(P.begin(), P.end(), D + h * P.size());
  }
}

void kda_fold(const double* const* M, const double* const* D, int segments, int heads, int dk,
              int dv, double* S) {
  PB_CHECK(segments >= 1 && heads >= 1 && dk >= 1 && dv >= 1, "ref::kda_fold: bad shape");
  const size_t sn = sz(int64_t(dv) * dk), mn = sz(int64_t(dk) * dk);
  std::copy(D[0], D[0] + heads * sn, S);
  std::vector<double> next(sn);
  for (int seg = 1; seg < segments; ++seg)
    for (int h = 0; h < heads; ++h) {
      const double* Mj = M[seg] + h * mn;
      const double* Dj = D[seg] + h * sn;
      double* Sh = S + h * sn;
      for (int j = 0; j < dv; ++j)
        for (int c = 0; c < dk; ++c) {
          double acc = 0.0;
          for (int a = 0; a < dk; ++a) acc += Sh[sz(j) * dk + a] * Mj[sz(a) * dk + c];
          next[sz(j) * dk + c] = acc + Dj[sz(j) * dk + c];
        }
      std::copy(next.begin(), next.end(), Sh);
    }
}

double kda_forward_flops(int64_t tokens, int heads, int dk, int dv, int chunk) {
  PB_CHECK(tokens >= 0 && heads >= 0 && dk >= 1 && dv >= 1 && chunk >= 1, "kda_forward_flops: bad shape");
  const double c = chunk, k = dk, v = dv;
  const double per_chunk = 2 * 2 * c * c * k + c * c * c + 2 * c * c * k + 2 * c * c * v +
                           3 * 2 * c * k * v + 2 * c * c * v;
  return chunks_of(tokens, chunk) * heads * per_chunk;
}

double kda_forward_flops_exact(int64_t tokens, int heads, int dk, int dv, int chunk) {
  PB_CHECK(tokens >= 0 && heads >= 0 && dk >= 1 && dv >= 1 && chunk >= 1,
           "kda_forward_flops_exact: bad shape");
  double total = 0.0;
  const double k = dk, v = dv;
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const double n = double(std::min<int64_t>(chunk, tokens - t0));
    total += (3 * n * n + n) * k + 2 * n * (n + 1) * v + (n * n * n - n) / 3 + 6 * n * k * v;
  }
  return total * heads;
}

double kda_package_flops(int64_t tokens, int heads, int dk, int dv, int chunk) {
  PB_CHECK(tokens >= 0 && heads >= 0 && dk >= 1 && dv >= 1 && chunk >= 1, "kda_package_flops: bad shape");
  const double c = chunk, k = dk, v = dv;
  const double per_chunk = 4 * c * c * k + 2 * c * c * v + c * c * c + 4 * c * k * v + 4 * c * k * k;
  return chunks_of(tokens, chunk) * heads * per_chunk;
}

}  // namespace pb::ref
