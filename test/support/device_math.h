// The device's own expf / tanhf / logf / rsqrtf, for the C++ references.
//
// evaluate_with_device_math(fn) runs fn(math) until every argument fn asked
// of math has a device value: arguments it has not seen yet get the host libm
// value for the moment and are queued; the queue is evaluated by a one-line
// kernel compiled with the project's flags, and fn runs again. Chained
// transcendentals (lse_merge's log of a sum of exps) settle in a few rounds.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "ref_math.h"

namespace pb::test {

class DeviceMathTable final : public ref::Transcendentals {
 public:
  float exp(float x) const override { return lookup(0, x); }
  float tanh(float x) const override { return lookup(1, x); }
  float log(float x) const override { return lookup(2, x); }
  float rsqrt(float x) const override { return lookup(3, x); }

  // Evaluate every queued argument on the device; returns how many there were.
  size_t resolve_pending();

 private:
  float lookup(int fn, float x) const;
  mutable std::unordered_map<uint32_t, float> known_[4];
  mutable std::vector<float> pending_[4];
};

template <class Fn>
auto evaluate_with_device_math(Fn&& fn) {
  DeviceMathTable table;
  for (int round = 0;; ++round) {
    auto result = fn(static_cast<const ref::Transcendentals&>(table));
    if (table.resolve_pending() == 0) return result;
    if (round == 16) throw std::runtime_error("device math table did not settle in 16 rounds");
  }
}

}  // namespace pb::test
