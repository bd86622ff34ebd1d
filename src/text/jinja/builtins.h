// The global names every template sees (jinja2's DEFAULT_NAMESPACE plus the reference environment's
// additions): range (with the sandbox's 100000-item cap), dict, namespace, raise_exception, strftime_now;
// lipsum, cycler and joiner exist but fail when called.
#pragma once

#include "text/jinja/value.h"

namespace rill::text::jinja {

DictData make_globals();

}  // namespace rill::text::jinja
