// Tests src/sweep/sweep: VALUES lists with geometric and arithmetic ranges (integer and real), --vary
// parsing with tied keys, the cartesian product's order and size, and InputError on every bad form.
// Pure string work: exact comparisons. Host only.
#include "src/sweep/sweep.hpp"

#include <gtest/gtest.h>

#include "src/common/error.hpp"

namespace moesim {
namespace {

using Values = std::vector<std::string>;

Values expand(const std::string& s) { return expand_sweep_values(s, "--vary k=" + s); }

TEST(SweepExpand, LiteralListKeepsOrderAndText) {
  EXPECT_EQ(expand("1,2,x"), (Values{"1", "2", "x"}));
  EXPECT_EQ(expand("token_choice"), (Values{"token_choice"}));
  EXPECT_EQ(expand("b,a,b"), (Values{"b", "a", "b"}));  // repeated values are the user's choice
}

TEST(SweepExpand, GeometricRangeIsPowersOfTheFactor) {
  EXPECT_EQ(expand("1..1024*2"), (Values{"1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024"}));
  EXPECT_EQ(expand("3..100*2"), (Values{"3", "6", "12", "24", "48", "96"}));  // the end need not be hit
  EXPECT_EQ(expand("1..4096*4"), (Values{"1", "4", "16", "64", "256", "1024", "4096"}));
  EXPECT_EQ(expand("5..5*2"), (Values{"5"}));
  EXPECT_EQ(expand("0.5..2*2"), (Values{"0.5", "1", "2"}));
  EXPECT_EQ(expand("1..3*1.5"), (Values{"1", "1.5", "2.25"}));
}

TEST(SweepExpand, ArithmeticRangeIncludesTheEnd) {
  EXPECT_EQ(expand("0..10+5"), (Values{"0", "5", "10"}));
  EXPECT_EQ(expand("1..4"), (Values{"1", "2", "3", "4"}));
  EXPECT_EQ(expand("-2..2+2"), (Values{"-2", "0", "2"}));
  EXPECT_EQ(expand("0..1+0.25"), (Values{"0", "0.25", "0.5", "0.75", "1"}));
  // 0.1 + 2 x 0.1 is 0.30000000000000004 in doubles: the end is still included and printed as 0.3.
  EXPECT_EQ(expand("0.1..0.3+0.1"), (Values{"0.1", "0.2", "0.3"}));
  EXPECT_EQ(expand("1..2+0.3"), (Values{"1", "1.3", "1.6", "1.9"}));
  EXPECT_EQ(expand("1..1e3+500"), (Values{"1", "501"}));  // a real bound: real arithmetic
}

TEST(SweepExpand, ItemsMixLiteralsAndRanges) {
  EXPECT_EQ(expand("1,4..16*2,100"), (Values{"1", "4", "8", "16", "100"}));
  EXPECT_EQ(expand("1..2,8..9"), (Values{"1", "2", "8", "9"}));
}

TEST(SweepExpand, BadListsAreInputErrors) {
  for (const char* bad : {"", ",", "1,,2", "1,", "a..b", "1..x*2", "1..8*", "0..8*2", "-1..8*2", "1..8*1",
                          "1..8*0.5", "8..1", "8..1*2", "1..8+0", "1..8+-1", "1..8+x", "1 ..8"}) {
    EXPECT_THROW(expand(bad), InputError) << "'" << bad << "'";
  }
  // The message names the argument as given.
  try {
    expand_sweep_values("0..8*2", "--vary workload.batch=0..8*2");
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--vary workload.batch=0..8*2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("START > 0"), std::string::npos) << e.what();
  }
}

TEST(SweepExpand, TooManyValuesIsAnInputError) {
  EXPECT_EQ(expand("1..100000").size(), kMaxSweepPoints);
  EXPECT_THROW(expand("1..100001"), InputError);
  EXPECT_THROW(expand("0..1+1e-9"), InputError);
}

TEST(SweepVary, ParsesKeyAndTiedKeys) {
  const SweepAxis a = parse_vary("workload.batch=1..8*2");
  EXPECT_EQ(a.key, "workload.batch");
  EXPECT_EQ(a.keys, (Values{"workload.batch"}));
  EXPECT_EQ(a.values, (Values{"1", "2", "4", "8"}));
  const SweepAxis t = parse_vary("model.hidden,model.ffn=256,512");
  EXPECT_EQ(t.key, "model.hidden,model.ffn");
  EXPECT_EQ(t.keys, (Values{"model.hidden", "model.ffn"}));
  EXPECT_EQ(t.values, (Values{"256", "512"}));
  // A value may itself hold '=' (only the first one splits).
  EXPECT_EQ(parse_vary("a.b=x=y").values, (Values{"x=y"}));
}

TEST(SweepVary, BadArgumentsAreInputErrors) {
  for (const char* bad : {"workload.batch", "=1,2", "workload.batch=", "a b=1", "a,,b=1", ",a=1", "a,=1",
                          "workload.batch=0..4*2"}) {
    EXPECT_THROW(parse_vary(bad), InputError) << bad;
  }
  EXPECT_THROW(parse_varies({"a.b=1", "a.b=2"}), InputError);
  EXPECT_THROW(parse_varies({"a.b,c.d=1", "c.d=2"}), InputError);
  EXPECT_THROW(parse_varies({"a.b,a.b=1"}), InputError);
  EXPECT_EQ(parse_varies({"a.b=1", "c.d=2,3"}).size(), 2u);
}

TEST(SweepPoints, CartesianProductFirstAxisSlowest) {
  const std::vector<SweepAxis> axes = parse_varies({"router.gating=balanced,token_choice", "workload.batch=1..4*2"});
  const std::vector<SweepPoint> p = sweep_points(axes);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].values, (Values{"balanced", "1"}));
  EXPECT_EQ(p[1].values, (Values{"balanced", "2"}));
  EXPECT_EQ(p[2].values, (Values{"balanced", "4"}));
  EXPECT_EQ(p[3].values, (Values{"token_choice", "1"}));
  EXPECT_EQ(p[5].settings, (Values{"router.gating=token_choice", "workload.batch=4"}));
}

TEST(SweepPoints, TiedKeysSetEveryKey) {
  const std::vector<SweepPoint> p = sweep_points(parse_varies({"model.hidden,model.ffn=256,512", "workload.batch=8"}));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].values, (Values{"512", "8"}));
  EXPECT_EQ(p[1].settings, (Values{"model.hidden=512", "model.ffn=512", "workload.batch=8"}));
}

TEST(SweepPoints, NoAxesIsOnePointAndHugeProductsAreRefused) {
  const std::vector<SweepPoint> none = sweep_points({});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(none[0].settings.empty());
  // 1000 x 1000 points is over the limit, refused before anything is built.
  EXPECT_THROW(sweep_points(parse_varies({"a.b=1..1000", "c.d=1..1000"})), InputError);
  EXPECT_EQ(sweep_points(parse_varies({"a.b=1..100", "c.d=1..1000"})).size(), 100000u);
}

}  // namespace
}  // namespace moesim
