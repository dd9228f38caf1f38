'use strict';
/*
 * The structs index.js declares for koffi, and the constants it copies from
 * asp.h, against the C compiler's view of include/asp.h: a small C program,
 * generated from the binding's own declarations, prints sizeof, offsetof of
 * every field, and every constant; the binding's koffi.sizeof/offsetof and
 * values must match line for line. A field appended to a struct in asp.h and
 * not in index.js (or the reverse) changes sizeof and fails here.
 */

const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { describe, it } = require('node:test');
const koffi = require('koffi');

const asp = require('..');

const INCLUDE = path.resolve(__dirname, '..', '..', '..', 'include');
const CC = process.env.CC || 'cc';

/* Member names of `typedef struct NAME { ... } NAME;` in asp.h, in order. */
function headerFields(header, name) {
	const m = new RegExp(`typedef struct ${name} \\{([^}]*)\\} ${name};`).exec(header);
	assert.ok(m, `asp.h: no typedef struct ${name}`);
	return m[1].replace(/\/\*[\s\S]*?\*\//g, '').split(';').map((d) => d.trim()).filter(Boolean)
		.map((d) => /([A-Za-z_]\w*)\s*(\[[^\]]*\])?$/.exec(d)[1]);
}

describe('struct layouts and constants', () => {
	/* sizeof alone misses a field appended into what was padding; the names do not. */
	it('declare the fields of include/asp.h, in its order', () => {
		const header = fs.readFileSync(path.join(INCLUDE, 'asp.h'), 'utf8');
		const { structs } = asp[Symbol.for('libasp.internals')]();
		for (const [name, type] of Object.entries(structs))
			assert.deepEqual(Object.keys(koffi.introspect(type).members), headerFields(header, name), name);
	});

	it('match include/asp.h as the C compiler sees it', () => {
		const internals = asp[Symbol.for('libasp.internals')]();
		const lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "asp.h"', 'int main(void) {'];
		const want = [];
		const print = (label, fmt, expr, value) => {
			lines.push(`\tprintf("${label} %${fmt}\\n", ${expr});`);
			want.push(`${label} ${value}`);
		};
		for (const [name, type] of Object.entries(internals.structs)) {
			print(name, 'zu', `sizeof(${name})`, koffi.sizeof(type));
			print(`${name} align`, 'zu', `_Alignof(${name})`, koffi.alignof(type));
			for (const field of Object.keys(koffi.introspect(type).members))
				print(`${name}.${field}`, 'zu', `offsetof(${name}, ${field})`, koffi.offsetof(type, field));
		}
		print('asp_error', 'zu', 'sizeof(asp_error)', internals.errorSize);
		print('asp_error.message', 'zu', 'offsetof(asp_error, message)', internals.errorMessageOffset);
		for (const [name, value] of Object.entries(internals.constants))
			print(name, 'lld', `(long long)${name}`, value);
		for (const [name, value, where] of internals.enums)
			print(`${where} ${name}`, 'lld', `(long long)${name}`, value);
		print('ASP_READ_ALL', 'llu', '(unsigned long long)ASP_READ_ALL', internals.readAll);
		lines.push('\treturn 0;', '}');

		const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-node-layout-'));
		try {
			const src = path.join(dir, 'layout.c');
			const exe = path.join(dir, 'layout');
			fs.writeFileSync(src, `${lines.join('\n')}\n`);
			execFileSync(CC, ['-std=c11', '-Wall', '-Werror', '-I', INCLUDE, '-o', exe, src], { stdio: 'inherit' });
			const got = execFileSync(exe, { encoding: 'utf8' }).split('\n').slice(0, -1);
			assert.deepEqual(got, want);
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});
});
