// Browser e2e of the console (issue 23), run by the Go e2e suite (test/e2e/console_test.go)
// against `kubectl agent ui` connected to the real cluster: Playwright (playwright-core) drives
// Debian's Chromium headless. It opens the session list, the parent session, sees streamed text
// and a tool call with its output, opens the child from the tree, sends a steer message and sees
// it delivered, aborts and sees Aborted. Screenshots go to OUT_DIR.
//
// Environment: CONSOLE_URL (with ?token=), NAMESPACE, PARENT, CHILD, OUT_DIR, CHROMIUM
// (default /usr/bin/chromium). Exit code 0 when every step passed.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === '') {
    console.error(`console e2e: ${name} is not set`);
    process.exit(2);
  }
  return v;
};

const url = env('CONSOLE_URL');
const ns = env('NAMESPACE');
const parent = env('PARENT');
const child = env('CHILD');
const outDir = env('OUT_DIR');
const steerText = 'Please also update the changelog.';
mkdirSync(outDir, { recursive: true });

const step = (what) => console.log(`console e2e: ${what}`);

const browser = await chromium.launch({
  executablePath: env('CHROMIUM', '/usr/bin/chromium'),
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
// The page records, per live data part, publish-to-next-frame latency (src/stream.ts).
await page.addInitScript(() => {
  window.__aoConsoleLatencies = [];
});
page.setDefaultTimeout(120_000);
const pageErrors = [];
page.on('pageerror', (err) => pageErrors.push(String(err)));

const byTestId = (id) => page.locator(`[data-testid="${id}"]`);

try {
  step('session list');
  const u = new URL(url);
  u.hash = `#/?namespace=${encodeURIComponent(ns)}`;
  await page.goto(u.toString());
  await byTestId(`session-row-${parent}`).waitFor();
  await page.screenshot({ path: join(outDir, 'console-list.png'), fullPage: true });

  step('open the parent session');
  await byTestId(`session-row-${parent}`).click();
  await byTestId('text-part').filter({ hasText: 'Looking at the repository.' }).first().waitFor();
  const shell = page
    .locator('[data-testid="tool-shell"][data-state="output-available"]')
    .filter({ hasText: 'hello-console' })
    .first();
  await shell.waitFor();
  if (!(await shell.evaluate((el) => el.open))) {
    await shell.locator('summary').first().click(); // finished tool cards are collapsed
  }
  await shell.locator('[data-testid="tool-output"]').filter({ hasText: 'hello-console' }).first().waitFor();

  step('open the child from the tree');
  await byTestId(`child-${child}`).click();
  await page.waitForURL((href) => decodeURIComponent(href.toString()).includes(`/sessions/${ns}/${child}`));
  await byTestId('text-part').filter({ hasText: 'hi from the child' }).first().waitFor();
  await page.goBack();
  await page.waitForURL((href) => decodeURIComponent(href.toString()).includes(`/sessions/${ns}/${parent}`));

  step('steer');
  await byTestId('steer-input').fill(steerText);
  await byTestId('steer').click();
  await byTestId('steering-message').filter({ hasText: steerText }).first().waitFor();
  await page.screenshot({ path: join(outDir, 'console-session.png'), fullPage: true });

  step('collect 30 live latency samples (a tool call starts and ends about every 2 s)');
  await page.waitForFunction(() => window.__aoConsoleLatencies.length >= 30, null, { timeout: 120_000 });

  step('abort');
  await byTestId('abort').click();
  await byTestId('phase').filter({ hasText: 'Aborted' }).first().waitFor();
  await page.screenshot({ path: join(outDir, 'console-aborted.png'), fullPage: true });

  const lat = (await page.evaluate(() => window.__aoConsoleLatencies)).slice().sort((a, b) => a - b);
  const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor((lat.length * p) / 100))] : NaN);
  // test/e2e/console_test.go reports this line.
  console.log(`console e2e: publish-to-page latency: n=${lat.length} p50=${pct(50)}ms p99=${pct(99)}ms max=${lat.length ? lat[lat.length - 1] : NaN}ms`);

  if (pageErrors.length > 0) {
    throw new Error(`the page threw: ${pageErrors.join('; ')}`);
  }
  step('all steps passed');
} catch (err) {
  console.error(`console e2e: FAILED: ${err && err.stack ? err.stack : err}`);
  await page.screenshot({ path: join(outDir, 'console-failure.png'), fullPage: true }).catch(() => {});
  await browser.close();
  process.exit(1);
}
await browser.close();
