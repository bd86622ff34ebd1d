// Whether a backend's kernels are built for a model's shapes (backend::KernelShapeLimits): checked when the
// model is built, so an unsupported shape is refused at load, naming the config field. (What every backend
// needs — groups of >= 2 experts, MXFP4 widths in multiples of 32 — is already ModelConfig's validation.)
#pragma once

#include "backend/backend.h"
#include "model/config.h"

namespace rill::model {

Status check_kernel_limits(const ModelConfig& c, const backend::KernelShapeLimits& l, const std::string& backend);

}  // namespace rill::model
