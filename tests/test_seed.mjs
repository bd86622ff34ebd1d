// The seed of a randomised node test: the rule of tests/test_seed.h, so a C++ and a node test of one commit
// draw from the same seed. RILL_TEST_SEED=N replays, RILL_TEST_SEED=random explores; unset, the first 8 hex
// digits of this checkout's HEAD, or NO_COMMIT_SEED where the source has no .git (a tarball).
import { execFileSync } from "child_process";
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

export const NO_COMMIT_SEED = 1;
const SOURCE_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

function commitSeed() {
  if (!fs.existsSync(path.join(SOURCE_DIR, ".git"))) return [NO_COMMIT_SEED, `no git checkout at ${SOURCE_DIR}: the fixed seed`];
  let head = "";
  try {
    head = execFileSync("git", ["-C", SOURCE_DIR, "rev-parse", "HEAD"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  } catch { /* falls through to the fixed seed */ }
  if (!/^[0-9a-f]{8}/.test(head)) return [NO_COMMIT_SEED, `git rev-parse HEAD failed in ${SOURCE_DIR}: the fixed seed`];
  return [parseInt(head.slice(0, 8), 16), `commit ${head.slice(0, 8)}`];
}

function chooseSeed() {
  const env = process.env.RILL_TEST_SEED ?? "";
  if (env === "") return commitSeed();
  if (env === "random") return [Math.floor(Math.random() * 2 ** 32), "RILL_TEST_SEED=random"];
  if (!/^[0-9]+$/.test(env)) {
    console.error(`RILL_TEST_SEED=${env} is neither a number nor 'random'`);
    process.exit(2);
  }
  return [Number(env) >>> 0, "RILL_TEST_SEED"];
}

let chosen = null;
// One seed per script, printed (with `label`) on first use.
export function testSeed(label) {
  if (chosen === null) {
    const [seed, origin] = chooseSeed();
    chosen = seed;
    console.log(`${label}: seed ${seed} (${origin}; RILL_TEST_SEED=${seed} replays it)`);
  }
  return chosen;
}
