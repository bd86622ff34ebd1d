#include "engine/spec/acceptance.h"

namespace rill::engine::spec {

Acceptance accept_drafts(std::span<const int32_t> drafts, std::span<const int32_t> sampled) {
  Acceptance a;
  size_t i = 0;
  while (i < drafts.size() && i + 1 < sampled.size() && drafts[i] == sampled[i]) ++i;
  a.n_accepted = int(i);
  a.emitted.assign(drafts.begin(), drafts.begin() + long(i));
  if (i < sampled.size()) a.emitted.push_back(sampled[i]);
  return a;
}

}  // namespace rill::engine::spec
