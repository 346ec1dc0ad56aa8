// The web page end to end: Debian's chromium, driven by puppeteer-core, opens build/web/index.html
// from file://, types runs into the form and reads what the page shows; each run is compared with
// the native command line (build/dev/memest ... --format json) on integer bytes, the timeline
// picture byte for byte, and error messages character for character. Exits non-zero on any
// difference. Usage: node tests/web/page_test.js (from anywhere; paths are the repository's).
// MEMEST and CHROMIUM name other binaries; build/web/page.png is the screenshot it leaves.
'use strict';

const assert = require('assert');
const {spawnSync} = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const puppeteer = require('puppeteer-core');

const root = path.resolve(__dirname, '..', '..');
const pageFile = path.join(root, 'build', 'web', 'index.html');
const pageUrl = `file://${pageFile}`;
const memest = process.env.MEMEST || path.join(root, 'build', 'dev', 'memest');
const chromium = process.env.CHROMIUM || '/usr/bin/chromium';
const read = (p) => fs.readFileSync(path.join(root, p), 'utf8');

// Each run as one would fill the form: option names are the flags without dashes; `paste` is
// text pasted into a file field (config: a Hugging Face config.json, file: a run config).
const RUNS = [
  {model: 'llama-2-7b', batch: '1', seq: '4096', precision: 'mixed-bf16', gpu: 'h100-80gb'},
  {model: 'gpt2', batch: '8', seq: '1024', precision: 'amp', optimizer: 'adamw', gpu: 't4'},
  {params: '7B', optimizer: 'adam8bit', precision: 'bf16'},
  {model: 'mistral-7b-v0.1', 'lora-rank': '16', 'lora-targets': 'all-linear', qlora: true,
   'double-quant': true, precision: 'bf16', batch: '1', seq: '2048', attention: 'flash',
   recompute: 'full', gpu: 'l4'},
  {model: 'llama-3-8b', batch: '2', seq: '8192', precision: 'bf16', attention: 'flash',
   recompute: 'selective', dp: '8', zero: '3', gpu: 'a100-80gb'},
  {model: 'llama-2-13b', tp: '2', pp: '2', sp: true, batch: '1', seq: '4096',
   precision: 'mixed-bf16', gpu: 'a100-40gb'},
  {model: 'qwen2.5-0.5b', optimizer: 'sgd', batch: '16', seq: '512', precision: 'fp32', gpu: 't4'},
  {paste: {config: read('configs/models/tinyllama-1.1b.json')}, batch: '4', seq: '2048',
   precision: 'amp-bf16', gpu: 'rtx-4090'},
  {model: 'phi-2', optimizer: 'adafactor', 'grad-accum': '4', budget: '24GB', batch: '2',
   seq: '2048', precision: 'mixed'},
  {model: 'mixtral-8x7b', ep: '8', dp: '8', zero: '3', precision: 'bf16', batch: '1', seq: '4096',
   gpu: 'h100-80gb', units: 'GiB'},
  {model: 'gpt2-xl', optimizer: 'lion', precision: 'mixed', batch: '4', seq: '1024',
   recompute: 'full', allocator: 'cuda', gpu: 'a10', dropout: '1e-1'},
  {model: 'llama-3.2-1b', 'lora-rank': '8', 'lora-dropout': '0.05', batch: '4', seq: '1024',
   precision: 'bf16', gpu: 'l4'},
  {paste: {file: read('configs/examples/llama-2-7b-budget.json')}, batch: '2'},
];

// Bad input: the page must show exactly what the command line prints on stderr.
const BAD = [
  {paste: {config: '{"model_type": "llama", "hidden_size": -2}'}, batch: '1', seq: '128'},
  {model: 'gpt2', batch: '0', seq: '1024'},
  // The web build parses probabilities without floating-point from_chars (src/input/config.cpp).
  {model: 'gpt2', 'lora-rank': '8', 'lora-dropout': '+0.1', batch: '1', seq: '128'},
  {model: 'gpt2', dropout: '0x1p-2', batch: '1', seq: '128'},
];

const FILE_NAMES = {config: 'config.json', file: 'run.json'};

// The command line's arguments for a run, written here independently of the page's own code.
function argsOf(run) {
  const args = [];
  for (const [name, v] of Object.entries(run)) {
    if (name === 'units') continue;
    if (name === 'paste') {
      for (const k of Object.keys(v)) args.push(`--${k}`, FILE_NAMES[k]);
    } else if (v === true) {
      args.push(`--${name}`);
    } else {
      args.push(`--${name}`, v);
    }
  }
  return args;
}

