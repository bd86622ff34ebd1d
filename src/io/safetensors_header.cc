// The safetensors header parser. A SAX handler walks the JSON once and accepts only the shape the format
// allows (an object of tensor entries plus `__metadata__`), so a hostile header never builds a DOM: deep
// nesting, huge arrays and duplicate keys (which a DOM parser would silently collapse) stop it at once.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/printable.h"
#include "io/safetensors.h"

namespace rill::io {
namespace {

// A tensor entry as written, before its fields are checked against each other.
struct RawEntry {
  std::string name;
  std::optional<std::string> dtype;
  bool has_shape = false;
  std::array<uint64_t, kMaxRank> shape{};
  int rank = 0;
  bool has_offsets = false;
  std::array<uint64_t, 2> offsets{};
  int n_offsets = 0;
};

enum class Field { Dtype, Shape, DataOffsets };

const char* field_name(Field f) {
  switch (f) {
    case Field::Dtype:
      return "dtype";
    case Field::Shape:
      return "shape";
    case Field::DataOffsets:
      return "data_offsets";
  }
  return "?";
}

// Checks one complete entry against the data section and turns it into a TensorInfo.
Result<TensorInfo> check_entry(const RawEntry& e, uint64_t data_bytes, std::string_view label) {
  const std::string who = fmt::format("{}: tensor '{}'", label, printable(e.name));
  if (!e.dtype) return invalid_argument("{}: missing field 'dtype'", who);
  if (!e.has_shape) return invalid_argument("{}: missing field 'shape'", who);
  if (!e.has_offsets) return invalid_argument("{}: missing field 'data_offsets'", who);
  if (e.n_offsets != 2) {
    return invalid_argument("{}: data_offsets must be [begin, end], got {} value(s)", who, e.n_offsets);
  }
  const std::optional<DType> dtype = dtype_from_name(*e.dtype);
  if (!dtype) {
    return invalid_argument(
        "{}: unknown dtype '{}' (expected BF16, F16, F32, F8_E4M3, U8, I8, I32, I64 or BOOL)", who,
        printable(*e.dtype));
  }
  std::array<int64_t, kMaxRank> dims{};
  std::string shape_text = "[";
  for (int i = 0; i < e.rank; ++i) shape_text += fmt::format("{}{}", i ? ", " : "", e.shape[i]);
  shape_text += "]";
  // Zero dims make the tensor empty, but the product of the others must still fit in int64: strides are
  // computed from it (TensorView::make) and must not overflow.
  uint64_t numel = 1, nonzero_product = 1;
  for (int i = 0; i < e.rank; ++i) {
    const uint64_t d = e.shape[i];
    if (d == 0) {
      numel = 0;
      continue;
    }
    if (__builtin_mul_overflow(nonzero_product, d, &nonzero_product) ||
        nonzero_product > uint64_t(std::numeric_limits<int64_t>::max())) {
      return invalid_argument("{}: shape {} has too many elements", who, shape_text);
    }
    dims[i] = int64_t(d);
  }
  if (numel != 0) numel = nonzero_product;
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t(dtype_size(*dtype)), &nbytes)) {
    return invalid_argument("{}: {}{} is too large", who, dtype_name(*dtype), shape_text);
  }
  const uint64_t begin = e.offsets[0], end = e.offsets[1];
  if (begin > end) return invalid_argument("{}: data_offsets [{}, {}]: begin is past end", who, begin, end);
  if (end > data_bytes) {
    return invalid_argument(
        "{}: data_offsets [{}, {}] run past the end of the data section ({} bytes; truncated file?)", who,
        begin, end, data_bytes);
  }
  if (end - begin != nbytes) {
    return invalid_argument("{}: data_offsets [{}, {}] hold {} bytes but {}{} needs {}", who, begin, end,
                            end - begin, dtype_name(*dtype), shape_text, nbytes);
  }
  TensorInfo info;
  info.name = e.name;
  info.dtype = *dtype;
  info.shape = Shape(std::span<const int64_t>(dims.data(), size_t(e.rank)));
  info.offset = begin;
  info.nbytes = nbytes;
  return info;
}

class HeaderSax final : public nlohmann::json_sax<nlohmann::json> {
 public:
  HeaderSax(uint64_t data_bytes, std::string_view label) : data_bytes_(data_bytes), label_(label) {}

  Status& error() { return error_; }
  SafetensorsHeader& header() { return header_; }
  bool done() const { return state_ == State::Done; }

