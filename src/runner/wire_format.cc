#include "runner/wire_format.h"

#include <cstring>
#include <limits>
#include <type_traits>

namespace rill::runner {
namespace {

// Four characters at the start of every message, so a message of one kind is never read as another.
constexpr uint32_t tag_of(const char (&s)[5]) {
  return uint32_t(uint8_t(s[0])) | uint32_t(uint8_t(s[1])) << 8 | uint32_t(uint8_t(s[2])) << 16 |
         uint32_t(uint8_t(s[3])) << 24;
}
constexpr uint32_t kStepTag = tag_of("STEP"), kOptionsTag = tag_of("ROPT"), kReportTag = tag_of("SREP"),
                   kVerdictTag = tag_of("SVER");
constexpr uint32_t kVersion = 1;

class Writer {
 public:
  explicit Writer(uint32_t tag) {
    put<uint32_t>(tag);
    put<uint32_t>(kVersion);
  }
  // Fixed-width fields in host order: every process of a job runs the same binary on the same architecture.
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_ints(const std::vector<int32_t>& v) {
    put<uint32_t>(uint32_t(v.size()));
    for (int32_t x : v) put<int32_t>(x);
  }
  void put_status(const Status& st) {
    put<uint8_t>(uint8_t(st.code()));
    put<uint32_t>(uint32_t(st.message().size()));
    out_.insert(out_.end(), st.message().begin(), st.message().end());
  }
  // One field of a fixed message (the *_fields lists below): bools as one byte, statuses as put_status.
  template <typename T>
  Status field(const T& v, const char*) {
    if constexpr (std::is_same_v<T, bool>)
      put<uint8_t>(v);
    else if constexpr (std::is_same_v<T, Status>)
      put_status(v);
    else
      put<T>(v);
    return {};
  }
  Bytes take() { return std::move(out_); }

 private:
  Bytes out_;
};

class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, const char* what) : in_(bytes), what_(what) {}

  Status header(uint32_t tag) {
    uint32_t got = 0, version = 0;
    RILL_TRY(get(got, "tag"));
    if (got != tag) return invalid_argument("{}: the message is not one (tag {:#010x})", what_, got);
    RILL_TRY(get(version, "version"));
    if (version != kVersion)
      return invalid_argument("{}: format version {}, this rill reads {} (run the same rill everywhere)",
                              what_, version, kVersion);
    return {};
  }
  template <typename T>
  Status get(T& v, const char* field) {
    if (in_.size() - at_ < sizeof(T))
      return invalid_argument("{}: truncated at {} (byte {} of {})", what_, field, at_, in_.size());
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return {};
  }
  // A count of items of `item_bytes` each: refused when the rest of the message cannot hold them, so a
  // corrupt count never becomes a huge allocation.
  Status count(uint32_t& n, size_t item_bytes, const char* field) {
    RILL_TRY(get(n, field));
    if (size_t(n) * item_bytes > in_.size() - at_)
      return invalid_argument("{}: {} says {} items, {} bytes are left", what_, field, n, in_.size() - at_);
    return {};
  }
  Status get_ints(std::vector<int32_t>& v, const char* field) {
    uint32_t n = 0;
    RILL_TRY(count(n, sizeof(int32_t), field));
    v.resize(n);
    for (uint32_t i = 0; i < n; ++i) RILL_TRY(get(v[i], field));
    return {};
  }
  Status get_bool(bool& b, const char* field) {
    uint8_t v = 0;
    RILL_TRY(get(v, field));
    if (v > 1) return invalid_argument("{}: {} is {}, not a boolean", what_, field, int(v));
    b = v == 1;
    return {};
  }
  Status get_status(Status& st, const char* field) {
    uint8_t code = 0;
    uint32_t n = 0;
    RILL_TRY(get(code, field));
    if (code > uint8_t(StatusCode::Internal))
      return invalid_argument("{}: {} has status code {}", what_, field, int(code));
    RILL_TRY(count(n, 1, field));
    std::string message(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    st = code == 0 ? Status{} : Status(StatusCode(code), std::move(message));
    return {};
  }
  // One field of a fixed message, read as Writer::field wrote it.
  template <typename T>
  Status field(T& v, const char* name) {
    if constexpr (std::is_same_v<T, bool>)
      return get_bool(v, name);
    else if constexpr (std::is_same_v<T, Status>)
      return get_status(v, name);
    else
      return get(v, name);
  }
  Status end() const {
    if (at_ != in_.size())
      return invalid_argument("{}: {} bytes past the end of the message", what_, in_.size() - at_);
    return {};
  }

 private:
  std::span<const uint8_t> in_;
  size_t at_ = 0;
  const char* what_;
};

}  // namespace

