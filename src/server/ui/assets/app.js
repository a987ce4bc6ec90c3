// ztserve's web page. It reads the JSON API that every client uses and
// writes every name from a file as text (textContent, attributes set one
// by one), never as markup. A token, when the server asks for one, is kept
// in sessionStorage for this browser session and sent as a header, never
// in a URL.
"use strict";

const TOKEN = "ztserve-token";
const app = document.getElementById("app");
const page = app ? app.dataset.page : "";

// Unicode's bidirectional controls written out, as GitHub shows them: in a
// name they make it read as another ("evil<U+202E>gpj.zt" would read
// "eviltz.jpg"). Every text and tooltip goes through it; URLs and the
// commands copied keep the exact name.
const BIDI = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
function visible(s) {
  return String(s).replace(BIDI, (c) => "<U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + ">");
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, k === "title" ? visible(v) : String(v));
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(visible(k)));
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// Asks the API; on 401 shows the token form and waits for a token.
async function api(path) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(path, { headers });
    if (r.status === 401) {
      sessionStorage.removeItem(TOKEN);
      await askToken();
      continue;
    }
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error((body.error || r.status) + ": " + (body.detail || r.statusText));
    return body;
  }
}

function askToken() {
  return new Promise((done) => {
    const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "bearer token" });
    const form = el("form", { class: "token", id: "token-form" },
      el("p", {}, "This server needs a token. It is kept for this browser session only."), input, " ", el("button", { type: "submit" }, "Use token"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN, input.value.trim());
      form.remove();
      done();
    });
    app.prepend(form);
    input.focus();
  });
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0, v = n;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : String(v)) + " " + u[i];
}

// A table whose columns sort on click. `cols`: [label, key, numeric].
function table(id, cols, rows, onPick) {
  const t = el("table", { id });
  const head = el("tr");
  const body = el("tbody");
  let sortKey = null, up = true;
  const draw = () => {
    const sorted = rows.slice();
    if (sortKey !== null) {
      const c = cols.find((x) => x[1] === sortKey);
      sorted.sort((a, b) => {
        const x = a[sortKey], y = b[sortKey];
        const r = c[2] ? (x ?? -Infinity) - (y ?? -Infinity) : String(x ?? "").localeCompare(String(y ?? ""));
        return up ? r : -r;
      });
    }
    body.replaceChildren(...sorted.map((r) => {
      const tr = el("tr", onPick ? { class: "pick" } : {});
      for (const [, key, numeric, show] of cols) {
        const v = show ? show(r) : r[key];
        tr.append(el("td", numeric ? { class: "n" } : {}, v instanceof Node ? v : (v ?? "")));
      }
      if (onPick) tr.addEventListener("click", () => {
        for (const c of body.querySelectorAll("tr.chosen")) c.classList.remove("chosen");
        tr.classList.add("chosen");
        onPick(r);
      });
      return tr;
    }));
  };
  for (const [label, key, numeric] of cols) {
    const th = el("th", numeric ? { class: "n" } : {}, label);
    th.addEventListener("click", () => {
      up = sortKey === key ? !up : true;
      sortKey = key;
      for (const h of head.children) h.classList.remove("sorted", "up");
      th.classList.add("sorted");
      if (up) th.classList.add("up");
      draw();
    });
    head.append(th);
  }
  t.append(el("thead", {}, head), body);
  draw();
  return t;
}

// Shell quoting: a name pastes as text, never as a command.
function sh(s) {
  return "'" + String(s).replaceAll("'", "'\\''") + "'";
}
// A Python string literal (JSON's escapes are Python's).
function py(s) {
  return JSON.stringify(String(s));
}
// A glob that selects exactly `name` (the server's escape: * ? \).
function globOf(name) {
  return String(name).replace(/[*?\\]/g, "\\$&");
}
// A local file name for an object or file (no directories).
function outName(name) {
  return String(name).replace(/[\/\\]/g, "_");
}
function fileUrl(path) {
  return location.origin + "/" + path.split("/").map(encodeURIComponent).join("/");
}

function command(label, text) {
  const pre = el("pre", {}, text);
  const copy = el("button", { type: "button" }, "Copy");
  copy.addEventListener("click", () => navigator.clipboard.writeText(text).then(() => { copy.textContent = "Copied"; }));
  return el("div", { class: "cmd" }, el("span", { class: "muted" }, label), pre, copy);
}

