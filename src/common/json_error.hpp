// A JSON parse error in a user's words: "line 3, column 7: unexpected '}'" instead of the JSON library's own
// text ("[json.exception.parse_error.101] parse error at line 3, column 7: syntax error while parsing object
// key - unexpected '}'; expected string literal"). Header only, host only; every reader of a user's JSON
// (config.json, baselines, load profiles, traces, run JSON for reports) words its errors through it.
// Covered by tests/common/json_error_test.cpp.
#pragma once

#include <string>

namespace moesim {

// The position and the complaint of a parse error's what() text, without the library's prefixes; "invalid
// JSON" when the text is not one of the library's parse errors.
inline std::string json_error_text(const std::string& what) {
  std::string s = what;
  // "[json.exception.parse_error.101] " and "[json.exception.type_error.316] ", ...
  if (s.rfind("[json.exception.", 0) == 0) {
    const size_t close = s.find("] ");
    s = close == std::string::npos ? "" : s.substr(close + 2);
  }
  if (s.rfind("parse error at ", 0) == 0) s = s.substr(15);
  else if (s.rfind("parse error: ", 0) == 0) s = s.substr(13);
  else if (s.rfind("parse error", 0) == 0) s = s.substr(11);
  // "syntax error while parsing value - invalid literal; last read: 'x'" -> "invalid literal; last read: 'x'"
  const size_t syntax = s.find("syntax error while parsing ");
  if (syntax != std::string::npos) {
    const size_t dash = s.find(" - ", syntax);
    if (dash != std::string::npos) s = s.substr(0, syntax) + s.substr(dash + 3);
  }
  while (!s.empty() && (s.front() == ' ' || s.front() == ':')) s.erase(s.begin());
  return s.empty() ? std::string("invalid JSON") : s;
}

}  // namespace moesim
