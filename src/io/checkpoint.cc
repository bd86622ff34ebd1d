// Checkpoint: finds the weight files of a Hugging Face directory, opens each once and builds one sorted
// name → (file, tensor) index, refusing anything ambiguous (a tensor in two files, an index that disagrees
// with its shards), because a silently wrong weight is far harder to debug than a load error.
#include "io/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "io/printable.h"

namespace rill::io {
namespace {

namespace fs = std::filesystem;
using Files = std::vector<std::unique_ptr<SafetensorsFile>>;
using Entries = std::vector<std::pair<std::string, Checkpoint::Entry>>;

Result<std::string> read_text_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) return not_found("{}: no such file", path.string());
  if (!fs::is_regular_file(st)) return invalid_argument("{}: not a regular file", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("{}: cannot open", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return invalid_argument("{}: read failed", path.string());
  return text;
}

// Parses with the caller's JSON type: ordered_json keeps a config's key order for printing, but its
// object inserts are linear scans, so the (possibly 100k-entry) index uses the std::map-backed json.
template <typename Json>
Result<Json> parse_json_text(const std::string& text, const fs::path& path) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return invalid_argument("{}: file is empty, expected JSON", path.string());
  }
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& ex) {
    // nlohmann's `byte` counts characters read; recount lines the way its own messages do.
    const size_t end = std::min<size_t>(ex.byte, text.size());
    const size_t line = 1 + size_t(std::count(text.begin(), text.begin() + ptrdiff_t(end), '\n'));
    const size_t last_nl = text.rfind('\n', end == 0 ? 0 : end - 1);
    const size_t column = last_nl == std::string::npos || end == 0 ? end : end - last_nl - 1;
    std::string what = ex.what();
    if (const size_t colon = what.find(": "); colon != std::string::npos) what.erase(0, colon + 2);
    return invalid_argument("{}: invalid JSON at line {}, column {}: {}", path.string(), line, column,
                            printable(what, 240));
  } catch (const std::exception& ex) {
    return invalid_argument("{}: cannot parse JSON: {}", path.string(), ex.what());
  }
}

Result<Files> open_indexed(const fs::path& dir, const fs::path& index_path, Entries& entries) {
  RILL_ASSIGN_OR_RETURN(const std::string text, read_text_file(index_path));
  RILL_ASSIGN_OR_RETURN(const nlohmann::json index, parse_json_text<nlohmann::json>(text, index_path));
  const std::string label = index_path.string();
  if (!index.is_object()) return invalid_argument("{}: must be a JSON object", label);
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    return invalid_argument("{}: missing object 'weight_map'", label);

  std::unordered_map<std::string, std::string> file_of;        // tensor -> shard file name
  std::map<std::string, std::vector<std::string>> tensors_of;  // shard -> tensors, shards sorted
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) {
      return invalid_argument("{}: weight_map['{}'] must be a file name string", label, printable(name));
    }
    const std::string& f = file.get_ref<const std::string&>();
    const fs::path rel(f);
    // Shard names come from a downloaded file: keep them inside the checkpoint directory.
    if (f.empty() || rel.is_absolute() || std::find(rel.begin(), rel.end(), fs::path("..")) != rel.end()) {
      return invalid_argument("{}: weight_map['{}'] = '{}' is not a file name inside the checkpoint", label,
                              printable(name), printable(f));
    }
    file_of.emplace(name, f);
    tensors_of[f].push_back(name);
  }

  Files files;
  for (const auto& [file, names] : tensors_of) {
    const fs::path path = dir / file;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      return not_found("{}: weight_map maps tensor '{}' to '{}', which does not exist in {}", label,
                       printable(names.front()), printable(file), dir.string());
    }
    RILL_ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::open(path));
    files.push_back(std::make_unique<SafetensorsFile>(std::move(shard)));
    const SafetensorsFile* sf = files.back().get();
    for (const std::string& name : names) {
      const TensorInfo* info = sf->find(name);
      if (!info) {
        return invalid_argument("{}: weight_map maps tensor '{}' to '{}', but that file has no such tensor",
                                label, printable(name), printable(file));
      }
      entries.emplace_back(name, Checkpoint::Entry{info, sf});
    }
    for (const TensorInfo& t : sf->tensors()) {
      const auto it = file_of.find(t.name);
      if (it == file_of.end()) {
        return invalid_argument("{}: tensor '{}' is not listed in {} (inconsistent checkpoint)",
                                path.string(), printable(t.name), label);
      }
      if (it->second != file) {
        return invalid_argument("{}: holds tensor '{}', which {} maps to '{}' (inconsistent checkpoint)",
                                path.string(), printable(t.name), label, printable(it->second));
      }
    }
  }
  return files;
}

Result<Files> open_unindexed(const std::vector<fs::path>& paths, Entries& entries) {
  Files files;
  for (const fs::path& path : paths) {
    RILL_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    files.push_back(std::make_unique<SafetensorsFile>(std::move(f)));
    const SafetensorsFile* sf = files.back().get();
    for (const TensorInfo& t : sf->tensors()) entries.emplace_back(t.name, Checkpoint::Entry{&t, sf});
  }
  return files;
}

Result<std::vector<fs::path>> list_safetensors(const fs::path& dir) {
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec2)) paths.push_back(it->path());
  }
  if (ec) return invalid_argument("{}: cannot list the directory: {}", dir.string(), ec.message());
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

Result<nlohmann::ordered_json> read_json_file(const std::filesystem::path& path) {
  RILL_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return parse_json_text<nlohmann::ordered_json>(text, path);
}

Result<Checkpoint> Checkpoint::open(const std::filesystem::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) return not_found("{}: no such directory", dir.string());
  if (!fs::is_directory(st)) return invalid_argument("{}: not a directory", dir.string());

  Checkpoint ck;
  ck.dir_ = dir;
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(index, ec)) {
    RILL_ASSIGN_OR_RETURN(ck.files_, open_indexed(dir, index, ck.entries_));
  } else if (fs::exists(single, ec)) {
    RILL_ASSIGN_OR_RETURN(ck.files_, open_unindexed({single}, ck.entries_));
  } else {
    RILL_ASSIGN_OR_RETURN(const std::vector<fs::path> paths, list_safetensors(dir));
    RILL_ASSIGN_OR_RETURN(ck.files_, open_unindexed(paths, ck.entries_));
  }

  std::sort(ck.entries_.begin(), ck.entries_.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // With an index the names are unique by construction; without one, two files may both claim a name.
  for (size_t i = 1; i < ck.entries_.size(); ++i) {
    if (ck.entries_[i].first == ck.entries_[i - 1].first) {
      return invalid_argument("{}: tensor '{}' is in both {} and {}", dir.string(),
                              printable(ck.entries_[i].first),
                              ck.entries_[i - 1].second.file->path().filename().string(),
                              ck.entries_[i].second.file->path().filename().string());
    }
  }
  return ck;
}

const Checkpoint::Entry* Checkpoint::find(std::string_view name) const {
  const auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                                   [](const auto& e, std::string_view n) { return e.first < n; });
  return it != entries_.end() && it->first == name ? &it->second : nullptr;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& e : entries_) n += e.second.info->nbytes;
  return n;
}

}  // namespace rill::io
