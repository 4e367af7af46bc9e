#include "sdk/history_store.h"

#include <chrono>
#include <random>

#include "runtime/error.h"

namespace hypic::sdk {
namespace {

constexpr int kSchemaVersion = 1;
constexpr const char* kSchema = R"(
CREATE TABLE sessions(
  id TEXT PRIMARY KEY,
  created_at_ms INTEGER NOT NULL,
  metadata TEXT NOT NULL);
CREATE TABLE turns(
  session_id TEXT NOT NULL REFERENCES sessions(id),
  turn INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY(session_id, turn));
CREATE TABLE messages(
  session_id TEXT NOT NULL,
  turn INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  role TEXT NOT NULL CHECK(role IN ('system','user','assistant','tool')),
  content TEXT NOT NULL,
  tool_calls TEXT,
  tool_call_id TEXT NOT NULL,
  name TEXT NOT NULL,
  blocks TEXT NOT NULL,
  PRIMARY KEY(session_id, turn, seq),
  FOREIGN KEY(session_id, turn) REFERENCES turns(session_id, turn));
)";

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json blocks_json(const std::vector<BlockRef>& blocks) {
  Json a = Json::array();
  for (const auto& b : blocks) a.push_back({{"block_id", b.block_id}, {"content_key", b.content_key}, {"chain_key", b.chain_key}});
  return a;
}

std::vector<BlockRef> parse_blocks(const std::string& s) {
  std::vector<BlockRef> out;
  for (const auto& b : Json::parse(s))
    out.push_back({b["block_id"].get<std::string>(), b["content_key"].get<std::string>(), b["chain_key"].get<std::string>()});
  return out;
}

void validate(const HistoryMessage& m) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
    throw InvalidArgument("history message has unknown role '" + m.role + "'");
  if (!m.tool_calls.is_null() && (m.role != "assistant" || !m.tool_calls.is_array()))
    throw InvalidArgument("tool_calls must be a list on an assistant message");
}

}  // namespace

HistoryStore HistoryStore::open(const std::string& path) {
  return HistoryStore(Database::open(path, "history", kSchemaVersion, kSchema));
}

