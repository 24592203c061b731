// `--set KEY.PATH=VALUE` on the parsed YAML tree, before the typed read: the key checked against the
// schema table (whole sections as maps, keys inside an inline hardware table, expect bounds), the value
// parsed as one YAML document and put in place, and the override remembered so that errors about the key
// name "--set KEY=VALUE" instead of a file line. Deterministic, host only. Declared in
// src/config/load_config_internal.hpp; covered by tests/config/load_config_test.cpp.
#include "src/config/load_config_internal.hpp"

#include <yaml-cpp/yaml.h>

#include <sstream>
#include <string>
#include <vector>

#include "src/common/error.hpp"
#include "src/config/load_config.hpp"

namespace moesim {
namespace config_detail {

void Loader::set_at(YAML::Node& root, const std::vector<std::string>& parts, const YAML::Node& value,
                    const std::string& prefix) {
  YAML::Node node = root;
  std::string path;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (i ? "." : "") + parts[i];
    const YAML::Node& cnode = node;  // const lookup: never inserts
    const YAML::Node child = cnode[parts[i]];  // invalid (not merely undefined) when missing
    if (!child.IsDefined() || child.IsNull()) {
      node.remove(parts[i]);
      node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      const YAML::Node created = node[parts[i]];
      node.reset(created);  // rebinds; operator= would overwrite the node's contents in the tree
    } else if (!child.IsMap()) {
      fail_expected(where(path, child.Mark()), path, "a map", describe(child));
    } else {
      node.reset(child);
    }
  }
  // Remove, then add: assigning into an existing node would also change every YAML alias of it.
  node.remove(parts.back());
  node[parts.back()] = value;
  std::string full;
  for (size_t i = 0; i < parts.size(); ++i) full += (i ? "." : "") + parts[i];
  set_origins_.emplace_back(full, prefix);
}

void Loader::apply_set(YAML::Node& root, const std::string& key_eq_value) {
  const std::string prefix = "--set " + key_eq_value;
  const size_t eq = key_eq_value.find('=');
  if (eq == std::string::npos) throw ConfigError(prefix + ": expected KEY.PATH=VALUE");
  std::string key = key_eq_value.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.pop_back();
  while (!key.empty() && key.front() == ' ') key.erase(key.begin());
  std::vector<std::string> parts;
  std::string part;
  std::istringstream ks(key);
  while (std::getline(ks, part, '.')) parts.push_back(part);
  if (key.empty() || key.back() == '.') parts.push_back("");
  for (const std::string& p : parts) {
    if (p.empty()) throw ConfigError(prefix + ": expected KEY.PATH=VALUE, got key '" + key + "'");
  }
  const YAML::Node value = [&] {
    const std::string text = key_eq_value.substr(eq + 1);
    try {
      const auto documents = scan_documents(text);
      if (documents.size() > 1) {
        throw ConfigError(prefix + ": expected one YAML value, got " + std::to_string(documents.size()) + " documents");
      }
      return documents.empty() ? YAML::Node() : YAML::Load(text);
    } catch (const YAML::ParserException& ex) {
      throw ConfigError(prefix + ": invalid YAML: " + ex.msg);
    }
  }();
  auto unknown = [&](const std::string& known) {
    throw ConfigError(prefix + ": unknown key " + key + " (" + known + ")");
  };
  const std::string& top = parts[0];
  bool known_top = false;
  for (const std::string& k : top_keys()) known_top = known_top || k == top;
  if (!known_top) unknown(nearest_names(top, top_keys(), "", "known: " + join(top_keys(), ", ")));

  if (const Section* s = find_section(top)) {
    if (parts.size() == 1 && value.IsMap()) {
      // A map given for a whole section sets the keys it names; the others keep their values.
      for (auto it = value.begin(); it != value.end(); ++it) {
        const std::string k = it->first.IsScalar() ? it->first.Scalar() : "";
        if (!s->find(k)) {
          throw ConfigError(prefix + ": unknown key " + top + "." + k + " (" +
                            nearest_names(k, s->keys(), top + ".", "moesim config --explain lists every key") + ")");
        }
        set_at(root, {top, k}, it->second, prefix);
      }
      return;
    }
    if (parts.size() > 2 || (parts.size() == 2 && !s->find(parts[1]))) {
      unknown(nearest_names(parts[1], s->keys(), top + ".", "moesim config --explain lists every key"));
    }
  } else if (top == "name") {
    if (parts.size() > 1) unknown("name is a string");
  } else if (top == "hardware" && parts.size() > 1) {
    // Keys inside an inline hardware map may be overridden one by one, when they exist.
    const YAML::Node& croot = root;
    YAML::Node node = croot["hardware"];
    bool found = true;
    for (size_t i = 1; found && i < parts.size(); ++i) {
      found = node.IsDefined() && node.IsMap();
      if (found) {
        const YAML::Node& cnode = node;
        const YAML::Node child = cnode[parts[i]];
        found = child.IsDefined();
        if (found) node.reset(child);
      }
    }
    if (!found) unknown("hardware is a profile name, or an inline map without this key");
  } else if (top == "expect" && parts.size() > 1) {
    const YAML::Node& croot = root;
    const YAML::Node expect = croot["expect"];
    if (expect.IsDefined() && expect.IsSequence()) {
      unknown("expect is a list here: set it whole, --set expect=[{metric: ..., max: ...}]");
    }
    if (!is_known_metric(parts[1]))
      unknown(nearest_names(parts[1], known_expect_metrics(), "expect.", "a metric of docs/json-schema.md's metrics"));
    if (parts.size() > 3 || (parts.size() == 3 && (parts[2] == "metric" || !one_of(parts[2], kExpectItemKeys)))) {
      unknown("known: min, max, aggregate, strategy");
    }
  }
  set_at(root, parts, value, prefix);
}

}  // namespace config_detail
}  // namespace moesim
