// The inspector in Chromium (run by run.sh, which starts and seeds the server). Every check
// compares what the page shows with what the API answers for the same key.
import { chromium } from "playwright";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const url = process.env.LOOM_URL;
const key = process.env.LOOM_KEY;
const other = process.env.LOOM_OTHER_KEY;
const trace = JSON.parse(process.env.LOOM_TRACE);
const generated = JSON.parse(process.env.LOOM_GENERATED);
const proxied = JSON.parse(process.env.LOOM_PROXIED);
const received = readFileSync(process.env.LOOM_RECEIVED);
const shots = process.env.LOOM_SHOTS;
const LOAD_TARGET_MS = 300;
const RUNS = 5;

async function api(path, k = key, raw = false) {
  const r = await fetch(url + path, { headers: { Authorization: "Bearer " + k } });
  if (raw) return { status: r.status, bytes: Buffer.from(await r.arrayBuffer()) };
  return { status: r.status, body: await r.json() };
}

function step(name) {
  console.log("-- " + name);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const failures = [];
const consoleErrors = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(15000);
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const ready = (view) => page.waitForSelector(`body[data-ready="${view}"]`);

  step("sign in with the key");
  await page.goto(url + "/ui");
  await ready("login");
  await page.fill("#key", key);
  await page.click("#keyform button");
  await ready("sessions");
  const row = page.locator(`#sessions tr[data-id="${trace.session}"]`);
  await row.waitFor();
  const cells = await row.locator("td").allTextContents();
  assert.equal(cells[0], trace.session);
  assert.equal(cells[2].replace(/,/g, ""), String(trace.events));
  assert.equal(cells[3].replace(/,/g, ""), String(trace.calls));
  await page.screenshot({ path: `${shots}/inspector-sessions.png` });

  step("filter and sort the sessions");
  await page.fill("#filter", "trace");
  await page.waitForFunction(() => document.querySelectorAll("#sessions tbody tr[data-id]").length === 1);
  await page.fill("#filter", "");
  await page.click('#sessions th[data-k="model_calls"]');
  const firstBySort = await page.locator("#sessions tbody tr[data-id]").first().getAttribute("data-id");
  assert.equal(firstBySort, generated.session, "most model calls first");

  step("open the session: timeline, fates, charts");
  await row.locator("a").click();
  await ready("session");
  assert.equal(await page.locator(".chart svg").count(), 2);
  assert.ok(await page.locator(".tl-row").count() > 10, "timeline rows drawn");
  await page.screenshot({ path: `${shots}/inspector-session.png` });

  // A stubbed result: stubbed in the newest call that stubs anything, with a reference.
  const detail = (await api(`/loom/v1/inspect/sessions/${trace.session}`)).body;
  const stubbed = new Set();
  let stubCall = null;
  for (const c of detail.calls) {
    for (const [a, b] of c.fates.stubbed || []) for (let s = a; s <= b; s++) stubbed.add(s);
    if ((c.fates.stubbed || []).length) stubCall = c;
  }
  const target = detail.events.find((e) => e.ref && stubbed.has(e.seq));
  assert.ok(target, "the seeded session has a stubbed result with a reference");
  assert.ok(detail.calls.some((c) => c.compaction), "the seeded session has compaction points");

  step(`open the stubbed result at seq ${target.seq} and its original bytes`);
  await page.evaluate((seq) => { document.querySelector("#timeline").scrollTop = (seq - 3) * 25; }, target.seq);
  const targetRow = page.locator(`.tl-row[data-seq="${target.seq}"]`);
  await targetRow.click();
  await page.waitForSelector("#event-fates");
  assert.match(await page.locator("#event-fates").textContent(), /stubbed in call/);
  await page.click("#open-original");
  await page.waitForSelector('body[data-original="shown"]');
  const shown = await page.locator("#original").evaluate((e) => ({ text: e.textContent, bytes: Number(e.dataset.bytes) }));
  const recalled = await api(`/loom/v1/sessions/${trace.session}/recall?ref=${encodeURIComponent(target.ref)}`, key, true);
  assert.equal(recalled.status, 200);
  assert.equal(shown.bytes, recalled.bytes.length, "the page got every byte");
  assert.equal(shown.text, recalled.bytes.toString("utf8"), "the page shows the original bytes");
  assert.equal(shown.bytes, target.bytes, "the original's size is the stats'");
  await page.screenshot({ path: `${shots}/inspector-original.png` });

  step(`open model call ${stubCall.id}: budget bar against the receipt`);
  await page.click(`#calls a[href$="/call/${stubCall.id}"]`);
  await ready("call");
  const receipt = (await api(`/loom/v1/sessions/${trace.session}/receipts/${stubCall.id}`)).body.receipt;
  // The receipt's tiers, with summary and tool results split into the receipt's parts, which
  // add up to their tiers.
  const expected = {};
  for (const t of ["system", "tools", "pins", "dialogue", "injected", "overhead"]) expected[t] = receipt.tiers[t] || 0;
  const parts = receipt.parts;
  assert.ok(parts, "the receipt has parts");
  const part = (k) => parts[k] || 0;
  Object.assign(expected, {
    summary: part("summary"), compact_block: part("compact"), turns: part("turns"),
    results_verbatim: part("verbatim"), stubs: part("stubbed"), elided: part("elided"), diffs: part("diffed"),
  });
  assert.ok(expected.stubs > 0, "the call sent stubs: " + JSON.stringify(parts));
  assert.equal(expected.summary + expected.compact_block, receipt.tiers.summary || 0, "summary's parts");
  assert.equal(expected.turns + expected.results_verbatim + expected.stubs + expected.elided + expected.diffs,
    receipt.tiers.tool_results || 0, "tool results' parts");
  expected.headroom = Math.max(0, receipt.budget.hard_total - receipt.estimate);
  expected.reserve = receipt.budget.response_reserve;
  const legend = await page.$$eval("#budget-legend [data-tier]", (rows) =>
    Object.fromEntries(rows.map((r) => [r.dataset.tier, Number(r.querySelector(".n").textContent.replace(/,/g, ""))])));
  const bar = await page.$$eval("#budget [data-tier]", (segs) =>
    Object.fromEntries(segs.map((s) => [s.dataset.tier, Number(s.dataset.tokens)])));
  assert.deepEqual(legend, expected, "the legend's numbers are the receipt's");
  assert.deepEqual(bar, expected, "the bar's segments are the receipt's");
  assert.equal((await page.locator("#estimate").textContent()).replace(/,/g, ""), String(receipt.estimate));
  const tiersSum = Object.values(receipt.tiers).reduce((a, b) => a + b, 0);
  assert.equal(tiersSum, receipt.estimate, "the tiers add up to the estimate");
  // A render's request is the body the render answered.
  const rendered = (await api(`/loom/v1/inspect/sessions/${trace.session}/calls/${stubCall.id}`)).body.request;
  assert.equal(rendered.as_sent, true);
  assert.equal(await page.locator("#request").getAttribute("data-source"), "sent");
  assert.equal(await page.locator("#request").textContent(), JSON.stringify(JSON.parse(rendered.sent), null, 2));
  await page.screenshot({ path: `${shots}/inspector-call.png` });

  step("search the request");
  await page.fill("#search", "role");
  await page.waitForFunction(() => /matches/.test(document.querySelector("#matches").textContent));
  const marks = await page.locator("#request mark").count();
  assert.ok(marks > 1, "matches are highlighted");

  step(`open proxied call ${proxied.call}: the request exactly as the upstream received it`);
  await page.goto(url + `/ui#/session/${proxied.session}/call/${proxied.call}`);
  await ready("call");
  const asSent = (await api(`/loom/v1/inspect/sessions/${proxied.session}/calls/${proxied.call}`)).body.request;
  assert.equal(asSent.as_sent, true);
  assert.ok(Buffer.from(asSent.sent, "utf8").equals(received), "the API holds the bytes the upstream received");
  assert.equal(await page.locator("#request").getAttribute("data-source"), "sent");
  assert.match(await page.locator("#request-title").textContent(), new RegExp(`as sent \\(${received.length.toLocaleString("en-US")} bytes`));
  const shownRequest = await page.locator("#request").textContent();
  assert.deepEqual(JSON.parse(shownRequest), JSON.parse(received.toString("utf8")), "the page shows the request the upstream received");
  assert.equal(shownRequest, JSON.stringify(JSON.parse(received.toString("utf8")), null, 2));
  assert.ok(!shownRequest.includes("line 2999 of the build log"), "the request sent is the fitted one, not the client's");
  await page.screenshot({ path: `${shots}/inspector-call-sent.png` });

  step("a second tenant's key sees none of it");
  const second = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const p2 = await second.newPage();
  await p2.goto(url + "/ui");
  await p2.waitForSelector('body[data-ready="login"]');
  await p2.fill("#key", other);
  await p2.click("#keyform button");
  await p2.waitForSelector('body[data-ready="sessions"]');
  assert.equal(await p2.locator("#sessions tr[data-id]").count(), 0);
  await p2.goto(url + `/ui#/session/${trace.session}`);
  await p2.waitForSelector('body[data-ready="error"]');
  assert.match(await p2.locator("main").textContent(), /not found/);
  assert.equal((await api(`/loom/v1/inspect/sessions/${trace.session}`, other)).status, 404);
  assert.equal((await api(`/loom/v1/sessions/${trace.session}/recall?ref=${encodeURIComponent(target.ref)}`, other, true)).status, 404);
  await second.close();

  step(`page loads: ${generated.events} events, ${generated.calls} model calls (${RUNS} runs each, every one < ${LOAD_TARGET_MS} ms)`);
  const views = [
    ["sessions", "#/sessions"],
    ["session", `#/session/${generated.session}`],
    ["call", `#/session/${generated.session}/call/${Math.ceil(generated.calls / 2)}`],
  ];
  const figures = {};
  for (const [view, hash] of views) {
    const times = [];
    for (let i = 0; i < RUNS; i++) {
      // A new document each time (the key stays in the tab's session storage).
      await page.goto("about:blank");
      await page.goto(url + "/ui" + hash);
      await ready(view);
      // From the start of navigation to the view drawn with its data.
      times.push(await page.evaluate(() => window.__loomTimings.at(-1).since_navigation));
    }
    console.log(`   ${view}: ${times.map((t) => Math.round(t)).join(", ")} ms`);
    times.sort((a, b) => a - b);
    figures[view] = { median_ms: Math.round(times[RUNS >> 1]), min_ms: Math.round(times[0]), max_ms: Math.round(times.at(-1)) };
  }
  console.log("page loads: " + JSON.stringify(figures));
  for (const [view, f] of Object.entries(figures)) {
    if (f.max_ms >= LOAD_TARGET_MS) failures.push(`${view}: slowest load ${f.max_ms} ms (median ${f.median_ms} ms), target < ${LOAD_TARGET_MS} ms for every load`);
  }
  const policyErrors = consoleErrors.filter((e) => /Content Security Policy|Refused/.test(e));
  assert.deepEqual(policyErrors, [], "nothing the policy refused");
} finally {
  await browser.close();
}
if (failures.length) {
  console.error("FAILED:\n" + failures.join("\n"));
  process.exit(1);
}
console.log("all browser checks passed");