// The native command line in a directory holding the pasted files under the page's names.
function native(run, extra) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memest-web-'));
  for (const [k, text] of Object.entries(run.paste || {})) {
    fs.writeFileSync(path.join(dir, FILE_NAMES[k]), text);
  }
  const r = spawnSync(memest, [...argsOf(run), ...extra], {cwd: dir, encoding: 'utf8'});
  if (r.error) throw r.error;
  const files = Object.fromEntries(fs.readdirSync(dir).map((f) => [f, fs.readFileSync(path.join(dir, f), 'utf8')]));
  fs.rmSync(dir, {recursive: true});
  return {code: r.status, out: r.stdout, err: r.stderr, files};
}

async function clearForm(page) {
  await page.click('#reset');
}

// Types one run into the form, as a person would, and presses Estimate.
async function fill(page, run) {
  await clearForm(page);
  const more = Object.keys(run).some((k) => k === 'paste' && run.paste.file) ||
               (await page.$$eval('#more-fields [name]', (els) => els.map((e) => e.name)))
                   .some((n) => n in run);
  if (more) await page.$eval('#more', (d) => { d.open = true; });
  await page.select('#units', run.units || 'GB');
  for (const [name, v] of Object.entries(run)) {
    if (name === 'units') {
      continue;
    } else if (name === 'paste') {
      for (const [k, text] of Object.entries(v)) {
        await page.$eval(`#opt-${k}`, (e, t) => { e.value = t; e.dispatchEvent(new Event('input')); }, text);
      }
    } else if (v === true) {
      await page.click(`#opt-${name}`);
    } else if (await page.$eval(`#opt-${name}`, (e) => e.tagName === 'SELECT')) {
      const got = await page.select(`#opt-${name}`, v);
      assert.deepStrictEqual(got, [v], `--${name}: the form has no choice "${v}"`);
    } else {
      await page.type(`#opt-${name}`, v);
    }
  }
  await submit(page, () => page.click('#estimate'));
}

// Does `action` and waits until the page has finished one more run.
async function submit(page, action) {
  const before = await page.$eval('body', (b) => Number(b.dataset.runs || 0));
  await action();
  await page.waitForFunction((n) => Number(document.body.dataset.runs || 0) > n, {timeout: 30000}, before);
}

// What the page shows, as numbers and texts (the bytes are the page's data-bytes).
async function shown(page) {
  return page.evaluate(() => {
    const bytes = (sel) => [...document.querySelectorAll(sel)].map((e) => [e.dataset.row, e.title.split(':')[0], Number(e.dataset.bytes)]);
    const img = document.querySelector('#timeline img');
    const svg = img ? decodeURIComponent(img.src.slice(img.src.indexOf(',') + 1))
                    : document.getElementById('timeline-error')?.textContent;
    return {
      error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
      peak: document.getElementById('peak')?.dataset.bytes,
      parts: bytes('#bar .seg'),
      live: [...document.querySelectorAll('#live tbody tr')].map((r) => [r.cells[0].textContent, Number(r.dataset.bytes)]),
      categories: [...document.querySelectorAll('#categories tbody tr')].map((r) => [r.cells[0].textContent, Number(r.dataset.bytes)]),
      policies: [...document.querySelectorAll('.pbar')].map((b) => [b.dataset.policy, Number(b.dataset.bytes)]),
      compareError: document.getElementById('compare-error').hidden ? null : document.getElementById('compare-error').textContent,
      units: document.getElementById('units').value,
      svg,
      text: document.getElementById('summary').textContent,
    };
  });
}

// The page against the native command line for one run.
function compare(label, run, got) {
  // Without a whole run there is no picture: the page shows why, and the estimate alone.
  let est = native(run, ['--format', 'json', '--plot', 'timeline.svg']);
  const svg = est.code === 2 ? est.err.replace(/\n$/, '') : est.files['timeline.svg'];
  if (est.code === 2) est = native(run, ['--format', 'json']);
  assert.ok(est.code === 0 || est.code === 1, `${label}: native memest failed: ${est.err}`);
  assert.strictEqual(got.error, null, `${label}: the page shows an error: ${got.error}`);
  const e = JSON.parse(est.out);
  assert.strictEqual(got.peak, e.peak ? String(e.peak.bytes) : undefined, `${label}: peak bytes`);
  const parts = Object.values(e.categories).filter((c) => c.location === 'device' && c.bytes > 0)
                    .map((c) => ['categories', c.label, c.bytes]);
  if (e.peak) {
    for (const [part, b] of Object.entries(e.peak.composition)) {
      if (b > 0) parts.push(['peak', part.replace(/_/g, ' '), b]);
    }
  }
  assert.deepStrictEqual(got.parts, parts, `${label}: the stacked bars`);
  assert.deepStrictEqual(got.live, e.peak ? e.peak.live.map((t) => [t.name, t.bytes]) : [], `${label}: live tensors`);
  assert.deepStrictEqual(got.categories, Object.values(e.categories).map((c) => [c.label, c.bytes]), `${label}: categories`);
  // One line, not the diff of two 30 kB pictures.
  assert.ok(got.svg === svg, `${label}: the timeline differs: the page's ${String(got.svg).length} ` +
            `characters against the command line's ${String(svg).length}`);
  assert.strictEqual(got.units, run.units || 'GB', `${label}: units`);
  const unit = got.units === 'GiB' ? 2 ** 30 : 1e9;
  const headline = e.peak ? `${(e.peak.bytes / unit).toFixed(2)} ${got.units} at the peak`
                          : `${(e.total.bytes / unit).toFixed(2)} ${got.units} in all categories`;
  assert.ok(got.text.startsWith(headline), `${label}: "${got.text}" starts with "${headline}"`);
  if (e.budget) {
    assert.ok(got.text.includes(e.budget.fits ? 'fits' : 'does not fit'), `${label}: budget verdict`);
  }
  // compare: the page's policies, the default list plus the run's own precision.
  const policies = ['fp32', 'amp', 'mixed', 'bf16'];
  if (run.precision && !policies.includes(run.precision)) policies.push(run.precision);
  const without = Object.fromEntries(Object.entries(run).filter(([k]) => k !== 'precision'));
  const cmp = native(without, ['compare', '--policies', policies.join(','), '--format', 'json']);
  if (cmp.code !== 0) {
    assert.strictEqual(got.compareError, cmp.err.replace(/\n$/, ''), `${label}: compare's message`);
    return;
  }
  const c = JSON.parse(cmp.out);
  assert.deepStrictEqual(got.policies, c.runs.map((r) => [r.precision.name, r.peak_bytes]), `${label}: compare`);
}