  bool null() override { return value("null", nullptr); }
  bool boolean(bool v) override { return value(v ? "true" : "false", nullptr); }
  bool number_integer(number_integer_t v) override {
    if (v >= 0) return number_unsigned(uint64_t(v));  // "-0" lands here
    return value(fmt::format("{}", v), nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ != State::Array) return value(fmt::format("{}", v), nullptr);
    return push_number(v);
  }
  bool number_float(number_float_t, const string_t& text) override { return value(text, nullptr); }
  bool string(string_t& s) override { return value(fmt::format("\"{}\"", printable(s, 40)), &s); }
  bool binary(binary_t&) override { return value("binary data", nullptr); }

  bool start_object(std::size_t) override {
    switch (state_) {
      case State::BeforeTop:
        state_ = State::Entries;
        return true;
      case State::EntryValue:
        state_ = in_metadata_ ? State::Metadata : State::Fields;
        if (!in_metadata_) {
          entry_ = RawEntry();
          entry_.name = std::move(key_);
        }
        return true;
      default:
        return value("an object", nullptr);
    }
  }
  bool end_object() override {
    switch (state_) {
      case State::Entries:
        state_ = State::Done;
        return true;
      case State::Metadata:
        state_ = State::Entries;
        return true;
      case State::Fields: {
        state_ = State::Entries;
        Result<TensorInfo> info = check_entry(entry_, data_bytes_, label_);
        if (!info.ok()) return fail(info.status());
        header_.tensors.push_back(std::move(info).value());
        return true;
      }
      default:
        return fail(invalid_argument("{}: unexpected end of object", label_));  // unreachable: lexer
    }
  }
  bool start_array(std::size_t) override {
    if (state_ == State::FieldValue && field_ != Field::Dtype) {
      state_ = State::Array;
      if (field_ == Field::Shape) entry_.has_shape = true;
      if (field_ == Field::DataOffsets) entry_.has_offsets = true;
      return true;
    }
    return value("an array", nullptr);
  }
  bool end_array() override {
    if (state_ != State::Array) return fail(invalid_argument("{}: unexpected end of array", label_));
    state_ = State::Fields;
    return true;
  }

  bool key(string_t& k) override {
    switch (state_) {
      case State::Entries:
        if (k == "__metadata__") {
          if (seen_metadata_)
            return fail(invalid_argument("{}: '__metadata__' appears twice in the header", label_));
          seen_metadata_ = in_metadata_ = true;
        } else {
          if (!names_.insert(k).second) {
            return fail(
                invalid_argument("{}: tensor '{}' appears twice in the header", label_, printable(k)));
          }
          in_metadata_ = false;
        }
        key_ = std::move(k);
        state_ = State::EntryValue;
        return true;
      case State::Metadata:
        if (header_.metadata.count(k)) {
          return fail(invalid_argument("{}: __metadata__ key '{}' appears twice", label_, printable(k)));
        }
        key_ = std::move(k);
        state_ = State::MetadataValue;
        return true;
      case State::Fields:
        return field_key(k);
      default:
        return fail(invalid_argument("{}: unexpected key", label_));  // unreachable: lexer
    }
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) override {
    std::string what = ex.what();
    // Keep only nlohmann's reason: its "[json.exception.parse_error.101] parse error at line 1, column N: "
    // prefix repeats the position (a header is one line).
    if (what.rfind("[json.exception", 0) == 0) {
      if (const size_t colon = what.find(": "); colon != std::string::npos) what.erase(0, colon + 2);
    }
    return fail(invalid_argument("{}: header is not valid JSON (byte {} of the header): {}", label_, position,
                                 printable(what, 240)));
  }

 private:
  enum class State {
    BeforeTop,
    Entries,
    EntryValue,
    Metadata,
    MetadataValue,
    Fields,
    FieldValue,
    Array,
    Done
  };

  bool fail(Status s) {
    if (error_.ok()) error_ = std::move(s);
    return false;
  }

