// The web page end to end: Debian's chromium, driven by puppeteer-core, opens build/web/index.html
// from file://, types runs into the form and reads what the page shows; each run is compared with
// the native command line (build/dev/memest ... --format json) on integer bytes, the timeline
// picture byte for byte, and error messages character for character. Exits non-zero on any
// difference. Then the page's polish (issue 23): null is "-", the bars and pictures share the
// table's words and colours, the picture's labels never overlap, a 400 px screen shows the whole
// form, and messages fit a browser; every failed check is listed. Usage: node
// tests/web/page_test.js (from anywhere; paths are the repository's). MEMEST and CHROMIUM name
// other binaries; build/web/page-1400.png and page-400.png are the screenshots it leaves.
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

// Serving runs typed into the serve form (memest serve's flags without dashes); each is compared
// with `memest serve ... --format json` on every figure and with its table byte for byte.
const SERVE_RUNS = [
  {model: 'llama-3.1-8b', 'max-model-len': '8192'},
  {model: 'qwen3-8b', gpu: 'a100-80gb', 'kv-cache-dtype': 'fp8', 'enforce-eager': true,
   'gpu-memory-utilization': '0.95', units: 'GB'},
  {engine: 'llama.cpp', model: 'llama-3.1-8b', 'ctx-size': '16384', parallel: '4',
   'cache-type-k': 'q8_0', 'cache-type-v': 'q8_0', 'flash-attn': true, quantization: 'Q4_K_M'},
  // vLLM would not start (exit 1): still a result, with the longest context that fits.
  {model: 'llama-3-70b', 'tensor-parallel-size': '2', gpu: 'a100-80gb', 'max-model-len': '131072'},
  {paste: {config: read('configs/models/gemma-3-27b-it.json')}, 'max-model-len': '32768',
   quantization: 'fp8'},
];
const SERVE_BAD = [
  {model: 'llama-3.1-8b', 'gpu-memory-utilization': '1.5'},
  {model: 'llama-3-70b', gpu: 'a10'},
  {engine: 'llama.cpp', model: 'llama-3.1-8b', 'cache-type-v': 'q8_0'},
];

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
function native(run, extra, command = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'memest-web-'));
  for (const [k, text] of Object.entries(run.paste || {})) {
    fs.writeFileSync(path.join(dir, FILE_NAMES[k]), text);
  }
  const r = spawnSync(memest, [...command, ...argsOf(run), ...extra], {cwd: dir, encoding: 'utf8'});
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
    const bytes = (sel) => [...document.querySelectorAll(sel)].map((e) => [e.dataset.row, e.dataset.kind, Number(e.dataset.bytes)]);
    const img = document.querySelector('#timeline img');
    const svg = img ? decodeURIComponent(img.src.slice(img.src.indexOf(',') + 1))
                    : document.getElementById('timeline-error')?.textContent;
    return {
      error: document.getElementById('error').hidden ? null : document.getElementById('error').textContent,
      peak: document.getElementById('peak')?.dataset.bytes,
      parts: bytes('#bar .seg'),
      live: [...document.querySelectorAll('#live tbody tr')].map((r) => [r.cells[0].textContent, Number(r.dataset.bytes)]),
      categories: [...document.querySelectorAll('#categories tbody tr')].map((r) => [r.cells[0].textContent, r.dataset.bytes === 'null' || r.dataset.bytes === undefined ? null : Number(r.dataset.bytes)]),
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
  const parts = Object.entries(e.categories).filter(([, c]) => c.location === 'device' && c.bytes > 0)
                    .map(([key, c]) => ['categories', key, c.bytes]);
  if (e.peak) {
    for (const [part, b] of Object.entries(e.peak.composition)) {
      if (b > 0) parts.push(['peak', part, b]);
    }
  }
  assert.deepStrictEqual(got.parts, parts, `${label}: the stacked bars`);
  assert.deepStrictEqual(got.live, e.peak ? e.peak.live.map((t) => [t.name, t.bytes]) : [], `${label}: live tensors`);
  // A row not estimated (null) has no bytes on the page either.
  assert.deepStrictEqual(got.categories, Object.values(e.categories).map((c) => [c.label, c.bytes ?? null]), `${label}: categories`);
  if (est.code === 0 && !e.peak && svg !== undefined && !svg.startsWith('<svg')) {
    // No picture without a whole run: the page says so in the form's terms, not --plot's (which
    // the page, not the user, asked for).
    assert.ok(!/--plot/.test(got.svg) && /batch/.test(got.svg) && /sequence/.test(got.svg),
              `${label}: why there is no picture: "${got.svg}"`);
  } else {
    // One line, not the diff of two 30 kB pictures.
    assert.ok(got.svg === svg, `${label}: the timeline differs: the page's ${String(got.svg).length} ` +
              `characters against the command line's ${String(svg).length}`);
  }
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
  // Each policy's bar is what compare weighs: the peak, or without one the sum of the rows.
  assert.deepStrictEqual(got.policies, c.runs.map((r) => [r.precision.name, r.peak_bytes ?? r.total_bytes]), `${label}: compare`);
}

