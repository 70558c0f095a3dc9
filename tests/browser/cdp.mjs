// Drives headless Chromium over the DevTools protocol for tests/ui_browser.rs (node 20:
// run with --experimental-websocket). Usage: node cdp.mjs CHROMIUM URL
// Starts Chromium with a fresh profile, opens URL, then reads commands on stdin, one a line:
//   wait JS-EXPRESSION   poll the page every 5 ms until the expression is truthy (10 s at
//                        most); answers "ok MS" (milliseconds since the command arrived) or
//                        "timeout LAST-VALUE"
//   eval JS-EXPRESSION   answers "value JSON"
//   shot PATH            saves a PNG screenshot; answers "ok"
//   quit
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const [chromium, url] = process.argv.slice(2);
const profile = mkdtempSync(join(tmpdir(), "zkgate-ui-"));
const browser = spawn(chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
  `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=1280,800",
  "--no-first-run", "--no-default-browser-check", "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });
const cleanup = () => { try { browser.kill("SIGKILL"); } catch {} try { rmSync(profile, { recursive: true, force: true }); } catch {} };
process.on("exit", cleanup);

const wsUrl = await new Promise((resolve, reject) => {
  let err = "";
  browser.stderr.on("data", (d) => {
    err += d;
    const m = err.match(/DevTools listening on (ws:\/\/\S+)/);
    if (m) resolve(m[1]);
  });
  browser.on("exit", (c) => reject(new Error(`chromium exited ${c}: ${err}`)));
});

const ws = new WebSocket(wsUrl);
await new Promise((r, j) => { ws.onopen = r; ws.onerror = j; });
let nextId = 1;
const pending = new Map();
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && pending.has(msg.id)) {
    const { resolve, reject } = pending.get(msg.id);
    pending.delete(msg.id);
    msg.error ? reject(new Error(JSON.stringify(msg.error))) : resolve(msg.result);
  }
};
function send(method, params = {}, sessionId) {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params, sessionId }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
await send("Page.enable", {}, sessionId);
await send("Page.navigate", { url }, sessionId);
const evaluate = async (expression) => {
  const r = await send("Runtime.evaluate", { expression, returnByValue: true }, sessionId);
  return r.result ? r.result.value : undefined;
};
console.log("ready");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
for await (const line of createInterface({ input: process.stdin })) {
  const [cmd, ...rest] = line.split(" ");
  const arg = rest.join(" ");
  try {
    if (cmd === "wait") {
      const t0 = performance.now();
      let v;
      for (;;) {
        v = await evaluate(arg).catch(() => undefined);
        if (v) { console.log(`ok ${(performance.now() - t0).toFixed(1)}`); break; }
        if (performance.now() - t0 > 10000) { console.log(`timeout ${JSON.stringify(v)}`); break; }
        await sleep(5);
      }
    } else if (cmd === "eval") {
      console.log(`value ${JSON.stringify(await evaluate(arg))}`);
    } else if (cmd === "shot") {
      const { data } = await send("Page.captureScreenshot", { format: "png" }, sessionId);
      writeFileSync(arg, Buffer.from(data, "base64"));
      console.log("ok");
    } else if (cmd === "quit") {
      break;
    }
  } catch (e) {
    console.log(`error ${e.message}`);
  }
}
ws.close();
cleanup();
process.exit(0);
