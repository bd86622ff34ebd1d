// rill's version for logs and --version: the project version and the commit the build was configured at.
#pragma once

namespace rill {

// "0.1.0 (976a0c9)": `git describe --always --dirty` at CMake configure time ("0.1.0" outside a checkout).
const char* rill_version();

}  // namespace rill
