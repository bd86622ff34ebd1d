// The checkpoints the engine tests run on: the tiny fixtures of tests/data, and the K3 fixture with every
// token routed to all of its experts (written once per process). Caching or speculation on vs off differs
// by fp32 rounding; a top-k expert choice within rounding of a tie may then go either way (both right) and
// move the logits far more than rounding does. With no choice to flip, what the engine must restore — the
// KDA state and conv window, the MLA cache, across K3's AttnRes blocks — is still all K3's, and the logits
// bound stays tight: a wrong state still fails it.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "model/fixture.h"

namespace rill::testing {

struct TempModelDir {
  std::filesystem::path path;
  ~TempModelDir() { std::filesystem::remove_all(path); }
};

inline std::filesystem::path k3_all_experts_dir() {
  static const TempModelDir dir = [] {
    namespace fs = std::filesystem;
    const fs::path src = data_dir() / "kimi_k3_tiny_a";
    const fs::path out = fs::temp_directory_path() / ("rill_k3_all_experts_" + std::to_string(::getpid()));
    fs::create_directories(out);
    nlohmann::ordered_json config = nlohmann::ordered_json::parse(std::ifstream(src / "config.json"));
    auto& text = config["text_config"];
    text["num_experts_per_token"] = text["num_experts"];
    std::ofstream(out / "config.json") << config.dump(2);
    fs::copy_file(src / "model.safetensors", out / "model.safetensors", fs::copy_options::overwrite_existing);
    return TempModelDir{out};
  }();
  return dir.path;
}

// "kimi_k3_tiny_a_all_experts" or a directory name under tests/data.
inline std::filesystem::path engine_model_dir(const std::string& fixture) {
  return fixture == "kimi_k3_tiny_a_all_experts" ? k3_all_experts_dir() : data_dir() / fixture;
}

}  // namespace rill::testing
