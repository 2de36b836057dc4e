#include "first_token.h"

#include "argmax.h"
#include "block_common.h"
#include "check.h"
#include "rmsnorm.h"

namespace pb {

FirstToken::FirstToken(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem) : m_(m) {
  lm_head_ = WeightFill{mem, stream}.proj("first_token.lm_head", m.vocab, m.hidden, seed * 1000003ull + 31, Format::bf16);
  mem.begin_block("first_token");
  normed_ = mem.take<__nv_bfloat16>("normed", m.hidden, Home::rank);
  logits_ = mem.take<__nv_bfloat16>("logits", m.vocab, Home::rank);
  partial_ = mem.take<float>("partial", m.vocab, Home::rank);
  token_ = mem.take<int32_t>("token", 1, Home::rank);
  if (!mem.counting_only()) PB_CUDA(cudaStreamSynchronize(stream));
}

void FirstToken::run(Timeline& tl, const Blas& blas, const CutSet& cuts, const __nv_bfloat16* last_row) {
  PB_CHECK(last_row != nullptr, "FirstToken::run: null last row");
  const int64_t h = m_.hidden, V = m_.vocab;
  cudaStream_t st = tl.stream();
  tl.launch("rmsnorm", "rmsnorm.final",
            [&] { rmsnorm(last_row, nullptr, normed_.get(), {1, h, 0, 0}, float(m_.rms_eps), st); });
  gemm_land(tl, blas, land_variant(cuts), "lm_head", normed_.get(), Fp8Act{}, lm_head_, partial_.get(), logits_.get(),
            1, V, h);
  tl.launch("sample", "sample.argmax", [&] { argmax_bf16(logits_.get(), V, token_.get(), st); });
}

int32_t FirstToken::token() const {
  int32_t t = -1;
  PB_CUDA(cudaMemcpy(&t, token_.get(), sizeof(t), cudaMemcpyDeviceToHost));
  return t;
}

}  // namespace pb
