#include "text/json/bounded_json.h"

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rill::text {
namespace {

using Json = nlohmann::ordered_json;

// Builds the document from nlohmann's SAX events (its SAX parser is iterative: an explicit stack).
class BoundedBuilder : public nlohmann::json_sax<Json> {
 public:
  BoundedBuilder(int max_depth, size_t max_values) : max_depth_(max_depth), max_values_(max_values) {}

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t&) override { return false; }  // JSON text has no binary values

  bool start_object(std::size_t) override { return open(Json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Json::array()); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    syntax_error_ = e.what();
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool too_many() const { return too_many_; }
  const std::string& syntax_error() const { return syntax_error_; }
  Json& root() { return root_; }

 private:
  struct Open {
    Json* node;
    // Object under construction: key -> index into its vector (arrays leave it empty).
    std::unordered_map<std::string, size_t> index;
  };

  // Places `value` in the innermost open container (or as the root); returns where it now lives.
  Json* place(Json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Open& top = stack_.back();
    if (top.node->is_array()) {
      auto& items = top.node->get_ref<Json::array_t&>();
      items.push_back(std::move(value));
      return &items.back();
    }
    // ordered_map is a vector of pairs: append to it directly, the hash index finds duplicates.
    auto& members = static_cast<Json::object_t::Container&>(top.node->get_ref<Json::object_t&>());
    auto [it, inserted] = top.index.try_emplace(key_, members.size());
    if (!inserted) {
      members[it->second].second = std::move(value);
      return &members[it->second].second;
    }
    members.emplace_back(std::move(key_), std::move(value));
    return &members.back().second;
  }

  bool counted() {
    if (++n_values_ <= max_values_) return true;
    too_many_ = true;
    return false;
  }

  bool add(Json&& value) {
    if (!counted()) return false;
    place(std::move(value));
    return true;
  }

  bool open(Json&& container) {
    if (!counted()) return false;
    if (int(stack_.size()) >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    // The enclosing container does not grow while this one is open, so the pointer stays valid.
    stack_.push_back(Open{place(std::move(container)), {}});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  int max_depth_;
  size_t max_values_;
  size_t n_values_ = 0;
  bool too_many_ = false;
  std::vector<Open> stack_;
  std::string key_;
  Json root_;
  bool too_deep_ = false;
  std::string syntax_error_;
};

// The offset of the bracket that opens level max_depth + 1. Called only once the parser has refused that
// bracket, so everything before it is a valid JSON prefix and strings are told apart by quotes alone.
size_t depth_error_offset(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

}  // namespace

Result<nlohmann::ordered_json> parse_bounded_json(std::string_view text, int max_depth, size_t max_values) {
  BoundedBuilder builder(max_depth, max_values);
  if (Json::sax_parse(text.begin(), text.end(), &builder)) return std::move(builder.root());
  if (builder.too_many()) return invalid_argument("JSON with more than {} values", max_values);
  if (builder.too_deep())
    return invalid_argument("JSON nested deeper than {} levels at byte {}", max_depth,
                            depth_error_offset(text, max_depth));
  return invalid_argument("{}", builder.syntax_error());
}

}  // namespace rill::text
