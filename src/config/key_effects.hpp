// Which config keys act under which settings: one table (key_effects) with, per key, when it acts (text
// for `moesim config --explain` and the README) and a rule that names why it does not in a given run.
// The CLI warns, one stderr line per key, about each key the user set to a non-default value that acts
// in none of a run's rows ("moesim: router.noise_std has no effect with router.gating=token_choice"),
// and --strict makes that exit 2. Host only, deterministic.
// Covered by tests/config/key_effects_test.cpp (the table against the schema, and every key's effect on
// computed results) and tests/cli/key_effects_cli_test.cpp (every documented command and shipped config).
#pragma once

#include <string>
#include <vector>

#include "src/config/experiment.hpp"

namespace moesim {

// What the command does with the experiment, beyond the experiment itself.
struct EffectContext {
  std::string command = "run";  // run | compare | sweep | check | route | validate | config | train
  bool executes = true;         // the executed CPU pipeline runs (no --no-execute; sweep --measure; ...)
  bool dumps_routing = false;   // each assignment's weight is written out
  bool cuda = false;            // the executed layer runs on the CUDA backend
  bool replays_recorded = false;  // a trace without logits: its recorded routing replays, no router runs
  bool compares_capacity = false; // moesim train --compare: its rows set the capacity factor
};

struct KeyEffect {
  const char* key;        // "router.noise_std"
  const char* acts_when;  // "router.gating is noisy_top_k"
  // Empty when the key acts in this experiment (one row of a run); else why not, a phrase that follows
  // "has no effect": "with router.gating=token_choice".
  std::string (*inert)(const Experiment& e, const EffectContext& ctx);
};

// Every key of the schema, in the order `moesim config` prints them, with its rule.
const std::vector<KeyEffect>& key_effects();

// Every key path the schema reads ("name", "model.hidden", ..., "hardware", "expect").
std::vector<std::string> schema_key_paths();

// The value of each key of schema_key_paths() in `e`, as `moesim config` writes it.
std::vector<std::string> experiment_key_values(const Experiment& e);

// The keys of e.given_keys whose value differs from the built-in default (under e's semantics preset):
// what the user set, as opposed to what `moesim config` printed and was fed back.
std::vector<std::string> user_set_keys(const Experiment& e);

struct InertKey {
  std::string key;
  std::string reason;  // "with router.gating=token_choice"
};

// The model description keys (model.layers, model.moe_layers, model.heads, model.kv_heads, model.head_dim,
// model.vocab): what a model is, which an experiment file states whole whatever runs it. inert_user_keys names
// one only when a --set or --vary gives it.
bool is_model_description_key(const std::string& key);

// The user-set keys (of any row) that act in none of `rows` (the experiments a run runs: one per
// compare row or sweep point), each with the reason the first row gives. A --set or --vary key is judged by
// this run (`ctx`); a key only an experiment file gives is one of the file's settings, named only when no
// run of the file could use it: judged as `moesim run` with the executed layer (on CUDA for execute.dtype),
// a router key under every gating, and never a model description key or expect.
std::vector<InertKey> inert_user_keys(const std::vector<Experiment>& rows, const EffectContext& ctx);

// The rule of `key` (its row `k` of key_effects()) in `moesim train` (train_key_effects.cpp): the train: section's
// and the training model keys' own rules; the router's rules where it routes the model's logits; "" (acts) or
// why not for the rest.
std::string train_key_inert(const KeyEffect& k, const Experiment& e, const EffectContext& ctx);

// One line: "moesim: KEY has no effect REASON".
std::string inert_key_message(const InertKey& k);

// The table as text: key, then when it acts (`moesim config --explain`; the README's table).
std::string explain_key_effects(bool markdown);

}  // namespace moesim
