// The released Kimi K3 config.json (values from spec/kimi-architecture.md §1.2 and §1.4): the multimodal
// root, the text decoder in `text_config` (Moonshot form, 1-based layer lists) with the MXFP4
// quantization_config nested inside it — the `kimi-k3` preset (model/presets.cc), which the config tests
// check field by field against the spec.
#pragma once

#include <nlohmann/json.hpp>

#include "model/presets.h"

inline nlohmann::ordered_json kimi_k3_released_config() { return *rill::model::preset_config("kimi-k3"); }
