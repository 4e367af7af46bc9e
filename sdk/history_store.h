// Conversation history in SQLite: sessions of turns of messages (role, content, tool calls, tool results)
// and the plan blocks / segment keys each message became. A turn is one transaction: after a crash a
// session holds exactly its committed turns. WAL mode, synchronous=FULL.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sdk/sqlite_db.h"

namespace hypic::sdk {

using Json = nlohmann::ordered_json;

// Which cache segment a message became.
struct BlockRef {
  std::string block_id;
  std::string content_key;  // "" when unknown (no tokenizer)
  std::string chain_key;
};

struct HistoryMessage {
  std::string role;  // system | user | assistant | tool
  std::string content;
  Json tool_calls = nullptr;  // assistant: OpenAI-style [{"id", "type", "function": {name, arguments}}]
  std::string tool_call_id;   // tool: the call this result answers
  std::string name;           // tool: the tool's name
  std::vector<BlockRef> blocks;
};

struct StoredTurn {
  int64_t index = 0;
  int64_t created_at_ms = 0;
  std::vector<HistoryMessage> messages;
};

class HistoryStore {
 public:
  // Opens or creates `path`. FormatError (naming the file, which is left untouched) when it is not a
  // hypic history database or is damaged; IoError when it cannot be opened.
  static HistoryStore open(const std::string& path);

  // Creates a session; `id` empty picks a fresh random id. InvalidArgument if `id` exists.
  std::string create_session(const std::string& id = "", const Json& metadata = Json::object());
  bool has_session(const std::string& id) const;
  std::vector<std::string> sessions() const;  // oldest first
  Json session_metadata(const std::string& id) const;

  // One turn being written (the store must outlive it): messages are added as the agent produces them and become visible
  // together at commit(). Destroyed uncommitted (crash, exception), it leaves no trace.
  class TurnWriter {
   public:
    TurnWriter(TurnWriter&&) noexcept = default;
    ~TurnWriter() = default;
    void add(const HistoryMessage& m);
    int64_t commit();  // returns the turn's index

   private:
    friend class HistoryStore;
    TurnWriter(HistoryStore& store, std::string session);
    HistoryStore* store_;
    std::string session_;
    std::unique_ptr<Transaction> tx_;
    int64_t turn_ = 0;
    int64_t next_seq_ = 0;
  };
  // InvalidArgument for an unknown session.
  TurnWriter begin_turn(const std::string& session);
  // A whole turn at once; returns its index.
  int64_t append_turn(const std::string& session, const std::vector<HistoryMessage>& messages);

  // Records the blocks a stored message became (known once the plan is compiled).
  void set_blocks(const std::string& session, int64_t turn, size_t message_in_turn, const std::vector<BlockRef>& blocks);

  std::vector<StoredTurn> turns(const std::string& session) const;
  std::vector<HistoryMessage> messages(const std::string& session) const;  // all turns, in order
  // The messages as a template `history` variable: [{role, content, tool_calls?, tool_call_id?, name?}].
  Json history_variable(const std::string& session) const;

  const std::string& path() const { return db_.path(); }

 private:
  explicit HistoryStore(Database db) : db_(std::move(db)) {}
  void require_session(const std::string& id) const;
  Database db_;
};

}  // namespace hypic::sdk