std::string HistoryStore::create_session(const std::string& id, const Json& metadata) {
  std::string sid = id;
  if (sid.empty()) {
    std::random_device rd;
    std::mt19937_64 gen((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(now_ms()));
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
    sid = buf;
  }
  if (has_session(sid)) throw InvalidArgument(path() + ": session '" + sid + "' already exists");
  db_.prepare("INSERT INTO sessions VALUES(?, ?, ?)").bind(1, sid).bind(2, now_ms()).bind(3, metadata.dump()).run();
  return sid;
}

bool HistoryStore::has_session(const std::string& id) const {
  Statement s = db_.prepare("SELECT 1 FROM sessions WHERE id = ?");
  s.bind(1, id);
  return s.step();
}

void HistoryStore::require_session(const std::string& id) const {
  if (!has_session(id)) throw InvalidArgument(path() + ": no session '" + id + "'");
}

std::vector<std::string> HistoryStore::sessions() const {
  std::vector<std::string> out;
  Statement s = db_.prepare("SELECT id FROM sessions ORDER BY created_at_ms, rowid");
  while (s.step()) out.push_back(s.text(0));
  return out;
}

Json HistoryStore::session_metadata(const std::string& id) const {
  Statement s = db_.prepare("SELECT metadata FROM sessions WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) throw InvalidArgument(path() + ": no session '" + id + "'");
  return Json::parse(s.text(0));
}

HistoryStore::TurnWriter::TurnWriter(HistoryStore& store, std::string session)
    : store_(&store), session_(std::move(session)) {
  tx_ = std::make_unique<Transaction>(store.db_);
  Statement s = store.db_.prepare("SELECT coalesce(max(turn) + 1, 0) FROM turns WHERE session_id = ?");
  s.bind(1, session_);
  s.step();
  turn_ = s.integer(0);
  store.db_.prepare("INSERT INTO turns VALUES(?, ?, ?)").bind(1, session_).bind(2, turn_).bind(3, now_ms()).run();
}

void HistoryStore::TurnWriter::add(const HistoryMessage& m) {
  HYPIC_ASSERT(tx_ != nullptr, "add() after commit()");
  validate(m);
  Statement s = store_->db_.prepare("INSERT INTO messages VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind(1, session_).bind(2, turn_).bind(3, next_seq_++).bind(4, m.role).bind(5, m.content);
  if (m.tool_calls.is_null()) s.bind_null(6);
  else s.bind(6, m.tool_calls.dump());
  s.bind(7, m.tool_call_id).bind(8, m.name).bind(9, blocks_json(m.blocks).dump()).run();
}

int64_t HistoryStore::TurnWriter::commit() {
  HYPIC_ASSERT(tx_ != nullptr, "commit() twice");
  tx_->commit();
  tx_.reset();
  return turn_;
}

HistoryStore::TurnWriter HistoryStore::begin_turn(const std::string& session) {
  require_session(session);
  return TurnWriter(*this, session);
}

int64_t HistoryStore::append_turn(const std::string& session, const std::vector<HistoryMessage>& messages) {
  TurnWriter w = begin_turn(session);
  for (const auto& m : messages) w.add(m);
  return w.commit();
}

void HistoryStore::set_blocks(const std::string& session, int64_t turn, size_t message_in_turn,
                              const std::vector<BlockRef>& blocks) {
  Statement s = db_.prepare("UPDATE messages SET blocks = ? WHERE session_id = ? AND turn = ? AND seq = ?");
  s.bind(1, blocks_json(blocks).dump()).bind(2, session).bind(3, turn).bind(4, int64_t(message_in_turn)).run();
  if (db_.changes() == 0)
    throw InvalidArgument(path() + ": session '" + session + "' has no message " + std::to_string(message_in_turn) +
                          " in turn " + std::to_string(turn));
}

std::vector<StoredTurn> HistoryStore::turns(const std::string& session) const {
  require_session(session);
  std::vector<StoredTurn> out;
  Statement t = db_.prepare("SELECT turn, created_at_ms FROM turns WHERE session_id = ? ORDER BY turn");
  t.bind(1, session);
  while (t.step()) out.push_back(StoredTurn{t.integer(0), t.integer(1), {}});
  Statement m = db_.prepare(
      "SELECT turn, role, content, tool_calls, tool_call_id, name, blocks FROM messages WHERE session_id = ? "
      "ORDER BY turn, seq");
  m.bind(1, session);
  size_t ti = 0;
  while (m.step()) {
    const int64_t turn = m.integer(0);
    while (ti < out.size() && out[ti].index != turn) ++ti;
    HYPIC_ASSERT(ti < out.size(), "message without its turn (foreign key)");
    HistoryMessage h;
    h.role = m.text(1);
    h.content = m.text(2);
    if (!m.is_null(3)) h.tool_calls = Json::parse(m.text(3));
    h.tool_call_id = m.text(4);
    h.name = m.text(5);
    h.blocks = parse_blocks(m.text(6));
    out[ti].messages.push_back(std::move(h));
  }
  return out;
}

std::vector<HistoryMessage> HistoryStore::messages(const std::string& session) const {
  std::vector<HistoryMessage> out;
  for (auto& t : turns(session))
    for (auto& m : t.messages) out.push_back(std::move(m));
  return out;
}

Json HistoryStore::history_variable(const std::string& session) const {
  Json a = Json::array();
  for (const auto& m : messages(session)) {
    Json e{{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.is_null()) e["tool_calls"] = m.tool_calls;
    if (!m.tool_call_id.empty()) e["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) e["name"] = m.name;
    a.push_back(std::move(e));
  }
  return a;
}

}  // namespace hypic::sdk