async function listing() {
  let files = document.getElementById("files");
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter by path" });
  if (!files) {
    const list = await api("/v1/files");
    const rows = list.files.map((f) => ({
      path: f.path, source: f.source, size: f.size, objects: f.objects, version: f.version, etag: f.etag, modified: f.modified,
    }));
    const link = (r) => el("a", { href: "/ui/files/" + r.path.split("/").map(encodeURIComponent).join("/") }, r.path);
    files = table("files", [["path", "path", false, link], ["source", "source"], ["size", "size", true, (r) => bytes(r.size)],
      ["objects", "objects", true], ["version", "version"], ["ETag", "etag"], ["changed", "modified"]], rows);
    const note = document.getElementById("static-note");
    if (note) note.remove();
    app.append(files);
    if ((list.unavailable || []).length) {
      app.append(el("h2", {}, "Not served"), table("unavailable", [["path", "path"], ["size", "size", true], ["reason", "reason"]], list.unavailable));
    }
  } else {
    sortable(files);
  }
  files.before(el("p", {}, filter));
  await repositories();
  filter.addEventListener("input", () => {
    const q = filter.value.toLowerCase();
    for (const tr of files.tBodies[0].rows) tr.hidden = !tr.cells[0].textContent.toLowerCase().includes(q);
  });
}

// The Hub repositories the root's layout makes (docs/hub.md); a
// repository's files (the first page of its tree) once it is opened, each
// linked to the URL the Hub's clients read it at. Nothing with --no-hub.
async function repositories() {
  let list;
  try {
    list = await api("/v1/repos");
  } catch (e) {
    return;
  }
  if (!(list.repos || []).length) return;
  const section = el("section", { id: "repos" }, el("h2", {}, "Hub repositories"),
    el("p", { class: "muted" }, "Clients of the Hugging Face Hub load these by id with HF_ENDPOINT=" + location.origin));
  for (const r of list.repos) {
    const title = `${r.kind} ${r.id}: ${r.files} files, ${bytes(r.bytes)}, commit ${r.sha.slice(0, 12)}`;
    const details = el("details", { class: "repo", "data-id": r.id }, el("summary", {}, title));
    details.addEventListener("toggle", async () => {
      if (!details.open || details.dataset.loaded) return;
      details.dataset.loaded = "1";
      const tree = await api(r.tree);
      const base = location.origin + r.resolve;
      const rows = tree.filter((e) => e.type === "file")
        .map((f) => ({ path: f.path, size: f.size, url: base + f.path.split("/").map(encodeURIComponent).join("/") }));
      const link = (x) => el("a", { href: x.url }, x.path);
      details.append(table(null, [["file", "path", false, link], ["size", "size", true, (x) => bytes(x.size)]], rows));
      if (rows.length < r.files) details.append(el("p", { class: "muted" }, `the first ${rows.length} of ${r.files} files`));
    }, { once: false });
    section.append(details);
  }
  app.append(section);
}

// Sorting for the table the server wrote (no data behind it but its cells).
function sortable(t) {
  const body = t.tBodies[0];
  [...t.tHead.rows[0].cells].forEach((th, i) => {
    let up = true;
    th.addEventListener("click", () => {
      const rows = [...body.rows];
      const key = (tr) => tr.cells[i].dataset.n !== undefined ? Number(tr.cells[i].dataset.n) : tr.cells[i].textContent;
      rows.sort((a, b) => { const x = key(a), y = key(b); const r = typeof x === "number" ? x - y : String(x).localeCompare(String(y)); return up ? r : -r; });
      body.replaceChildren(...rows);
      up = !up;
    });
  });
}

