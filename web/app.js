// The memest web page: a form generated from the run-config schema that `memest schema` prints
// (and one for serving from `memest schema --serve`), turned into the command line's arguments
// and run by the command line itself (memest.js, the WebAssembly build of memest::cli::run). The
// page only draws what the JSON says.
'use strict';

// The options shown first, in this order; every other option of the schema is under "More".
const COMMON = [
  'model/name', 'model/params', 'model/config', 'training/micro_batch', 'training/seq_len',
  'precision/preset', 'optimizer/name', 'training/attention', 'training/recompute',
  'model/lora_rank', 'model/lora_targets', 'model/qlora', 'parallel/data_parallel',
  'parallel/zero_stage', 'parallel/tensor_parallel', 'parallel/pipeline_parallel', 'hardware/gpu',
];
// Options that name a file: the page takes the file's text and gives the command line a file of
// that name in its in-memory file system.
// "file" is the command line's --file: a memest run config.
const FILES = {'model/config': 'config.json', 'file': 'run.json'};
const PLOT = 'timeline.svg';    // --plot writes the picture here
const DEFAULT_POLICIES = ['fp32', 'amp', 'mixed', 'bf16'];  // compare's own default list
const UNITS = {GB: 1e9, GiB: 2 ** 30};

let memest = null;  // the WebAssembly module
let options = [];   // the run options, from the schema
// How every output names and colours a kind of memory (src/step/memory_kinds.cpp, read from the
// module): by the peak's part names and by the rows' keys.
const kinds = {part: new Map(), row: new Map()};

// Runs `memest ...args`: {code, out, err} as the command line would exit and print.
function cli(args) {
  return JSON.parse(memest.ccall('memest_run', 'string', ['string'], [JSON.stringify(args)]));
}

// ---- The form, from the schema ----

// One run option of the schema: its flag is the one the description names.
function optionOf(section, key, schema) {
  const m = /\s*\(flag (--[a-z0-9-]+)\)$/.exec(schema.description || '');
  if (!m) return null;
  const help = schema.description.slice(0, m.index);
  const alternatives = schema.anyOf || [schema];
  // A numbered choice (--zero) is an enum of numbers and one of strings: one list of names.
  const choices = [...new Set(alternatives.flatMap((a) => (a.enum || []).map(String)))];
  const onlyChoices = alternatives.every((a) => a.enum);
  const d = /\(default ([^;)]+)/.exec(help);
  let kind = 'text';
  if (schema.type === 'boolean') kind = 'bool';
  else if (schema.type === 'object') kind = 'json';
  else if (FILES[`${section}/${key}`]) kind = 'file';
  else if (choices.length && onlyChoices) kind = 'select';
  return {
    id: `${section}/${key}`, section, key, flag: m[1], name: m[1].slice(2), help, kind, choices,
    placeholder: d ? `default ${d[1]}` : '',
  };
}