// ---- Serving ----

// Types one serving run into the serve form (the engine first: it decides the fields shown).
async function fillServe(page, run) {
  await page.click('#serve-reset');
  await page.select('#serve-units', run.units || 'GiB');
  const ordered = Object.entries(run).sort(([a], [b]) => (b === 'engine') - (a === 'engine'));
  for (const [name, v] of ordered) {
    if (name === 'units') continue;
    if (name === 'paste') {
      for (const [k, text] of Object.entries(v)) {
        await page.$eval(`#serve-${k}`, (e, t) => { e.value = t; }, text);
      }
    } else if (v === true) {
      await page.click(`#serve-${name}`);
    } else if (await page.$eval(`#serve-${name}`, (e) => e.tagName === 'SELECT')) {
      const got = await page.select(`#serve-${name}`, v);
      assert.deepStrictEqual(got, [v], `serve --${name}: the form has no choice "${v}"`);
    } else {
      await page.type(`#serve-${name}`, v);
    }
  }
  const before = await page.$eval('body', (b) => Number(b.dataset.serveRuns || 0));
  await page.click('#serve-estimate');
  await page.waitForFunction((n) => Number(document.body.dataset.serveRuns || 0) > n, {timeout: 30000}, before);
}

async function serveShown(page) {
  return page.evaluate(() => ({
    error: document.getElementById('serve-error').hidden ? null : document.getElementById('serve-error').textContent,
    rows: [...document.querySelectorAll('#serve-parts tbody tr')].map((r) => [r.cells[0].textContent, JSON.parse(r.dataset.bytes)]),
    text: document.getElementById('serve-table').textContent,
  }));
}

// The serve document's figures by JSON key, written here independently of the page's code.
function serveFigures(doc) {
  const out = [];
  for (const [part, v] of Object.entries(doc)) {
    if (part === 'inputs') continue;  // the settings that give the document again
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      for (const [field, x] of Object.entries(v)) out.push([`${part}.${field}`, x]);
    }
  }
  out.push(['max_concurrency', doc.max_concurrency]);
  return out;
}