function barChart(layers) {
  const w = 640, h = 160, pad = 24;
  const s = svg("svg", { id: "layer-chart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  s.append(svg("line", { class: "axis", x1: pad, y1: h - pad, x2: w, y2: h - pad }));
  const max = Math.max(1, ...layers.map((l) => l.bytes));
  const bw = (w - pad) / Math.max(1, layers.length);
  layers.forEach((l, i) => {
    const bh = ((h - 2 * pad) * l.bytes) / max;
    const r = svg("rect", { class: "bar", x: pad + i * bw + 1, y: h - pad - bh, width: Math.max(1, bw - 2), height: bh });
    const t = svg("title", {});
    t.textContent = (l.layer === null ? "other" : "layer " + l.layer) + ": " + bytes(l.bytes);
    r.append(t);
    s.append(r);
  });
  const label = svg("text", { x: pad, y: 12 });
  label.textContent = "bytes per layer (max " + bytes(max) + ")";
  s.append(label);
  return s;
}

function histogram(hist) {
  const w = 480, h = 140, pad = 20;
  const s = svg("svg", { id: "histogram", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img" });
  const max = Math.max(1, ...hist.counts);
  const bw = w / hist.counts.length;
  hist.counts.forEach((c, i) => {
    const bh = ((h - pad) * c) / max;
    s.append(svg("rect", { class: "bar", x: i * bw, y: h - pad - bh, width: Math.max(1, bw - 1), height: bh }));
  });
  const t = svg("text", { x: 0, y: h - 4 });
  t.textContent = `${hist.lo} … ${hist.hi}`;
  s.append(t);
  return s;
}

function heatmap(grid, lo, hi) {
  const cell = Math.max(2, Math.floor(320 / Math.max(grid.rows, grid.cols)));
  const s = svg("svg", { id: "heatmap", width: grid.cols * cell, height: grid.rows * cell, role: "img" });
  const span = hi - lo || 1;
  grid.values.forEach((v, i) => {
    const r = Math.floor(i / grid.cols), c = i % grid.cols;
    const x = v === null ? 0.5 : (v - lo) / span;
    const shade = v === null ? "#cccccc" : `hsl(${240 - 240 * x}, 70%, ${30 + 35 * x}%)`;
    s.append(svg("rect", { x: c * cell, y: r * cell, width: cell, height: cell, fill: shade }));
  });
  return s;
}

async function tensorView(path, row, into) {
  // A link to this view: the object's name in the fragment.
  history.replaceState(null, "", "#object=" + encodeURIComponent(row.name));
  into.replaceChildren(el("h2", {}, row.name));
  const url = fileUrl(path);
  const cmds = el("div", {});
  if (row.offset !== null && row.length) {
    cmds.append(command("curl", `curl -r ${row.offset}-${row.offset + row.length - 1} -o ${sh(outName(row.name) + ".bin")} ${sh(url)}`));
  }
  cmds.append(command("zt", `zt fetch ${sh(url)} --select ${sh(globOf(row.name))} -o ${sh(outName(row.name) + ".zt")}`));
  cmds.append(command("Python", `import ztserve\nwith ztserve.safe_open(${py(url)}) as f:\n    t = f.get_tensor(${py(row.name)})`));
  into.append(cmds);
  if (row.format !== "dense") {
    into.append(el("p", { class: "muted" }, `A ${row.format} object: no value summary.`));
    return;
  }
  const status = el("p", { class: "muted" }, "Summarising…");
  into.append(status);
  try {
    const sm = await api(`/v1/files/${path.split("/").map(encodeURIComponent).join("/")}/summaries/${encodeURIComponent(row.name)}`);
    status.remove();
    const dl = el("dl", { class: "attrs", id: "summary" });
    for (const k of ["dtype", "type", "count", "min", "max", "mean", "std", "nan", "pos_inf", "neg_inf"]) {
      dl.append(el("dt", {}, k), el("dd", {}, sm[k] === null ? "—" : JSON.stringify(sm[k])));
    }
    dl.append(el("dt", {}, "shape"), el("dd", {}, JSON.stringify(sm.shape)));
    const r = el("div", { class: "row" }, dl, histogram(sm.histogram));
    if (sm.grid) r.append(heatmap(sm.grid, sm.min ?? 0, sm.max ?? 1));
    into.append(r);
  } catch (e) {
    status.className = "error";
    status.textContent = visible(e.message);
  }
}

// A token id's colour, as `zt ingest svg` draws it: SplitMix64's
// finalizer over the id, the low 24 bits, kept out of the darkest shades.
function colour(id) {
  const M = (1n << 64n) - 1n;
  let z = (BigInt(id) + 0x9E3779B97F4A7C15n) & M;
  z = ((z ^ (z >> 30n)) * 0xBF58476D1CE4E5B9n) & M;
  z = ((z ^ (z >> 27n)) * 0x94D049BB133111EBn) & M;
  z ^= z >> 31n;
  const c = (shift) => (64n + ((z >> shift) & 0xFFn) * 191n / 255n).toString(16).padStart(2, "0");
  return "#" + c(0n) + c(8n) + c(16n);
}

// The atom viewer: one atom of an SVG-Tensor projection (`grids`, u16,
// [atoms, rows, cols]) drawn as its grid of token ids, each cell's
// tooltip `ID: TEXT` when the entry serves a symbol map.
async function atomViewer(enc, grids, into) {
  const [count, rows, cols] = grids.shape;
  let texts = null;
  const input = el("input", { type: "number", id: "atom", min: 0, max: count - 1, value: 0 });
  const holder = el("div", { id: "atom-holder" });
  into.append(el("h2", {}, "Atoms"), el("p", {}, `${count} atoms of ${rows} × ${cols} tokens; atom `, input), holder);
  const draw = async () => {
    const n = Math.max(0, Math.min(count - 1, Number(input.value) || 0));
    const headers = {};
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = "Bearer " + token;
    if (texts === null) {
      texts = new Map();
      const m = await fetch(`/v1/files/${enc}/objects/symbol_map/data`, { headers });
      if (m.ok) for (const s of (await m.json()).symbols || []) texts.set(s.id, s.text);
    }
    const r = await fetch(`/v1/files/${enc}/objects/grids/data?rows=${n}:${n + 1}`, { headers });
    if (!r.ok) { holder.replaceChildren(el("p", { class: "error" }, `atom ${n}: ${r.status}`)); return; }
    const ids = new Uint16Array(await r.arrayBuffer());
    const cell = Math.min(40, Math.max(8, Math.floor(480 / Math.max(rows, cols))));
    const g = svg("svg", { id: "atom-grid", width: cols * cell, height: rows * cell, role: "img" });
    ids.forEach((id, i) => {
      const rect = svg("rect", { x: (i % cols) * cell, y: Math.floor(i / cols) * cell, width: cell - 1, height: cell - 1, fill: colour(id) });
      const t = svg("title", {});
      t.textContent = visible(texts.has(id) ? `${id}: ${texts.get(id)}` : String(id));
      rect.append(t);
      g.append(rect);
    });
    holder.replaceChildren(g);
  };
  input.addEventListener("change", draw);
  await draw();
}

async function filePage() {
  const path = app.dataset.path;
  const enc = path.split("/").map(encodeURIComponent).join("/");
  const list = await api("/v1/files");
  const f = list.files.find((x) => x.path === path) || {};
  const dl = el("dl", { class: "attrs", id: "attrs" });
  for (const k of ["source", "size", "objects", "version", "etag", "digests", "modified", "files"]) {
    if (f[k] === undefined || f[k] === null) continue;
    const v = k === "size" ? `${bytes(f.size)} (${f.size})` : Array.isArray(f[k]) ? f[k].join(", ") : f[k];
    dl.append(el("dt", {}, k), el("dd", {}, v));
  }
  const url = fileUrl(path);
  const cmds = el("div", { class: "panel" },
    command("curl", `curl -o ${sh(path.split("/").pop())} ${sh(url)}`),
    command("zt", `zt fetch ${sh(url)} -o ${sh(path.split("/").pop())}`),
    command("Python", `import ztserve\nwith ztserve.safe_open(${py(url)}) as f:\n    names = f.keys()`));
  const glob = el("input", { type: "search", id: "glob", placeholder: "glob, e.g. model.layers.0.*" });
  const holder = el("div", { id: "objects-holder" });
  const totals = el("p", { id: "totals", class: "muted" });
  const chart = el("div", { id: "chart-holder" });
  const view = el("div", { id: "tensor", class: "panel" }, el("p", { class: "muted" }, "Pick an object to see its values."));
  app.append(dl, cmds, el("h2", {}, "Objects"), el("p", {}, glob), totals, chart, view, holder);
  const load = async () => {
    const q = glob.value.trim() ? "?select=" + encodeURIComponent(glob.value.trim()) : "";
    try {
      const t = await api(`/v1/files/${enc}/objects${q}`);
      totals.textContent = `${t.total.objects} objects, ${bytes(t.total.bytes)}`;
      chart.replaceChildren(barChart(t.layers));
      holder.replaceChildren(table("objects", [["name", "name"], ["format", "format"], ["shape", "shape", false, (r) => JSON.stringify(r.shape)],
        ["dtype", "dtype"], ["type", "type"], ["encoding", "encoding"], ["bytes", "bytes", true], ["digest", "digest"], ["layer", "layer", true]],
        t.objects, (r) => tensorView(path, r, view)));
      return t.objects;
    } catch (e) {
      holder.replaceChildren(el("p", { class: "error" }, e.message));
      return [];
    }
  };
  let timer = null;
  glob.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(load, 250); });
  const rows = await load();
  const grids = (rows || []).find((r) => r.name === "grids" && r.dtype === "u16" && r.shape.length === 3);
  if (grids) {
    const atoms = el("div", { id: "atoms", class: "panel" });
    view.before(atoms);
    await atomViewer(enc, grids, atoms);
  }
  // `#object=NAME` opens that object's view.
  const picked = location.hash.startsWith("#object=") ? decodeURIComponent(location.hash.slice(8)) : null;
  const row = picked && (rows || []).find((r) => r.name === picked);
  if (row) await tensorView(path, row, view);
}

(async () => {
  try {
    if (page === "listing") await listing();
    else if (page === "file") await filePage();
  } catch (e) {
    app.append(el("p", { class: "error" }, e.message));
  }
})();
