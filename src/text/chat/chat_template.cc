#include "text/chat/chat_template.h"

#include <fstream>
#include <sstream>

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::string token_text(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

SpecialTokens special_tokens_of(const Json& config) {
  SpecialTokens t;
  t.bos = token_text(config, "bos_token");
  t.eos = token_text(config, "eos_token");
  t.unk = token_text(config, "unk_token");
  t.pad = token_text(config, "pad_token");
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array()) {
    for (const Json& e : *extra) {
      if (e.is_string()) t.additional.push_back(e);
      if (e.is_object() && e.contains("content") && e["content"].is_string())
        t.additional.push_back(e["content"]);
    }
  }
  return t;
}

Result<Json> read_config(const std::filesystem::path& path) {
  RILL_ASSIGN_OR_RETURN(const std::string text, read_file(path));
  Json config = Json::parse(text, nullptr, false);
  if (config.is_discarded() || !config.is_object())
    return invalid_argument("{} is not a JSON object", path.string());
  return config;
}

}  // namespace

Result<ChatTemplate::Named> ChatTemplate::compile(std::string_view source, std::string name) {
  RILL_ASSIGN_OR_RETURN(jinja::Template tmpl, jinja::Template::parse(source, name));
  const bool parts = tmpl.loops_over("content");
  return Named{std::move(name), std::move(tmpl), parts};
}

Result<ChatTemplate> ChatTemplate::from_source(std::string_view source, SpecialTokens tokens,
                                               std::string name, ChatTemplateOptions options) {
  std::vector<Named> templates;
  RILL_ASSIGN_OR_RETURN(Named named, compile(source, std::move(name)));
  named.name = "default";
  templates.push_back(std::move(named));
  return ChatTemplate(std::move(templates), std::move(tokens), std::move(options));
}

Result<ChatTemplate> ChatTemplate::load(const std::filesystem::path& model_dir, ChatTemplateOptions options) {
  const std::filesystem::path config_path = model_dir / "tokenizer_config.json";
  const std::filesystem::path file_path = model_dir / "chat_template.jinja";
  std::error_code ec;
  Json config = Json::object();
  if (std::filesystem::exists(config_path, ec)) {
    RILL_ASSIGN_OR_RETURN(config, read_config(config_path));
  }
  SpecialTokens tokens = special_tokens_of(config);
  if (!options.template_file.empty()) {
    if (!std::filesystem::is_regular_file(options.template_file, ec))
      return not_found("--chat-template {}: no such file", options.template_file.string());
    RILL_ASSIGN_OR_RETURN(const std::string source, read_file(options.template_file));
    const std::string name = options.template_file.string();
    return from_source(source, std::move(tokens), name, std::move(options));
  }
  if (std::filesystem::exists(file_path, ec)) {
    RILL_ASSIGN_OR_RETURN(const std::string source, read_file(file_path));
    return from_source(source, std::move(tokens), file_path.string(), std::move(options));
  }
  auto field = config.find("chat_template");
  if (field == config.end() || field->is_null()) {
    return not_found(
        "{} has no chat template (neither chat_template.jinja nor tokenizer_config.json's "
        "chat_template)",
        model_dir.string());
  }
  const std::string where = config_path.string() + " chat_template";
  if (field->is_string())
    return from_source(field->get<std::string>(), std::move(tokens), where, std::move(options));
  if (!field->is_array())
    return invalid_argument("{} must be a string or a list of {{name, template}}", where);
  std::vector<Named> templates;
  for (const Json& entry : *field) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return invalid_argument("{}: every entry needs a string 'name' and 'template'", where);
    }
    const std::string name = entry["name"].get<std::string>();
    RILL_ASSIGN_OR_RETURN(Named named,
                          compile(entry["template"].get<std::string>(), where + " '" + name + "'"));
    named.name = name;
    templates.push_back(std::move(named));
  }
  return ChatTemplate(std::move(templates), std::move(tokens), std::move(options));
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const Named& n : templates_) names.push_back(n.name);
  return names;
}

Result<const ChatTemplate::Named*> ChatTemplate::select(const Json& request) const {
  auto find = [&](std::string_view name) -> const Named* {
    for (const Named& n : templates_) {
      if (n.name == name) return &n;
    }
    return nullptr;
  };
  const bool has_tools = request.is_object() && request.contains("tools") && !request["tools"].is_null();
  if (has_tools) {
    if (const Named* t = find("tool_use")) return t;
  }
  if (const Named* t = find("default")) return t;
  std::string names;
  for (const Named& n : templates_) names += (names.empty() ? "" : ", ") + n.name;
  return invalid_argument("the checkpoint's chat templates ({}) include no 'default'", names);
}

Result<std::string> ChatTemplate::render(const Json& request) const {
  RILL_ASSIGN_OR_RETURN(const Named* t, select(request));
  ChatNormalization n;
  n.parse_tool_arguments = options_.parse_tool_arguments;
  n.template_handles_content_parts = t->handles_content_parts;
  RILL_ASSIGN_OR_RETURN(const Json vars, chat_template_variables(request, tokens_, n));
  return t->tmpl.render(vars, options_.limits);
}

}  // namespace rill::text