Bytes encode_step(const model::StepBatch& batch, const cache::CacheOps& ops) {
  Writer w(kStepTag);
  w.put_ints(batch.token_ids);
  w.put<uint32_t>(uint32_t(batch.seqs.size()));
  for (const model::SequenceStep& s : batch.seqs) {
    w.put<int32_t>(s.start_pos);
    w.put<int32_t>(s.n_new);
    w.put<int32_t>(s.state_slot);
    w.put<uint8_t>(uint8_t(s.logits));
    w.put<int32_t>(s.n_logits);
    w.put<uint8_t>(s.kda_records ? 1 : 0);
    w.put_ints(s.block_table);
    w.put<uint32_t>(uint32_t(s.kda_snapshots.size()));
    for (const model::KdaSnapshotRequest& k : s.kda_snapshots) {
      w.put<int32_t>(k.pos);
      w.put<int32_t>(k.slot);
    }
  }
  w.put<uint32_t>(uint32_t(ops.kda_slot_copies.size()));
  for (const cache::KdaSlotCopy& c : ops.kda_slot_copies) {
    w.put<int32_t>(c.from);
    w.put<int32_t>(c.to);
  }
  w.put<uint32_t>(uint32_t(ops.kda_folds.size()));
  for (const cache::KdaFold& f : ops.kda_folds) {
    w.put<int32_t>(f.slot);
    w.put<int32_t>(f.n_tokens);
  }
  return w.take();
}

Result<StepMessage> decode_step(std::span<const uint8_t> bytes) {
  Reader r(bytes, "step message");
  RILL_TRY(r.header(kStepTag));
  StepMessage m;
  RILL_TRY(r.get_ints(m.batch.token_ids, "token ids"));
  uint32_t n_seqs = 0;
  RILL_TRY(r.count(n_seqs, 26, "sequence count"));  // 26: the fixed bytes of one sequence
  m.batch.seqs.resize(n_seqs);
  for (model::SequenceStep& s : m.batch.seqs) {
    uint8_t logits = 0;
    RILL_TRY(r.get(s.start_pos, "start_pos"));
    RILL_TRY(r.get(s.n_new, "n_new"));
    RILL_TRY(r.get(s.state_slot, "state_slot"));
    RILL_TRY(r.get(logits, "logits"));
    if (logits > uint8_t(model::LogitsNeeded::LastN))
      return invalid_argument("step message: logits kind {} is none of None, Last, All, LastN", int(logits));
    s.logits = model::LogitsNeeded(logits);
    RILL_TRY(r.get(s.n_logits, "n_logits"));
    RILL_TRY(r.get_bool(s.kda_records, "kda_records"));
    RILL_TRY(r.get_ints(s.block_table, "block table"));
    uint32_t n_snapshots = 0;
    RILL_TRY(r.count(n_snapshots, 8, "snapshot count"));
    s.kda_snapshots.resize(n_snapshots);
    for (model::KdaSnapshotRequest& k : s.kda_snapshots) {
      RILL_TRY(r.get(k.pos, "snapshot pos"));
      RILL_TRY(r.get(k.slot, "snapshot slot"));
    }
  }
  uint32_t n_copies = 0;
  RILL_TRY(r.count(n_copies, 8, "slot copy count"));
  m.ops.kda_slot_copies.resize(n_copies);
  for (cache::KdaSlotCopy& c : m.ops.kda_slot_copies) {
    RILL_TRY(r.get(c.from, "slot copy from"));
    RILL_TRY(r.get(c.to, "slot copy to"));
  }
  uint32_t n_folds = 0;
  RILL_TRY(r.count(n_folds, 8, "record fold count"));
  m.ops.kda_folds.resize(n_folds);
  for (cache::KdaFold& f : m.ops.kda_folds) {
    RILL_TRY(r.get(f.slot, "record fold slot"));
    RILL_TRY(r.get(f.n_tokens, "record fold tokens"));
  }
  RILL_TRY(r.end());
  return m;
}

