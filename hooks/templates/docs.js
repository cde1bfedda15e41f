// Renders /openapi.json as a page: every operation with its parameters, body and answers, then the schemas.
const $ = (id) => document.getElementById(id);
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };
const refName = (schema) => schema && schema.$ref ? schema.$ref.split("/").pop() : null;

function typeOf(schema) {
  if (!schema) return "";
  if (schema.$ref) return refName(schema);
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(" | ");
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.type === "array") return typeOf(schema.items) + "[]";
  if (schema.type === "object" && schema.additionalProperties) return "{string: " + typeOf(schema.additionalProperties) + "}";
  return schema.type || "any";
}

function table(headers, rows) {
  const t = el("table"); const head = t.createTHead().insertRow();
  for (const h of headers) head.append(el("th", h));
  const body = t.createTBody();
  for (const r of rows) { const row = body.insertRow(); for (const c of r) row.insertCell().textContent = c; }
  return t;
}

async function render() {
  const doc = await (await fetch("/openapi.json", { headers: { "X-Requested-With": "fetch" } })).json();
  document.title = `${doc.info.title} ${doc.info.version} · API reference`;
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      const id = `${method}-${path}`.replace(/[^A-Za-z0-9]+/g, "-");
      const link = el("a", `${method.toUpperCase()} ${path}`); link.href = "#" + id;
      $("index").append(el("div")); $("index").lastChild.append(link);
      const section = el("section"); section.id = id;
      section.append(el("h2", `${method.toUpperCase()} ${path}`));
      if (op.summary) section.append(el("p", op.summary));
      if (op.description) section.append(el("p", op.description));
      const params = op.parameters || [];
      if (params.length) section.append(table(["parameter", "in", "required", "type", "about"],
        params.map((p) => [p.name, p.in, p.required ? "yes" : "no", typeOf(p.schema), p.description || ""])));
      const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
      if (body) section.append(el("p", "JSON body: " + (typeOf(body.schema) || body.schema.title || "object")));
      section.append(table(["answer", "meaning", "body"], Object.entries(op.responses || {}).map(([code, r]) => {
        const content = r.content || {};
        const media = Object.keys(content)[0];
        return [code, r.description || "", media ? `${media} ${typeOf(content[media].schema)}` : ""];
      })));
      $("operations").append(section);
    }
  }
  for (const [name, schema] of Object.entries((doc.components || {}).schemas || {})) {
    const section = el("section"); section.id = "schema-" + name;
    section.append(el("h3", name));
    if (schema.description) section.append(el("p", schema.description));
    const required = new Set(schema.required || []);
    section.append(table(["field", "type", "required"], Object.entries(schema.properties || {}).map(
      ([field, s]) => [field, typeOf(s), required.has(field) ? "yes" : "no"])));
    $("schemas").append(section);
  }
}

render().catch((e) => { $("error").textContent = "Error: " + e.message; $("error").hidden = false; });
