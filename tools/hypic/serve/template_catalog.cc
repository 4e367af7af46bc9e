#include "tools/hypic/serve/template_catalog.h"

#include <filesystem>
#include <system_error>

namespace hypic::serve {

namespace fs = std::filesystem;

TemplateCatalog TemplateCatalog::load(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw IoError("--templates " + dir + ": not a folder");
  TemplateCatalog c;
  c.dir_ = dir;
  dsl::LoadOptions opt;
  opt.template_root = dir;  // includes may reach subfolders of DIR, never outside it
  std::map<std::string, std::string> file_of;
  fs::directory_iterator it(dir, ec), end;
  if (ec) throw IoError("--templates " + dir + ": cannot list it: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) throw IoError("--templates " + dir + ": cannot list it: " + ec.message());
    const fs::path p = it->path();
    const std::string ext = p.extension().string();
    if ((ext != ".yaml" && ext != ".yml") || !it->is_regular_file(ec)) continue;
    const std::string name = p.stem().string();
    if (auto prev = file_of.find(name); prev != file_of.end())
      throw FormatError("--templates " + dir + ": " + prev->second + " and " + p.filename().string() +
                        " both name the template '" + name + "'");
    file_of[name] = p.filename().string();
    c.templates_.emplace(name, dsl::load_template(p.string(), opt));
  }
  return c;
}

const dsl::Template& TemplateCatalog::get(const std::string& name) const {
  auto it = templates_.find(name);
  if (it == templates_.end()) {
    std::string known;
    for (auto& [n, t] : templates_) known += (known.empty() ? "" : ", ") + n;
    throw ApiError(404, "not_found_error",
                   "the template '" + name + "' does not exist (" +
                       (templates_.empty() ? std::string("this server was started without --templates")
                                           : "templates: " + known) +
                       ")",
                   "hypic.template");
  }
  return it->second;
}

Json TemplateCatalog::list_json() const {
  Json data = Json::array();
  for (auto& [name, t] : templates_) {
    Json vars = Json::array();
    for (const dsl::VarDecl& v : t.vars) {
      Json j = {{"name", v.name}, {"type", dsl::var_type_name(v.type)}, {"required", v.required}};
      if (!v.required) j["default"] = v.default_value;
      vars.push_back(std::move(j));
    }
    // The tools the prompt offers: those its tools blocks show.
    Json tools = Json::array();
    for (const dsl::BlockDecl& b : t.blocks)
      if (b.kind == dsl::BlockDecl::Kind::kTools)
        for (const std::string& n : b.tools) tools.push_back(n);
    data.push_back({{"id", name}, {"object", "template"}, {"vars", vars}, {"tools", tools}});
  }
  return Json{{"object", "list"}, {"data", data}};
}

}  // namespace hypic::serve
