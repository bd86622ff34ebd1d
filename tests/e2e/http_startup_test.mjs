// Start-up failures are prompt and clean (issue 14 item 7): `rill serve` on a model directory without
// tiktoken.model fails while the listener starts (the stop used to be lost when it came before listen(),
// hanging the process in listener.join() about once in 60 runs). 100 runs, 4 at a time: each must exit
// non-zero within 10 s, naming the missing file.
import { spawn } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

import { MODEL_DIR, RILL, assert, run } from "./lib/harness.mjs";

const RUNS = Number(process.env.RILL_E2E_STARTUP_RUNS ?? 100);

function serveOnce(dir) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const proc = spawn(RILL, ["serve", dir, "--device", "cpu", "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (d) => (log += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), 10000);
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, log, ms: Date.now() - t0 });
    });
  });
}

await run("e2e_http_startup", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill-no-tiktoken-"));
  try {
    for (const f of fs.readdirSync(MODEL_DIR))
      if (f !== "tiktoken.model") fs.symlinkSync(path.resolve(MODEL_DIR, f), path.join(dir, f));
    let slowest = 0;
    for (let done = 0; done < RUNS; done += 4) {
      const batch = await Promise.all(Array.from({ length: Math.min(4, RUNS - done) }, () => serveOnce(dir)));
      for (const r of batch) {
        assert(r.signal === null, `rill serve exits by itself within 10 s (got ${r.signal}):\n${r.log}`);
        assert(r.code === 1, `rill serve exits 1 on a load failure (got ${r.code}):\n${r.log}`);
        assert(/tiktoken\.model/.test(r.log), "the failure names the missing file:\n" + r.log);
        slowest = Math.max(slowest, r.ms);
      }
    }
    console.log(`${RUNS} start-up failures, each exited 1; slowest ${slowest} ms`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
