// Named configs for running without a checkpoint (`--load-format dummy --preset NAME`): the released
// Kimi-Linear-48B-A3B config (spec §1.1), and a contiguous slice of Kimi K3's MoE layers at full width
// (spec §1.2; all 93 layers would not fit one GPU), for benchmarks at full size.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace rill::model {

std::vector<std::string> preset_names();
Result<nlohmann::ordered_json> preset_config(std::string_view name);

}  // namespace rill::model
