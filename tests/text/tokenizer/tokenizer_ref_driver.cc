// Test-only driver for the tiktoken reference test (tiktoken_reference_test.mjs):
//   tokenizer_ref_driver MODEL_DIR           JSON lines {"text": s, "allow_special": b} on stdin ->
//                                            JSON lines {"ids": [...], "decoded": s} on stdout
//   tokenizer_ref_driver --corpus            the mixed corpus (mixed_corpus.h) on stdout
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "text/tokenizer/mixed_corpus.h"
#include "text/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tokenizer_ref_driver MODEL_DIR | --corpus\n");
    return 2;
  }
  if (std::string(argv[1]) == "--corpus") {
    std::cout << rill::text::testing::make_mixed_corpus();
    return 0;
  }
  auto tokenizer = rill::text::Tokenizer::load(argv[1]);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().to_string().c_str());
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string text;
    bool allow_special = false;
    try {
      const nlohmann::json request = nlohmann::json::parse(line);
      text = request.at("text").get<std::string>();
      allow_special = request.value("allow_special", false);
    } catch (const nlohmann::json::exception& e) {
      std::fprintf(stderr, "bad request line: %s\n", e.what());
      return 1;
    }
    const std::vector<int32_t> ids = tokenizer->encode(text, allow_special);
    auto decoded = tokenizer->decode(ids);
    if (!decoded.ok()) {
      std::fprintf(stderr, "%s\n", decoded.status().to_string().c_str());
      return 1;
    }
    std::cout << nlohmann::json{{"ids", ids}, {"decoded", *decoded}}.dump() << '\n';
  }
  std::cout.flush();
  return 0;
}
