// uopviz front end: the DAG canvas, the rewrite player and the static-model shim used by reports.
// Plain JS, no dependencies, nothing fetched: the same text is the _esm of the anywidgets (with an
// `export default` appended by Python) and is inlined into standalone HTML reports.
// Data comes from Python (uopviz/widgets/serialize.py); this file computes no compiler facts.
const UOPVIZ = (() => {
  "use strict";
  const SVG_NS = "http://www.w3.org/2000/svg";
  // what an empty side panel says (a view's data may say otherwise: an operator graph's)
  const UOP_PANEL_PROMPT = "Click a node to see its op, dtype, shape, arg, sources, min_max, device and axis.";

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  function escapeXml(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }

  function textColor(hex) {
    const n = parseInt(hex.slice(1), 16);
    const r = (n >> 16) & 255, g = (n >> 8) & 255, b = n & 255;
    return (0.299 * r + 0.587 * g + 0.114 * b) > 150 ? "#111" : "#fff";
  }

  // A trait sent as one JSON buffer (GraphView.graph) arrives as a DataView; a report's state as is.
  function jsonValue(value) {
    return value instanceof DataView ? JSON.parse(new TextDecoder().decode(value)) : value;
  }

  // Nodes may come compact ({k, x, y}) with their static attributes in a shared table (reports);
  // an operator graph writes each definition text once (graph.texts, a node's "dd" indexes it).
  function hydrate(graph, table) {
    if (graph && graph.texts) {
      graph.nodes = graph.nodes.map((n) => (n.dd === undefined ? n
        : Object.assign({}, n, { d: Object.assign({}, n.d, { definition: graph.texts[n.dd] }) })));
    }
    if (!graph || !table) return graph;
    graph.nodes = graph.nodes.map((n) => (n.l === undefined && table[n.k] ? Object.assign({}, table[n.k], n) : n));
    return graph;
  }

  // ------------------------------------------------------------------------------------------
  // the legend of op families and AxisTypes
  function legendEl(legend) {
    const row = h("div", { class: "uv-legend" });
    if (!legend) return row;
    const group = (title, items) => {
      const g = h("span", { class: "uv-legend-group" }, h("span", { class: "uv-legend-title", text: title }));
      for (const it of items) {
        g.append(h("span", { class: "uv-chip", title: it.title || it.name },
          h("span", { class: "uv-swatch" + (it.shape === "range" ? " uv-swatch-range" : ""), style: `background:${it.color}` }), it.name));
      }
      return g;
    };
    // UOp graphs: op families and AxisTypes; operator graphs (NNEF): modules and tensor kinds
    const groups = [["ops", legend.families], ["axes", legend.axis_types], ["modules", legend.modules], ["tensors", legend.tensors]];
    for (const [title, items] of groups) if (items && items.length) row.append(group(title, items));
    return row;
  }

  // ------------------------------------------------------------------------------------------
  // the DAG canvas: SVG, zoom (wheel), pan (drag), hover tooltip, click → side panel
  // Room kept free around a fitted graph (the tool row is a bar of its own above the drawing).
  const VIEW_MARGINS = { top: 12, bottom: 10, side: 16 };
  // "fit" shows the whole graph when that is readable; below this zoom (where uv-lod hides the
  // labels) a 2,000-node graph would be a thin strip: fit then fills the view along the graph's
  // shorter side, at this zoom at least, from its top-left corner, and the rest is dragged or
  // scrolled to ("whole" still shows everything at once).
  const FIT_MIN_ZOOM = 0.38;
  // Below this zoom labels are too small to read (uv-lod hides them below 0.38): a player step whose
  // whole graph fits only below it is shown zoomed to its changed region instead.
  const READABLE_ZOOM = 0.6;
  // The least zoom a step's region is shown at (labels at 11px × 0.8: easily read).
  const FOCUS_ZOOM = 0.8;
  class DagCanvas {
    constructor(container, options) {
      this.options = Object.assign({ onSelect: null, onToggle: null, canToggle: true, emptyText: UOP_PANEL_PROMPT }, options || {});
      this.root = h("div", { class: "uv-dag" });
      this.viewport = h("div", { class: "uv-viewport" });
      this.svg = document.createElementNS(SVG_NS, "svg");
      this.svg.setAttribute("class", "uv-svg");
      this.scene = document.createElementNS(SVG_NS, "g");
      this.svg.append(this.scene);
      this.tooltip = h("div", { class: "uv-tooltip" });
      // the node count sits in the tool row (click-through), never over the drawing's lower corner
      this.info = h("span", { class: "uv-info" });
      this.changesButton = h("button", { class: "uv-btn uv-changes", title: "zoom to what this step changed", onclick: () => { this.userMoved = false; this.mode = "focus"; this.home(); }, text: "changes" });
      this.tools = h("div", { class: "uv-tools" },
        h("button", { class: "uv-btn uv-fit", title: "fit the graph (a large one: as much as is readable; drag or shift+wheel for the rest)", onclick: () => { this.userMoved = false; this.mode = "fit"; this.fit(); }, text: "fit" }),
        h("button", { class: "uv-btn uv-whole", title: "the whole graph at once, however small", onclick: () => { this.userMoved = true; this.fit(true); }, text: "whole" }),
        this.changesButton,
        h("button", { class: "uv-btn", title: "zoom in", onclick: () => { this.userMoved = true; this.zoomBy(1.25); }, text: "+" }),
        h("button", { class: "uv-btn", title: "zoom out", onclick: () => { this.userMoved = true; this.zoomBy(0.8); }, text: "−" }),
        this.info);
      this.viewport.append(this.svg, this.tooltip);
      // the tool row is a bar above the drawing: it never covers a node
      this.drawing = h("div", { class: "uv-drawing" }, this.tools, this.viewport);
      this.panel = h("div", { class: "uv-panel" }, h("div", { class: "uv-panel-empty", text: this.options.emptyText }));
      this.root.append(this.drawing, this.panel);
      container.append(this.root);
      this.view = { k: 1, x: 0, y: 0 };
      this.graph = null;
      this.byKey = new Map();
      this.selected = null;
      this.userMoved = false;
      // how the view is placed while the user has not moved it: "fit" (the whole graph), "auto" (a
      // step's changed region when the whole graph would be too small to read, else fit), "focus"
      this.mode = "fit";
      this.region = null;
      this._bindEvents();
      // a view drawn while hidden (a closed tab, an output scrolled away) has no size yet: fit it
      // again when it gets one, unless the user has zoomed or panned since
      if (typeof ResizeObserver !== "undefined") {
        let last = "";
        new ResizeObserver((entries) => {
          const box = entries[0].contentRect;
          const size = `${Math.round(box.width)}x${Math.round(box.height)}`;
          if (box.width > 0 && size !== last && !this.userMoved && this.graph) this.home();
          last = size;
        }).observe(this.viewport);
      }
    }

    _bindEvents() {
      let drag = null;
      this.viewport.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        this.userMoved = true;
        if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
          // shift+wheel (or a sideways swipe) scrolls: a graph larger than the view is read by parts
          const across = ev.shiftKey && !ev.deltaX ? ev.deltaY : ev.deltaX;
          this.view.x -= across;
          if (!ev.shiftKey) this.view.y -= ev.deltaY;
          this._applyView();
          return;
        }
        const rect = this.viewport.getBoundingClientRect();
        this.zoomBy(Math.exp(-ev.deltaY * 0.0015), ev.clientX - rect.left, ev.clientY - rect.top);
      }, { passive: false });
      this.viewport.addEventListener("pointerdown", (ev) => {
        if (ev.target.closest(".uv-node") || ev.target.closest(".uv-tools")) return;
        drag = { x: ev.clientX, y: ev.clientY, vx: this.view.x, vy: this.view.y };
        this.userMoved = true;
        this.viewport.setPointerCapture(ev.pointerId);
        this.viewport.classList.add("uv-dragging");
      });
      this.viewport.addEventListener("pointermove", (ev) => {
        if (!drag) return;
        this.view.x = drag.vx + ev.clientX - drag.x;
        this.view.y = drag.vy + ev.clientY - drag.y;
        this._applyView();
      });
      const end = () => { drag = null; this.viewport.classList.remove("uv-dragging"); };
      this.viewport.addEventListener("pointerup", end);
      this.viewport.addEventListener("pointercancel", end);
      this.scene.addEventListener("click", (ev) => {
        const toggle = ev.target.closest(".uv-toggle");
        const node = ev.target.closest(".uv-node");
        if (!node) return;
        if (toggle && this.options.onToggle) { this.options.onToggle(node.dataset.key); return; }
        this.select(node.dataset.key, true);
      });
      this.scene.addEventListener("mouseover", (ev) => {
        const node = ev.target.closest(".uv-node");
        if (!node) return;
        const n = this.byKey.get(node.dataset.key);
        if (!n) return;
        const d = n.d || {};
        this.tooltip.innerHTML = `<b>${escapeXml(n.op)}</b> <span class="uv-dim">${escapeXml(n.f || "")}</span><br>` +
          `${escapeXml(d.dtype || "")} ${escapeXml(d.shape || "")}` +
          (d.arg !== undefined ? `<br><span class="uv-dim">arg</span> ${escapeXml(d.arg.slice(0, 120))}` : "") +
          (d.axis_type ? `<br><span class="uv-dim">axis type</span> ${escapeXml(d.axis_type)}` : "");
        this.tooltip.style.display = "block";
      });
      this.scene.addEventListener("mousemove", (ev) => {
        if (this.tooltip.style.display !== "block") return;
        const rect = this.viewport.getBoundingClientRect();
        this.tooltip.style.left = `${ev.clientX - rect.left + 14}px`;
        this.tooltip.style.top = `${ev.clientY - rect.top + 12}px`;
      });
      this.scene.addEventListener("mouseout", (ev) => {
        if (!ev.relatedTarget || !ev.relatedTarget.closest || !ev.relatedTarget.closest(".uv-node")) this.tooltip.style.display = "none";
      });
    }

    zoomBy(factor, cx, cy) {
      const rect = this.viewport.getBoundingClientRect();
      if (cx === undefined) { cx = rect.width / 2; cy = rect.height / 2; }
      const k = Math.min(8, Math.max(0.005, this.view.k * factor));
      const f = k / this.view.k;
      this.view.x = cx - (cx - this.view.x) * f;
      this.view.y = cy - (cy - this.view.y) * f;
      this.view.k = k;
      this._applyView();
    }

    _applyView() {
      this.scene.setAttribute("transform", `translate(${this.view.x},${this.view.y}) scale(${this.view.k})`);
      this.svg.classList.toggle("uv-lod", this.view.k < 0.38);
    }

    // fit: the whole graph when it is readable so, else as much as fills the view readably (see
    // FIT_MIN_ZOOM); whole: the whole graph however small
    fit(whole) {
      if (!this.graph) return;
      const rect = this.viewport.getBoundingClientRect();
      const width = rect.width || 800, height = rect.height || 500;
      const [gw, gh] = this.extent;
      const { top, bottom, side } = VIEW_MARGINS;
      if (this.graph.engine === "linear") {
        // a listing is read from the top: fit its width (at most 1:1), start at the first row
        const k = Math.min(1.0, Math.max(0.05, (width - 2 * side - 120) / Math.max(gw, 1)));
        this.view = { k, x: side + 40 - this.minX * k, y: top - this.minY * k };
        this.partial = false;
        this._showCounts();
        this._applyView();
        return;
      }
      const across = (width - 2 * side) / Math.max(gw, 1), down = (height - top - bottom) / Math.max(gh, 1);
      const k = Math.min(1.0, Math.max(0.005, Math.min(across, down)));
      if (whole || k >= FIT_MIN_ZOOM || k >= 1.0) {
        this.view = { k, x: (width - gw * k) / 2 - this.minX * k, y: top + (height - top - bottom - gh * k) / 2 - this.minY * k };
        this.partial = false;
      } else {
        // too small to read whole: fill the view along the graph's shorter side, centred along it
        // where it fits, from the top-left corner along the side that overflows
        const fill = Math.min(1.0, Math.max(across, down, FIT_MIN_ZOOM));
        const x = gw * fill <= width - 2 * side ? (width - gw * fill) / 2 - this.minX * fill : side - this.minX * fill;
        const y = gh * fill <= height - top - bottom ? top + (height - top - bottom - gh * fill) / 2 - this.minY * fill
          : top - this.minY * fill;
        this.view = { k: fill, x, y };
        this.partial = true;
      }
      this.root.dataset.fit = this.partial ? "partial" : "whole";
      this._showCounts();
      this._applyView();
    }

    _showCounts() {
      if (!this.graph) return;
      const graph = this.graph;
      this.info.textContent = graph.nodes.length + " nodes · " + graph.edges.length + " edges" + (graph.engine ? " · " + graph.engine : "") +
        (this.partial ? " · part shown: drag or shift+wheel to scroll, “whole” for all" : "");
    }

    // select a node chosen from outside the canvas (a search) and bring it into view, readable
    reveal(key) {
      if (!this.byKey.has(key)) return;
      this.select(key, false);
      this.userMoved = true;
      if (this.view.k < FOCUS_ZOOM) this.view.k = FOCUS_ZOOM;
      this.centerOn(key);
    }

    // the zoom at which fit() shows the whole graph
    fitScale() {
      const rect = this.viewport.getBoundingClientRect();
      const width = rect.width || 800, height = rect.height || 500;
      const { top, bottom, side } = VIEW_MARGINS;
      const [gw, gh] = this.extent || [1, 1];
      return Math.min(1.0, (width - 2 * side) / Math.max(gw, 1), (height - top - bottom) / Math.max(gh, 1));
    }

    // zoom to the step's changed region (Python's marks.region, y up): as large as fits, at most 1:1,
    // never below FOCUS_ZOOM; a region too large for that is centred on the replacement node
    focusRegion() {
      const r = this.region;
      if (!r) { this.fit(); return; }
      const rect = this.viewport.getBoundingClientRect();
      const width = rect.width || 800, height = rect.height || 500;
      const { top, bottom, side } = VIEW_MARGINS;
      const fits = Math.min(1.0, (width - 2 * side) / Math.max(r.x1 - r.x0, 1), (height - top - bottom) / Math.max(r.y1 - r.y0, 1));
      const k = Math.max(fits, FOCUS_ZOOM);
      let cx = (r.x0 + r.x1) / 2, cy = this.maxY - (r.y0 + r.y1) / 2;
      const focus = this.focus && this.byKey.get(this.focus);
      if (fits < FOCUS_ZOOM && focus) { cx = focus.x; cy = this.maxY - focus.y; }
      this.view = { k, x: width / 2 - cx * k, y: top + (height - top - bottom) / 2 - cy * k };
      this._applyView();
    }

    // place the view as its mode says (the user has not moved it): a step whose graph would be too
    // small to read at fit zooms to its changed region; anything else is fitted
    home() {
      if (!this.graph) return;
      const wanted = this.mode === "focus" || (this.mode === "auto" && this.fitScale() < READABLE_ZOOM);
      if (wanted && this.region && this.graph.engine !== "linear") this.focusRegion();
      else this.fit();
    }

    // true when the step's region lies inside the current view at a readable zoom
    _regionInView() {
      const r = this.region;
      if (!r || this.view.k < READABLE_ZOOM) return false;
      const rect = this.viewport.getBoundingClientRect();
      const x0 = r.x0 * this.view.k + this.view.x, x1 = r.x1 * this.view.k + this.view.x;
      const y0 = (this.maxY - r.y1) * this.view.k + this.view.y, y1 = (this.maxY - r.y0) * this.view.k + this.view.y;
      return x0 >= 0 && y0 >= 0 && x1 <= rect.width && y1 <= rect.height;
    }

    // graph: {nodes:[{k,x,y,w,h,c,l,op,f,d,col,sh}], edges:[[s,t,slot]], clusters:[...]};
    // marks: {added, changed, focus, region}
    setGraph(graph, marks, keepView) {
      const t0 = performance.now();
      this.graph = graph;
      this.byKey = new Map(graph.nodes.map((n) => [n.k, n]));
      const added = new Set((marks && marks.added) || []);
      const changed = new Set((marks && marks.changed) || []);
      const focus = marks && marks.focus;
      this.focus = focus || null;
      this.region = (marks && marks.region) || null;
      this.changesButton.style.display = this.region ? "" : "none";
      let maxY = -Infinity, minX = Infinity, maxX = -Infinity, minY = Infinity;
      for (const n of graph.nodes) {
        maxY = Math.max(maxY, n.y + n.h / 2); minY = Math.min(minY, n.y - n.h / 2);
        minX = Math.min(minX, n.x - n.w / 2); maxX = Math.max(maxX, n.x + n.w / 2);
      }
      for (const c of graph.clusters || []) {
        maxY = Math.max(maxY, c.y1); minY = Math.min(minY, c.y0); minX = Math.min(minX, c.x0); maxX = Math.max(maxX, c.x1);
      }
      if (!graph.nodes.length) { maxY = 0; minY = 0; minX = 0; maxX = 0; }
      this.maxY = maxY;
      const sy = (y) => maxY - y; // graphviz y-up → screen y-down
      this.minX = minX; this.minY = 0; this.extent = [maxX - minX, maxY - minY];
      if (this.options.maxHeight) {
        // small graphs get a shorter canvas (no acre of empty grid); large ones stop at maxHeight
        const wanted = Math.max(220, Math.min(this.options.maxHeight, this.extent[1] + 50));
        this.root.style.height = `${wanted}px`;
      }
      const parts = [];
      for (const c of graph.clusters || []) {
        parts.push(`<g class="uv-cluster"><rect x="${c.x0}" y="${sy(c.y1)}" width="${c.x1 - c.x0}" height="${c.y1 - c.y0}" rx="8"/>` +
          `<text x="${c.x0 + 6}" y="${sy(c.y1) + 12}">${escapeXml(c.label)}</text></g>`);
      }
      parts.push('<g class="uv-edges">');
      const listing = graph.engine === "linear";
      const edgeLabels = [];
      for (const [s, t, , edgeLabel] of graph.edges) {
        const a = graph.nodes[s], b = graph.nodes[t];
        const cls = added.has(b.k) || changed.has(b.k) ? "uv-edge uv-edge-hot" : "uv-edge";
        if (listing) {
          // a listing: arcs on the right, wider for longer jumps, so they never cross the rows
          const x1 = a.x + a.w / 2, y1 = sy(a.y), x2 = b.x + b.w / 2, y2 = sy(b.y);
          const bulge = 16 + 0.18 * Math.abs(y2 - y1);
          const xr = Math.max(x1, x2) + bulge;
          parts.push(`<path class="${cls} uv-arc" d="M${x1},${y1} C${xr},${y1} ${xr},${y2} ${x2},${y2}"/>`);
          continue;
        }
        const x1 = a.x, y1 = sy(a.y) + a.h / 2, x2 = b.x, y2 = sy(b.y) - b.h / 2;
        const my = (y1 + y2) / 2;
        parts.push(`<path class="${cls}" d="M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}"/>`);
        // an edge's optional label (an operator graph's tensor shape) beside the curve's middle
        if (edgeLabel) {
          let label = `<text class="uv-edge-label" x="${(x1 + x2) / 2 + 5}" y="${my - 7 * String(edgeLabel).split("\n").length + 10}">`;
          String(edgeLabel).split("\n").forEach((line, i) => { label += `<tspan x="${(x1 + x2) / 2 + 5}" dy="${i === 0 ? 0 : 11}">${escapeXml(line)}</tspan>`; });
          edgeLabels.push(label + "</text>");
        }
      }
      parts.push("</g>");
      if (edgeLabels.length) parts.push('<g class="uv-edge-labels">', ...edgeLabels, "</g>");
      parts.push('<g class="uv-nodes">');
      for (const n of graph.nodes) {
        const x = n.x - n.w / 2, y = sy(n.y) - n.h / 2;
        let cls = "uv-node";
        if (added.has(n.k)) cls += " uv-added";
        if (changed.has(n.k)) cls += " uv-changed";
        if (focus === n.k) cls += " uv-focus";
        if (this.selected === n.k) cls += " uv-selected";
        const lines = String(n.l).split("\n");
        const fg = textColor(n.c);
        const indent = n.sh === "range" ? 14 : 8; // clear of a pill's round ends
        let text = `<text x="${x + indent}" y="${y + 15}" fill="${fg}">`;
        lines.forEach((line, i) => {
          text += `<tspan x="${x + indent}" dy="${i === 0 ? 0 : 14}"${i === 0 ? ' class="uv-title"' : ""}>${escapeXml(line)}</tspan>`;
        });
        text += "</text>";
        let toggle = "";
        if (n.col && this.options.canToggle) {
          toggle = `<g class="uv-toggle"><rect x="${x + n.w - 18}" y="${y + 3}" width="14" height="14" rx="3"/>` +
            `<text x="${x + n.w - 11}" y="${y + 14}" text-anchor="middle">${n.col === 2 ? "+" : "−"}</text></g>`;
        }
        // a RANGE is a pill with an inner ring: its AxisType colour is also some op family's colour
        let box = `<rect class="uv-box" x="${x}" y="${y}" width="${n.w}" height="${n.h}" rx="5" fill="${n.c}"/>`;
        if (n.sh === "range") {
          cls += " uv-range";
          box = `<rect class="uv-box" x="${x}" y="${y}" width="${n.w}" height="${n.h}" rx="${n.h / 2}" fill="${n.c}"/>` +
            `<rect class="uv-ring" x="${x + 2.5}" y="${y + 2.5}" width="${n.w - 5}" height="${n.h - 5}" rx="${n.h / 2 - 2.5}"/>`;
        }
        parts.push(`<g class="${cls}" data-key="${n.k}" data-op="${n.op}">${box}${text}${toggle}</g>`);
      }
      parts.push("</g>");
      this.scene.innerHTML = parts.join("");
      this.partial = false;
      this._showCounts();
      // a new graph is placed afresh; a changed one (the next step, a body opened) keeps the view
      // once the user zoomed or panned, unless it is a step whose changed region is out of that view
      // (or unreadable there). Placing: a step's region when the whole graph would be unreadable at
      // fit (a 400-node graph fitted into a strip), else the whole graph.
      if (keepView && this.userMoved && (!this.region || this._regionInView())) this._applyView();
      else {
        this.userMoved = false;
        this.mode = this.region ? "auto" : "fit";
        requestAnimationFrame(() => this.home());
      }
      if (this.selected && this.byKey.has(this.selected)) this.select(this.selected, false);
      else if (this.selected) this._showPanel(null);
      this.renderMs = performance.now() - t0;
      this.root.dataset.renderMs = this.renderMs.toFixed(1);
      return this.renderMs;
    }

    select(key, notify) {
      for (const el of this.scene.querySelectorAll(".uv-selected")) el.classList.remove("uv-selected");
      this.selected = key;
      const el = key ? this.scene.querySelector(`.uv-node[data-key="${key}"]`) : null;
      if (el) el.classList.add("uv-selected");
      this._showPanel(key ? this.byKey.get(key) : null);
      if (notify && this.options.onSelect) this.options.onSelect(key);
    }

    centerOn(key) {
      const n = this.byKey.get(key);
      if (!n) return;
      const rect = this.viewport.getBoundingClientRect();
      this.view.x = rect.width / 2 - n.x * this.view.k;
      this.view.y = rect.height / 2 - (this.maxY - n.y) * this.view.k;
      this._applyView();
    }

    _showPanel(n) {
      this.panel.innerHTML = "";
      if (!n) {
        this.panel.append(h("div", { class: "uv-panel-empty", text: this.options.emptyText }));
        return;
      }
      const d = n.d || {};
      this.panel.append(h("div", { class: "uv-panel-head", style: `border-left: 6px solid ${n.c}` },
        h("b", { text: n.op }), h("span", { class: "uv-dim", text: " " + (n.f || "") })));
      const table = h("table", { class: "uv-details" });
      const order = ["op", "family", "dtype", "shape", "arg", "axis_type", "sources", "values", "min_max", "device", "axis", "tag"];
      // other details (an operator graph's attributes, tensors, definition) follow in their order
      for (const key of order.concat(Object.keys(d).filter((k) => !order.includes(k)))) {
        if (d[key] === undefined) continue;
        const value = h("td", {});
        if (key === "sources" && n.s && d.sources !== "—") {
          // each drawn source is "OP key": a link to its node (a node cropped out of this view: its op)
          const names = d.sources.split(", ");
          names.forEach((name, i) => {
            const [op, srcKey] = name.split(" ");
            if (srcKey && this.byKey.has(srcKey)) {
              value.append(h("a", { href: "#", class: "uv-link", text: op, onclick: (ev) => { ev.preventDefault(); this.select(srcKey, true); this.centerOn(srcKey); } }));
            } else value.append(h("span", { text: op }));
            if (i < names.length - 1) value.append(", ");
          });
        } else if (String(d[key]).includes("\n")) value.append(h("pre", { class: "uv-pre", text: d[key] }));
        else value.textContent = d[key];
        table.append(h("tr", {}, h("th", { text: key.replace("_", " ") }), value));
      }
      this.panel.append(table);
      // a view's own section under the details (the player's "Why didn't a rule fire?")
      const extra = this.options.panelSection ? this.options.panelSection(n) : null;
      if (extra) this.panel.append(extra);
    }
  }

  // ------------------------------------------------------------------------------------------
  // widgets: each renders from a model (an anywidget model, or StaticModel in reports)
  // The body selector of a graph with FUNCTION/CALL bodies: all open, all collapsed, or one body
  // open at a time (with the bodies around it), each listed by title and size.  Hidden while the
  // graph has no bodies; rebuilt when the view is given another graph.
  function bodyBar(model) {
    const select = h("select", { class: "uv-bodies", title: "which FUNCTION/CALL bodies are open" });
    const count = h("span", { class: "uv-dim" });
    const bar = h("div", { class: "uv-bodybar" }, h("span", { class: "uv-legend-title", text: "bodies" }), select, count);
    const sync = () => { select.value = model.get("body_view") || "all"; };
    const build = () => {
      const bodies = model.get("bodies") || [];
      bar.style.display = bodies.length ? "" : "none";
      select.innerHTML = "";
      if (!bodies.length) return;
      const variants = model.get("variants"); // a report offers the views it embeds
      const offered = (view) => !variants || variants[view] !== undefined;
      const byKey = new Map(bodies.map((b) => [b.key, b]));
      const depthOf = (b) => {
        let depth = 0;
        for (let p = b.parent; p && byKey.has(p) && depth < 16; p = byKey.get(p).parent) depth++;
        return depth;
      };
      select.append(h("option", { value: "all", text: "all bodies open" }),
        h("option", { value: "none", text: "all bodies collapsed" }));
      const group = h("optgroup", { label: "one body open, the others collapsed" });
      for (const b of bodies) {
        const view = "only:" + b.key;
        if (!offered(view)) continue;
        group.append(h("option", { value: view, text: "\u00a0\u00a0".repeat(depthOf(b)) + `${b.title} · ${b.size} ops` }));
      }
      select.append(group, h("option", { value: "custom", text: "as toggled", hidden: true }));
      count.textContent = `${bodies.length} FUNCTION/CALL ${bodies.length === 1 ? "body" : "bodies"}: open them all, or one by one (or click a node's +/−)`;
      sync();
    };
    select.addEventListener("change", () => { model.set("body_view", select.value); model.save_changes(); });
    model.on("change:body_view", sync);
    model.on("change:bodies", build);
    build();
    return bar;
  }

  function renderDag(model, el) {
    const wrap = h("div", { class: "uv-root uv-dag-widget", tabindex: "0" });
    wrap.style.setProperty("--uv-height", `${model.get("height") || 520}px`);
    el.append(wrap);
    wrap.append(legendEl(model.get("legend")));
    wrap.append(bodyBar(model));
    const canvas = new DagCanvas(wrap, {
      maxHeight: model.get("height") || 520,
      emptyText: model.get("empty_text") || UOP_PANEL_PROMPT,
      canToggle: model.get("can_toggle") !== false,
      onSelect: (key) => { model.set("selected", key || ""); model.save_changes(); },
      onToggle: (key) => {
        if (model.isStatic) { model.set("toggle", key); model.save_changes(); return; }
        const collapsed = new Set(model.get("collapsed") || []);
        if (collapsed.has(key)) collapsed.delete(key); else collapsed.add(key);
        model.set("collapsed", Array.from(collapsed)); model.save_changes();
      },
    });
    const table = model.get("node_table");
    const draw = (keepView) => canvas.setGraph(hydrate(jsonValue(model.get("graph")), table), model.get("marks"), keepView);
    draw(false);
    model.on("change:graph", () => draw(true));
    // a node chosen from Python (the model explorer's search): select it and bring it into view
    model.on("change:selected", () => {
      const key = model.get("selected");
      if (key && key !== canvas.selected && canvas.byKey.has(key)) canvas.reveal(key);
    });
    model.on("change:marks", () => draw(true));
    return () => {};
  }

  function diffEl(lines, explanation) {
    const pre = h("pre", { class: "uv-diff" });
    for (const line of lines || []) {
      const cls = line.startsWith("+") ? "uv-add" : line.startsWith("-") ? "uv-del" : line.startsWith("@@") ? "uv-hunk" : "";
      pre.append(h("span", { class: cls, text: line + "\n" }));
    }
    if (!lines || !lines.length) pre.append(h("span", { class: "uv-dim", text: explanation ? `(${explanation})` : "(no textual change)" }));
    return pre;
  }

  function renderPlayer(model, el) {
    const wrap = h("div", { class: "uv-root uv-player", tabindex: "0" });
    wrap.style.setProperty("--uv-height", `${model.get("height") || 520}px`);
    el.append(wrap);
    const passList = h("div", { class: "uv-passes" });
    const hide = h("input", { type: "checkbox" });
    hide.checked = !!model.get("hide_unchanged");
    hide.addEventListener("change", () => { model.set("hide_unchanged", hide.checked); model.save_changes(); drawPasses(); });
    const side = h("div", { class: "uv-side" },
      h("div", { class: "uv-side-title", text: "Passes" }),
      h("label", { class: "uv-hide", title: "also passes over steps that left the graph as it was" }, hide, " hide passes and steps that changed nothing"), passList);
    const slider = h("input", { type: "range", class: "uv-slider", min: "0", max: "0", value: "0", step: "1" });
    const stepLabel = h("span", { class: "uv-step-label" });
    const button = (text, title, delta) => h("button", { class: "uv-btn", title, text, onclick: () => go(delta) });
    const controls = h("div", { class: "uv-controls" },
      button("|◀", "first step: the input (Home)", "first"), button("◀", "previous step (←)", -1), slider,
      button("▶", "next step (→)", 1), button("▶|", "last step (End)", "last"), stepLabel);
    const ruleBox = h("div", { class: "uv-rule" });
    // the chosen pass's rules with their step counts (from the data); the box filters them by name
    // and lists the steps a matching rule made, each a link to that step
    const ruleFilter = h("input", { type: "search", class: "uv-rule-filter", placeholder: "filter steps by rule name" });
    const ruleCounts = h("div", { class: "uv-rule-counts" });
    const ruleSteps = h("div", { class: "uv-rule-steps" });
    const rulesBox = h("details", { class: "uv-rules" },
      h("summary", { class: "uv-text-title" }), ruleFilter, ruleCounts, ruleSteps);
    const main = h("div", { class: "uv-main" }, controls, ruleBox, rulesBox);
    const body = h("div", { class: "uv-player-body" }, side, main);
    wrap.append(legendEl(model.get("legend")), body);
    // provenance: a source line clicked selects its UOp; a node selected lights up its lines
    const canvas = new DagCanvas(main, { canToggle: false, panelSection: whySection, onSelect: (key) => markLines(key) });
    let pendingSelect = null; // a node to select once the step that created it is shown
    // the text a stage makes, beside the graph it is made from: Render's sources, Linearize's listings
    const textBox = h("div", { class: "uv-textbox" });
    const diffBox = h("div", { class: "uv-diffbox" });
    main.append(textBox, diffBox);
    const table = model.get("node_table");

    // "Why didn't a rule fire?": Python tries the chosen pass's rules on the selected node (asked
    // through the comm, answers kept per step and node); a report has no kernel to ask
    const whyAnswers = new Map();
    let whyWaiting = null;
    function whySection(n) {
      const box = h("div", { class: "uv-why" }, h("div", { class: "uv-side-title", text: "Why didn't a rule fire?" }));
      if (model.isStatic) {
        box.append(h("div", { class: "uv-dim", text: "Needs a live notebook: trying the pass's rules on this node runs Python, and this report has no kernel (open the program with uv.explore in JupyterLab)." }));
        return box;
      }
      const f = model.get("frame") || {};
      const id = `${f.pass_index}:${f.step}:${n.k}`;
      if (whyAnswers.has(id)) { drawWhy(box, whyAnswers.get(id)); return box; }
      box.append(h("div", { class: "uv-dim", text: "trying the pass's rules on this node…" }));
      whyWaiting = { id, box };
      model.send({ kind: "why", key: n.k, position: [f.pass_index, f.step] });
      return box;
    }
    function drawWhy(box, answer) {
      box.replaceChildren(box.firstChild);
      const lines = answer.error ? [answer.error] : answer.note ? [answer.note] : [];
      for (const line of lines) box.append(h("div", { class: "uv-dim", text: line }));
      for (const e of answer.explanations || []) {
        const list = h("details", { class: "uv-why-set", open: e.outcomes.length > 0 },
          h("summary", { text: e.summary }));
        for (const o of e.outcomes) {
          list.append(h("div", { class: "uv-why-rule uv-why-" + o.status.replace(" ", "-") + (o.fires ? " uv-why-fires" : "") },
            h("span", { class: "uv-why-status", text: o.fires ? "fires" : o.status }), h("b", { text: " " + o.rule }),
            h("div", { class: "uv-location", text: o.location }), h("div", { text: o.detail })));
        }
        box.append(list);
      }
    }
    model.on("msg:custom", (answer) => {
      if (!answer || answer.kind !== "why") return;
      const id = `${answer.position[0]}:${answer.position[1]}:${answer.key}`;
      whyAnswers.set(id, answer);
      if (whyAnswers.size > 200) whyAnswers.delete(whyAnswers.keys().next().value);
      if (whyWaiting && whyWaiting.id === id) { drawWhy(whyWaiting.box, answer); whyWaiting = null; }
    });

    function visiblePasses() {
      const passes = model.get("passes") || [];
      return passes.filter((p) => !hide.checked || p.changed);
    }
    function drawPasses() {
      passList.innerHTML = "";
      const current = (model.get("frame") || {}).pass_index;
      for (const p of visiblePasses()) {
        const item = h("div", { class: "uv-pass" + (p.index === current ? " uv-active" : "") + (p.changed ? "" : " uv-unchanged"), "data-index": p.index, title: p.name },
          h("span", { class: "uv-pass-name", style: `padding-left:${p.depth * 12}px`, text: p.name }),
          h("span", { class: "uv-count", text: String(p.steps) }));
        item.addEventListener("click", () => moveTo(p.index, p.steps > 0 ? 1 : 0));
        passList.append(item);
      }
      // the chosen pass stays in sight (chosen from Python, or by ↑/↓ past the list's edge); only
      // the list scrolls, never the page around the player
      const active = passList.querySelector(".uv-pass.uv-active");
      if (active) {
        const top = active.offsetTop - passList.offsetTop, bottom = top + active.offsetHeight;
        if (top < passList.scrollTop) passList.scrollTop = top;
        else if (bottom > passList.scrollTop + passList.clientHeight) passList.scrollTop = bottom - passList.clientHeight;
      }
    }
    function moveTo(passIndex, step) {
      model.set("position", [passIndex, step]); model.save_changes();
    }
    function go(delta) {
      const frame = model.get("frame") || {};
      const count = frame.step_count || 0;
      const current = frame.step || 0;
      let step = current;
      if (delta === "first") step = 0; else if (delta === "last") step = count; else step = Math.min(count, Math.max(0, step + delta));
      if (step !== current) moveTo(frame.pass_index, step);
    }
    function drawFrame(keepView) {
      const f = model.get("frame") || {};
      slider.max = String(f.step_count || 0);
      slider.value = String(f.step || 0);
      stepLabel.textContent = `step ${f.step || 0} / ${f.step_count || 0}`;
      ruleBox.innerHTML = "";
      if (f.step) {
        const parts = [h("span", { class: "uv-rule-name", text: f.rule || "" }),
          h("span", { class: "uv-location", text: f.location || "" }),
          f.code ? h("code", { class: "uv-code", text: f.code }) : null,
          h("span", { class: "uv-dim", text: f.summary ? "  " + f.summary : "" }),
          f.note ? h("div", { class: "uv-note", text: f.note }) : null,
          f.scope ? h("div", { class: "uv-note uv-scope", text: f.scope }) : null,
          h("span", { class: "uv-marks-key" },
            h("span", { class: "uv-key uv-key-focus", text: "replacement" }),
            h("span", { class: "uv-key uv-key-added", text: "new" }),
            h("span", { class: "uv-key uv-key-changed", text: "rebuilt" }))];
        ruleBox.append(...parts.filter((part) => part !== null));
      } else {
        ruleBox.append(h("span", { class: "uv-rule-name", text: `${f.pass_name || ""}: input` }),
          h("span", { class: "uv-dim", text: " — the graph before the first step; move the slider or press → " }));
      }
      if (f.graph) canvas.setGraph(hydrate(f.graph, table), f.marks, keepView);
      drawTexts(f);
      if (pendingSelect && canvas.byKey.has(pendingSelect)) {
        canvas.select(pendingSelect, false); canvas.centerOn(pendingSelect);
      }
      pendingSelect = null;
      markLines(canvas.selected);
      drawRules();
      diffBox.innerHTML = "";
      diffBox.append(h("div", { class: "uv-side-title", text: "Printed graph diff" }), diffEl(f.diff, f.step ? f.explanation : ""));
      wrap.dataset.step = String(f.step || 0);
      drawPasses();
    }
    function currentPass() {
      const index = (model.get("frame") || {}).pass_index;
      return (model.get("passes") || []).find((p) => p.index === index) || null;
    }
    function drawRules() {
      const pass = currentPass();
      const rules = pass ? pass.rules || [] : [];
      rulesBox.hidden = !rules.length;
      if (!rules.length) return;
      rulesBox.querySelector("summary").textContent = `Rules of ${pass.name}: ${rules.length} rules, ${pass.steps} steps`;
      const wanted = ruleFilter.value.trim().toLowerCase();
      const matches = (rule) => !wanted || rule.toLowerCase().includes(wanted);
      ruleCounts.innerHTML = "";
      for (const [rule, count] of rules.filter(([rule]) => matches(rule))) {
        ruleCounts.append(h("span", { class: "uv-rule-count", title: `${count} steps made by ${rule}`, onclick: () => { ruleFilter.value = rule; drawRules(); } },
          h("span", { text: rule }), h("b", { text: ` ${count}` })));
      }
      ruleSteps.innerHTML = "";
      if (!wanted) return;
      const current = (model.get("frame") || {}).step || 0;
      const steps = (pass.step_rules || []).map((rule, i) => [rule, i + 1]).filter(([rule]) => matches(rule));
      ruleSteps.append(h("span", { class: "uv-dim", text: `${steps.length} steps: ` }));
      for (const [rule, step] of steps.slice(0, 300)) {
        ruleSteps.append(h("a", { href: "#", class: "uv-link" + (step === current ? " uv-active" : ""), title: rule, text: String(step),
          onclick: (ev) => { ev.preventDefault(); moveTo(pass.index, step); } }), " ");
      }
      if (steps.length > 300) ruleSteps.append(h("span", { class: "uv-dim", text: `… ${steps.length - 300} more` }));
    }
    ruleFilter.addEventListener("input", drawRules);
    ruleFilter.addEventListener("keydown", (ev) => ev.stopPropagation());
    function drawTexts(f) {
      textBox.innerHTML = "";
      for (const source of f.sources || []) {
        const code = h("div", { class: "uv-source" });
        code.innerHTML = source.html; // highlighted by Python (pygments: every character escaped)
        const origin = h("div", { class: "uv-origin", hidden: true });
        textBox.append(h("div", { class: "uv-text-title", text: `Source of ${source.kernel} (${source.backend})` }), code, origin);
        if (source.provenance) linkSourceLines(code, origin, source.provenance, lineLinks);
      }
      for (const listing of f.listings || []) {
        textBox.append(h("div", { class: "uv-text-title", text: `LINEAR program of ${listing.kernel}: ${listing.lines.length} instructions` }),
          h("pre", { class: "uv-listing", text: listing.lines.join("\n") }));
      }
      textBox.hidden = !textBox.childElementCount;
    }
    // a source line clicked selects its node here, and its creator's step is a player frame
    const lineLinks = {
      select: (key) => { if (canvas.byKey.has(key)) { canvas.select(key, false); canvas.centerOn(key); } markLines(key); },
      node: (key) => canvas.byKey.get(key),
      jump: (creator, key) => { pendingSelect = key; moveTo(creator.pass_index, creator.step); },
    };
    // the lines written for the selected node, in every source shown
    function markLines(key) { markSourceLines(textBox, key); }
    slider.addEventListener("input", () => moveTo((model.get("frame") || {}).pass_index, parseInt(slider.value, 10)));
    wrap.addEventListener("keydown", (ev) => {
      if (ev.target.tagName === "INPUT" && ev.target.type === "checkbox") return;
      const moves = { ArrowRight: 1, ArrowLeft: -1, Home: "first", End: "last" };
      if (ev.key in moves) { ev.preventDefault(); ev.stopPropagation(); go(moves[ev.key]); }
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault(); ev.stopPropagation();
        const passes = visiblePasses();
        const at = passes.findIndex((p) => p.index === (model.get("frame") || {}).pass_index);
        const next = passes[Math.min(passes.length - 1, Math.max(0, at + (ev.key === "ArrowDown" ? 1 : -1)))];
        if (next) moveTo(next.index, next.steps > 0 ? 1 : 0);
      }
    });
    let previousPass = null;
    // Python may answer a move with another step (one that changed nothing is passed over) and the
    // same frame: the slider follows the position
    model.on("change:position", () => { slider.value = String((model.get("position") || [0, 0])[1]); });
    model.on("change:frame", () => {
      const f = model.get("frame") || {};
      drawFrame(previousPass === f.pass_index);
      previousPass = f.pass_index;
    });
    previousPass = (model.get("frame") || {}).pass_index;
    drawFrame(false);
    return () => {};
  }

  // Colour-coded axis string of a kernel (tuner) and plain HTML pieces rendered by Python need no JS.
  // ------------------------------------------------------------------------------------------
  // Provenance of generated source, shared by the player's Render frames and the kernel tuner's
  // sources.  Each line of a source becomes a span (the highlighter's spans never cross a line); a
  // line that holds an instruction is clickable: it selects the instruction's node, says what
  // created it and which Tensor expression or NNEF operation it descends from.  `links` says what
  // a view does: select(key) (a line clicked), node(key) (the drawn node: {op}, or undefined) and
  // jump(creator, key) (go to the step that created it; null where there are no steps to show).
  function linkSourceLines(code, originBox, provenance, links) {
    const pre = code.querySelector("pre");
    if (!pre || !provenance.lines.length) {
      if (provenance.note) { originBox.hidden = false; originBox.textContent = provenance.note; }
      return;
    }
    const texts = pre.innerHTML.split("\n");
    if (texts.some((t) => (t.match(/<span/g) || []).length !== (t.match(/<\/span>/g) || []).length)) return;
    const byLine = new Map(provenance.lines.map((entry) => [entry[0], entry]));
    pre.innerHTML = texts.map((t, i) => {
      const mapped = byLine.get(i + 1);
      const key = mapped && mapped[1] ? ` data-key="${mapped[1]}"` : "";
      return `<span class="uv-line${mapped ? " uv-line-mapped" : ""}" data-line="${i + 1}"${key}>${t}</span>`;
    }).join("\n");
    pre.addEventListener("click", (ev) => {
      const line = ev.target.closest(".uv-line-mapped");
      if (!line) return;
      const entry = byLine.get(parseInt(line.dataset.line, 10));
      links.select(entry[1]);
      showLineOrigin(originBox, provenance, entry, entry[1] ? links.node(entry[1]) : undefined, links.jump);
    });
  }
  function showLineOrigin(box, provenance, entry, node, jump) {
    const [line, key, made, came] = entry;
    const creator = made >= 0 ? provenance.creators[made] : null;
    box.hidden = false;
    box.innerHTML = "";
    box.dataset.line = String(line);
    box.append(h("b", { text: `line ${line}: ${node ? node.op : "an instruction"}` }),
      h("span", { class: "uv-dim", text: node ? "" : " (not drawn in this graph)" }));
    box.append(h("div", { class: "uv-origin-made" }, h("span", { class: "uv-dim", text: "created by " }),
      h("span", { text: creator ? creator.text : "no step of this trace" })));
    if (jump && creator && creator.step > 0) {
      box.lastChild.append(" ", h("button", { class: "uv-btn uv-jump", text: "jump to the step that created it",
        title: `pass ${creator.pass_index}, step ${creator.step}`, onclick: () => jump(creator, key) }));
    }
    box.append(h("div", { class: "uv-origin-from" }, h("span", { class: "uv-dim", text: "descends from " }),
      h("span", { class: "uv-origin-name", text: came >= 0 ? provenance.origins[came] : "no recorded Tensor expression or NNEF operation" })));
  }
  // the lines written for the node `key`, in every source under `root`, lit (the first scrolled to)
  function markSourceLines(root, key) {
    for (const el of root.querySelectorAll(".uv-line-selected")) el.classList.remove("uv-line-selected");
    if (!key) return;
    const lines = root.querySelectorAll(`.uv-line[data-key="${key}"]`);
    for (const el of lines) el.classList.add("uv-line-selected");
    if (lines.length) {
      const box = lines[0].closest(".uv-source");
      if (box) box.scrollTop = Math.max(0, lines[0].offsetTop - box.offsetTop - box.clientHeight / 3);
    }
  }

  // The kernel tuner's sources (SourcePanes): the panes' HTML from Python, each pane's lines linked
  // to the tuner's graph through `selected` (Python links it to the graph's `selected`)
  function renderSources(model, el) {
    const wrap = h("div", { class: "uv-tuner-sources" });
    const panes = h("div");
    const originBox = h("div", { class: "uv-origin", hidden: true });
    wrap.append(panes, originBox);
    el.append(wrap);
    const select = (key) => { model.set("selected", key || ""); model.save_changes(); markSourceLines(panes, key); };
    function draw() {
      panes.innerHTML = model.get("value") || ""; // highlighted by Python (every character escaped)
      originBox.hidden = true;
      const provenance = model.get("provenance") || {};
      for (const pane of panes.querySelectorAll(".uv-source[data-backend]")) {
        const found = provenance[pane.dataset.backend];
        if (!found || !found.lines.length) continue; // a failed backend says why in its pane
        const node = (key) => (found.ops && found.ops[key] ? { op: found.ops[key] } : undefined);
        linkSourceLines(pane, originBox, found, { select, node, jump: null });
      }
      markSourceLines(panes, model.get("selected"));
    }
    draw();
    model.on("change:value", draw);
    model.on("change:provenance", draw);
    model.on("change:selected", () => markSourceLines(panes, model.get("selected")));
    return () => {};
  }

  const RENDERERS = { dag: renderDag, player: renderPlayer, sources: renderSources };

  function render({ model, el }) {
    const kind = model.get("kind");
    const renderer = RENDERERS[kind];
    if (!renderer) { el.textContent = `uopviz: unknown view ${kind}`; return; }
    return renderer(model, el);
  }

  // ------------------------------------------------------------------------------------------
  // StaticModel: the anywidget model interface over embedded state, for reports (no kernel).
  // `resolve(model, key)` recomputes derived keys (e.g. the player's frame) from embedded data.
  class StaticModel {
    constructor(state, resolve) { this.state = Object.assign({}, state); this.listeners = {}; this.resolve = resolve; this.pending = new Set(); this.isStatic = true; }
    get(key) { return this.state[key]; }
    set(key, value) { this.state[key] = value; this.pending.add(key); }
    on(event, callback) { (this.listeners[event] = this.listeners[event] || []).push(callback); }
    emit(key) { for (const cb of this.listeners["change:" + key] || []) cb(); }
    save_changes() {
      const keys = Array.from(this.pending); this.pending.clear();
      const changed = this.resolve ? this.resolve(this, keys) : [];
      for (const key of changed) this.emit(key);
    }
  }

  // Resolvers for embedded views: the player picks precomputed frames; the DAG picks a variant.
  // Embedded frames are shared by the passes that show the same step: a pass lists frame keys.
  function embeddedFrame(state, passIndex, step) {
    const keys = state.frames[String(passIndex)] || [];
    if (!keys.length) return null;
    step = Math.max(0, Math.min(step, keys.length - 1));
    const pass = (state.passes || []).find((p) => p.index === passIndex) || {};
    // a stage's step drawn in its nested pass's graph refers to that pass's frame (own scope line)
    const own = state.frame_table[keys[step]];
    const frame = own.ref ? Object.assign({}, state.frame_table[own.ref], own) : own;
    return Object.assign({}, frame,
      { pass_index: passIndex, pass_name: pass.name, step, step_count: keys.length - 1 });
  }
  function playerResolver(model, keys) {
    if (!keys.includes("position")) return [];
    const [passIndex, wanted] = model.get("position");
    let frame = embeddedFrame(model.state, passIndex, wanted);
    if (!frame) return [];
    if (model.state.hide_unchanged && frame.empty) {
      // a step that changed nothing is passed over in the direction of travel (else back)
      const old = model.state.frame || {};
      const direction = old.pass_index === passIndex && wanted < (old.step || 0) ? -1 : 1;
      const found = [direction, -direction].map((d) => {
        for (let s = frame.step + d; s >= 1 && s <= frame.step_count; s += d) {
          const candidate = embeddedFrame(model.state, passIndex, s);
          if (!candidate.empty) return candidate;
        }
        return null;
      }).find((candidate) => candidate);
      if (found) frame = found;
    }
    model.state.position = [passIndex, frame.step];
    model.state.frame = frame;
    return ["frame"];
  }
  // A DAG's embedded body views: a toggle opens that body alone (the others collapsed) or closes it
  // (back to the body around it, or to every body collapsed); the selector picks any view.
  function dagResolver(model, keys) {
    const variants = model.get("variants") || {};
    if (keys.includes("toggle")) {
      const key = model.state.toggle;
      const node = ((model.state.graph || {}).nodes || []).find((n) => n.k === key);
      const body = (model.state.bodies || []).find((b) => b.key === key);
      const opening = !!node && node.col === 2;
      let view = opening ? "only:" + key : (body && body.parent ? "only:" + body.parent : "none");
      if (!variants[view]) view = opening ? "all" : "none";
      model.state.body_view = view;
      keys = keys.concat(["body_view"]);
    }
    if (keys.includes("body_view")) {
      const view = model.state.body_view;
      if (variants[view]) { model.state.graph = variants[view]; return ["graph", "body_view"]; }
      return ["body_view"];
    }
    return [];
  }

  function mountStatic(el, state) {
    const resolver = state.kind === "player" ? playerResolver : dagResolver;
    const model = new StaticModel(state, resolver);
    if (state.kind === "player") {
      const [passIndex, step] = state.position;
      model.state.frame = embeddedFrame(state, passIndex, step);
    }
    render({ model, el });
    return model;
  }

  return { render, mountStatic, StaticModel, DagCanvas, hydrate };
})();