async function serving(page, check) {
  // The form: a field for every option of the serve schema (--gguf aside), a select for each
  // choice, the other engine's fields hidden.
  const schema = JSON.parse(spawnSync(memest, ['schema', '--serve'], {encoding: 'utf8'}).stdout);
  const keys = Object.keys(schema.properties).filter((k) => k !== '$schema' && k !== 'description' && k !== 'gguf');
  const fields = await page.$$eval('[data-serve-flag]', (els) => els.map((e) => [e.name, e.tagName]));
  check('the serve form has a field for every serve option of the schema', () =>
    assert.deepStrictEqual(fields.map(([n]) => n.replace(/-/g, '_')), keys));
  const choices = keys.filter((k) => schema.properties[k].enum);
  check('each choice of the serve schema is a select', () => {
    const selects = fields.filter(([, t]) => t === 'SELECT').map(([n]) => n.replace(/-/g, '_'));
    assert.deepStrictEqual(selects, choices);
  });
  await page.click('#serve-reset');
  await page.select('#serve-engine', 'llama.cpp');
  const llama = await page.evaluate(() => ({
    hidden: [...document.querySelectorAll('#serve-fields .field')].filter((f) => f.offsetParent === null).map((f) => f.id.slice(12)),
    quantization: [...document.querySelectorAll('#serve-quantization option')].map((o) => o.value).filter((v) => v),
  }));
  const underLlama = schema.allOf[1].then.properties;
  check('under llama.cpp the vLLM fields are hidden and --quantization lists GGUF types', () => {
    assert.deepStrictEqual(llama.hidden.map((n) => n.replace(/-/g, '_')),
                           Object.keys(underLlama).filter((k) => underLlama[k] === false));
    assert.deepStrictEqual(llama.quantization, underLlama.quantization.enum);
  });
  for (const [i, run] of SERVE_RUNS.entries()) {
    await fillServe(page, run);
    const got = await serveShown(page);
    const want = native(run, ['--format', 'json'], ['serve']);
    const table = native(run, ['--units', run.units || 'GiB'], ['serve']);
    check(`serve run ${i + 1} (${argsOf(run).join(' ')})`, () => {
      assert.ok(want.code === 0 || want.code === 1, `native memest serve failed: ${want.err}`);
      assert.strictEqual(got.error, null);
      assert.deepStrictEqual(got.rows, serveFigures(JSON.parse(want.out)));
      assert.strictEqual(got.text, table.out);
    });
  }
  for (const [i, run] of SERVE_BAD.entries()) {
    await fillServe(page, run);
    const got = await serveShown(page);
    const want = native(run, ['--format', 'json'], ['serve']);
    check(`serve bad ${i + 1}: the message`, () => {
      assert.strictEqual(want.code, 2, `native memest exit ${want.code}`);
      assert.strictEqual(got.error, want.err.replace(/\n$/, ''));
    });
  }
  return SERVE_RUNS.length;
}

// ---- The page's polish (issue 23, part 6) ----

// The flags a message names that the run did not set (the page adds --format, --plot and
// --policies of its own; a message must not name them, nor advise a flag the user never saw).
function flagsNotSet(run, text) {
  const set = new Set(argsOf(run).filter((a) => a.startsWith('--')));
  return [...new Set(String(text || '').match(/--[a-z][a-z0-9-]*/g) || [])].filter((f) => !set.has(f));
}

// Every text element of an SVG as the browser lays it out: its getBBox's four corners in the
// picture's coordinates (through getCTM, so a rotated label stays a rotated rectangle).
async function textBoxes(browser, svg) {
  const p = await browser.newPage();
  try {
    await p.setContent(`<!doctype html><body style="margin:0">${svg}</body>`);
    return await p.evaluate(() => [...document.querySelectorAll('svg text')].map((t) => {
      const b = t.getBBox(), m = t.getCTM();
      const at = (x, y) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f];
      return {text: t.textContent, empty: b.width === 0 || b.height === 0,
              corners: [at(b.x, b.y), at(b.x + b.width, b.y), at(b.x + b.width, b.y + b.height),
                        at(b.x, b.y + b.height)]};
    }));
  } finally {
    await p.close();
  }
}

// Whether two convex quadrilaterals overlap by more than `slack` px (no separating axis).
function overlaps(a, b, slack = 0.5) {
  for (const poly of [a, b]) {
    for (let i = 0; i < 4; i++) {
      const [x1, y1] = poly[i], [x2, y2] = poly[(i + 1) % 4];
      const len = Math.hypot(x2 - x1, y2 - y1) || 1;
      const n = [(y1 - y2) / len, (x2 - x1) / len];
      const pa = a.map(([x, y]) => x * n[0] + y * n[1]), pb = b.map(([x, y]) => x * n[0] + y * n[1]);
      const depth = Math.min(Math.max(...pa), Math.max(...pb)) - Math.max(Math.min(...pa), Math.min(...pb));
      if (depth <= slack) return false;
    }
  }
  return true;
}

function rgb(hex) {
  const n = parseInt(hex.slice(1), 16);
  return `rgb(${n >> 16}, ${(n >> 8) & 255}, ${n & 255})`;
}

