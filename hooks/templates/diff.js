const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
for (const key of ["repository", "left", "right"]) if (params.get(key)) $(key).value = params.get(key);
if (params.get("table_path")) $("table").add(new Option(params.get("table_path"), params.get("table_path"), true, true));

// the session is an HttpOnly cookie (a lakeFS token): this script never sees a credential
async function post(path, body) {
  const answer = await fetch(path, { method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Requested-With": "fetch" }, body: JSON.stringify(body) });
  const found = await answer.json().catch(() => ({ error: answer.statusText }));
  if (!answer.ok) throw new Error(found.error || ("HTTP " + answer.status));
  return found;
}

// X-Requested-With: a 401 then comes without WWW-Authenticate, so the browser shows no dialog of its own
const FROM_PAGE = { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } };

async function api(path) {
  let answer = await fetch(path, FROM_PAGE);
  for (let tries = 0; answer.status === 202 && tries < 150; tries++) {  // a worker is computing it: ask again
    await new Promise((done) => setTimeout(done, 1000 * Number(answer.headers.get("Retry-After") || 2)));
    answer = await fetch(path, FROM_PAGE);
  }
  const body = await answer.json().catch(() => ({ error: answer.statusText }));
  if (answer.status === 401) show("sign-in", true);
  if (!answer.ok) throw new Error(body.error || ("HTTP " + answer.status));
  return body;
}

async function signInWithCode() {  // a sign-in link: trade its one-time code, then drop it from the address bar
  const code = params.get("code");
  if (!code) return;
  params.delete("code");
  history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  await post("/session/code", { code });
}
function show(id, on) { $(id).hidden = !on; }
function text(value) { return value === null || value === undefined ? "unknown" : String(value); }
function cell(row, value, cls) { const td = row.insertCell(); td.textContent = value; if (cls) td.className = cls; return td; }

async function loadTables() {
  show("error", false);
  const found = await api(`/repositories/${encodeURIComponent($("repository").value)}/refs/${encodeURIComponent($("right").value || $("left").value)}/datasets`);
  const select = $("table"); select.innerHTML = "";
  for (const d of found.results) {
    const option = new Option(`${d.name} (${d.path}${d.source === "detected" ? ", detected" : ""})`, d.path);
    select.add(option);
  }
  if (params.get("table_path")) select.value = params.get("table_path");
}

async function compare() {
  show("error", false); show("result", false); show("loading", true);
  try {
    const repo = encodeURIComponent($("repository").value);
    const path = `/repositories/${repo}/otf/refs/${encodeURIComponent($("left").value)}/diff/${encodeURIComponent($("right").value)}` +
      `?type=delta&amount=1000&table_path=${encodeURIComponent($("table").value)}`;
    render(await api(path));
    loadRows(true).catch((e) => { $("rows-error").textContent = "Rows: " + e.message; show("rows-error", true); });
  } catch (e) {
    $("error").textContent = "Error: " + e.message; show("error", true);
  } finally { show("loading", false); }
}

async function loadOverview() {  // the landing view: every table that differs between the two refs
  const repo = encodeURIComponent($("repository").value);
  const left = $("left").value, right = $("right").value;
  const found = await api(`/repositories/${repo}/otf/refs/${encodeURIComponent(left)}/diff/${encodeURIComponent(right)}/tables`);
  $("overview-refs").textContent = `${left} and ${right}`;
  const body = $("tables").tBodies[0]; body.innerHTML = "";
  for (const t of found.tables) {
    const row = body.insertRow(); row.dataset.path = t.path;
    row.className = t.diff_type === "created" ? "added" : (t.diff_type === "dropped" ? "removed" : "");
    cell(row, `${t.name} (${t.path})`); cell(row, t.diff_type);
    cell(row, t.rows.difference === null ? "unknown" : (t.rows.difference > 0 ? "+" : "") + t.rows.difference);
    cell(row, `${text(t.files.left)} → ${text(t.files.right)}`); cell(row, t.schema_changed ? "changed" : "");
    row.addEventListener("click", () => {
      const select = $("table");
      if (![...select.options].some((o) => o.value === t.path)) select.add(new Option(t.path, t.path));
      select.value = t.path; compare();
    });
  }
  show("no-tables", found.tables.length === 0);
  show("overview", true);
}

async function loadChecks() {  // the rules the right side's tables declare, held against merging it into the left
  const repo = encodeURIComponent($("repository").value);
  const left = $("left").value, right = $("right").value;
  const found = await api(`/repositories/${repo}/otf/refs/${encodeURIComponent(left)}/checks/${encodeURIComponent(right)}`);
  if (found.tables.length === 0 && found.findings.length === 0) { show("checks", false); return; }  // no table declares checks
  $("checks-refs").textContent = `${right} into ${left}`;
  $("checks-summary").textContent = found.passed ? `Passed: every rule of ${found.tables.length} table(s) holds.`
    : `Blocked: ${found.findings.length} finding(s) over ${found.tables.length} table(s) checked.`;
  $("checks-summary").className = found.passed ? "added" : "removed";
  const body = $("checks-findings").tBodies[0]; body.innerHTML = "";
  for (const f of found.findings) {
    const row = body.insertRow(); row.className = "removed";
    cell(row, f.table); cell(row, f.rule); cell(row, f.found);
    if (f.rows && f.rows.length) offendingRows(body.insertRow(), f.rows);
  }
  show("checks", true);
}

function offendingRows(row, rows) {  // a finding's rows, under it: a column per column any of them has
  row.className = "offending"; const td = row.insertCell(); td.colSpan = 3;
  const table = document.createElement("table"), columns = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const head = table.createTHead().insertRow();
  for (const column of columns) { const th = document.createElement("th"); th.textContent = column; head.append(th); }
  const body = table.createTBody();
  for (const r of rows) {
    const tr = body.insertRow();
    for (const column of columns) { const c = cell(tr, shown(r[column])); if (r[column] === null) c.classList.add("null"); }
  }
  td.append(table);
}

let rowsAfter = null, rowColumns = [], rowPages = 0;
// rows per page of the rows section: `?page_size=` on the page's URL (1-1000), else 200
const ROWS_PAGE = Math.min(1000, Math.max(1, Number(params.get("page_size")) || 200));
if (params.get("key")) $("row-key").value = params.get("key");

function shown(value) {  // a value as a cell shows it: text as is, null marked, nested values as JSON
  if (value === null || value === undefined) return "null";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function same(a, b) { return JSON.stringify(a ?? null) === JSON.stringify(b ?? null); }

function valueCell(row, value, before, updated) {  // an updated row's changed cell shows before → after, marked
  const td = row.insertCell();
  if (updated && !same(before, value)) {
    td.className = "changed";
    const was = document.createElement("del"); was.textContent = shown(before);
    const now = document.createElement("ins"); now.textContent = shown(value);
    td.append(was, " → ", now);
  } else {
    td.textContent = shown(value);
    if (value === null || value === undefined) td.classList.add("null");
  }
}

function rowHeader() {  // change, partition, then a column per table column (each page may add some)
  const head = $("rows").tHead.rows[0]; head.innerHTML = "";
  for (const name of ["change", "partition", ...rowColumns]) {
    const th = document.createElement("th"); th.textContent = name; head.append(th);
  }
}

async function loadRows(reset) {  // which rows changed, a page at a time, as a grid
  if (reset) {
    rowsAfter = null; rowColumns = []; rowPages = 0;
    $("rows").tBodies[0].innerHTML = ""; $("partitions").tBodies[0].innerHTML = "";
  }
  show("rows-error", false);
  const repo = encodeURIComponent($("repository").value);
  const found = await api(`/repositories/${repo}/otf/refs/${encodeURIComponent($("left").value)}/diff/` +
    `${encodeURIComponent($("right").value)}/rows?amount=${ROWS_PAGE}&table_path=${encodeURIComponent($("table").value)}` +
    `&key=${encodeURIComponent($("row-key").value)}` + (rowsAfter === null ? "" : `&after=${rowsAfter}`));
  $("rows-added").textContent = found.counts.added; $("rows-removed").textContent = found.counts.removed;
  $("rows-updated").textContent = found.counts.updated; show("rows-updated-part", found.key.length > 0);
  if (reset) {
    const parts = $("partitions").tBodies[0];
    for (const [name, c] of Object.entries(found.partitions)) {
      if (!name) continue;
      const row = parts.insertRow(); cell(row, name); cell(row, c.added); cell(row, c.removed); cell(row, c.updated);
    }
  }
  const before = rowColumns.length;
  for (const r of found.rows) {
    for (const name of [...Object.keys(r.values || {}), ...Object.keys(r.before || {})]) {
      if (!rowColumns.includes(name)) rowColumns.push(name);
    }
  }
  const body = $("rows").tBodies[0];
  if (rowColumns.length !== before || reset) {
    rowHeader();
    for (const row of body.rows) while (row.cells.length < rowColumns.length + 2) row.insertCell();  // columns a later page added
  }
  for (const r of found.rows) {
    const row = body.insertRow(); row.className = r.change;
    cell(row, r.change); cell(row, r.partition || "—");
    const updated = r.change === "updated" && r.before;
    for (const name of rowColumns) valueCell(row, (r.values || {})[name], updated ? r.before[name] : undefined, updated);
  }
  rowPages += 1;
  rowsAfter = found.pagination.has_more ? found.pagination.next_offset : null;
  $("rows-pages").textContent = `${body.rows.length} rows shown, ${rowPages} page${rowPages === 1 ? "" : "s"}` +
    (rowsAfter === null ? "" : ", more to load");
  show("more-rows", rowsAfter !== null);
}

function render(diff) {
  $("diff-type").textContent = diff.diff_type;
  show("truncated", diff.history_truncated);
  const rc = diff.row_count;
  const sign = rc.difference > 0 ? "+" : "";
  $("row-count").innerHTML = "";
  $("row-count").append(`${text(rc.left)} → ${text(rc.right)} `);
  const change = document.createElement("span");
  change.id = "row-difference";
  change.className = rc.difference > 0 ? "delta-up" : "delta-down";
  change.textContent = rc.difference === null ? "(difference unknown: some files have no stats)" : `(${sign}${rc.difference})`;
  $("row-count").append(change);
  const f = diff.files;
  const side = (s) => s ? `${s.count} files, ${s.bytes} bytes` : "absent";
  $("files").textContent = `${side(f.left)} → ${side(f.right)}`;
  const schema = $("schema").tBodies[0]; schema.innerHTML = "";
  for (const c of diff.schema_changes) {
    const row = schema.insertRow(); row.className = c.change === "removed" ? "removed" : (c.change === "added" ? "added" : "");
    cell(row, c.change); cell(row, c.column); cell(row, c.left ?? "—"); cell(row, c.right ?? "—");
  }
  show("no-schema-changes", diff.schema_changes.length === 0);
  const ops = $("operations").tBodies[0]; ops.innerHTML = "";
  for (const op of diff.results) {
    const row = ops.insertRow();
    cell(row, op.id); cell(row, op.timestamp ? new Date(op.timestamp).toISOString() : "unknown");
    cell(row, op.operation); cell(row, op.operation_type);
    const details = document.createElement("details");
    details.innerHTML = "<summary>parameters and metrics</summary>";
    const pre = document.createElement("pre"); pre.textContent = JSON.stringify(op.operation_content, null, 2);
    details.append(pre); row.insertCell().append(details);
  }
  show("no-operations", diff.results.length === 0);
  show("result", true);
}

function fail(e) { $("error").textContent = "Error: " + e.message; show("error", true); }

$("load-tables").addEventListener("click", () => loadTables().catch(fail));
$("more-rows").addEventListener("click", () => loadRows(false).catch(fail));
$("row-key").addEventListener("change", () => loadRows(true).catch(fail));
$("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  if ($("table").value) compare();
  loadOverview().catch(fail);
  loadChecks().catch(fail);
});
$("sign-in").addEventListener("submit", async (e) => {
  e.preventDefault();
  try {
    await post("/session", { access_key_id: $("access-key-id").value, secret_access_key: $("secret-access-key").value });
    $("secret-access-key").value = ""; show("sign-in", false); show("error", false);
    if ($("repository").value && $("right").value && $("table").value) compare();
    if ($("repository").value && $("right").value) { loadOverview().catch(fail); loadChecks().catch(fail); }
    if ($("repository").value) loadTables().catch(() => {});
  } catch (err) { fail(err); }
});
// everything the URL names is used: with a table path the diff shows at once; the table list fills in beside it
signInWithCode().catch(fail).finally(() => {
  if (params.get("repository") && params.get("right") && params.get("table_path")) compare();
  if (params.get("repository") && params.get("right")) { loadOverview().catch(fail); loadChecks().catch(fail); }
  if (params.get("repository") && (params.get("right") || params.get("left"))) loadTables().catch(() => {});
});
