// The server-side YAML prompt templates of `hypic serve --templates DIR`: every *.yaml / *.yml file
// directly in DIR is loaded and validated at start-up (its includes may reach files under DIR, nothing
// outside it) and named by its file name without the extension. Requests name a template; a name is
// only ever looked up here, never joined to a path, so a request cannot reach another file.
#pragma once
#include <map>
#include <string>

#include "dsl/template.h"
#include "tools/hypic/serve/openai_protocol.h"

namespace hypic::serve {

class TemplateCatalog {
 public:
  TemplateCatalog() = default;  // no templates
  // Throws dsl::TemplateError naming file:line:column for a template that does not load, IoError for a
  // DIR that is not a readable folder, FormatError for two files with one name (a.yaml and a.yml).
  static TemplateCatalog load(const std::string& dir);

  bool empty() const { return templates_.empty(); }
  size_t size() const { return templates_.size(); }
  // ApiError 404 (param hypic.template) naming `name` when no template has it.
  const dsl::Template& get(const std::string& name) const;
  // The folder the templates came from (error messages name files relative to it).
  const std::string& dir() const { return dir_; }
  // GET /v1/templates: {"object": "list", "data": [{"id", "object": "template", "vars":
  // [{name, type, required, default?}], "tools": [names]}]}, sorted by name.
  Json list_json() const;

 private:
  std::string dir_;
  std::map<std::string, dsl::Template> templates_;
};

}  // namespace hypic::serve