  // Any scalar or container event; `s` is set for strings. Only three places accept a scalar: a metadata
  // value, a dtype and an array element; everything else is a structural error named after where it is.
  bool value(std::string_view what, string_t* s) {
    switch (state_) {
      case State::BeforeTop:
        return fail(invalid_argument("{}: header is not a JSON object", label_));
      case State::EntryValue:
        if (in_metadata_)
          return fail(
              invalid_argument("{}: __metadata__ must be an object of strings, got {}", label_, what));
        return fail(invalid_argument("{}: tensor '{}': entry must be an object, got {}", label_,
                                     printable(key_), what));
      case State::MetadataValue:
        if (!s) {
          return fail(invalid_argument("{}: __metadata__ value of '{}' must be a string, got {}", label_,
                                       printable(key_), what));
        }
        header_.metadata.emplace(std::move(key_), std::move(*s));
        state_ = State::Metadata;
        return true;
      case State::FieldValue:
        if (field_ == Field::Dtype && s) {
          entry_.dtype = std::move(*s);
          state_ = State::Fields;
          return true;
        }
        return fail(invalid_argument("{}: tensor '{}': {} must be {}, got {}", label_, printable(entry_.name),
                                     field_name(field_),
                                     field_ == Field::Dtype ? "a string" : "an array of integers", what));
      case State::Array:
        return fail(invalid_argument("{}: tensor '{}': {} must hold non-negative integers, got {}", label_,
                                     printable(entry_.name), field_name(field_), what));
      case State::Entries:
      case State::Metadata:
      case State::Fields:
      case State::Done:
        break;
    }
    return fail(invalid_argument("{}: unexpected {} in the header", label_, what));  // unreachable: lexer
  }

  bool push_number(uint64_t v) {
    if (field_ == Field::Shape) {
      if (entry_.rank == kMaxRank) {
        return fail(invalid_argument("{}: tensor '{}': shape has more than {} dimensions", label_,
                                     printable(entry_.name), kMaxRank));
      }
      entry_.shape[entry_.rank++] = v;
      return true;
    }
    if (entry_.n_offsets == 2) {
      return fail(
          invalid_argument("{}: tensor '{}': data_offsets must be [begin, end], got more than 2 values",
                           label_, printable(entry_.name)));
    }
    entry_.offsets[entry_.n_offsets++] = v;
    return true;
  }

  bool field_key(const string_t& k) {
    Field f;
    if (k == "dtype") {
      f = Field::Dtype;
    } else if (k == "shape") {
      f = Field::Shape;
    } else if (k == "data_offsets") {
      f = Field::DataOffsets;
    } else {
      return fail(
          invalid_argument("{}: tensor '{}': unknown field '{}' (expected dtype, shape, data_offsets)",
                           label_, printable(entry_.name), printable(k)));
    }
    const bool seen = f == Field::Dtype   ? entry_.dtype.has_value()
                      : f == Field::Shape ? entry_.has_shape
                                          : entry_.has_offsets;
    if (seen) {
      return fail(
          invalid_argument("{}: tensor '{}': field '{}' appears twice", label_, printable(entry_.name), k));
    }
    field_ = f;
    state_ = State::FieldValue;
    return true;
  }

  uint64_t data_bytes_;
  std::string_view label_;
  State state_ = State::BeforeTop;
  Status error_;
  SafetensorsHeader header_;
  std::unordered_set<std::string> names_;
  bool seen_metadata_ = false;
  bool in_metadata_ = false;
  std::string key_;
  RawEntry entry_;
  Field field_ = Field::Dtype;
};

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json, uint64_t data_bytes,
                                                   std::string_view label) {
  // The reference (Rust) reader insists on '{' first; so do we, which also rules out a UTF-8 BOM that
  // nlohmann would otherwise skip.
  if (header_json.empty() || header_json.front() != '{') {
    return invalid_argument("{}: header is not a JSON object (it starts with '{}')", label,
                            header_json.empty() ? "" : printable(header_json.substr(0, 1)));
  }
  HeaderSax sax(data_bytes, label);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(header_json.begin(), header_json.end(), &sax);
  } catch (const std::exception& ex) {  // only std::bad_alloc is expected; keep exceptions inside io/
    return internal_error("{}: parsing the header failed: {}", label, ex.what());
  }
  if (!ok || !sax.done()) {
    if (sax.error().ok()) return invalid_argument("{}: header is not valid JSON", label);
    return std::move(sax.error());
  }

  std::vector<TensorInfo>& tensors = sax.header().tensors;
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.offset, a.nbytes, a.name) < std::tie(b.offset, b.nbytes, b.name);
  });
  // Sorted by begin, a non-empty tensor overlaps an earlier one exactly when it starts before the furthest
  // end seen so far. Empty tensors own no bytes and may sit anywhere. Gaps are legal in the format.
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.nbytes == 0) continue;
    if (furthest && t.offset < furthest->offset + furthest->nbytes) {
      return invalid_argument("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", label,
                              printable(furthest->name), furthest->offset,
                              furthest->offset + furthest->nbytes, printable(t.name), t.offset,
                              t.offset + t.nbytes);
    }
    if (!furthest || t.offset + t.nbytes > furthest->offset + furthest->nbytes) furthest = &t;
  }
  return std::move(sax.header());
}

}  // namespace rill::io
