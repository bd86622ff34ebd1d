// `rill serve`'s lifecycle: bind first (so /health answers 503 with load progress), load the model and
// start the engine in the background, serve, and on SIGINT/SIGTERM drain: new requests get 503, running ones
// finish within the grace period (then they are cancelled), every completed response is written, exit 0.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/cors.h"
#include "server/http/http_limits.h"

namespace rill::server {

struct ServerOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (printed)
  std::string served_model_name;  // "": the model directory's name
  std::string api_key;            // "": no authentication
  bool api_key_metrics = false;   // the key guards /metrics too
  engine::EngineOptions engine;
  double shutdown_timeout_s = 30.0;  // grace for running requests after SIGINT/SIGTERM
  HttpLimits http;                   // sizes, deadlines, connection cap, threads
  // vLLM's --served-model-name with several names: requests may use any, /v1/models lists all, a response
  // names the one its request asked for (the first when it asked for none), metrics the first. Empty:
  // served_model_name alone (or the directory's name).
  std::vector<std::string> served_model_names;
  CorsOptions cors;                  // --allowed-origins / --allowed-methods / --allowed-headers
  bool log_requests = true;          // one log line per finished or rejected request (--disable-log-requests)
  double log_stats_interval_s = 10;  // seconds between stats lines while there is activity; 0: none
  std::string chat_template_file;    // --chat-template FILE: replaces the checkpoint's template ("": its own)
  std::string generation_config = "auto";  // auto: MODEL_DIR/generation_config.json; vllm: none; else a DIR
  std::optional<uint64_t> seed;  // --seed: requests without a seed get seed, seed + 1, ... in arrival order
  std::vector<std::string> startup_flags;  // the flags given, for the start-up summary
};

// Loads the weights, reporting (bytes done, bytes total), and answers the factory of the engine's executor,
// which owns the devices: the backend and the loaded model (runner::local_executor_factory), or the ranks of
// `rill serve -tp N` (each loads its shard when the executor is made). The draft model of
// --speculative-config method draft_model is loaded by the executor too (EngineOptions::speculative).
using ModelLoader = std::function<Result<engine::Engine::ExecutorFactory>(const model::LoadProgress& progress)>;

// The directory's last component ("models/rill-tiny/" -> "rill-tiny").
std::string default_served_name(const std::string& model_dir);

// Runs until a signal ends it; returns the process exit code (0 after a graceful shutdown, 1 when the
// port cannot be bound or the model fails to load).
int run_server(const ServerOptions& options, const ModelLoader& loader);

}  // namespace rill::server