async function main() {
  const start = Date.now();
  assert.ok(fs.existsSync(pageFile), `${pageFile} not built: cmake --workflow --preset web`);
  assert.ok(fs.existsSync(memest), `${memest} not built: cmake --workflow --preset dev`);
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // No network at all: the page must need none.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--proxy-server=127.0.0.1:9',
           '--proxy-bypass-list=<-loopback>'],
  });
  const problems = [];
  let compared = 0;
  try {
    const page = await browser.newPage();
    await page.setViewport({width: 1200, height: 900});
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url().slice(0, 80)}`));
    page.on('request', (r) => { if (!r.url().startsWith('file:') && !r.url().startsWith('data:')) problems.push(`network request: ${r.url()}`); });
    // A shared link: the page opened with a run in its URL restores the form and shows the run.
    const shared = RUNS[3];
    const hash = new URLSearchParams(Object.entries(shared).map(([k, v]) => [k, v === true ? '1' : v]));
    await page.goto(`${pageUrl}#${hash}`);
    await page.waitForFunction(() => Number(document.body.dataset.runs || 0) >= 1, {timeout: 60000});
    compare('opened from a link', shared, await shown(page));
    assert.strictEqual(await page.$eval('#opt-lora-rank', (e) => e.value), shared['lora-rank'], 'restored --lora-rank');
    assert.strictEqual(await page.$eval('#opt-qlora', (e) => e.checked), true, 'restored --qlora');
    compared += 1;
    const fields = await page.$$eval('[data-flag]', (els) => els.length);
    const schema = JSON.parse(spawnSync(memest, ['schema'], {encoding: 'utf8'}).stdout);
    const flags = JSON.stringify(schema).match(/\(flag --[a-z0-9-]+\)/g).length;
    assert.strictEqual(fields, flags + 1, 'the form has a field for every option of the schema (and --file)');

    for (const [i, run] of RUNS.entries()) {
      await fill(page, run);
      compare(`run ${i + 1} (${argsOf(run).join(' ')})`, run, await shown(page));
      compared += 1;
      // Typed in, the run gets the link it was opened from.
      if (run === shared) {
        const link = Object.fromEntries(new URLSearchParams(new URL(page.url()).hash.slice(1)));
        assert.deepStrictEqual(link, Object.fromEntries(hash), 'the link of a run');
      }
    }
    for (const [i, run] of BAD.entries()) {
      await fill(page, run);
      const got = await shown(page);
      const want = native(run, ['--format', 'json']);
      assert.strictEqual(want.code, 2, `bad ${i + 1}: native memest exit ${want.code}`);
      assert.strictEqual(got.error, want.err.replace(/\n$/, ''), `bad ${i + 1}: the message`);
    }
    await fill(page, RUNS[0]);
    await page.$eval('#more', (d) => { d.open = false; });
    await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => done())));
    await page.screenshot({path: path.join(root, 'build', 'web', 'page.png'), fullPage: true});
  } finally {
    await browser.close();
  }
  assert.deepStrictEqual(problems, [], 'the page ran without console errors or network requests');
  console.log(`web page: ${compared} runs match the native command line, ${BAD.length} messages ` +
              `match its stderr (${((Date.now() - start) / 1000).toFixed(1)} s); screenshot build/web/page.png`);
}

main().catch((e) => {
  console.error(`web page test FAILED: ${e.message}`);
  process.exit(1);
});