function optionsFromSchema(schema) {
  const out = [];
  for (const [section, s] of Object.entries(schema.properties)) {
    const object = s.properties ? s : (s.anyOf || []).find((a) => a.properties);
    if (!object) continue;  // "$schema", "description"
    for (const [key, v] of Object.entries(object.properties)) {
      const o = optionOf(section, key, v);
      if (o) out.push(o);
    }
  }
  return out;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function control(o) {
  const attrs = {id: `opt-${o.name}`, name: o.name, 'data-flag': o.flag};
  if (o.kind === 'bool') return el('input', {...attrs, type: 'checkbox'});
  if (o.kind === 'select') {
    const s = el('select', attrs, el('option', {value: '', text: o.placeholder || '(default)'}));
    for (const c of o.choices) s.append(el('option', {value: c, text: c}));
    return s;
  }
  if (o.kind === 'json' || o.kind === 'file') {
    const what = o.kind === 'file' ? `paste the ${FILES[o.id]} here` : 'JSON';
    return el('textarea', {...attrs, rows: 4, placeholder: what, spellcheck: 'false'});
  }
  const input = el('input', {...attrs, type: 'text', placeholder: o.placeholder});
  // A name from the list, or another form the option takes (a Hub id, a size).
  if (o.choices.length) input.setAttribute('list', `list-${o.name}`);
  return input;
}

function field(o) {
  const c = control(o);
  const label = el('label', {for: c.id, title: o.help},
                   el('span', {class: 'name', text: o.flag}), el('span', {class: 'help', text: o.help}));
  const f = el('div', {class: `field ${o.kind}`}, label, c);
  if (c.getAttribute('list')) {
    const list = el('datalist', {id: c.getAttribute('list')});
    for (const v of o.choices) list.append(el('option', {value: v}));
    f.append(list);
  }
  return f;
}

function buildForm(schema) {
  options = optionsFromSchema(schema);
  const common = document.getElementById('common');
  for (const id of COMMON) {
    const o = options.find((x) => x.id === id);
    if (o) common.append(field(o));
  }
  const more = document.getElementById('more-fields');
  const file = {id: 'file', name: 'file', flag: '--file', kind: 'file', choices: [],
                help: 'A memest run config (JSON); the fields above override it'};
  more.append(field(file));
  let section = '';
  for (const o of options) {
    if (COMMON.includes(o.id)) continue;
    if (o.section !== section) {
      section = o.section;
      more.append(el('h3', {text: section}));
    }
    more.append(field(o));
  }
  options.push(file);
}

// ---- Form values, arguments and the URL ----

function values() {
  const v = {};
  for (const o of options) {
    const c = document.getElementById(`opt-${o.name}`);
    if (o.kind === 'bool') {
      if (c.checked) v[o.name] = '1';
    } else if (c.value !== '') {
      v[o.name] = c.value;
    }
  }
  return v;
}

function setValues(v) {
  for (const o of options) {
    const c = document.getElementById(`opt-${o.name}`);
    if (o.kind === 'bool') c.checked = o.name in v;
    else c.value = v[o.name] || '';
  }
}

// The command line's arguments for these values; files go into its file system first.
function argumentsOf(v) {
  const args = [];
  for (const o of options) {
    if (!(o.name in v)) continue;
    if (o.kind === 'bool') {
      args.push(o.flag);
      continue;
    }
    let value = v[o.name];
    if (o.kind === 'file') {
      memest.FS.writeFile(FILES[o.id], value);
      value = FILES[o.id];
    }
    // `--name value`, as one types it; `--name=value` where the value would read as a flag.
    if (value.startsWith('-')) args.push(`${o.flag}=${value}`);
    else args.push(o.flag, value);
  }
  return args;
}

function hashOf(v, units) {
  const p = new URLSearchParams(v);
  if (units !== 'GB') p.set('units', units);
  return p.toString();
}

function shellWord(w) {
  return /^[A-Za-z0-9_./:,=+-]+$/.test(w) ? w : `'${w.replace(/'/g, "'\\''")}'`;
}

// ---- Rendering: reads the JSON, computes nothing but the unit conversion ----

// As the command line writes a size: two decimals, and "< 0.01" for a few bytes that are there.
function size(bytes, units) {
  const v = bytes / UNITS[units];
  return bytes > 0 && v < 0.005 ? `< 0.01 ${units}` : `${v.toFixed(2)} ${units}`;
}

// A table's cell, as the command line's table writes it: "-" for a row that is not estimated
// (null in the JSON) or holds nothing.
function cell(bytes, units) {
  return bytes ? size(bytes, units) : '-';
}

// A part's or a row's words and colour; a key the table lacks keeps its own name.
function kindOf(map, key) {
  return map.get(key) || {label: key.replace(/_/g, ' '), colour: kinds.row.get('').colour};
}

function readKinds() {
  for (const k of JSON.parse(memest.ccall('memest_kinds', 'string', [], []))) {
    if (k.part) kinds.part.set(k.part, k);
    if (k.category || !k.part) kinds.row.set(k.category, k);
  }
}

// A table; `bytes[i]`, when given, is row i's integer bytes (data-bytes, for the browser test).
function table(t, head, rows, bytes = []) {
  t.replaceChildren(el('thead', {}, el('tr', {}, ...head.map((h) => el('th', {text: h})))));
  const body = el('tbody');
  rows.forEach((r, i) => {
    const tr = el('tr', {}, ...r.map((c) => el('td', {text: String(c)})));
    if (i < bytes.length) tr.dataset.bytes = String(bytes[i]);
    body.append(tr);
  });
  t.append(body);
}

// The breakdown as stacked bars on one scale, against the GPU's memory when one is given: the
// categories (device memory) and, for a whole run, what is live at the peak.
function drawBar(est, units) {
  const rows = [['categories', Object.entries(est.categories)
                                   .filter(([, c]) => c.location === 'device' && c.bytes > 0)
                                   .map(([key, c]) => [key, c.label, kindOf(kinds.row, key).colour, c.bytes])]];
  if (est.peak) {
    rows.push(['peak', Object.entries(est.peak.composition).filter(([, b]) => b > 0).map(([part, b]) => {
      const k = kindOf(kinds.part, part);
      return [part, k.label, k.colour, b];
    })]);
  }
  const budget = est.budget;
  const scale = Math.max(est.total.bytes, est.peak ? est.peak.bytes : 0,
                         budget ? budget.capacity_bytes : 0) || 1;
  const colours = new Map();  // the legend: each label once, with its colour
  const out = [];
  for (const [row, parts] of rows) {
    const bar = el('div', {class: 'stack'});
    for (const [kind, label, colour, bytes] of parts) {
      if (!colours.has(label)) colours.set(label, colour);
      const seg = el('div', {class: 'seg', title: `${label}: ${size(bytes, units)}`,
                             'data-row': row, 'data-kind': kind, 'data-bytes': String(bytes)});
      seg.style.width = `${(100 * bytes) / scale}%`;
      seg.style.background = colour;
      bar.append(seg);
    }
    const box = el('div', {class: 'bar'}, bar);
    if (budget) {
      for (const [name, b] of [['capacity', budget.capacity_bytes], ['usable', budget.usable_bytes]]) {
        const line = el('div', {class: `limit ${name}`, title: `${name}: ${size(b, units)}`});
        line.style.left = `${(100 * b) / scale}%`;
        box.append(line);
      }
    }
    out.push(el('div', {class: 'barrow'}, el('span', {class: 'barname', text: row}), box));
  }
  const legend = el('ul', {class: 'legend'});
  for (const [label, c] of colours) {
    const swatch = el('span', {class: 'swatch'});
    swatch.style.background = c;
    legend.append(el('li', {}, swatch, label));
  }
  if (budget) {
    legend.append(el('li', {}, el('span', {class: 'swatch limit-key'}),
                     `${budget.source}: ${size(budget.capacity_bytes, units)} (dashed: usable ` +
                     `${size(budget.usable_bytes, units)})`));
  }
  document.getElementById('bar').replaceChildren(...out, legend);
}

function drawSummary(est, units) {
  const p = est.peak, b = est.budget;
  const lines = [];
  if (p) {
    lines.push(el('p', {id: 'peak', 'data-bytes': String(p.bytes)},
                  el('strong', {text: size(p.bytes, units)}),
                  ` at the peak${p.approximate ? ' (approximate)' : ''}, in the ${p.phase} phase ` +
                  `(moment: ${p.moment}); the categories sum to ${size(est.total.bytes, units)}.`));
  } else {
    lines.push(el('p', {id: 'peak'}, el('strong', {text: size(est.total.bytes, units)}),
                  ' in all categories; no peak over the step without a batch and a sequence.'));
  }
  if (b) {
    const verdict = b.fits ? `fits, ${size(b.headroom_bytes, units)} to spare`
                           : `does not fit: over by ${size(b.over_bytes, units)}`;
    lines.push(el('p', {id: 'fits', class: b.fits ? 'fits' : 'over'},
                  `Needs ${size(b.need_bytes, units)} of ${size(b.usable_bytes, units)} usable on ` +
                  `${b.source}: ${verdict}.`));
  }
  if (est.stages.length) {
    const worst = est.stages.find((s) => s.worst);
    lines.push(el('p', {}, `${est.stages.length} pipeline stages; the figures are stage ` +
                            `${worst ? worst.stage : 0}'s, the one that needs most.`));
  }
  for (const w of [...est.warnings, ...est.assumptions, ...est.notes]) lines.push(el('p', {class: 'note', text: w}));
  document.getElementById('summary').replaceChildren(...lines);
}

function drawCompare(cmp, units) {
  const runs = cmp.runs;
  const keys = Object.keys(runs[0].categories_bytes);
  const rows = keys.map((k) => [kindOf(kinds.row, k).label, ...runs.map((r) => cell(r.categories_bytes[k], units))]);
  rows.push(['sum of categories', ...runs.map((r) => size(r.total_bytes, units))]);
  const peaks = runs.every((r) => r.peak_bytes !== null);
  if (peaks) rows.push(['peak over a step', ...runs.map((r) => size(r.peak_bytes, units))]);
  const t = el('table', {id: 'compare-table'});
  table(t, ['', ...runs.map((r) => r.precision.name)], rows);
  // Each policy's need, as compare weighs them: the peak, or without a batch and a sequence the
  // sum of the rows.
  const need = (r) => (peaks ? r.peak_bytes : r.total_bytes);
  const max = Math.max(...runs.map(need)) || 1;
  const bars = el('div', {class: 'policy-bars'});
  for (const r of runs) {
    const b = el('div', {class: 'pbar', 'data-bytes': String(need(r)),
                         'data-policy': r.precision.name});
    b.style.width = `${(100 * need(r)) / max}%`;
    bars.append(el('div', {class: 'prow'}, el('span', {class: 'pname', text: r.precision.name}),
                   el('div', {class: 'ptrack'}, b), el('span', {text: size(need(r), units)})));
  }
  const what = el('p', {class: 'note', text: peaks ? 'Bars: the peak over a step.'
      : 'Bars: the sum of the rows (no peak without a batch and a sequence).'});
  document.getElementById('compare').replaceChildren(what, bars, t);
}

function showError(text) {
  const e = document.getElementById('error');
  e.textContent = text.replace(/\n$/, '');
  e.hidden = false;
  document.getElementById('output').hidden = true;
}

// ---- One run ----

function run() {
  const v = values();
  const units = document.getElementById('units').value;
  const hash = hashOf(v, units);
  history.replaceState(null, '', `#${hash}`);
  document.getElementById('share').href = `#${hash}`;
  const args = argumentsOf(v);
  // The picture needs a whole run (a batch and a sequence): without one, the estimate alone.
  const withPlot = cli([...args, '--format', 'json', '--plot', PLOT]);
  const est = withPlot.code === 2 ? cli([...args, '--format', 'json']) : withPlot;
  document.getElementById('command').textContent =
      ['memest', ...args].map(shellWord).join(' ');
  document.body.dataset.runs = String(Number(document.body.dataset.runs || 0) + 1);
  if (est.code !== 0 && est.code !== 1) {  // 1: a check failed (over budget); still a result
    showError(est.err);
    return;
  }
  document.getElementById('error').hidden = true;
  const e = JSON.parse(est.out);
  drawSummary(e, units);
  drawBar(e, units);
  const live = e.peak ? e.peak.live : [];
  table(document.getElementById('live'), ['tensor', 'part', 'count', units],
        live.map((t) => [t.name, kindOf(kinds.part, t.part).label, t.count, size(t.bytes, units)]),
        live.map((t) => t.bytes));
  // The command line's table: "-" where there is no dtype or no bytes.
  table(document.getElementById('categories'), ['category', 'dtype', units, 'basis'],
        Object.values(e.categories).map((c) => [c.label, c.dtype || '-', cell(c.bytes, units), c.basis]),
        Object.values(e.categories).map((c) => c.bytes));
  if (withPlot === est) {
    const svg = memest.FS.readFile(PLOT, {encoding: 'utf8'});
    const img = el('img', {alt: 'live memory over the training step',
                           src: `data:image/svg+xml;charset=utf-8,${encodeURIComponent(svg)}`});
    document.getElementById('timeline').replaceChildren(img);
  } else {
    // The page asked for the picture, not the user: say why there is none in the form's terms.
    const text = e.peak ? withPlot.err.replace(/\n$/, '')
                        : 'The step is drawn for a whole run: fill in a micro-batch and a sequence length.';
    const why = el('p', {class: 'note', id: 'timeline-error', text});
    document.getElementById('timeline').replaceChildren(why);
  }
  // compare takes the policies to set side by side instead of one precision.
  const cmpArgs = argumentsOf(Object.fromEntries(
      Object.entries(v).filter(([k]) => k !== 'precision' && k !== 'amp')));
  const chosen = v.precision || (v.amp ? 'amp' : null);
  const policies = [...new Set([...DEFAULT_POLICIES, ...(chosen ? [chosen] : [])])];
  const cmp = cli(['compare', ...cmpArgs, '--policies', policies.join(','), '--format', 'json']);
  const ce = document.getElementById('compare-error');
  ce.hidden = cmp.code === 0;
  ce.textContent = cmp.code === 0 ? '' : cmp.err.replace(/\n$/, '');
  if (cmp.code === 0) drawCompare(JSON.parse(cmp.out), units);
  else document.getElementById('compare').replaceChildren();
  document.getElementById('output').hidden = false;
}

function restore() {
  const p = new URLSearchParams(location.hash.slice(1));
  const v = Object.fromEntries(p);
  document.getElementById('units').value = v.units in UNITS ? v.units : 'GB';
  delete v.units;
  setValues(v);
  if (options.some((o) => o.name in v && !COMMON.includes(o.id))) {
    document.getElementById('more').open = true;
  }
  if (Object.keys(v).length) run();
}

// ---- Serving: a form generated from the serve run configs' schema (memest schema --serve) ----

// The serve options that name a file: config.json is pasted as the training form's is. A GGUF
// file (--gguf) is binary and read only by its header: not offered on the page.
const SERVE_FILES = {config: 'config.json'};
const SERVE_SKIPPED = ['gguf'];
let serveOptions = [];
// Per engine, what the schema's allOf says under it: a key false (the other engine's flag) or
// the engine's own names ({"enum": [...]}, --quantization).
const serveRules = new Map();

function serveOptionsFromSchema(schema) {
  for (const rule of schema.allOf || []) {
    serveRules.set(rule.if.properties.engine.const, rule.then.properties);
  }
  const out = [];
  for (const [key, v] of Object.entries(schema.properties)) {
    const m = /\s*\(flag (--[a-z0-9-]+)\)$/.exec(v.description || '');
    if (!m || SERVE_SKIPPED.includes(key)) continue;
    const help = v.description.slice(0, m.index);
    const alternatives = v.anyOf || [v];
    const choices = [...new Set(alternatives.flatMap((a) => (a.enum || []).map(String)))];
    const d = /\(default ([^;)]+)/.exec(help);
    let kind = 'text';
    if (v.type === 'boolean') kind = 'bool';
    else if (SERVE_FILES[key]) kind = 'file';
    else if (choices.length && alternatives.every((a) => a.enum)) kind = 'select';
    out.push({key, flag: m[1], name: m[1].slice(2), help, kind, choices,
              placeholder: d ? `default ${d[1]}` : ''});
  }
  return out;
}

// The engine chosen: the form's, else the first of the schema (memest serve's default).
function serveEngine() {
  return document.getElementById('serve-engine').value || [...serveRules.keys()][0];
}

// A field of the serve form, with ids of its own (the training form has --model and --gpu too).
function serveField(o) {
  const attrs = {id: `serve-${o.name}`, name: o.name, 'data-serve-flag': o.flag};
  let c;
  if (o.kind === 'bool') {
    c = el('input', {...attrs, type: 'checkbox'});
  } else if (o.kind === 'select') {
    c = el('select', attrs);
  } else if (o.kind === 'file') {
    c = el('textarea', {...attrs, rows: 4, placeholder: `paste the ${SERVE_FILES[o.key]} here`,
                        spellcheck: 'false'});
  } else {
    c = el('input', {...attrs, type: 'text', placeholder: o.placeholder});
  }
  const label = el('label', {for: c.id, title: o.help},
                   el('span', {class: 'name', text: o.flag}), el('span', {class: 'help', text: o.help}));
  return el('div', {class: `field ${o.kind}`, id: `serve-field-${o.name}`}, label, c);
}

// Shows the chosen engine's fields only, each select with that engine's names.
function showServeEngine() {
  const rules = serveRules.get(serveEngine()) || {};
  for (const o of serveOptions) {
    const f = document.getElementById(`serve-field-${o.name}`);
    f.hidden = rules[o.key] === false;
    if (o.kind !== 'select' || o.key === 'engine') continue;
    const c = document.getElementById(`serve-${o.name}`);
    const names = (rules[o.key] && rules[o.key].enum) || o.choices;
    const kept = names.includes(c.value) ? c.value : '';
    c.replaceChildren(el('option', {value: '', text: o.placeholder || '(default)'}),
                      ...names.map((n) => el('option', {value: n, text: n})));
    c.value = kept;
  }
}

function buildServeForm(schema) {
  serveOptions = serveOptionsFromSchema(schema);
  const fields = document.getElementById('serve-fields');
  for (const o of serveOptions) fields.append(serveField(o));
  const engine = serveOptions.find((o) => o.key === 'engine');
  const c = document.getElementById('serve-engine');
  c.append(el('option', {value: '', text: engine.placeholder || '(default)'}),
           ...engine.choices.map((n) => el('option', {value: n, text: n})));
  c.addEventListener('change', showServeEngine);
  showServeEngine();
}

// memest serve's arguments for the fields shown; a pasted file goes into the file system first.
function serveArguments() {
  const args = ['serve'];
  for (const o of serveOptions) {
    const c = document.getElementById(`serve-${o.name}`);
    if (document.getElementById(`serve-field-${o.name}`).hidden) continue;
    if (o.kind === 'bool') {
      if (c.checked) args.push(o.flag);
      continue;
    }
    let value = c.value;
    if (value === '') continue;
    if (o.kind === 'file') {
      memest.FS.writeFile(SERVE_FILES[o.key], value);
      value = SERVE_FILES[o.key];
    }
    if (value.startsWith('-')) args.push(`${o.flag}=${value}`);
    else args.push(o.flag, value);
  }
  return args;
}

// The serve document's figures as they are keyed in its JSON (weights.bytes, kv_cache.tokens,
// ..., max_concurrency): bytes in the units chosen, counts as they are, null as "-". The
// document's inputs (the run config that gives it again) are settings, not figures.
function serveRows(doc, units) {
  const rows = [];
  for (const [part, v] of Object.entries(doc)) {
    if (part === 'inputs' || v === null || typeof v !== 'object' || Array.isArray(v)) continue;
    for (const [field, x] of Object.entries(v)) rows.push([`${part}.${field}`, x]);
  }
  rows.push(['max_concurrency', doc.max_concurrency]);
  const shownAs = (key, x) => {
    if (x === null) return '-';
    return /bytes/.test(key) ? size(x, units) : String(x);
  };
  return rows.map(([key, x]) => [key, shownAs(key, x), x]);
}

function runServe() {
  const args = serveArguments();
  const units = document.getElementById('serve-units').value;
  const json = cli([...args, '--format', 'json']);
  document.getElementById('serve-command').textContent =
      ['memest', ...args].map(shellWord).join(' ');
  document.body.dataset.serveRuns = String(Number(document.body.dataset.serveRuns || 0) + 1);
  const error = document.getElementById('serve-error');
  const output = document.getElementById('serve-output');
  if (json.code !== 0 && json.code !== 1) {  // 1: vLLM would not start; still a result
    error.textContent = json.err.replace(/\n$/, '');
    error.hidden = false;
    output.hidden = true;
    return;
  }
  error.hidden = true;
  const doc = JSON.parse(json.out);
  const rows = serveRows(doc, units);
  table(document.getElementById('serve-parts'), ['JSON key', `per device (${units} for bytes)`],
        rows.map(([key, text]) => [key, text]), rows.map(([, , x]) => x));
  const text = cli([...args, '--units', units]);
  document.getElementById('serve-table').textContent = text.out;
  output.hidden = false;
}

createMemest().then((m) => {
  memest = m;
  readKinds();
  const schema = cli(['schema']);
  buildForm(JSON.parse(schema.out));
  const form = document.getElementById('run');
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    run();
  });
  document.getElementById('units').addEventListener('change', () => {
    if (location.hash.length > 1) run();
  });
  document.getElementById('reset').addEventListener('click', () => {
    setValues({});
    history.replaceState(null, '', location.pathname);
    document.getElementById('output').hidden = true;
    document.getElementById('error').hidden = true;
  });
  window.addEventListener('hashchange', restore);
  buildServeForm(JSON.parse(cli(['schema', '--serve']).out));
  document.getElementById('serve-run').addEventListener('submit', (ev) => {
    ev.preventDefault();
    runServe();
  });
  document.getElementById('serve-reset').addEventListener('click', () => {
    for (const o of serveOptions) {
      const c = document.getElementById(`serve-${o.name}`);
      if (o.kind === 'bool') c.checked = false;
      else c.value = '';
    }
    showServeEngine();
    document.getElementById('serve-output').hidden = true;
    document.getElementById('serve-error').hidden = true;
  });
  document.getElementById('loading').remove();
  document.getElementById('estimate').disabled = false;
  document.getElementById('serve-estimate').disabled = false;
  if (location.hash.length > 1) restore();
  document.body.dataset.ready = '1';
});
