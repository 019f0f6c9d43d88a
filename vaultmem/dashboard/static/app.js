/* vaultmem dashboard: seven panels over the JSON the server returns (or, in an exported file, the
 * snapshot inlined in the page). Memory text is untrusted: it only ever reaches the page as text
 * nodes (textContent), or, for summaries rendered as light Markdown, escaped first and then passed
 * through DOMPurify. No innerHTML ever sees raw memory. No network beyond this page's own origin. */
(function () {
  "use strict";

  // -- where the data comes from ------------------------------------------------------------------
  const snapEl = document.getElementById("vm-snapshot");
  const SNAP = snapEl ? JSON.parse(snapEl.textContent) : null;
  const OFFLINE = SNAP !== null;
  const tokenMeta = document.querySelector('meta[name="vaultmem-token"]');
  const TOKEN = tokenMeta ? tokenMeta.getAttribute("content") : "";
  const LEAVES = OFFLINE ? new Map(SNAP.leaves.map((l) => [l.id, l])) : null;

  const vm = (window.vaultmem = { offline: OFFLINE, ready: {}, cy: null, errors: [] });
  // What the Content-Security-Policy blocked (a test asserts there is nothing).
  vm.blocked = [];
  document.addEventListener("securitypolicyviolation", (ev) => {
    vm.blocked.push(ev.violatedDirective + " " + (ev.blockedURI || "") + " " + (ev.sourceFile || "") + ":" + ev.lineNumber + ":" + ev.columnNumber + " " + (ev.sample || ""));
  });
  // Readiness, also as <html data-ready-NAME>: a test (or a person's script) waits on a selector.
  function ready(name, value) {
    vm.ready[name] = value;
    if (value === false) delete document.documentElement.dataset["ready" + name[0].toUpperCase() + name.slice(1)];
    else document.documentElement.dataset["ready" + name[0].toUpperCase() + name.slice(1)] = value === true ? "1" : String(value);
  }
  const state = { vault: null, panel: null, statusTimer: null, loaded: {} };

  async function api(name, params) {
    if (OFFLINE) return offline[name](params || {});
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") qs.set(k, v);
    const q = qs.toString();
    const r = await fetch("api/" + name + (q ? "?" + q : ""), { headers: { "X-Vaultmem-Token": TOKEN } });
    const data = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
    if (!r.ok) throw new Error(data.error || r.statusText);
    return data;
  }

  async function post(name, body) {
    const r = await fetch("api/" + name, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Vaultmem-Token": TOKEN },
      body: JSON.stringify(body || {}),
    });
    const data = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
    if (!r.ok) throw new Error(data.error || r.statusText);
    return data;
  }

  // -- the exported file answers from its snapshot --------------------------------------------------
  const offline = {
    status: () => SNAP.status,
    metrics: () => SNAP.metrics,
    graph: () => SNAP.graph,
    topic: (p) => {
      if (!SNAP.topics[p.key]) throw new Error("this topic is not in the snapshot");
      return SNAP.topics[p.key];
    },
    topics: () => SNAP.graph.nodes.slice(0, 50).map((n) => ({ key: n.key, name: n.name, kind: n.kind })),
    heatmap: (p) => SNAP.heatmap[p.source || ""] || SNAP.heatmap[""],
    search: (p) => localSearch(p),
    children: (p) => {
      const key = p.node || (p.source ? "source:" + p.source : "");
      const list = SNAP.tree[key] || [];
      const offset = Number(p.offset || 0);
      const limit = Number(p.limit || 100);
      const items = list.slice(offset, offset + limit).map((x) => (typeof x === "string" ? leafNode(LEAVES.get(x)) : x));
      return { items, total: list.length, offset };
    },
    review: () => SNAP.review || { proposals: [], actions: false },
    day: (p) => {
      const day = p.day || SNAP.today;
      if (SNAP.days[day]) return SNAP.days[day];
      const leaves = SNAP.leaves.filter((l) => (l.ts || "").slice(0, 10) === day).length;
      return { day, fallback: false, leaves, digest: null, commits: [], git: false, note: "This snapshot holds the digests of its last days with memories only." };
    },
  };

  function leafNode(l) {
    return {
      id: l.id, kind: "leaf", title: words(l.text, 10), path: l.path, ts: l.ts, ts_end: l.ts,
      depth: 0, children: 0, descendants: 1, stale: false, speaker: l.speaker, text: l.text,
    };
  }

  const STOP = new Set(("a about an and are as at be been but by can could did do does for from had has have he her his how i if in into is it its " +
    "me my no not of on or our she so that the their them then there they this to us was we were what when where which who why will with would you your").split(" "));

  function queryTerms(q) {
    const lower = q.toLowerCase();
    const cjk = lower.match(/[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]+/g) || [];
    const latin = (lower.replace(/[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uac00-\ud7af]+/g, " ").match(/[\p{L}\p{N}][\p{L}\p{N}'’_.-]*/gu) || [])
      .map((w) => w.replace(/[.'’-]+$/, ""));
    const content = latin.filter((w) => !STOP.has(w));
    return [...new Set([...(content.length ? content : latin), ...cjk])].filter(Boolean);
  }

  // Offline search: every content word of the question, found in the leaf's text or speaker. The
  // served page searches by words and meaning; a file cannot carry the model, so this is words only.
  function localSearch(p) {
    const terms = queryTerms(p.q || "");
    if (!terms.length) throw new Error("type a few words to search for");
    const [kind, value] = splitScope(p.scope || "all");
    const since = p.since || "";
    const until = p.until ? (p.until.length === 10 ? p.until + "T23:59:59Z" : p.until) : "";
    const hits = [];
    for (const l of SNAP.leaves) {
      if (kind === "source" && l.source !== value) continue;
      if (kind === "topic" && !(l.entities || []).includes(value)) continue;
      if (since && (!l.ts || l.ts < since)) continue;
      if (until && (!l.ts || l.ts > until)) continue;
      const hay = ((l.speaker || "") + ": " + l.text).toLowerCase();
      let found = 0, count = 0;
      for (const t of terms) {
        const n = hay.split(t).length - 1;
        if (n) { found += 1; count += n; }
      }
      if (!found) continue;
      const coverage = found / terms.length;
      hits.push({ ...l, score: coverage + 0.01 * Math.min(count, 10), weak: coverage < 0.5 });
    }
    hits.sort((a, b) => b.score - a.score || (b.ts || "").localeCompare(a.ts || ""));
    return { query: p.q, scope: p.scope, hits: hits.slice(0, Number(p.limit || 20)) };
  }

  function splitScope(scope) {
    const i = scope.indexOf(":");
    return i < 0 ? [scope, ""] : [scope.slice(0, i), scope.slice(i + 1)];
  }

  // -- DOM helpers: every string becomes a text node ------------------------------------------------
  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    append(e, kids);
    return e;
  }
  function append(e, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function s(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    append(e, kids);
    return e;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function fill(e, ...kids) { return append(clear(e), kids); }
  const $ = (id) => document.getElementById(id);

  function errorBox(err) {
    vm.errors.push(String(err && err.message ? err.message : err));
    return h("div", { class: "error", role: "alert", text: String(err && err.message ? err.message : err) });
  }

  // Memory text, as text. ``terms`` are marked by splitting the text into text nodes and <mark>s.
  function memText(text, opts) {
    const o = opts || {};
    const e = h("div", { class: "mem" + (o.clamp ? " clamp" : "") });
    const terms = (o.terms || []).filter((t) => t.length > 1);
    if (!terms.length) { e.textContent = text; return e; }
    const re = new RegExp("(" + terms.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|") + ")", "gi");
    let last = 0;
    for (const m of text.matchAll(re)) {
      e.append(document.createTextNode(text.slice(last, m.index)));
      e.append(h("mark", { text: m[0] }));
      last = m.index + m[0].length;
    }
    e.append(document.createTextNode(text.slice(last)));
    return e;
  }

  // Light Markdown for summaries: the text is escaped first, a few tags are added, and DOMPurify
  // keeps only those tags (defence in depth: nothing from memory can become an element or attribute).
  const MD_TAGS = ["p", "ul", "li", "strong", "em", "code", "h4", "h5", "span"];
  function escapeHtml(t) {
    return t.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function inlineMd(t) {
    return escapeHtml(t)
      .replace(/\[\[([^\]|]+)\|([^\]]+)\]\]/g, '<span class="wikilink">$2</span>')
      .replace(/\[\[([^\]]+)\]\]/g, '<span class="wikilink">$1</span>')
      .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
      .replace(/(^|[\s(])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
      .replace(/`([^`]+)`/g, "<code>$1</code>");
  }
  function mdNode(text) {
    const out = [];
    let list = null;
    for (const raw of String(text || "").split("\n")) {
      const line = raw.trimEnd();
      const bullet = line.match(/^\s*[-*]\s+(.*)$/);
      if (bullet) {
        if (!list) list = [];
        list.push("<li>" + inlineMd(bullet[1]) + "</li>");
        continue;
      }
      if (list) { out.push("<ul>" + list.join("") + "</ul>"); list = null; }
      if (!line.trim()) continue;
      const head = line.match(/^(#{1,6})\s+(.*)$/);
      if (head) out.push((head[1].length <= 2 ? "<h4>" : "<h5>") + inlineMd(head[2]) + (head[1].length <= 2 ? "</h4>" : "</h5>"));
      else out.push("<p>" + inlineMd(line) + "</p>");
    }
    if (list) out.push("<ul>" + list.join("") + "</ul>");
    const e = h("div", { class: "md" });
    e.innerHTML = window.DOMPurify.sanitize(out.join(""), { ALLOWED_TAGS: MD_TAGS, ALLOWED_ATTR: ["class"] });
    return e;
  }

  // -- formatting ---------------------------------------------------------------------------------
  const nf = new Intl.NumberFormat("en");
  const fmtInt = (n) => nf.format(n || 0);
  function fmtBytes(b) {
    if (b === null || b === undefined || b < 0) return "…";
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0, v = b;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return (i ? v.toFixed(v < 10 ? 1 : 0) : v) + " " + units[i];
  }
  const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
  function fmtDay(iso) {
    if (!iso) return "—";
    const d = new Date(iso.slice(0, 10) + "T00:00:00Z");
    return d.getUTCDate() + " " + MONTHS[d.getUTCMonth()] + " " + d.getUTCFullYear();
  }
  function fmtTime(iso) {
    if (!iso) return "undated";
    return fmtDay(iso) + (iso.length > 10 ? " " + iso.slice(11, 16) + " UTC" : "");
  }
  function fmtSpan(a, b) {
    if (!a) return "";
    const x = a.slice(0, 10), y = (b || a).slice(0, 10);
    return x === y ? fmtDay(x) : fmtDay(x) + " – " + fmtDay(y);
  }
  function ago(iso) {
    if (!iso) return "";
    const s = (Date.now() - Date.parse(iso)) / 1000;
    if (!isFinite(s)) return "";
    if (s < 60) return "just now";
    if (s < 3600) return Math.round(s / 60) + " min ago";
    if (s < 86400) return Math.round(s / 3600) + " h ago";
    return Math.round(s / 86400) + " days ago";
  }
  function plural(n, one, many) { return fmtInt(n) + " " + (n === 1 ? one : many || one + "s"); }
  function words(text, n) {
    const w = String(text || "").split(/\s+/).filter(Boolean);
    return w.slice(0, n).join(" ") + (w.length > n ? " …" : "");
  }
  function addDays(day, n) {
    const d = new Date(day + "T00:00:00Z");
    d.setUTCDate(d.getUTCDate() + n);
    return d.toISOString().slice(0, 10);
  }

  // -- links back to the files --------------------------------------------------------------------
  const encPath = (p) => p.split("/").map(encodeURIComponent).join("/");
  function obsidianHref(path) {
    return "obsidian://open?vault=" + encodeURIComponent(state.vault.name) + "&file=" + encodeURIComponent(path.replace(/\.md$/, ""));
  }
  function fileHref(path) {
    return OFFLINE ? "file://" + encPath(state.vault.root + "/" + path) : "file/" + encPath(path);
  }
  function fileLinks(path) {
    if (!path) return null;
    return h("div", { class: "links" },
      h("a", { href: obsidianHref(path), class: "obsidian-link", text: "Open in Obsidian" }),
      h("a", { href: fileHref(path), class: "file-link", target: "_blank", rel: "noopener", text: path }));
  }

  // A memory (search hit, fact, leaf) as a card.
  function memCard(m, opts) {
    const o = opts || {};
    const meta = h("div", { class: "meta" },
      m.kind === "summary" ? h("span", { class: "badge badge-accent", text: "summary" }) : null,
      m.weak ? h("span", { class: "badge badge-warn", title: "Few of the question's words and a low similarity: maybe not about it", text: "weak match" }) : null,
      h("span", { class: "badge", text: m.source }),
      m.speaker ? h("span", { text: m.speaker }) : null,
      h("span", { text: fmtTime(m.ts) }),
      m.session ? h("span", { class: "faint", text: "session " + m.session }) : null,
      o.score !== undefined ? h("span", { class: "faint", text: "score " + Number(o.score).toFixed(3) }) : null);
    return h("article", { class: "mcard" + (m.weak ? " weak" : ""), data: { id: m.id } },
      meta, memText(m.text, { clamp: o.clamp, terms: o.terms }), fileLinks(m.path));
  }

  // -- theme --------------------------------------------------------------------------------------
  const THEMES = ["auto", "light", "dark"];
  function storedTheme() {
    try { return localStorage.getItem("vaultmem-theme") || "auto"; } catch (e) { return "auto"; }
  }
  function applyTheme(choice) {
    const dark = choice === "dark" || (choice === "auto" && window.matchMedia("(prefers-color-scheme: dark)").matches);
    document.documentElement.dataset.theme = dark ? "dark" : "light";
    $("theme-toggle").textContent = "Theme: " + choice;
    try { localStorage.setItem("vaultmem-theme", choice); } catch (e) { /* a file:// page may refuse */ }
    if (vm.cy) styleGraph(vm.cy);
    if (state.panel === "heatmap" && state.loaded.heatmap) state.loaded.heatmap = false;
  }
  $("theme-toggle").addEventListener("click", () => {
    const next = THEMES[(THEMES.indexOf(storedTheme()) + 1) % THEMES.length];
    applyTheme(next);
  });
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme(storedTheme()));
  applyTheme(storedTheme());
  const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  // -- routing ------------------------------------------------------------------------------------
  const PANELS = ["status", "metrics", "graph", "heatmap", "search", "tree", "review", "today"];
  const RENDER = {};
  function route() {
    const [name, ...rest] = location.hash.replace(/^#/, "").split("/");
    const panel = PANELS.includes(name) ? name : "status";
    const arg = rest.length ? decodeURIComponent(rest.join("/")) : null;
    state.panel = panel;
    for (const p of PANELS) {
      $("panel-" + p).classList.toggle("active", p === panel);
      document.querySelector('#nav a[data-panel="' + p + '"]').classList.toggle("active", p === panel);
    }
    document.title = "vaultmem · " + $("h-" + panel).textContent + (state.vault ? " · " + state.vault.name : "");
    if (panel !== "status" && state.statusTimer) { clearInterval(state.statusTimer); state.statusTimer = null; }
    Promise.resolve(RENDER[panel](arg)).catch((err) => fill($(panel === "graph" ? "graph-toolbar" : panel + "-body"), errorBox(err)));
  }
  window.addEventListener("hashchange", route);

  // -- 1 status -----------------------------------------------------------------------------------
  const KIND_LABEL = {
    ingest: "ingest", admit: "embed & admit", append_buffer: "check buffer", seal: "seal", flush_stale: "seal stale",
    resummarise: "re-summarise", topic_route: "route topic", digest_daily: "daily digest", session_end: "session note",
    detect_updates: "look for updates",
  };

  async function loadStatus() {
    const st = await api("status");
    renderStatus(st);
    if (!performance.getEntriesByName("status-drawn").length) performance.mark("status-drawn"); // bench/dashboard.py
    ready("status", true);
    return st;
  }

  RENDER.status = async function () {
    await loadStatus();
    if (!OFFLINE && !state.statusTimer) {
      state.statusTimer = setInterval(() => { if (state.panel === "status") loadStatus().catch(() => {}); }, 2000);
    }
  };

  function renderStatus(st) {
    const body = $("status-body");
    const flash = $("status-flash") || h("div", { class: "flash", id: "status-flash", role: "status" });
    const d = st.daemon || {};
    const busy = st.state !== "idle";
    const stateCard = h("div", { class: "card" },
      h("h2", { text: "Engine" }),
      h("div", { class: "state" },
        h("span", { class: "dot " + (st.state === "idle" ? "dot-idle" : st.state === "waiting" ? "dot-warn" : "dot-ok") }),
        h("span", { class: "state-word", id: "engine-state", text: st.state })),
      h("p", { class: "muted small", text: busy ? "Queued work runs in the watch daemon, or here after a request." : "Nothing is running and nothing waits." }),
      st.read_only ? h("p", { class: "badge badge-warn", text: "read-only: " + st.read_only }) : null,
      st.git ? h("p", { class: "small", id: "git-busy" }, h("span", { class: "badge badge-warn", text: "paused for git" }), " ", st.git.why + ". Writes wait until it ends: " + st.git.advice + ".") : null);
    const daemonCard = h("div", { class: "card" },
      h("h2", { text: "Watch daemon" }),
      h("div", { class: "row" },
        h("span", { class: "dot " + (!d.running ? "dot-idle" : d.state === "running" ? "dot-ok" : "dot-warn") }),
        h("strong", { id: "daemon-state", text: !d.running ? "not running" : d.state || "running" })),
      d.paused ? h("p", { class: "small", id: "daemon-paused", text: "Paused since " + fmtTime(d.paused.since) + ": " + d.paused.why + ". " + (d.paused.advice ? "To resume: " + d.paused.advice + "." : "") }) : null,
      h("dl", { class: "kv", style: null },
        d.running ? [h("dt", { text: "process" }), h("dd", { text: "pid " + d.pid + " on " + d.host })] : null,
        d.running ? [h("dt", { text: "since" }), h("dd", { text: fmtTime(d.since) })] : null,
        h("dt", { text: "last event" }), h("dd", { id: "last-event", text: d.last_event || "—" }),
        h("dt", { text: "last rescan" }), h("dd", { text: d.last_rescan ? fmtTime(d.last_rescan) : "—" })),
      d.running ? null : h("p", { class: "muted small" }, "Start it with ", h("code", { text: "vaultmem watch" }), " to keep the index in step with hand edits."));

    const kinds = Object.keys(st.queue || {});
    const max = Math.max(1, ...kinds.map((k) => Object.values(st.queue[k]).reduce((a, b) => a + b, 0)));
    const queueCard = h("div", { class: "card" },
      h("h2", { text: "Queue" }),
      kinds.length
        ? h("table", { id: "queue-table" },
          h("thead", {}, h("tr", {}, h("th", { text: "job" }), h("th", { class: "num", text: "queued" }), h("th", { class: "num", text: "running" }), h("th", { class: "num", text: "parked" }), h("th", {}))),
          h("tbody", {}, kinds.map((k) => {
            const q = st.queue[k];
            const bar = h("div", { class: "qbar" });
            for (const [state2, color] of [["running", "--ok"], ["queued", "--accent"], ["parked", "--bad"]]) {
              const seg = h("span");
              seg.style.width = (100 * (q[state2] || 0) / max) + "%";
              seg.style.background = cssVar(color);
              bar.append(seg);
            }
            return h("tr", { data: { kind: k } },
              h("td", { title: k, text: KIND_LABEL[k] || k }),
              h("td", { class: "num queued", text: fmtInt(q.queued) }),
              h("td", { class: "num running", text: fmtInt(q.running) }),
              h("td", { class: "num parked", text: fmtInt(q.parked) }),
              h("td", { style: null }, bar));
          })))
        : h("p", { class: "muted", id: "queue-empty", text: "The queue is empty." }));

    const parkedCard = h("div", { class: "card" },
      h("h2", { text: "Parked jobs" }),
      st.parked.length
        ? h("div", { class: "stack" }, st.parked.map((j) => h("div", {},
          h("div", { class: "row" }, h("span", { class: "badge badge-bad", text: KIND_LABEL[j.kind] || j.kind }), h("span", { class: "faint small", text: "job " + j.id + " · " + j.attempts + " attempts" })),
          j.error ? h("div", { class: "small muted mem", text: j.error }) : null)))
        : h("p", { class: "muted", text: "None: every job that failed was retried successfully." }),
      st.parked.length ? h("p", { class: "small muted" }, h("code", { text: "vaultmem jobs --retry" }), " puts them back in the queue.") : null);

    const disabled = !st.actions;
    const why = st.read_only ? "the vault is read-only" : "the dashboard was started with --read-only";
    const sourceRows = st.sources.map((src) =>
      h("div", { class: "source-row", data: { source: src.name } },
        h("div", {}, h("strong", { text: src.name }), " ", src.exists ? null : h("span", { class: "badge badge-bad", text: "missing" }),
          h("div", { class: "path", text: src.path })),
        h("button", { class: "btn btn-small ingest-btn", type: "button", disabled: disabled || !src.exists, title: disabled ? "Disabled: " + why : "Queue an ingest of " + src.path,
          onclick: (ev) => request(ev.currentTarget, "ingest", { source: src.name }) }, "Run ingest")));
    const actionsCard = h("div", { class: "card span-2" },
      h("div", { class: "row spread" },
        h("h2", { text: "Sources and compaction" }),
        h("button", { class: "btn btn-primary", id: "compact-btn", type: "button", disabled, title: disabled ? "Disabled: " + why : "Seal, condense and re-summarise through the queue",
          onclick: (ev) => request(ev.currentTarget, "compact", {}) }, "Compact now")),
      sourceRows.length
        ? h("div", {}, sourceRows)
        : h("p", { class: "muted" }, "No configured source folders. Add them to ", h("code", { text: ".vaultmem/config.toml" }), ":", h("pre", { class: "diff", text: '[sources]\nmail = "~/Mail/inbox.mbox"\nnotes = "~/notes"' })),
      disabled ? h("p", { class: "small muted", text: "Buttons are off: " + why + "." }) : null,
      st.runner && st.runner.last ? h("p", { class: "small muted", id: "runner-last", text: "Last run here: " + st.runner.last + (st.runner.running ? " (running)" : "") }) : null,
      flash);
    fill(body, h("div", { class: "grid grid-2" }, stateCard, daemonCard, queueCard, parkedCard, actionsCard));
  }

  async function request(button, name, body) {
    const flash = $("status-flash");
    button.disabled = true;
    try {
      const r = await post(name, body);
      flash.className = "flash";
      flash.textContent = r.message;
      await loadStatus();
      $("status-flash").textContent = r.message;
    } catch (err) {
      flash.className = "flash bad";
      flash.textContent = err.message;
    } finally {
      button.disabled = false;
    }
  }

  // -- 2 metrics ----------------------------------------------------------------------------------
  const STATUS_COLOR = { admitted: "--accent", sealed: "--ok", pending_extraction: "--warn", dropped: "--faint", stale: "--bad" };
  RENDER.metrics = async function () {
    const m = await api("metrics");
    const tile = (label, value, hint, id, small) => h("div", { class: "card tile" },
      h("div", { class: "label", text: label }),
      h("div", { class: "value" + (small ? " small-value" : ""), id, text: value }),
      hint ? h("div", { class: "hint", text: hint }) : null);
    const total = Object.values(m.by_status).reduce((a, b) => a + b, 0) || 1;
    const stacked = h("div", { class: "stacked" });
    const legend = h("div", { class: "legend" });
    for (const [st, n] of Object.entries(m.by_status).sort((a, b) => b[1] - a[1])) {
      const seg = h("span", { title: st + ": " + fmtInt(n) });
      seg.style.width = (100 * n / total) + "%";
      seg.style.background = cssVar(STATUS_COLOR[st] || "--muted");
      stacked.append(seg);
      const dot = h("i", { class: "kind-dot" });
      dot.style.background = cssVar(STATUS_COLOR[st] || "--muted");
      legend.append(h("span", { data: { status: st } }, dot, st.replace("_", " ") + " ", h("strong", { text: fmtInt(n) })));
    }
    const biggest = Math.max(1, ...m.sources.map((s2) => s2.leaves));
    const bars = h("div", { class: "bars" }, m.sources.slice().sort((a, b) => b.leaves - a.leaves).slice(0, 30).map((s2) => {
      const f = h("div", { class: "fill" });
      f.style.width = Math.max(1, 100 * s2.leaves / biggest) + "%";
      return h("div", { class: "bar-row" }, h("span", { class: "name", title: s2.name, text: s2.name }), h("div", { class: "track" }, f), h("span", { class: "num muted", text: fmtInt(s2.leaves) }));
    }));
    const storage = m.storage;
    fill($("metrics-body"),
      h("div", { class: "grid grid-4" },
        tile("Leaves", fmtInt(m.leaves), "verbatim memories", "m-leaves"),
        tile("Summaries", fmtInt(m.summaries), "levels, topics and digests", "m-summaries"),
        tile("Topics", fmtInt(m.topics), "entities followed in topics/", "m-topics"),
        tile("Sources", fmtInt(m.sources.length), m.sources.slice(0, 3).map((x) => x.name).join(", ") + (m.sources.length > 3 ? "…" : ""), "m-sources"),
        tile("Files", storage ? fmtBytes(storage.files) : "measuring…", "Markdown and sidecars", "m-files"),
        tile("Index", storage ? fmtBytes(storage.index) : "measuring…", "chunks.db: rebuildable", "m-index"),
        tile("First memory", fmtDay(m.first_memory), m.first_memory ? m.first_memory.slice(11, 16) + " UTC" : "", "m-first", true),
        tile("Latest memory", fmtDay(m.latest_memory), m.latest_memory ? ago(m.latest_memory) : "", "m-latest", true)),
      h("div", { class: "grid grid-2", style: null },
        h("div", { class: "card" }, h("h2", { text: "Leaves by status" }), stacked, legend),
        h("div", { class: "card" }, h("h2", { text: "Leaves per source" }), bars)));
    $("metrics-body").lastChild.style.marginTop = "16px";
    ready("metrics", true);
  };

  // -- 3 graph ------------------------------------------------------------------------------------
  const KIND_COLOR = {
    person: "#6366f1", place: "#10b981", org: "#f59e0b", product: "#ec4899", event: "#ef4444", project: "#8b5cf6",
    repo: "#64748b", url: "#0ea5e9", version: "#84cc16", date: "#14b8a6", money: "#eab308", email: "#06b6d4", ticker: "#f97316",
  };
  const graphOpts = { limit: 300, min_weight: 1 };
  // Kinds that are mostly noise in a picture of who and what: shown on request (their chip).
  const QUIET_KINDS = new Set(["date", "money", "version", "email", "url"]);
  const hiddenKinds = new Set(QUIET_KINDS);

  function styleGraph(cy) {
    const text = cssVar("--text"), bg = cssVar("--surface"), edge = cssVar("--border-strong"), accent = cssVar("--accent");
    cy.style([
      { selector: "node", style: {
        "background-color": "data(color)", width: "data(size)", height: "data(size)", label: "data(name)",
        "font-size": "data(font)", "font-family": "system-ui, sans-serif", "font-weight": 500, color: text,
        "text-valign": "bottom", "text-margin-y": 3, "text-outline-color": bg, "text-outline-width": 2,
        "text-outline-opacity": 0.9, "min-zoomed-font-size": 6, "border-width": 1.5, "border-color": bg } },
      { selector: "node:selected", style: { "border-width": 3, "border-color": accent } },
      { selector: "node.faded", style: { opacity: 0.15 } },
      { selector: "node.off", style: { display: "none" } },
      { selector: "edge", style: { width: "data(w)", "line-color": edge, opacity: 0.5, "curve-style": "haystack" } },
      { selector: "edge.faded", style: { opacity: 0.05 } },
      { selector: "edge.near", style: { "line-color": accent, opacity: 0.85 } },
    ]);
  }

  function graphLayout(cy, animate) {
    const shown = cy.elements().filter((e) => (e.isNode() ? !e.hasClass("off") : !e.source().hasClass("off") && !e.target().hasClass("off")));
    const layout = shown.layout({
      name: "cose", animate: animate && shown.nodes().length <= 400 ? "end" : false, animationDuration: 400, randomize: true,
      fit: true, padding: 40, nodeRepulsion: () => 6000, idealEdgeLength: () => 55, edgeElasticity: () => 90,
      gravity: 30, numIter: 1500, componentSpacing: 40, nodeDimensionsIncludeLabels: true,
    });
    return new Promise((resolve) => { layout.one("layoutstop", resolve); layout.run(); });
  }

  function visibleCount(cy) {
    const nodes = cy.nodes().filter((n) => !n.hasClass("off"));
    return nodes.length;
  }

  RENDER.graph = async function (arg) {
    if (!state.loaded.graph) {
      state.loaded.graph = true;
      try {
        await drawGraph();
      } catch (err) {
        state.loaded.graph = false;
        throw err;
      }
    }
    if (arg) openTopic(arg);
  };

  async function drawGraph() {
    ready("graph", false);
    const g = await api("graph", graphOpts);
    const toolbar = $("graph-toolbar");
    const kinds = {};
    for (const n of g.nodes) kinds[n.kind] = (kinds[n.kind] || 0) + 1;
    // A picture of only quiet kinds would be empty: then show them all.
    if (Object.keys(kinds).every((k) => hiddenKinds.has(k))) hiddenKinds.clear();
    const limitSel = h("select", { id: "graph-limit", "aria-label": "Entities shown", onchange: (ev) => { graphOpts.limit = Number(ev.target.value); state.loaded.graph = false; RENDER.graph(); } },
      [50, 100, 300, 600].map((n) => h("option", { value: n, selected: n === graphOpts.limit, text: "top " + n + " by heat" })));
    const weightSel = h("select", { id: "graph-weight", "aria-label": "Shared memories", onchange: (ev) => { graphOpts.min_weight = Number(ev.target.value); state.loaded.graph = false; RENDER.graph(); } },
      [1, 2, 3, 5].map((n) => h("option", { value: n, selected: n === graphOpts.min_weight, text: n === 1 ? "any shared memory" : "≥ " + n + " shared memories" })));
    const find = h("input", { type: "search", placeholder: "Find an entity…", id: "graph-find", "aria-label": "Find an entity" });
    find.addEventListener("input", () => highlight(find.value.trim().toLowerCase()));
    const count = h("span", { class: "muted small", id: "graph-count" });
    const chips = Object.keys(kinds).sort((a, b) => kinds[b] - kinds[a]).map((k) => {
      const dot = h("span", { class: "kind-dot" });
      dot.style.background = KIND_COLOR[k] || "#888";
      const chip = h("button", { type: "button", class: "chip chip-toggle", "aria-pressed": String(!hiddenKinds.has(k)), data: { kind: k }, title: "Show or hide " + k },
        dot, k + " ", h("span", { class: "faint", text: String(kinds[k]) }));
      chip.addEventListener("click", async () => {
        if (hiddenKinds.has(k)) hiddenKinds.delete(k); else hiddenKinds.add(k);
        chip.setAttribute("aria-pressed", String(!hiddenKinds.has(k)));
        if (!vm.cy) return;
        vm.cy.nodes().forEach((n) => n.toggleClass("off", hiddenKinds.has(n.data("kind"))));
        ready("graph", false);
        await graphLayout(vm.cy, true);
        markDrawn();
      });
      return chip;
    });
    fill(toolbar, OFFLINE ? null : limitSel, OFFLINE ? null : weightSel, find, h("div", { class: "chips", id: "graph-legend" }, chips), h("span", { class: "spacer" }), count);
    const container = $("cy");
    container.dataset.ready = "";
    if (vm.cy) { vm.cy.destroy(); vm.cy = null; }
    const markDrawn = () => {
      const shown = vm.cy ? visibleCount(vm.cy) : 0;
      count.textContent = plural(shown, "entity", "entities") + " shown of " + fmtInt(g.nodes.length) + " · " + plural(g.edges.length, "link");
      container.dataset.ready = "1";
      container.dataset.nodes = String(shown);
      ready("graph", true);
    };
    if (!g.nodes.length) {
      fill(container, h("div", { class: "graph-empty", text: "No entities yet: they appear as leaves are admitted." }));
      markDrawn();
      return;
    }
    clear(container);
    const maxHeat = Math.max(0.001, ...g.nodes.map((n) => n.heat));
    const maxW = Math.max(1, ...g.edges.map((e) => e.weight));
    const elements = [
      ...g.nodes.map((n) => {
        const r = Math.sqrt(n.heat / maxHeat);
        return { data: { id: n.key, name: n.name, kind: n.kind, color: KIND_COLOR[n.kind] || "#888", size: 16 + 44 * r, font: 13 + 7 * r }, classes: hiddenKinds.has(n.kind) ? "off" : "" };
      }),
      ...g.edges.map((e, i) => ({ data: { id: "e" + i, source: e.source, target: e.target, w: 0.5 + 3.5 * (e.weight / maxW) } })),
    ];
    const cy = (vm.cy = window.cytoscape({ container, elements, minZoom: 0.15, maxZoom: 4, boxSelectionEnabled: false }));
    styleGraph(cy);
    cy.on("tap", "node", (ev) => { location.hash = "#graph/" + encodeURIComponent(ev.target.id()); });
    cy.on("tap", (ev) => { if (ev.target === cy) closeTopic(); });
    await graphLayout(cy, true);
    markDrawn();
  }

  function highlight(q) {
    const cy = vm.cy;
    if (!cy) return;
    cy.elements().removeClass("faded near");
    if (!q) return;
    const hit = cy.nodes().filter((n) => n.data("name").toLowerCase().includes(q));
    if (!hit.length) return;
    const keep = hit.closedNeighborhood();
    cy.elements().not(keep).addClass("faded");
    hit.connectedEdges().addClass("near");
  }

  function closeTopic() {
    $("topic-drawer").hidden = true;
    if (vm.cy) {
      vm.cy.elements().removeClass("faded near");
      vm.cy.nodes().unselect();
      vm.cy.resize();
      vm.cy.animate({ fit: { eles: vm.cy.elements().filter((e) => e.visible()), padding: 40 }, duration: 300 });
    }
    if (location.hash.startsWith("#graph/")) history.replaceState(null, "", "#graph");
  }

  async function openTopic(key) {
    const drawer = $("topic-drawer");
    drawer.hidden = false;
    fill(drawer, h("div", { class: "loading", text: "Loading…" }));
    if (vm.cy) {
      const cy = vm.cy;
      const node = cy.getElementById(key);
      cy.resize(); // the drawer took part of the width
      if (node.length) {
        cy.elements().removeClass("faded near").unselect();
        node.select();
        cy.elements().not(node.closedNeighborhood()).addClass("faded");
        node.connectedEdges().addClass("near");
        cy.animate({ fit: { eles: node.closedNeighborhood().filter((e) => !e.hasClass("off")), padding: 70 }, duration: 300 });
      }
    }
    let t;
    try {
      t = await api("topic", { key });
    } catch (err) {
      fill(drawer, errorBox(err));
      return;
    }
    const e = t.entity;
    const dot = h("span", { class: "kind-dot" });
    dot.style.background = KIND_COLOR[e.kind] || "#888";
    fill(drawer,
      h("div", { class: "row spread" },
        h("span", { class: "chip" }, dot, e.kind),
        h("button", { class: "btn btn-small btn-ghost", type: "button", "aria-label": "Close", onclick: closeTopic, text: "✕" })),
      h("h2", { id: "topic-name", text: e.name }),
      h("div", { class: "muted small" },
        plural(e.leaves, "memory", "memories") + " · " + plural(e.sources, "source") + " · heat " + Number(e.heat).toFixed(1),
        e.first_seen ? " · " + fmtSpan(e.first_seen, e.last_seen) : ""),
      h("div", { class: "row", style: null },
        e.topic ? h("a", { class: "btn btn-small", href: obsidianHref(e.topic), text: "Topic page in Obsidian" }) : null,
        h("a", { class: "btn btn-small", href: "#search", onclick: () => { pendingScope = "topic:" + e.key; }, text: "Search this topic" })),
      h("section", { id: "topic-state" }, h("h3", { text: "Latest state" }),
        t.summary ? mdNode(t.summary.replace(/\n## Children[\s\S]*$/, "")) : h("p", { class: "muted small", text: "No topic page yet: one is made once the entity is hot enough." })),
      h("section", { id: "topic-facts" }, h("h3", { text: "Key facts" }), t.facts.length ? t.facts.map((m) => memCard(m, { clamp: true })) : h("p", { class: "muted small", text: "—" })),
      h("section", { id: "topic-recent" }, h("h3", { text: "Recent" }), t.recent.length ? t.recent.map((m) => memCard(m, { clamp: true })) : h("p", { class: "muted small", text: "—" })));
    ready("topic", key);
  }

  // -- 4 heatmap ----------------------------------------------------------------------------------
  let heatSource = "";
  const heatLevel = (n, max) => (n <= 0 ? 0 : Math.min(4, Math.ceil((4 * n) / max)));
  const dayCount = (first, last) => Math.round((Date.parse(last) - Date.parse(first)) / 86400000) + 1;

  // A contribution-style grid: a column per week (Monday first), a cell per day with its count.
  function heatGrid(d, width) {
    const first = d.first, last = d.last, days = d.days;
    const max = Math.max(1, ...Object.values(days));
    const total = dayCount(first, last);
    const startDow = (new Date(first + "T00:00:00Z").getUTCDay() + 6) % 7;
    const weeks = Math.ceil((startDow + total) / 7);
    const left = 32, top = 20;
    const step = Math.max(10, Math.min(22, Math.floor((width - left) / weeks)));
    const cell = step - 3;
    const w = left + weeks * step, hgt = top + 7 * step;
    const svgEl = s("svg", { width: w, height: hgt, viewBox: "0 0 " + w + " " + hgt, role: "img", "aria-label": "Memories per day", id: "heat-svg" });
    ["Mon", "", "Wed", "", "Fri", "", "Sun"].forEach((label, i) => { if (label) svgEl.append(s("text", { x: 0, y: top + i * step + cell - 2 }, label)); });
    let lastLabelX = -100;
    for (let i = 0; i < total; i++) {
      const day = addDays(first, i);
      const n = days[day] || 0;
      const pos = startDow + i;
      const x = left + Math.floor(pos / 7) * step, y = top + (pos % 7) * step;
      if (day.slice(8) === "01" || (i === 0 && Number(day.slice(8)) <= 10)) {
        const labelX = left + Math.floor(pos / 7) * step;
        if (labelX - lastLabelX >= 3 * step) {
          svgEl.append(s("text", { x: labelX, y: 12 }, MONTHS[Number(day.slice(5, 7)) - 1] + (day.slice(5, 7) === "01" || i === 0 ? " " + day.slice(0, 4) : "")));
          lastLabelX = labelX;
        }
      }
      svgEl.append(s("rect", { x, y, width: cell, height: cell, rx: 2.5, class: "cell l" + heatLevel(n, max), "data-day": day, "data-count": n },
        s("title", {}, fmtDay(day) + ": " + plural(n, "memory", "memories"))));
    }
    svgEl.addEventListener("click", (ev) => {
      const day = ev.target.getAttribute && ev.target.getAttribute("data-day");
      if (day) location.hash = "#today/" + day;
    });
    return svgEl;
  }

  // One thin strip per source: the day a source went quiet stands out.
  function heatStrip(d, width) {
    const total = dayCount(d.first, d.last);
    const max = Math.max(1, ...Object.values(d.days));
    const step = Math.max(1, (width - 4) / total);
    const svgEl = s("svg", { width: Math.ceil(step * total), height: 16, class: "strip", role: "img", "aria-label": "Memories per day of " + d.source });
    for (let i = 0; i < total; i++) {
      const day = addDays(d.first, i);
      const n = d.days[day] || 0;
      if (!n) continue;
      svgEl.append(s("rect", { x: (i * step).toFixed(2), y: 0, width: Math.max(1.5, step - 0.5).toFixed(2), height: 16, class: "cell l" + heatLevel(n, max), "data-day": day, "data-count": n },
        s("title", {}, d.source + ", " + fmtDay(day) + ": " + plural(n, "memory", "memories"))));
    }
    return svgEl;
  }

  RENDER.heatmap = async function () {
    const d = await api("heatmap", { source: heatSource });
    const first = d.first, last = d.last, days = d.days;
    const total = dayCount(first, last);
    let active = 0, longest = 0, gapLen = 0, busiest = null, seenFirst = false, bestGap = null;
    for (let i = 0; i < total; i++) {
      const day = addDays(first, i);
      const n = days[day] || 0;
      if (n) {
        active += 1;
        if (!busiest || n > busiest[1]) busiest = [day, n];
        if (seenFirst && gapLen > longest) { longest = gapLen; bestGap = [addDays(day, -gapLen), addDays(day, -1)]; }
        seenFirst = true;
        gapLen = 0;
      } else if (seenFirst) gapLen += 1;
    }
    const sel = h("select", { id: "heat-source", "aria-label": "Source", onchange: (ev) => { heatSource = ev.target.value; RENDER.heatmap(); } },
      h("option", { value: "", text: "All sources", selected: !heatSource }),
      d.sources.map((src) => h("option", { value: src, text: src, selected: src === heatSource })));
    const tile = (label, value, hint, id) => h("div", { class: "card tile" }, h("div", { class: "label", text: label }), h("div", { class: "value small-value", id, text: value }), hint ? h("div", { class: "hint", text: hint }) : null);
    const gridCard = h("div", { class: "card heat" });
    const stripsCard = h("div", { class: "card heat", id: "heat-sources" }, h("h2", { text: "By source" }));
    const body = $("heatmap-body");
    fill(body,
      h("div", { class: "toolbar" }, h("label", {}, "Source", sel), h("span", { class: "spacer" }), h("span", { class: "muted small", text: fmtDay(first) + " – " + fmtDay(last) })),
      h("div", { class: "grid grid-4" },
        tile("Memories", fmtInt(d.total), "in these 365 days", "heat-total"),
        tile("Active days", fmtInt(active), Math.round((100 * active) / total) + "% of days", "heat-active"),
        tile("Busiest day", busiest ? fmtDay(busiest[0]) : "—", busiest ? plural(busiest[1], "memory", "memories") : ""),
        tile("Longest silence", longest ? plural(longest, "day") : "—", bestGap ? fmtDay(bestGap[0]) + " – " + fmtDay(bestGap[1]) : "between active days")),
      gridCard, heatSource || d.sources.length < 2 ? null : stripsCard);
    gridCard.style.marginTop = "16px";
    stripsCard.style.marginTop = "16px";
    const inner = gridCard.clientWidth - 40;
    append(gridCard, [h("div", { class: "heat-wrap" }, heatGrid(d, inner)),
      h("div", { class: "heat-legend" }, "Less", h("i", { class: "h0" }), h("i", { class: "h1" }), h("i", { class: "h2" }), h("i", { class: "h3" }), h("i", { class: "h4" }), "More")]);
    state.loaded.heatmap = true;
    ready("heatmap", true);
    if (!heatSource && d.sources.length >= 2) {
      const shown = d.sources.slice(0, 24);
      const per = await Promise.all(shown.map((src) => api("heatmap", { source: src, last: d.last }).catch(() => null)));
      const width = stripsCard.clientWidth - 40 - 200;
      for (const one of per) {
        if (!one) continue;
        const lastDay = Object.keys(one.days).sort().pop();
        const quiet = lastDay ? dayCount(lastDay, d.last) - 1 : null;
        stripsCard.append(h("div", { class: "strip-row", data: { source: one.source } },
          h("div", { class: "strip-name" }, h("a", { href: "#heatmap", text: one.source, onclick: (ev) => { ev.preventDefault(); heatSource = one.source; RENDER.heatmap(); } }),
            h("div", { class: "faint small", text: lastDay ? (quiet === 0 ? "active on the last day" : "quiet for " + plural(quiet, "day")) : "nothing this year" })),
          heatStrip(one, width)));
      }
      if (d.sources.length > shown.length) stripsCard.append(h("p", { class: "muted small", text: "and " + (d.sources.length - shown.length) + " more sources: pick one above." }));
    }
  };

  // -- 5 search -----------------------------------------------------------------------------------
  let pendingScope = null;
  let searchBuilt = false;
  RENDER.search = async function () {
    if (!searchBuilt) {
      searchBuilt = true;
      await buildSearch();
    }
    if (pendingScope) {
      const sel = $("search-scope");
      if (![...sel.options].some((o) => o.value === pendingScope)) sel.append(h("option", { value: pendingScope, text: "topic: " + pendingScope }));
      sel.value = pendingScope;
      pendingScope = null;
    }
    $("search-q").focus();
  };

  async function buildSearch() {
    const [metrics, topics] = await Promise.all([api("metrics"), api("topics").catch(() => [])]);
    const q = h("input", { type: "search", id: "search-q", name: "q", placeholder: "Ask your memory… e.g. when is the ryokan check-in?", autocomplete: "off", "aria-label": "Search" });
    const scope = h("select", { id: "search-scope", "aria-label": "Scope" },
      h("option", { value: "all", text: "Everywhere" }),
      h("optgroup", { label: "Source" }, metrics.sources.map((x) => h("option", { value: "source:" + x.name, text: x.name }))),
      topics.length ? h("optgroup", { label: "Topic" }, topics.map((t) => h("option", { value: "topic:" + t.key, text: t.name + " (" + t.kind + ")" }))) : null);
    const since = h("input", { type: "date", id: "search-since", "aria-label": "From", title: "From this day" });
    const until = h("input", { type: "date", id: "search-until", "aria-label": "Until", title: "Until this day" });
    const results = h("div", { id: "search-results" });
    const form = h("form", { class: "search-form", id: "search-form", role: "search" }, q, scope, since, until,
      h("button", { class: "btn btn-primary", type: "submit", text: "Search" }));
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      if (!q.value.trim()) return;
      fill(results, h("div", { class: "loading", text: "Searching…" }));
      ready("search", false);
      try {
        const r = await api("search", { q: q.value, scope: scope.value, since: since.value, until: until.value });
        const terms = queryTerms(q.value);
        const weak = r.hits.filter((x) => x.weak).length;
        fill(results,
          h("p", { class: "results-head", id: "search-count" },
            r.hits.length ? plural(r.hits.length, "hit") : "No memory matches.",
            weak && weak === r.hits.length ? " All of them are weak matches: the vault may not know this." : weak ? " (" + weak + " weak)" : "",
            OFFLINE ? " Offline snapshot: matched by words, not by meaning." : ""),
          r.hits.map((x) => memCard(x, { terms, score: x.score })));
      } catch (err) {
        fill(results, errorBox(err));
      }
      ready("search", true);
    });
    fill($("search-body"), form, results);
  }

  // -- 6 tree -------------------------------------------------------------------------------------
  const ICONS = {
    source: "M3 7h6l2 2h10v10H3z",
    summary: "M5 4h14v16H5zM8 8h8M8 12h8M8 16h5",
    leaf: "M6 3h9l4 4v14H6zM14 3v5h5",
  };
  RENDER.tree = async function () {
    if (state.loaded.tree) return;
    const r = await api("children", {});
    const root = h("ul", { class: "tree", id: "tree-root", role: "tree" });
    for (const item of r.items) root.append(treeNode(item));
    fill($("tree-body"), h("div", { class: "card" }, r.items.length ? root : h("p", { class: "muted", text: "The vault holds no sources yet." })));
    state.loaded.tree = true;
    ready("tree", true);
  };

  function treeNode(item) {
    const kind = item.kind;
    const li = h("li", { class: "tnode kind-" + kind, role: "treeitem", data: { id: item.id, kind } });
    const caret = h("button", { class: "caret", type: "button", "aria-expanded": "false", "aria-label": "Expand", text: "▶" });
    const meta = h("span", { class: "tmeta" });
    const part = (text) => h("span", { text });
    if (kind === "source") meta.append(part(plural(item.descendants, "leaf", "leaves")));
    if (kind === "summary") {
      append(meta, [item.stale ? h("span", { class: "badge badge-warn stale", title: "Its summary is behind its children; compaction re-summarises it", text: "stale" }) : null,
        part(fmtSpan(item.ts, item.ts_end)), part(plural(item.descendants, "leaf", "leaves"))]);
    }
    if (kind === "leaf") append(meta, [item.speaker ? part(item.speaker) : null, part(fmtTime(item.ts))]);
    const title = kind === "leaf" ? words(item.text, 14) : item.title || "(untitled level)";
    const row = h("div", { class: "trow" }, caret,
      s("svg", { class: "ticon", viewBox: "0 0 24 24", "aria-hidden": "true" }, s("path", { d: ICONS[kind] || ICONS.leaf })),
      h("span", { class: "ttitle", title, text: title }), meta);
    li.append(row);
    let open = false, box = null;
    const toggle = async () => {
      open = !open;
      caret.setAttribute("aria-expanded", String(open));
      li.setAttribute("aria-expanded", String(open));
      if (!open) { if (box) box.hidden = true; return; }
      if (box) { box.hidden = false; return; }
      box = h("div", { class: "tchildren" });
      li.append(box);
      if (kind === "leaf") {
        box.append(h("div", { class: "tdetail" }, memText(item.text), h("div", { class: "muted small", text: item.path }), fileLinks(item.path)));
        return;
      }
      if (kind === "summary" && item.text) box.append(h("div", { class: "tdetail" }, mdNode(item.text), fileLinks(item.path)));
      const list = h("ul", { role: "group" });
      box.append(list);
      await loadChildren(item, list, 0);
    };
    row.addEventListener("click", toggle);
    return li;
  }

  async function loadChildren(item, list, offset) {
    const params = item.kind === "source" ? { source: item.id, offset, limit: 100 } : { node: item.id, offset, limit: 100 };
    let r;
    try {
      r = await api("children", params);
    } catch (err) {
      list.append(errorBox(err));
      return;
    }
    for (const child of r.items) list.append(treeNode(child));
    const shown = offset + r.items.length;
    if (shown < r.total) {
      const more = h("li", { class: "tmore" }, h("button", { class: "btn btn-small", type: "button", text: "Show " + Math.min(100, r.total - shown) + " more (" + fmtInt(shown) + " of " + fmtInt(r.total) + ")",
        onclick: async () => { more.remove(); await loadChildren(item, list, shown); } }));
      list.append(more);
    }
    if (!r.total) list.append(h("li", { class: "muted small tmore", text: "empty" }));
  }

  // -- review: proposals that a memory replaces an older one ---------------------------------------
  RENDER.review = async function () {
    const d = await api("review");
    const body = $("review-body");
    const flash = h("p", { class: "flash", id: "review-flash", role: "status" });
    if (!d.proposals.length) {
      fill(body, h("p", { class: "muted", id: "review-empty", text: "Nothing waits for review." }), flash);
      ready("review", 0);
      return;
    }
    const cards = d.proposals.map((p) => {
      const buttons = d.actions ? h("div", { class: "row" },
        ["accept", "reject", "skip"].map((decision) => h("button", {
          class: "btn btn-small" + (decision === "accept" ? "" : " btn-ghost"), type: "button", data: { decision },
          text: decision[0].toUpperCase() + decision.slice(1),
          onclick: async (ev) => {
            ev.target.disabled = true;
            try {
              const r = await post("review", { key: p.key, decision });
              await RENDER.review();
              $("review-flash").textContent = r.message;
            } catch (err) {
              $("review-flash").className = "flash bad";
              $("review-flash").textContent = err.message;
              ev.target.disabled = false;
            }
          },
        }))) : h("p", { class: "muted small", text: "Decide in Obsidian: set decision: to accept or reject in " + p.path });
      return h("article", { class: "card proposal", data: { key: p.key } },
        h("div", { class: "meta" }, h("span", { class: "badge badge-accent", text: "confidence " + Number(p.confidence).toFixed(2) }),
          h("span", { class: "faint", text: p.why.join("; ") })),
        h("h2", { text: "Old" }), memText(p.old_text || "(gone)", {}), p.old_path ? fileLinks(p.old_path) : null,
        h("h2", { text: "New" }), memText(p.new_text || "(gone)", {}), p.new_path ? fileLinks(p.new_path) : null,
        buttons);
    });
    fill(body, flash, h("div", { class: "grid" }, cards));
    ready("review", d.proposals.length);
  };

  // -- 7 today ------------------------------------------------------------------------------------
  RENDER.today = async function (arg) {
    const d = await api("day", { day: arg || "" });
    const body = $("today-body");
    const picker = h("input", { type: "date", id: "day-picker", value: d.day, "aria-label": "Day", onchange: (ev) => { if (ev.target.value) location.hash = "#today/" + ev.target.value; } });
    const weekday = WEEKDAYS[new Date(d.day + "T00:00:00Z").getUTCDay()];
    const toolbar = h("div", { class: "toolbar" },
      h("a", { class: "btn btn-small", href: "#today/" + addDays(d.day, -1), title: "Previous day", text: "◀" }),
      picker,
      h("a", { class: "btn btn-small", href: "#today/" + addDays(d.day, 1), title: "Next day", text: "▶" }),
      h("a", { class: "btn btn-small btn-ghost", href: "#today", text: "Today" }),
      h("span", { class: "spacer" }),
      h("span", { class: "muted small", id: "day-count", text: plural(d.leaves, "memory", "memories") + " dated this day" }));
    const head = h("div", { class: "row", style: null }, h("span", { class: "day-title", id: "day-title", text: weekday + ", " + fmtDay(d.day) }),
      d.fallback ? h("span", { class: "badge badge-accent", text: "nothing today: the latest day with memories" }) : null);
    let digest;
    if (d.digest) {
      const g = d.digest;
      digest = h("div", { class: "card", id: "digest" },
        h("h2", { text: "Digest" }),
        h("div", { class: "muted small", style: null, text: plural(g.descendants, "memory", "memories") + " · " + (g.summariser || "") }),
        mdNode(g.text),
        g.children && g.children.length ? h("details", {}, h("summary", { class: "muted small", text: "The day's memories (" + g.children.length + ")" }),
          h("ul", { class: "links-list" }, g.children.map((c) => h("li", {}, c.path ? h("a", { href: fileHref(c.path), target: "_blank", rel: "noopener", text: c.label }) : c.label)))) : null,
        h("div", { class: "links", style: null }, g.path ? fileLinks(g.path) : null));
    } else {
      digest = h("div", { class: "card", id: "digest" }, h("h2", { text: "Digest" }),
        h("p", { class: "muted", text: d.note || (d.leaves ? "No digest yet for this day." : "Nothing was remembered this day.") }));
    }
    let commits;
    if (!d.git) {
      commits = h("div", { class: "card", id: "commits" }, h("h2", { text: "Memory commits" }),
        h("p", { class: "muted" }, "Git auto-commit is off. Set ", h("code", { text: "auto_commit = true" }), " under ", h("code", { text: "[git]" }), " in config.toml to keep one commit per memory operation, and see each day's here."));
    } else {
      commits = h("div", { class: "card", id: "commits" }, h("h2", { text: "Memory commits (" + d.commits.length + ")" }),
        d.commits.length ? d.commits.map((c) => h("details", { class: "commit" },
          h("summary", {}, h("span", { class: "sha", text: c.sha.slice(0, 8) }), h("span", { class: "muted small nowrap", text: c.when.slice(11, 16) }), h("span", { text: c.subject }), h("span", { class: "faint small nowrap", text: plural(c.files.length, "file") })),
          h("div", { class: "files" }, c.files.slice(0, 40).map((f) => h("div", { text: f })), c.files.length > 40 ? h("div", { text: "… " + (c.files.length - 40) + " more" }) : null),
          diffNode(c.diff, c.truncated))) : h("p", { class: "muted", text: "No commits this day." }));
    }
    fill(body, toolbar, head, h("div", { class: "grid grid-2", style: null }, digest, commits));
    body.lastChild.style.marginTop = "14px";
    ready("today", d.day);
  };

  function diffNode(diff, truncated) {
    const pre = h("pre", { class: "diff" });
    for (const line of String(diff || "").split("\n").slice(0, 2000)) {
      const cls = line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index ") ? "hdr"
        : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(h("span", { class: cls, text: line || " " }));
    }
    if (truncated) pre.append(h("span", { class: "hdr", text: "… (cut: the patch is longer)" }));
    return pre;
  }

  // -- start --------------------------------------------------------------------------------------
  async function start() {
    try {
      const st = OFFLINE ? SNAP.status : await api("status");
      state.vault = st.vault;
      $("vault-name").textContent = st.vault.name;
      $("vault-name").title = st.vault.root;
      $("open-obsidian").href = "obsidian://open?path=" + encodeURIComponent(st.vault.root);
      if (OFFLINE) $("side-note").textContent = "Snapshot of " + fmtTime(SNAP.generated) + ". Read-only, offline.";
    } catch (err) {
      fill($("status-body"), errorBox(err));
      return;
    }
    route();
  }
  start();
})();