// The words and colours the page's bars and legend use, and the timeline's (its legend and parts).
async function paletteShown(page) {
  return page.evaluate(() => {
    const img = document.querySelector('#timeline img');
    const svg = new DOMParser().parseFromString(
        decodeURIComponent(img.src.slice(img.src.indexOf(',') + 1)), 'image/svg+xml');
    const legend = [...svg.querySelectorAll('rect[width="12"][height="12"]')].map((r) => [
      r.getAttribute('fill'),
      r.nextElementSibling.textContent.replace(/ (< )?[0-9.]+ [kMGT]?i?B$/, '')]);
    const parts = [...svg.querySelectorAll('polygon.part')].map((p) => [p.dataset.part, p.getAttribute('fill')]);
    const segs = [...document.querySelectorAll('#bar .seg')].map((e) => ({
      row: e.dataset.row, kind: e.dataset.kind, label: e.title.split(':')[0],
      colour: getComputedStyle(e).backgroundColor}));
    const keys = [...document.querySelectorAll('#bar .legend li')].map((li) => li.textContent);
    const compareRows = [...document.querySelectorAll('#compare-table tbody tr')].map((r) => r.cells[0].textContent);
    return {legend, parts, segs, keys, compareRows};
  });
}

// Form fields, buttons and labels that reach past the window's right edge, and how wide the
// document is against the window.
async function cutOff(page) {
  return page.evaluate(() => {
    const w = document.documentElement.clientWidth;
    const out = [...document.querySelectorAll('#run input, #run select, #run textarea, #run button, #run label')]
                    .filter((e) => e.offsetParent !== null)
                    .filter((e) => { const r = e.getBoundingClientRect(); return r.right > w + 0.5 || r.left < -0.5; })
                    .map((e) => e.id || e.getAttribute('for') || e.tagName);
    return {out, scroll: document.documentElement.scrollWidth, width: w};
  });
}

async function messagesShown(page) {
  return page.evaluate(() => ['error', 'timeline-error', 'compare-error'].map((id) => {
    const e = document.getElementById(id);
    return e && !e.hidden && !e.closest('[hidden]') ? e.textContent : '';
  }).join('\n'));
}

async function polishMessages(page, check) {
  // A bare parameter count: rows not estimated are "-", the picture's absence names no flag.
  const bare = {params: '7B'};
  await fill(page, bare);
  const est = JSON.parse(native(bare, ['--format', 'json']).out);
  const head = await page.$$eval('#categories thead th', (t) => t.map((c) => c.textContent));
  const cells = await page.$$eval('#categories tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check('a row not estimated shows "-" (null in the JSON)', () => {
    const rows = Object.values(est.categories);
    assert.ok(rows.some((c) => c.bytes === null), 'the bare run has a row not estimated');
    rows.forEach((c, i) => {
      if (c.bytes === null) assert.strictEqual(cells[i][head.indexOf('GB')], '-', c.label);
    });
  });
  check('no "bytes/element" column', () => assert.ok(!head.some((h) => /bytes\/element/.test(h)), head.join(', ')));
  const cmp = JSON.parse(native(bare, ['compare', '--policies', 'fp32,amp,mixed,bf16', '--format', 'json']).out);
  const compareCells = await page.$$eval('#compare-table tbody tr', (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));
  check('a policy\'s row not estimated shows "-"', () => {
    Object.keys(cmp.runs[0].categories_bytes).forEach((k, i) => cmp.runs.forEach((r, j) => {
      if (r.categories_bytes[k] === null) assert.strictEqual(compareCells[i][j + 1], '-', `${k}, ${r.precision.name}`);
    }));
  });
  const bars = await page.$$eval('.prow', (rows) => rows.map((r) => r.lastElementChild.textContent));
  check('the policy bars of a bare --params 7B', () => {
    assert.strictEqual(bars.length, 4, bars.join(', '));
    assert.ok(!bars.every((b) => /^0\.00 /.test(b)), `all four read ${bars[0]}`);
    // Each bar is the policy's need: its peak, or without a peak the sum of its rows.
    cmp.runs.forEach((r, i) => assert.strictEqual(bars[i], `${((r.peak_bytes ?? r.total_bytes) / 1e9).toFixed(2)} GB`, r.precision.name));
  });
  const bareText = await messagesShown(page);
  check('no message names a flag the user did not set (bare --params 7B)', () =>
    assert.deepStrictEqual(flagsNotSet(bare, bareText), [], bareText));

  // An unknown Hub id: what the page offers, no cache path, no huggingface-cli.
  const hub = {model: 'nobody/no-such-model', batch: '1', seq: '128'};
  await fill(page, hub);
  const hubText = await messagesShown(page);
  check('an unknown Hub id\'s message fits a browser', () => {
    assert.ok(hubText.includes('no-such-model'), hubText);
    for (const bad of ['/home/web_user', '.cache', 'huggingface-cli']) assert.ok(!hubText.includes(bad), hubText);
    assert.deepStrictEqual(flagsNotSet(hub, hubText), [], hubText);
  });

  // An unknown GPU (the form's list has none; a pasted run config can): named once, on the page
  // and by the native command line.
  const gpu = {paste: {file: '{"hardware": {"gpu": "foo"}}'}, model: 'gpt2', batch: '1', seq: '128'};
  await fill(page, gpu);
  const gpuText = await messagesShown(page);
  const gpuNative = native(gpu, ['--format', 'json']).err;
  check('--gpu foo: its error once on the page', () =>
    assert.strictEqual((gpuText.match(/unknown GPU/g) || []).length, 1, gpuText));
  check('--gpu foo: its error once from the command line', () =>
    assert.strictEqual((gpuNative.match(/unknown GPU/g) || []).length, 1, gpuNative));
}

