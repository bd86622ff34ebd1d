// MarkerScanner: the shared splitting of text into plain runs and markers.
#include "text/parsers/marker_scanner.h"

#include <gtest/gtest.h>

namespace rill::text {
namespace {

const std::vector<std::string_view> kMarkers = {"<|close|>", "<|close|>think<|sep|>", "[EOS]"};

// Drains the scanner into "text|" / "#marker|" items.
std::string drain(MarkerScanner& scanner, bool at_end) {
  std::string out;
  MarkerScanner::Token token;
  while (scanner.next(token, at_end)) {
    out += token.is_marker ? "#" + std::to_string(token.marker) : std::string(token.text);
    out += "|";
  }
  return out;
}

TEST(MarkerScanner, SplitsTextAndMarkers) {
  MarkerScanner scanner(kMarkers);
  scanner.feed("a[EOS]b<|close|>think<|sep|>c");
  EXPECT_EQ(drain(scanner, false), "a|#2|b|#1|c|");
}

TEST(MarkerScanner, LongestMarkerWinsAndWaitsForIt) {
  MarkerScanner scanner(kMarkers);
  scanner.feed("x<|close|>thi");
  EXPECT_EQ(drain(scanner, false), "x|");  // "<|close|>" matches, but the longer marker may still come
  scanner.feed("s");
  EXPECT_EQ(drain(scanner, false), "#0|this|");
}

TEST(MarkerScanner, HeldPrefixIsTextAtTheEnd) {
  MarkerScanner scanner(kMarkers);
  scanner.feed("ab[EO");
  EXPECT_EQ(drain(scanner, false), "ab|");
  EXPECT_EQ(drain(scanner, true), "[EO|");
}

TEST(MarkerScanner, DisambiguatedPrefixIsReleased) {
  MarkerScanner scanner(kMarkers);
  scanner.feed("[E");
  EXPECT_EQ(drain(scanner, false), "");
  scanner.feed("X]");
  EXPECT_EQ(drain(scanner, false), "[EX]|");
}

TEST(MarkerScanner, HoldsAnIncompleteUtf8Sequence) {
  MarkerScanner scanner(kMarkers);
  std::string bei = "北";  // E5 8C 97
  scanner.feed("a" + bei.substr(0, 2));
  EXPECT_EQ(drain(scanner, false), "a|");
  scanner.feed(bei.substr(2));
  EXPECT_EQ(drain(scanner, false), "北|");
}

TEST(Utf8IncompleteTail, CountsOnlyAnOpenSequence) {
  std::string emoji = "🎉";  // 4 bytes
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("ab"), 0u);
  EXPECT_EQ(utf8_incomplete_tail(emoji), 0u);
  EXPECT_EQ(utf8_incomplete_tail(emoji.substr(0, 1)), 1u);
  EXPECT_EQ(utf8_incomplete_tail("x" + emoji.substr(0, 3)), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);  // stray continuation bytes: nothing to wait for
}

TEST(TrimJsonSpace, TrimsOnlyJsonWhitespace) {
  EXPECT_EQ(trim_json_space(" \t\n{}\r "), "{}");
  EXPECT_TRUE(is_blank(" \n\t\r"));
  EXPECT_FALSE(is_blank(" x "));
}

}  // namespace
}  // namespace rill::text
