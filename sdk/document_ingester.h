// Ingests a folder of text documents into a retrieval database: every regular file with a text
// extension, path keys relative to the folder (so ids survive moving the folder), unchanged files skipped.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "sdk/fts_retriever.h"

namespace hypic::sdk {

struct IngestOptions {
  size_t chunk_tokens = 256;
  const TokenCounter* counter = nullptr;  // null: count whitespace-separated words
  std::vector<std::string> extensions = {".txt", ".md", ".markdown", ".rst"};
  // Called before each document with its index, the number of documents found and its path relative to
  // the folder (a progress report); may be empty.
  std::function<void(size_t index, size_t total, const std::string& path)> on_document;
  size_t max_document_bytes = size_t{64} << 20;  // larger files are skipped with a warning
};

struct IngestReport {
  size_t documents_added = 0;      // new or changed
  size_t documents_unchanged = 0;
  size_t chunks_added = 0;
  std::vector<std::string> skipped;   // entries left out: not strictly valid UTF-8, unreadable, unresolvable links
  std::vector<std::string> warnings;  // one per skipped entry: "<path>: <why>; skipped"
};

// IoError when `dir` is not a readable folder; a bad entry inside it is skipped with a warning.
IngestReport ingest_directory(FtsRetriever& store, const std::string& dir, const IngestOptions& options);

}  // namespace hypic::sdk
