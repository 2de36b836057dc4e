// The model's shapes (docs/design.md §2): presets `k3` (the real shapes) and `tiny`
// (tests), each key overridable from a scenario's `model:` map.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "precision.h"

namespace pb {

struct ModelShape {
  std::string preset;
  int64_t hidden = 0, layers = 0;
  double rms_eps = 1e-5;
  // MLA (layers where layer % mla_period == mla_period - 1, and the last layer)
  int64_t mla_period = 0, heads = 0, q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  // KDA
  int64_t kda_heads = 0, kda_head_dim = 0, conv_taps = 0, f_rank = 0, kda_chunk = 0;
  // FFN: dense on the first dense_layers layers, MoE elsewhere
  int64_t dense_layers = 0, dense_inter = 0;
  int64_t experts = 0, top_k = 0, moe_latent = 0, expert_inter = 0, shared_inter = 0;
  int64_t vocab = 0;
  // AttnRes: a snapshot every attnres_period layers
  int64_t attnres_period = 0;

  bool is_mla(int64_t layer) const {
    return layer % mla_period == mla_period - 1 || layer == layers - 1;
  }
  bool is_dense_ffn(int64_t layer) const { return layer < dense_layers; }
  bool is_snapshot_layer(int64_t layer) const { return layer % attnres_period == 0; }
  // AttnRes block counts (DESIGN §2.1): before the mixer, before the FFN, and
  // before the first token.
  int64_t nb_in(int64_t layer) const { return (layer + attnres_period - 1) / attnres_period; }
  int64_t nb_mlp(int64_t layer) const { return layer / attnres_period + 1; }
  int64_t nb_final() const { return (layers - 1) / attnres_period + 1; }

  int64_t kda_inner() const { return kda_heads * kda_head_dim; }
  int64_t d_qk() const { return qk_nope + qk_rope; }
  int64_t mla_fused_width() const { return q_lora + kv_lora + qk_rope + heads * v_head; }
};

// One overridable key: its name, its member, its allowed range.
using ModelField = int64_t ModelShape::*;
struct ModelKey {
  const char* name;
  ModelField member;
  int64_t min, max;
};
const std::vector<ModelKey>& model_keys();
std::vector<std::string> model_preset_names();
// Throws pb::Error for an unknown preset.
ModelShape model_preset(const std::string& name);
// Cross-key consistency (e.g. top_k <= experts); returns "" when consistent,
// else a sentence naming the keys.
std::string model_inconsistency(const ModelShape& m);
// "" when every block-scaled GEMM of the model under `p` (fp8 or fp4) has whole
// 128-column groups (its input width, and for the experts their weights' row
// blocks; fp4's 16-element scale blocks divide them); else the sentence naming
// the first width that is not a multiple of 128.
std::string scaled_width_problem(const ModelShape& m, const Precision& p);

}  // namespace pb
