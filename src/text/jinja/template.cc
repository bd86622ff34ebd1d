#include "text/jinja/template.h"

#include <exception>
#include <new>

#include "text/jinja/analysis.h"
#include "text/jinja/ast.h"
#include "text/jinja/error.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/json.h"
#include "text/jinja/parser.h"

namespace rill::text::jinja {
namespace {

Status to_status(const std::string& name, const Error& e) {
  return invalid_argument("{}:{}: {}", name, e.line, e.message);
}

}  // namespace

Result<Template> Template::parse(std::string_view source, std::string name) {
  try {
    std::shared_ptr<const ast::TemplateNode> root = parse_template(source);
    return Template(std::move(root), std::move(name));
  } catch (const Error& e) {
    return to_status(name, e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while parsing the template", name);
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& variables,
                                     const RenderLimits& limits) const {
  if (!variables.is_object()) return invalid_argument("{}: template variables must be a JSON object", name_);
  try {
    const Value vars = from_json(variables);
    Interpreter interpreter(limits, vars.as_dict());
    return interpreter.render(*root_);
  } catch (const Error& e) {
    return to_status(name_, e);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("{}: out of memory while rendering", name_);
  } catch (const std::exception& e) {
    return internal_error("{}: {}", name_, e.what());
  }
}

bool Template::loops_over(std::string_view key) const {
  return jinja::loops_over(*root_, key);
}

}  // namespace rill::text::jinja
