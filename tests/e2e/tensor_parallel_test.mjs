// rill serve -tp 2 --device cpu (issue #17): two ranks as threads of one process, each holding half of the
// heads, widths and vocabulary (and -tp 2 -pp 2: two stages of two layers each on top), answer the official openai client exactly as the single-rank server does —
// completions and chat, streamed and not, greedy (the sharded logits are within 1e-5 of one rank's, so the
// argmax does not move) — and say in the start-up log that the model is split. A mapping the model cannot
// take (-tp 3 over 2 heads) ends the server with an error naming the dimension.
import { spawn } from "child_process";

import { MODEL_DIR, RILL, assert, assertEq, run, startServer } from "./lib/harness.mjs";
import { answers } from "./lib/greedy_answers.mjs";

function serveFails(args) {
  return new Promise((resolve) => {
    const proc = spawn(RILL, ["serve", MODEL_DIR, "--device", "cpu", "--port", "0", "--num-kv-blocks", "64", ...args],
                       { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    proc.stderr.on("data", (d) => (log += d));
    const timer = setTimeout(() => proc.kill("SIGKILL"), 60000);
    proc.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, log });
    });
  });
}


await run("e2e_tensor_parallel", async (track) => {
  const single = track(await startServer(["--served-model-name", "m", "--num-kv-blocks", "64"]));
  const want = await answers(single.client());
  const split = track(await startServer(["--served-model-name", "m", "--num-kv-blocks", "64", "-tp", "2"]));
  assert(/2 ranks \(threads communicators\): tp 0\/2/.test(split.log), "the log says the model runs on 2 ranks:\n" + split.log);
  assert(/rank 0's shard: tp 0\/2/.test(split.log), "the model line names rank 0's shard:\n" + split.log);
  const got = await answers(split.client());
  assertEq(JSON.stringify(got), JSON.stringify(want), "-tp 2 answers exactly as one rank");
  assert(want.some(([, text]) => text.length > 0), "the answers are not empty");
  await split.stop();

  // Two pipeline stages of two tensor-parallel ranks each (4 threads): the same answers again.
  const staged = track(await startServer(["--served-model-name", "m", "--num-kv-blocks", "64", "-tp", "2", "-pp", "2"]));
  assert(/4 ranks \(threads communicators\): tp 0\/2, .*pp 0\/2/.test(staged.log), "the log names the stages:\n" + staged.log);
  assertEq(JSON.stringify(await answers(staged.client())), JSON.stringify(want), "-tp 2 -pp 2 answers exactly as one rank");

  const bad = await serveFails(["-tp", "3"]);
  assert(bad.code !== 0 && /not divisible by --tensor-parallel-size 3/.test(bad.log),
         "-tp 3 is refused naming what does not divide:\n" + bad.log);
  const deep = await serveFails(["-pp", "9"]);
  assert(deep.code !== 0 && /--pipeline-parallel-size 9 is more stages than the model's 4 layers/.test(deep.log),
         "-pp 9 is refused naming the layers:\n" + deep.log);
});