async function polishPalette(page, check) {
  // One word and one colour per kind of memory: the page's bars, its legend, the timeline's
  // legend and parts, and the policies' table.
  const run = RUNS[0];
  await fill(page, run);
  const est = JSON.parse(native(run, ['--format', 'json']).out);
  const p = await paletteShown(page);
  const fillOf = Object.fromEntries(p.parts);
  const labelOf = Object.fromEntries(p.legend);
  check('the page\'s peak bar has the timeline\'s words and colours', () => {
    const peak = p.segs.filter((s) => s.row === 'peak');
    assert.ok(peak.length > 2, 'the peak bar has parts');
    for (const s of peak) {
      assert.ok(fillOf[s.kind], `${s.kind}: no part in the timeline`);
      assert.strictEqual(s.colour, rgb(fillOf[s.kind]), `${s.kind}'s colour`);
      assert.strictEqual(s.label, labelOf[fillOf[s.kind]], `${s.kind}'s words`);
    }
  });
  check('a row has the colour of the part of the same words', () => {
    const byLabel = new Map(p.segs.filter((s) => s.row === 'peak').map((s) => [s.label, s.colour]));
    for (const s of p.segs.filter((x) => x.row === 'categories' && byLabel.has(x.label))) {
      assert.strictEqual(s.colour, byLabel.get(s.label), s.label);
    }
    assert.ok(p.segs.some((x) => x.row === 'categories' && byLabel.has(x.label)), 'rows and parts share words');
  });
  check('the legend names each kind once', () => {
    const labels = [...new Set(p.segs.map((s) => s.label))];
    assert.strictEqual(p.keys.length >= labels.length, true, p.keys.join(' | '));
    assert.deepStrictEqual(p.keys.slice(0, labels.length), labels);
  });
  check('the policies\' table has the rows\' words', () => {
    const cmp = JSON.parse(native(Object.fromEntries(Object.entries(run).filter(([k]) => k !== 'precision')),
                                  ['compare', '--policies', 'fp32,amp,mixed,bf16,mixed-bf16', '--format', 'json']).out);
    const keys = Object.keys(cmp.runs[0].categories_bytes);
    assert.deepStrictEqual(p.compareRows.slice(0, keys.length), keys.map((k) => est.categories[k].label));
  });
}

async function polishPictures(browser, pictures, check) {
  for (const [label, svg] of pictures) {
    const boxes = (await textBoxes(browser, svg)).filter((b) => !b.empty);
    const hits = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        if (overlaps(boxes[i].corners, boxes[j].corners)) hits.push(`"${boxes[i].text}" and "${boxes[j].text}"`);
      }
    }
    check(`${label}: the picture's labels do not overlap`, () => assert.deepStrictEqual(hits, []));
  }
}

