// A streamed completion whose chunk arrival times are recorded in a worker thread: its own event loop, so
// the times are the server's pace and not the main thread's (which may build and send megabytes meanwhile,
// or drive other clients). Used to measure one stream's inter-token gaps while other requests run.
import { isMainThread, parentPort, Worker, workerData } from "worker_threads";

import { OpenAI } from "./harness.mjs";

if (!isMainThread && workerData?.recordedStream) {
  const { url, body } = workerData;
  const controller = new AbortController();
  parentPort.on("message", () => controller.abort());
  const client = new OpenAI({ apiKey: "none", baseURL: url + "/v1", maxRetries: 0, timeout: 600000 });
  try {
    const s = await client.completions.create({ ...body, stream: true }, { signal: controller.signal });
    for await (const ch of s) if (ch.choices[0]?.text !== undefined) parentPort.postMessage({ at: Date.now() });
    parentPort.postMessage({ done: controller.signal.aborted ? "aborted" : "the stream ended early" });
  } catch (e) {
    parentPort.postMessage({ done: controller.signal.aborted ? "aborted" : String(e) });
  }
}

// Starts the stream (`body`: a /v1/completions request). `arrivals` grows with each chunk's time (ms);
// `done` is null while it runs, then "aborted" after stop() or why it ended; error() is null unless it ended
// on its own.
export function startRecordedStream(url, body) {
  const worker = new Worker(new URL(import.meta.url),
    { argv: process.argv.slice(2), workerData: { recordedStream: true, url, body } });
  const rec = { arrivals: [], done: null };
  const finished = new Promise((resolve) => worker.on("message", (m) => {
    if (m.at) rec.arrivals.push(m.at);
    if (m.done) rec.done = m.done, resolve();
  }));
  rec.error = () => (rec.done === "aborted" ? null : rec.done);
  rec.stop = async () => {
    worker.postMessage("stop");
    await finished;
    await worker.terminate();
  };
  return rec;
}
