#include "text/jinja/arguments.h"

#include "text/jinja/error.h"

namespace rill::text::jinja {

std::vector<Value> bind_args(std::string_view fn, const CallArgs& args, std::initializer_list<Param> params) {
  if (args.positional.size() > params.size()) {
    fail("{}() takes at most {} positional argument(s) but {} were given", fn, params.size(),
         args.positional.size());
  }
  std::vector<std::optional<Value>> bound(params.size());
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (const Param& p : params) {
      if (p.name == key) break;
      ++i;
    }
    if (i == params.size()) fail("{}() got an unexpected keyword argument '{}'", fn, key);
    if (bound[i]) fail("{}() got multiple values for argument '{}'", fn, key);
    bound[i] = value;
  }
  std::vector<Value> out;
  out.reserve(params.size());
  size_t i = 0;
  for (const Param& p : params) {
    if (!bound[i] && !p.default_value) fail("{}() missing required argument '{}'", fn, p.name);
    out.push_back(bound[i] ? *bound[i] : *p.default_value);
    ++i;
  }
  return out;
}

int64_t int_arg(std::string_view fn, const Value& v) {
  if (!v.is_integral()) fail("{}(): '{}' object cannot be interpreted as an integer", fn, type_name(v));
  return v.as_int();
}

const std::string& str_arg(std::string_view fn, const Value& v) {
  if (!v.is_string()) fail("{}(): argument must be str, not {}", fn, type_name(v));
  return v.as_string();
}

}  // namespace rill::text::jinja
