// Ranks in several processes (issue #17): `mpirun -np 2 rill serve MODEL -tp 2 --device cpu` — two processes of
// one rank each, the CPU ranks talking over MPI, the first process serving — answers the official openai client
// exactly as the single-process server does (completions and chat, streamed and not, greedy), and the job
// exits 0 after SIGTERM to the serving process; so does `mpirun -np 4 ... -tp 2 -pp 2` (pipeline stages in
// different processes). A rank that fails ends the whole job within seconds with a message naming it, never a
// hang: a worker whose load fails (on purpose, and on a checkpoint that differs from the leader's), an exception
// in a worker's step and in the leader's (RILL_FAULT_INJECTION=RANK:STEP), and a worker process killed with
// SIGKILL (mpirun names it). -np that does not divide the ranks, and CPU ranks sharing a process, are refused.
//
// Run by ctest only where mpirun exists (RILL_MPIEXEC), like dist_mpi_tests_np2.
import { spawn } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

import { MODEL_DIR, RILL, assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";
import { answers } from "./lib/greedy_answers.mjs";

const MPIRUN = process.env.RILL_MPIEXEC;
if (!MPIRUN) {
  console.error("mpi_serve_test: set RILL_MPIEXEC to mpirun (ctest does where it found one)");
  process.exit(2);
}
// Open MPI refuses root without these (containers, CI); --bind-to none leaves each process the machine's cores
// (its default binds one process per core, which would starve the CPU backend's thread pool).
const MPI_ENV = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1" };
const mpiLaunch = (env = {}, np = 2) => (argv) =>
  [MPIRUN, ["--oversubscribe", "--bind-to", "none", "-np", String(np), RILL, ...argv], { env: { ...MPI_ENV, ...env } }];
const COMMON = ["--served-model-name", "m", "--num-kv-blocks", "64"];


// mpirun without waiting for /health: the job's exit and everything its processes logged.
function mpiJob(args, env = {}, np = 2) {
  const [program, argv, options] = mpiLaunch(env, np)(["serve", MODEL_DIR, "--device", "cpu", "--port", "0", ...COMMON, ...args]);
  const proc = spawn(program, argv, { stdio: ["ignore", "ignore", "pipe"], ...options });
  started.push(proc);
  const job = { proc, log: "" };
  proc.stderr.on("data", (d) => (job.log += d));
  job.exit = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  return job;
}

// mpirun forwards each process's output on its own: a worker's line may trail the leader's readiness a little.
async function waitForLog(server, re, what, ms = 10000) {
  for (const deadline = Date.now() + ms; !re.test(server.log); await sleep(50))
    if (Date.now() > deadline) throw new Error(`${what}: no line matches ${re} in the log:\n${server.log}`);
  return re.exec(server.log);
}

// The job must end by itself within `ms` (a hang is the failure this guards against).
async function endsWithin(job, ms, what) {
  const t0 = Date.now();
  let timer;
  const timeout = new Promise((resolve) => (timer = setTimeout(() => resolve(null), ms)));
  const r = await Promise.race([job.exit, timeout]);
  clearTimeout(timer);
  if (r === null) {
    job.proc.kill("SIGKILL");
    throw new Error(`${what}: the job still runs ${ms / 1000} s later (a hang):\n${job.log.slice(-4000)}`);
  }
  console.log(`${what}: the job ended in ${((Date.now() - t0) / 1000).toFixed(1)} s (${JSON.stringify(r)})`);
  return r;
}

// Every mpirun this test starts; whatever still runs when the test ends (a failure) is stopped: SIGTERM first,
// so that mpirun takes its processes down with it.
const started = [];
function stopAll() {
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
  setTimeout(() => { for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL"); }, 5000).unref();
}
async function startMpiServer(args, env = {}, np = 2) {
  const s = await startServer(args, { launch: mpiLaunch(env, np) });
  started.push(s.proc);
  return s;
}

await run("e2e_mpi_serve", async (track) => {
  try {
    await main(track);
  } finally {
    stopAll();
  }
});

async function main(track) {
  const single = track(await startServer(COMMON));
  const want = await answers(single.client());
  await single.stop();
  assert(want.some(([, text]) => text.length > 0), "the answers are not empty");

  const split = await startMpiServer([...COMMON, "-tp", "2"]);
  assert(/2 ranks \(mpi communicators, 2 processes of 1 rank\): tp 0\/2/.test(split.log),
         "the log says the model runs on 2 ranks in 2 processes:\n" + split.log);
  await waitForLog(split, /process 1 of 2 \(pid \d+\)/, "the second process says it runs the leader's steps");
  const got = await answers(split.client());
  assertEq(JSON.stringify(got), JSON.stringify(want), "mpirun -np 2 ... -tp 2 answers exactly as one process");
  // The clean stop: SIGTERM to the serving process (a signal to mpirun aborts the job: Open MPI sends its
  // processes SIGTERM, then SIGKILL a second later). It drains, releases the worker, and mpirun exits 0.
  const leader = Number(/serve: pid (\d+)/.exec(split.log)[1]);
  process.kill(leader, "SIGTERM");
  const stopped = await endsWithin({ proc: split.proc, exit: split.exit, get log() { return split.log; } }, 60000,
                                   "SIGTERM to the leader");
  assert(stopped.code === 0, `mpirun exits 0 once the leader stopped (got ${JSON.stringify(stopped)}):\n${split.log.slice(-4000)}`);

  // Two pipeline stages of two tensor-parallel ranks, one rank per process: the stages' residual stream and
  // logits go between processes too.
  const staged = await startMpiServer([...COMMON, "-tp", "2", "-pp", "2"], {}, 4);
  assert(/4 ranks \(mpi communicators, 4 processes of 1 rank\): tp 0\/2, .*pp 0\/2/.test(staged.log),
         "the log names the stages:\n" + staged.log);
  assertEq(JSON.stringify(await answers(staged.client())), JSON.stringify(want),
           "mpirun -np 4 ... -tp 2 -pp 2 answers exactly as one process");
  process.kill(Number(/serve: pid (\d+)/.exec(staged.log)[1]), "SIGTERM");
  const s4 = await endsWithin({ proc: staged.proc, exit: staged.exit, get log() { return staged.log; } }, 60000,
                              "SIGTERM to the leader of 4 processes");
  assert(s4.code === 0, `mpirun -np 4 exits 0 once the leader stopped (got ${JSON.stringify(s4)})`);

  // CPU ranks are one per process: 4 ranks over 2 processes are refused at start-up, naming -np.
  const crowded = mpiJob(["-tp", "2", "-pp", "2"]);
  const c = await endsWithin(crowded, 60000, "4 CPU ranks over 2 processes");
  assert(c.code !== 0 && /rill serve: CPU ranks in several processes run one rank per process: 4 ranks need mpirun -np 4/.test(crowded.log),
         "4 CPU ranks over 2 processes are refused naming -np:\n" + crowded.log);

  // -np must divide the ranks: every process refuses, naming both.
  const uneven = mpiJob(["-tp", "3"]);
  const u = await endsWithin(uneven, 60000, "-tp 3 over 2 processes");
  assert(u.code !== 0 && /2 processes \(mpirun -np\) for 3 ranks/.test(uneven.log),
         "-tp 3 with -np 2 is refused naming -np:\n" + uneven.log);

  // A worker rank whose load fails: the leader's start-up fails naming it, and the job ends.
  const badLoad = mpiJob(["-tp", "2"], { RILL_FAULT_INJECTION: "1:0" });
  const l = await endsWithin(badLoad, 60000, "rank 1's load fails");
  assert(l.code !== 0, "the job fails: " + JSON.stringify(l));
  assert(/rill serve: rank 1: fault injected at load/.test(badLoad.log),
         "the server's error names rank 1 and its reason:\n" + badLoad.log);

  // A node whose checkpoint is not the others' (MPMD: process 1 serves a copy whose config widens the experts):
  // rank 1's load fails on the tensors' shapes, and the server's start-up error names rank 1 and the tensors.
  const odd = fs.mkdtempSync(path.join(os.tmpdir(), "rill-mpi-odd-"));
  try {
    for (const f of fs.readdirSync(MODEL_DIR)) fs.copyFileSync(path.join(MODEL_DIR, f), path.join(odd, f));
    const config = JSON.parse(fs.readFileSync(path.join(odd, "config.json"), "utf8"));
    config.moe_intermediate_size *= 2;
    fs.writeFileSync(path.join(odd, "config.json"), JSON.stringify(config));
    const serve = (dir) => [RILL, "serve", dir, "--device", "cpu", "--port", "0", ...COMMON, "-tp", "2"];
    const proc = spawn(MPIRUN, ["--oversubscribe", "--bind-to", "none", "-np", "1", ...serve(MODEL_DIR), ":", "-np", "1",
                                ...serve(odd)], { stdio: ["ignore", "ignore", "pipe"], env: MPI_ENV });
    started.push(proc);
    const job = { proc, log: "" };
    proc.stderr.on("data", (d) => (job.log += d));
    job.exit = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
    const m = await endsWithin(job, 60000, "rank 1's checkpoint differs");
    assert(m.code !== 0, "the job fails: " + JSON.stringify(m));
    assert(/rill serve: rank 1: \S+: checkpoint does not match the model\s+\d+ mis-shaped/.test(job.log),
           "the server's error names rank 1 and the mis-shaped tensors:\n" + job.log.slice(-4000));
  } finally {
    fs.rmSync(odd, { recursive: true, force: true });
  }

  // An exception in a step: rank 1's (a worker process), then rank 0's (the leader's own). The request in
  // flight fails instead of waiting forever, and the job ends.
  for (const [rank, step] of [[1, 2], [0, 3]]) {
    const what = `an exception in rank ${rank}'s step ${step}`;
    const server = await startMpiServer([...COMMON, "-tp", "2"], { RILL_FAULT_INJECTION: `${rank}:${step}` });
    const request = server.client().completions
      .create({ model: "m", prompt: "The quick brown fox", max_tokens: 16, temperature: 0 })
      .then(() => "answered", (e) => "failed: " + e.message);
    const r = await endsWithin({ proc: server.proc, exit: server.exit, get log() { return server.log; } }, 30000, what);
    assert(r.code !== 0 || r.signal !== null, `${what}: the job fails (${JSON.stringify(r)})`);
    const re = new RegExp(`rank ${rank}: exception: fault injected in step ${step}`);
    assert(re.test(server.log), `${what}: the log names the rank and the exception:\n${server.log.slice(-4000)}`);
    assert((await request).startsWith("failed"), `${what}: the request in flight fails`);
  }

  // A worker process killed: mpirun notices, names it and ends the job (MPI has no timeouts of its own).
  const victim = await startMpiServer([...COMMON, "-tp", "2"]);
  const pid = Number((await waitForLog(victim, /process 1 of 2 \(pid (\d+)\)/, "the worker's pid"))[1]);
  process.kill(pid, "SIGKILL");
  const request = victim.client().completions
    .create({ model: "m", prompt: "Once upon a time", max_tokens: 16, temperature: 0 })
    .then(() => "answered", (e) => "failed: " + e.message);
  const k = await endsWithin({ proc: victim.proc, exit: victim.exit, get log() { return victim.log; } }, 30000,
                             "a killed worker");
  assert(k.code !== 0, "the job fails: " + JSON.stringify(k));
  assert(/process rank 1 .*signal 9/s.test(victim.log), "mpirun names the killed process:\n" + victim.log.slice(-4000));
  assert((await request).startsWith("failed"), "the request in flight fails");
}
