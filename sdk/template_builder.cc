#include "sdk/template_builder.h"

#include <yaml-cpp/yaml.h>

namespace hypic::sdk {
namespace {

void emit(YAML::Emitter& out, const Json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      emit(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (auto& v : j) emit(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    out << YAML::DoubleQuoted << j.get<std::string>();
  } else if (j.is_boolean()) {
    out << j.get<bool>();
  } else if (j.is_number_integer()) {
    out << j.get<long long>();
  } else if (j.is_number()) {
    out << j.get<double>();
  } else {
    out << YAML::Null;
  }
}

}  // namespace

TemplateBuilder::TemplateBuilder(std::string name) : name_(std::move(name)) {}

TemplateBuilder& TemplateBuilder::var(const std::string& name, const std::string& type, const VarOptions& opt) {
  Json v{{"type", type}};
  if (opt.default_) v["default"] = *opt.default_;
  if (opt.volatile_) v["volatile"] = true;
  if (opt.markup != "reject") v["markup"] = opt.markup;
  if (!opt.items.empty()) v["items"] = opt.items;
  vars_[name] = v;
  return *this;
}

TemplateBuilder& TemplateBuilder::tool(const Tool& t) {
  tools_.push_back(Json{{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}});
  return *this;
}

TemplateBuilder& TemplateBuilder::system(const std::string& id, const std::string& text, const std::string& cache) {
  blocks_.push_back(Json{{"id", id}, {"role", "system"}, {"cache", cache}, {"text", text}});
  return *this;
}

TemplateBuilder& TemplateBuilder::user(const std::string& id, const std::string& text, const std::string& cache) {
  blocks_.push_back(Json{{"id", id}, {"role", "user"}, {"cache", cache}, {"text", text}});
  return *this;
}

TemplateBuilder& TemplateBuilder::tools_block(const std::string& id) {
  blocks_.push_back(Json{{"id", id}, {"tools", "all"}});
  return *this;
}

TemplateBuilder& TemplateBuilder::repeat(const std::string& id, const std::string& list_var, const std::string& as,
                                         const std::string& text, const std::string& role) {
  blocks_.push_back(Json{{"id", id}, {"role", role}, {"for_each", list_var}, {"as", as}, {"order", "free"}, {"text", text}});
  return *this;
}

TemplateBuilder& TemplateBuilder::history(const std::string& id, const std::string& list_var) {
  blocks_.push_back(Json{{"id", id}, {"history", list_var}});
  return *this;
}

TemplateBuilder& TemplateBuilder::max_steps(int n) {
  agent_["max_steps"] = n;
  return *this;
}

TemplateBuilder& TemplateBuilder::max_tokens(int n) {
  agent_["max_tokens"] = n;
  return *this;
}

TemplateBuilder& TemplateBuilder::sampling(double temperature, double top_p, int top_k, uint64_t seed) {
  agent_["temperature"] = temperature;
  agent_["top_p"] = top_p;
  agent_["top_k"] = top_k;
  agent_["seed"] = seed;
  return *this;
}

TemplateBuilder& TemplateBuilder::penalties(double presence, double frequency, double repetition) {
  agent_["presence_penalty"] = presence;
  agent_["frequency_penalty"] = frequency;
  agent_["repetition_penalty"] = repetition;
  return *this;
}

std::string TemplateBuilder::yaml() const {
  Json doc{{"name", name_}};
  if (!vars_.empty()) doc["vars"] = vars_;
  if (!tools_.empty()) doc["tools"] = tools_;
  if (!agent_.empty()) doc["agent"] = agent_;
  doc["blocks"] = blocks_;
  YAML::Emitter out;
  emit(out, doc);
  return std::string(out.c_str()) + "\n";
}

dsl::Template TemplateBuilder::build() const { return dsl::parse_template(yaml(), "<builder:" + name_ + ">"); }

}  // namespace hypic::sdk