async function polishWidths(page, check) {
  for (const width of [400, 1400]) {
    await page.setViewport({width, height: 900});
    await fill(page, RUNS[0]);
    await page.$eval('#more', (d) => { d.open = false; });
    await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => done())));
    const c = await cutOff(page);
    check(`at ${width} px the form is not cut off`, () => assert.deepStrictEqual(c.out, []));
    check(`at ${width} px the page does not scroll sideways`, () =>
      assert.ok(c.scroll <= c.width, `${c.scroll} px wide in a ${c.width} px window`));
    await page.screenshot({path: path.join(root, 'build', 'web', `page-${width}.png`), fullPage: true});
  }
}

async function polish(browser, page, pictures, check) {
  await polishMessages(page, check);
  await polishPalette(page, check);
  await polishPictures(browser, pictures, check);
  await polishWidths(page, check);
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
  // Every check that fails is listed, not only the first.
  const failures = [];
  const check = (label, fn) => {
    try {
      fn();
    } catch (e) {
      failures.push(`${label}: ${e.message.replace(/\s*\n\s*/g, ' ').slice(0, 600)}`);
    }
  };
  const pictures = [];  // [label, the timeline's SVG text] of each run that has one
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
    const opened = await shown(page);
    check('opened from a link', () => compare('opened from a link', shared, opened));
    assert.strictEqual(await page.$eval('#opt-lora-rank', (e) => e.value), shared['lora-rank'], 'restored --lora-rank');
    assert.strictEqual(await page.$eval('#opt-qlora', (e) => e.checked), true, 'restored --qlora');
    compared += 1;
    const fields = await page.$$eval('[data-flag]', (els) => els.length);
    const schema = JSON.parse(spawnSync(memest, ['schema'], {encoding: 'utf8'}).stdout);
    const flags = JSON.stringify(schema).match(/\(flag --[a-z0-9-]+\)/g).length;
    assert.strictEqual(fields, flags + 1, 'the form has a field for every option of the schema (and --file)');

    for (const [i, run] of RUNS.entries()) {
      await fill(page, run);
      const got = await shown(page);
      check(`run ${i + 1} (${argsOf(run).join(' ')})`, () => compare(`run ${i + 1}`, run, got));
      if (got.svg && got.svg.startsWith('<svg')) pictures.push([`run ${i + 1}`, got.svg]);
      compared += 1;
      // Typed in, the run gets the link it was opened from.
      if (run === shared) {
        const link = Object.fromEntries(new URLSearchParams(new URL(page.url()).hash.slice(1)));
        check('the link of a run', () => assert.deepStrictEqual(link, Object.fromEntries(hash)));
      }
    }
    for (const [i, run] of BAD.entries()) {
      await fill(page, run);
      const got = await shown(page);
      const want = native(run, ['--format', 'json']);
      check(`bad ${i + 1}: the message`, () => {
        assert.strictEqual(want.code, 2, `native memest exit ${want.code}`);
        assert.strictEqual(got.error, want.err.replace(/\n$/, ''));
      });
    }
    compared += await serving(page, check);
    // The committed pictures (README's, docs/parallelism.md's) too.
    for (const f of fs.readdirSync(path.join(root, 'docs')).filter((n) => n.endsWith('.svg'))) {
      pictures.push([`docs/${f}`, read(`docs/${f}`)]);
    }
    await polish(browser, page, pictures, check);
  } finally {
    await browser.close();
  }
  check('the page ran without console errors or network requests', () => assert.deepStrictEqual(problems, []));
  if (failures.length) {
    console.error(`web page test FAILED: ${failures.length} checks\n${failures.map((f) => `  - ${f}`).join('\n')}`);
    process.exit(1);
  }
  console.log(`web page: ${compared} runs match the native command line (${SERVE_RUNS.length} of ` +
              `them serve runs), ${BAD.length + SERVE_BAD.length} messages ` +
              `match its stderr, the polish checks pass (${((Date.now() - start) / 1000).toFixed(1)} s); ` +
              'screenshots build/web/page-1400.png and page-400.png');
}

main().catch((e) => {
  console.error(`web page test FAILED: ${e.message}`);
  process.exit(1);
});
