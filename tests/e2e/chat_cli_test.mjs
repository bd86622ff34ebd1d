// `rill chat` (issue 19 part 6), on the engine and with --url against `rill serve`: driven in tmux as a
// person would, Ctrl-C mid-reply stops the reply and keeps the conversation (/history shows it), Ctrl-C at the
// prompt gives a fresh prompt, the up arrow recalls the last line (libedit history), Ctrl-D exits 0. Piped,
// --url's first greedy reply is the server's own; a checkpoint without a chat template is refused before
// any weight is read. Needs tmux (scripts/setup.sh); without it the tmux part reports as skipped unless CI=true.
import { spawnSync } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";

import { MODEL_DIR, RILL, assert, assertEq, run, sleep, startServer } from "./lib/harness.mjs";

const tmuxOk = spawnSync("tmux", ["-V"], { encoding: "utf8" }).status === 0;
const tmux = (...args) => spawnSync("tmux", args, { encoding: "utf8" });

// Waits until the pane's text satisfies `pred` (returns it), or throws with the pane after `ms`.
async function waitPane(session, pred, what, ms = 60000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const pane = tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", session).stdout ?? "";
    if (pred(pane)) return pane;
    if (Date.now() > deadline) throw new Error(`tmux: ${what}: timed out; the pane:\n${pane}`);
    await sleep(100);
  }
}

const count = (s, re) => (s.match(re) ?? []).length;

async function driveInTmux(label, chatArgs, dir) {
  const session = `rill-chat-${process.pid}-${label}`;
  const status = path.join(dir, `${label}.exit`);
  const cmd = [RILL, "chat", ...chatArgs].map((a) => `'${a}'`).join(" ");
  const r = tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", `${cmd}; echo $? > '${status}'`);
  assertEq(r.status, 0, "tmux new-session: " + r.stderr);
  try {
    await waitPane(session, (p) => /^> $/m.test(p), `${label}: the first prompt`);
    // A reply that would run for thousands of tokens (--ignore-eos): Ctrl-C once text has appeared.
    tmux("send-keys", "-t", session, "first message", "Enter");
    await waitPane(session, (p) => /> first message\n.{20,}/s.test(p), `${label}: the reply starts`);
    tmux("send-keys", "-t", session, "C-c");
    await waitPane(session, (p) => p.includes("[interrupted]") && /\n> $/.test(p.trimEnd() + " "), `${label}: the reply stops, a new prompt`);
    // Ctrl-C at the prompt: still running, a fresh prompt.
    tmux("send-keys", "-t", session, "C-c");
    await sleep(300);
    tmux("send-keys", "-t", session, "/history", "Enter");
    let pane = await waitPane(session, (p) => /\(\d+ message\(s\)\)/.test(p), `${label}: /history`);
    assert(/\[user\] first message/.test(pane) && /\(2 message\(s\)\)/.test(pane),
           `${label}: after Ctrl-C the conversation holds the message and the partial reply:\n${pane}`);
    // The up arrow brings back "/history" (libedit's history); Enter runs it again.
    tmux("send-keys", "-t", session, "Up", "Enter");
    pane = await waitPane(session, (p) => count(p, /\(2 message\(s\)\)/g) >= 2, `${label}: Up recalls /history`);
    assert(!pane.includes("\x1b[A") && !pane.includes("^[[A"), `${label}: no raw arrow-key escapes in the line`);
    tmux("send-keys", "-t", session, "second", "Enter");
    await waitPane(session, (p) => /> second\n.{20,}/s.test(p), `${label}: the second reply starts`);
    tmux("send-keys", "-t", session, "C-c");
    await waitPane(session, (p) => count(p, /\[interrupted\]/g) >= 2, `${label}: the second reply stops`);
    tmux("send-keys", "-t", session, "/history", "Enter");
    pane = await waitPane(session, (p) => /\(4 message\(s\)\)/.test(p), `${label}: /history shows 4 messages`);
    tmux("send-keys", "-t", session, "/reset", "Enter", "/history", "Enter");
    await waitPane(session, (p) => /\(0 message\(s\)\)/.test(p), `${label}: /reset empties the conversation`);
    tmux("send-keys", "-t", session, "C-d");
    const deadline = Date.now() + 30000;
    while (!fs.existsSync(status) && Date.now() < deadline) await sleep(100);
    assert(fs.existsSync(status), `${label}: rill chat exits on Ctrl-D`);
    assertEq(fs.readFileSync(status, "utf8").trim(), "0", `${label}: exit status 0 after Ctrl-D`);
  } finally {
    tmux("kill-session", "-t", session);
  }
}

await run("e2e_chat_cli", async (track) => {
  const server = track(await startServer());
  const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hi" }];
  const whole = await server.client().chat.completions.create({ messages, max_tokens: 24, temperature: 0 });

  // --url, piped: the same first reply as the API's (greedy), printed as it streams.
  const viaUrl = spawnSync(RILL, ["chat", "--url", server.url, "--system", messages[0].content, "--max-tokens", "24",
    "--temperature", "0"], { input: messages[1].content + "\n/exit\n", encoding: "utf8", timeout: 60000 });
  assertEq(viaUrl.status, 0, "rill chat --url exits 0: " + viaUrl.stderr);
  const tail = whole.choices[0].finish_reason === "length" ? "\n[length]\n" : "\n";
  assertEq(viaUrl.stdout, (whole.choices[0].message.content ?? "") + tail, "rill chat --url's reply == the server's (greedy)");

  const bad = spawnSync(RILL, ["chat", "--url", "http://127.0.0.1:1"], { input: "", encoding: "utf8", timeout: 30000 });
  assert(bad.status !== 0 && /cannot connect/.test(bad.stderr), "an unreachable --url is named: " + bad.stderr);

  // A checkpoint without a chat template (and without weights): refused on the template, before the weights.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "rill-chat-cli-"));
  try {
    const noTemplate = path.join(dir, "no-template");
    fs.mkdirSync(noTemplate);
    for (const f of fs.readdirSync(MODEL_DIR)) {
      if (f.endsWith(".safetensors") || f === "chat_template.jinja") continue;
      if (f === "tokenizer_config.json") {
        const config = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, f), "utf8"));
        delete config.chat_template;
        fs.writeFileSync(path.join(noTemplate, f), JSON.stringify(config));
      } else {
        fs.symlinkSync(path.resolve(MODEL_DIR, f), path.join(noTemplate, f));
      }
    }
    const refused = spawnSync(RILL, ["chat", noTemplate, "--device", "cpu"], { input: "hi\n", encoding: "utf8", timeout: 30000 });
    assert(refused.status !== 0 && /cannot chat/.test(refused.stderr) && /chat template/.test(refused.stderr),
           `no chat template: a non-zero exit naming it (got ${refused.status}): ${refused.stderr}`);

    if (!tmuxOk) {
      if (process.env.CI === "true") throw new Error("tmux is missing (scripts/setup.sh installs it)");
      console.log("e2e_chat_cli: tmux not found: the terminal part is skipped");
      return;
    }
    // Replies of thousands of tokens (the server's context is 16K tokens: 256 blocks).
    const long = ["--ignore-eos", "--max-tokens", "8000", "--temperature", "1"];
    await driveInTmux("local", [MODEL_DIR, "--device", "cpu", "--max-model-len", "16384", ...long], dir);
    await driveInTmux("url", ["--url", server.url, ...long], dir);
    await sleep(300);
    assert(/request chatcmpl-\S+ finished: choice=0 status=499 finish=abort/.test(server.log),
           "the server logged the --url reply that Ctrl-C stopped as an abort:\n" + server.log.slice(-3000));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
