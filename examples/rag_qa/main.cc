// RAG question answering with hypic: ingest a folder of documents into SQLite FTS5, then for every
// question retrieve the best chunks, fill the template's chunk blocks (each chunk its own cached
// segment) and run the agent. Later questions reuse the chunks and the pinned system/tool blocks
// wherever they appear.
//
//   example_rag_qa --model DIR --template examples/templates/rag_qa.yaml --docs DOCS_DIR "question" ...
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "dsl/template.h"
#include "runtime/error.h"
#include "sdk/agent.h"
#include "sdk/builtin_tools.h"
#include "sdk/document_ingester.h"
#include "sdk/fts_retriever.h"

using namespace hypic;

int main(int argc, char** argv) {
  std::string model, tpl_path, docs;
  int max_tokens = 128;
  std::vector<std::string> questions;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") model = value();
    else if (a == "--template") tpl_path = value();
    else if (a == "--docs") docs = value();
    else if (a == "--max-tokens") max_tokens = std::stoi(value());
    else questions.push_back(a);
  }
  if (model.empty() || tpl_path.empty() || docs.empty() || questions.empty()) {
    std::fprintf(stderr, "usage: example_rag_qa --model DIR --template T.yaml --docs DIR [--max-tokens N] QUESTION...\n");
    return 2;
  }
  const std::string db = (std::filesystem::temp_directory_path() / ("rag_qa_" + std::to_string(getpid()) + ".sqlite")).string();
  try {
    sdk::RuntimeOptions ro;
    ro.model_dir = model;
    auto rt = sdk::Runtime::open(ro);
    auto retriever = sdk::FtsRetriever::open(db);
    sdk::IngestOptions io;
    const auto report = sdk::ingest_directory(retriever, docs, io);
    std::printf("ingested %zu chunks from %s\n", retriever.chunk_count(), docs.c_str());
    (void)report;

    sdk::ToolRegistry tools;
    tools.add(sdk::calculator_tool());
    tools.add(sdk::search_docs_tool(retriever));
    dsl::Template tpl = dsl::load_template(tpl_path);
    tpl.agent.max_tokens = max_tokens;
    sdk::Agent agent(*rt, tpl, tools);

    for (size_t q = 0; q < questions.size(); ++q) {
      sdk::Json vars{{"question", questions[q]}, {"chunks", sdk::chunks_to_json(retriever.search(questions[q], 3))}};
      const sdk::AgentResult r = agent.run(vars);
      int hits = 0;
      for (auto& b : r.blocks) hits += b.hit;
      std::printf("question %zu: %s\nanswer: %s\n  %d/%zu blocks hit, %lld of %lld prompt tokens computed, TTFT %.1f ms\n",
                  q + 1, questions[q].c_str(), r.answer.c_str(), hits, r.blocks.size(),
                  static_cast<long long>(r.computed_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    std::filesystem::remove(db);
    return 1;
  }
  std::filesystem::remove(db);
  return 0;
}
