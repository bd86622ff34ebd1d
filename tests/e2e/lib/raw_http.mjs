// Raw HTTP/1.x over a TCP socket for the hardening tests: exact bytes out (bad framing included), and the
// server's bytes back as they arrived, so what the server does on the wire is what is checked.
import net from "net";
import fs from "fs";

// Opens a connection; resolves with {sock, data(), closed, waitFor(re, ms)}.
export function rawConnect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ port, host: "127.0.0.1", allowHalfOpen: true });
    let buf = Buffer.alloc(0);
    const waiters = [];
    const c = {
      sock,
      closedAt: null,
      data: () => buf.toString("latin1"),
      closed: null,
      // Resolves with the text once it matches `re` (or the connection ends / `ms` passes: then null).
      waitFor(re, ms = 10000) {
        return new Promise((res) => {
          const check = () => {
            if (re.test(c.data())) return res(c.data()), true;
            if (c.closedAt !== null) return res(null), true;
            return false;
          };
          if (check()) return;
          const w = { check };
          waiters.push(w);
          // Unref'd: a wait that was answered must not keep the test process alive until `ms` passes.
          setTimeout(() => { res(re.test(c.data()) ? c.data() : null); }, ms).unref();
        });
      },
    };
    // Closed = the server will send nothing more: its FIN ("end"; allowHalfOpen keeps our side open, so
    // half-close tests can still send) or a reset / full close.
    c.closed = new Promise((res) => {
      const done = () => {
        if (c.closedAt === null) c.closedAt = Date.now();
        waiters.forEach((w) => w.check());
        res();
      };
      sock.on("end", done);
      sock.on("close", done);
    });
    sock.on("data", (d) => { buf = Buffer.concat([buf, d]); waiters.forEach((w) => w.check()); });
    sock.on("error", () => {});
    sock.once("connect", () => resolve(c));
    sock.once("error", reject);
  });
}

// Sends `bytes` on a fresh connection; resolves with the first response's status (0: none) and the raw text
// received before the server closed (or `ms` passed), and how long the first status line took.
export async function rawExchange(port, bytes, ms = 10000) {
  const c = await rawConnect(port);
  const t0 = Date.now();
  c.sock.write(bytes);
  const text = await c.waitFor(/^HTTP\/1\.[01] \d{3}/, ms);
  const elapsed = Date.now() - t0;
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(text ?? "");
  return { c, status: m ? Number(m[1]) : 0, text: text ?? c.data(), elapsed };
}

// The statuses of every response in `text`, in order.
export function statuses(text) {
  return [...text.matchAll(/HTTP\/1\.[01] (\d{3}) /g)].map((m) => Number(m[1]));
}

// VmRSS / VmHWM of a process, in MiB.
export function memoryMiB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)[1]);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}
