// The node side of tests/shared_data.h: test data outside the repository (RILL_SHARED_DIR, ../shared beside
// the checkout by default). A missing file skips the test (exit 77, ctest's SKIP_RETURN_CODE) and says how to
// get it; under CI=true (or 1) it fails the test instead.
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

export const SHARED_DIR = process.env.RILL_SHARED_DIR ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../shared");
export const SKIP_EXIT_CODE = 77;
const inCi = ["true", "1"].includes(process.env.CI ?? "");

// "" when every file (relative to `dir`) exists; else a line naming the missing ones and how to get them.
// Under CI=true a missing file ends the script with status 1 here.
export function checkSharedFiles(label, files, dir = SHARED_DIR) {
  const missing = files.filter((f) => !fs.statSync(path.join(dir, f), { throwIfNoEntry: false })?.isFile());
  if (missing.length === 0) return "";
  let message = `missing shared test data: ${missing.map((f) => path.join(dir, f)).join(", ")}.`;
  if (missing.some((f) => f.endsWith("tiktoken.model") || f.endsWith("tokenizer_config.json"))) {
    message += " tiktoken.model and tokenizer_config.json come with any Kimi checkpoint on Hugging Face (e.g. " +
      "`huggingface-cli download moonshotai/Kimi-Linear-48B-A3B-Instruct tiktoken.model tokenizer_config.json " +
      `--local-dir ${dir}\`).`;
  }
  if (missing.some((f) => f.startsWith("chat_templates/"))) message += " The chat templates are listed in tests/README.md.";
  message += " Configure with -DRILL_SHARED_DIR=DIR to use another directory (tests/README.md).";
  if (inCi) {
    console.error(`${label}: FAILED (CI=true: shared test data is required): ${message}`);
    process.exit(1);
  }
  return message;
}

// Ends the script as skipped (ctest shows it as such) with the reason.
export function skip(label, reason) {
  console.log(`${label}: SKIPPED: ${reason}`);
  process.exit(SKIP_EXIT_CODE);
}
