// schema.mjs - a Kubernetes object against the API's published OpenAPI schema, offline.
//
// The schema is the npm package kubernetes-models (pinned in package.json and
// package-lock.json), generated from Kubernetes' OpenAPI document (its PodSpec
// has hostnameOverride: v1.34 or later). Two checks per object:
//  1. the package's own validators (compiled JSON Schema: types, enums,
//     required fields, formats such as int32 and quantities);
//  2. unknown fields, which those validators let through (the schema has no
//     additionalProperties: false) but an API server refuses (field
//     validation Strict, kubectl's default since 1.27): every key is looked
//     up in the field list of its type, read from the package's TypeScript
//     declarations (one interface per OpenAPI definition).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
const pkgDir = dirname(require.resolve("kubernetes-models/package.json"));
const nodeModules = dirname(pkgDir);

// apiVersion/kind -> the module that defines it.
const KINDS = {
	"v1/Pod": "v1/Pod",
	"v1/Secret": "v1/Secret",
	"v1/ConfigMap": "v1/ConfigMap",
	"v1/Service": "v1/Service",
	"networking.k8s.io/v1/NetworkPolicy": "networking.k8s.io/v1/NetworkPolicy",
};

// A declaration file: its imports (name -> file) and interfaces (name -> {field: type text}).
const files = new Map();
function parseDts(path) {
	if (files.has(path))
		return files.get(path);
	const text = readFileSync(path, "utf8").replace(/\/\*\*[\s\S]*?\*\//g, "");
	const imports = {};
	for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
		let target = m[2];
		if (target.startsWith("."))
			target = join(dirname(path), target.replace(/\.js$/, ".d.ts"));
		else
			target = join(nodeModules, target + ".d.ts");
		imports[m[1]] = target;
	}
	const interfaces = {};
	for (const m of text.matchAll(/export interface (\w+)(?: extends \w+)? \{\n([\s\S]*?)\n\}/g)) {
		const fields = {};
		// A field: "name", optional ?, ": ", its type up to the ";" that ends it at depth 0
		// (a map type spans lines).
		let name = null, type = "", depth = 0;
		for (const line of m[2].split("\n")) {
			let rest = line.trim();
			if (name === null) {
				const f = rest.match(/^"([^"]+)"\??: (.*)$/);
				if (!f)
					continue;
				name = f[1];
				rest = f[2];
				type = "";
			}
			type += (type ? " " : "") + rest;
			depth += (rest.match(/[{<]/g) || []).length - (rest.match(/[}>]/g) || []).length;
			if (depth === 0 && rest.endsWith(";")) {
				fields[name] = type.slice(0, -1).trim();
				name = null;
			}
		}
		interfaces[m[1]] = fields;
	}
	const aliases = {};
	for (const m of text.matchAll(/export type \{ (\w+) as (\w+)/g))
		aliases[m[2]] = m[1];
	const r = { path, imports, interfaces, aliases };
	files.set(path, r);
	return r;
}

// The fields of the interface `name` as seen from file f (an imported alias or a local one).
function resolve(f, name) {
	if (f.interfaces[name])
		return { file: f, fields: f.interfaces[name] };
	const target = f.imports[name];
	if (!target)
		return null;
	const g = parseDts(target);
	const local = g.aliases[name] || name;
	if (g.interfaces[local])
		return { file: g, fields: g.interfaces[local] };
	// Re-exported under another name: the file's only interface.
	const names = Object.keys(g.interfaces);
	return names.length === 1 ? { file: g, fields: g.interfaces[names[0]] } : null;
}

function unknownFields(value, type, file, path, out) {
	if (value === null || typeof value !== "object")
		return;
	type = type.replace(/\s+/g, " ").trim();
	let m;
	if ((m = type.match(/^Array<(.+)>$/))) {
		if (Array.isArray(value))
			value.forEach((v, i) => unknownFields(v, m[1], file, `${path}[${i}]`, out));
		return;
	}
	if ((m = type.match(/^\{ \[key: string\]: (.+) \}$/))) {
		for (const [k, v] of Object.entries(value))
			unknownFields(v, m[1], file, `${path}.${k}`, out);
		return;
	}
	if (!/^I\w+$/.test(type))
		return; // a primitive, a union or a free-form object (IntOrString, Quantity, ...)
	const r = resolve(file, type);
	if (!r) {
		out.push(`${path}: no declaration for ${type} (the schema package changed?)`);
		return;
	}
	for (const [k, v] of Object.entries(value)) {
		if (!(k in r.fields))
			out.push(`${path}.${k}: unknown field (not in ${type.replace(/^IIoK8s/, "")})`);
		else
			unknownFields(v, r.fields[k], r.file, `${path}.${k}`, out);
	}
}

// Errors of one object (an empty list when it is valid).
export async function validateObject(obj) {
	const key = `${obj.apiVersion}/${obj.kind}`;
	const mod = KINDS[key];
	if (!mod)
		return [`${key}: not a kind this checker knows (add it to KINDS in tests/kube/schema.mjs)`];
	const errors = [];
	const m = await import(`kubernetes-models/${mod}`);
	const Cls = m[obj.kind];
	try {
		new Cls(obj).validate();
	} catch (e) {
		errors.push(...String(e.message).split(", ").map((s) => `schema: ${s}`));
	}
	const dts = parseDts(join(pkgDir, mod + ".d.ts"));
	const top = Object.keys(dts.interfaces).find((n) => n === `I${obj.kind}`);
	if (!top)
		errors.push(`${key}: no interface I${obj.kind} in ${mod}.d.ts`);
	else
		unknownFields(obj, top, dts, obj.kind, errors);
	return errors;
}

export const schemaPackage = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
