// JSON parse errors as moesim words them (src/common/json_error.hpp): the position and the complaint, none of
// the library's own prefixes, for the errors nlohmann::json raises on the inputs users get wrong. Host only.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "src/common/json_error.hpp"

namespace moesim {
namespace {

std::string error_of(const std::string& text) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    (void)parsed;
  } catch (const nlohmann::json::exception& e) {
    return json_error_text(e.what());
  }
  return "(parsed)";
}

TEST(JsonError, PositionAndComplaintWithoutTheLibrarysWords) {
  for (const char* text : {"{\"a\": }", "{\"a\": 1,,}", "", "[1, 2", "{\"a\" 1}", "nul", "{\"a\": 1} x"}) {
    const std::string m = error_of(text);
    EXPECT_EQ(m.find("json.exception"), std::string::npos) << text << ": " << m;
    EXPECT_EQ(m.find("syntax error while parsing"), std::string::npos) << text << ": " << m;
    EXPECT_EQ(m.find("parse_error"), std::string::npos) << text << ": " << m;
    EXPECT_EQ(m.rfind("line 1, column ", 0), 0u) << text << ": " << m;
  }
  // Worked: the library says "[json.exception.parse_error.101] parse error at line 2, column 8: syntax error
  // while parsing value - unexpected '}'; expected '[', '{', or a literal".
  EXPECT_EQ(error_of("{\n  \"a\": }"), "line 2, column 8: unexpected '}'; expected '[', '{', or a literal");
  EXPECT_EQ(json_error_text("something else"), "something else");
  EXPECT_EQ(json_error_text("[json.exception.parse_error.101] parse error"), "invalid JSON");
}

}  // namespace
}  // namespace moesim