namespace {

// The fixed messages' fields in wire order, one list for both directions: `io` is a Writer (the message
// const) or a Reader.
template <typename IO, typename Options>
Status runner_options_fields(IO& io, Options& o) {
  RILL_TRY(io.field(o.max_batch_size, "max_batch_size"));
  RILL_TRY(io.field(o.max_num_tokens, "max_num_tokens"));
  RILL_TRY(io.field(o.max_model_len, "max_model_len"));
  RILL_TRY(io.field(o.kv_cache_fraction, "kv_cache_fraction"));
  RILL_TRY(io.field(o.gpu_memory_utilization, "gpu_memory_utilization"));
  RILL_TRY(io.field(o.num_kv_blocks, "num_kv_blocks"));
  RILL_TRY(io.field(o.block_size, "block_size"));
  RILL_TRY(io.field(o.prefix.enabled, "prefix.enabled"));
  RILL_TRY(io.field(o.prefix.snapshot_interval, "prefix.snapshot_interval"));
  RILL_TRY(io.field(o.prefix.snapshot_budget_bytes, "prefix.snapshot_budget_bytes"));
  RILL_TRY(io.field(o.prefix.staging_slots, "prefix.staging_slots"));
  RILL_TRY(io.field(o.enforce_eager, "enforce_eager"));
  RILL_TRY(io.field(o.capture_graphs, "capture_graphs"));
  RILL_TRY(io.field(o.num_speculative_tokens, "num_speculative_tokens"));
  bool records = o.kda_rollback == cache::KdaRollback::Records;
  RILL_TRY(io.field(records, "kda_rollback"));
  if constexpr (!std::is_const_v<Options>) o.kda_rollback = records ? cache::KdaRollback::Records : cache::KdaRollback::Checkpoint;
  return io.field(o.max_logit_rows, "max_logit_rows");
}
template <typename IO, typename Report>
Status setup_report_fields(IO& io, Report& rep) {
  RILL_TRY(io.field(rep.status, "status"));
  RILL_TRY(io.field(rep.n_blocks, "n_blocks"));
  RILL_TRY(io.field(rep.n_slots, "n_slots"));
  return io.field(rep.n_snapshots, "n_snapshots");
}
template <typename IO, typename Verdict>
Status setup_verdict_fields(IO& io, Verdict& v) {
  RILL_TRY(io.field(v.status, "status"));
  return io.field(v.n_blocks, "n_blocks");
}

// A fixed message: its tag, then `fields` (writing cannot fail).
template <typename Message, typename Fields>
Bytes encode_fixed(uint32_t tag, const Message& m, Fields fields) {
  Writer w(tag);
  (void)fields(w, m);
  return w.take();
}
template <typename Message, typename Fields>
Result<Message> decode_fixed(std::span<const uint8_t> bytes, const char* what, uint32_t tag, Fields fields) {
  Reader r(bytes, what);
  RILL_TRY(r.header(tag));
  Message m;
  RILL_TRY(fields(r, m));
  RILL_TRY(r.end());
  return m;
}

}  // namespace

Bytes encode_runner_options(const RunnerOptions& o) {
  return encode_fixed(kOptionsTag, o, [](auto& io, auto& m) { return runner_options_fields(io, m); });
}

Result<RunnerOptions> decode_runner_options(std::span<const uint8_t> bytes) {
  return decode_fixed<RunnerOptions>(bytes, "runner options message", kOptionsTag,
                                     [](auto& io, auto& m) { return runner_options_fields(io, m); });
}

Bytes encode_setup_report(const SetupReport& rep) {
  return encode_fixed(kReportTag, rep, [](auto& io, auto& m) { return setup_report_fields(io, m); });
}

Result<SetupReport> decode_setup_report(std::span<const uint8_t> bytes) {
  return decode_fixed<SetupReport>(bytes, "setup report", kReportTag,
                                   [](auto& io, auto& m) { return setup_report_fields(io, m); });
}

Bytes encode_setup_verdict(const SetupVerdict& v) {
  return encode_fixed(kVerdictTag, v, [](auto& io, auto& m) { return setup_verdict_fields(io, m); });
}

Result<SetupVerdict> decode_setup_verdict(std::span<const uint8_t> bytes) {
  return decode_fixed<SetupVerdict>(bytes, "setup verdict", kVerdictTag,
                                    [](auto& io, auto& m) { return setup_verdict_fields(io, m); });
}

}  // namespace rill::runner
