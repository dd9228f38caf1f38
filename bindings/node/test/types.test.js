'use strict';
/*
 * index.d.ts against the compiler and the runtime (test/types/):
 *   - usage.mts / usage.cts use every export, option and result field and
 *     must compile (tsc, strict), through `import` and `require`;
 *   - negative.mts must fail with exactly the errors its lines expect;
 *   - usage.mts, compiled, runs against a real sshd and checks that the
 *     fields and options it names are exactly the ones the binding has.
 */

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const { startSshd } = require('./sshd-fixture.js');

const PKG = path.resolve(__dirname, '..');
const TYPES = path.join(__dirname, 'types');
const TSC = path.join(PKG, 'node_modules', 'typescript', 'bin', 'tsc');

let fx;

before(async () => {
	fx = await startSshd();
});

after(async () => {
	if (fx)
		await fx.stop();
});

/* Run a program; resolve { code, out } (stdout + stderr), whatever the exit status. */
function run(argv, opts = {}) {
	return new Promise((resolve) => {
		execFile(argv[0], argv.slice(1), { cwd: PKG, timeout: 120_000, ...opts }, (err, stdout, stderr) =>
			resolve({ code: err ? (err.code ?? 'killed') : 0, out: stdout + stderr }));
	});
}

const tsc = (...args) => run([process.execPath, TSC, ...args]);

describe('TypeScript declarations', () => {
	it('typescript is installed (npm install in bindings/node)', () => {
		assert.ok(fs.existsSync(TSC), `${TSC} is missing: run npm install in ${PKG}`);
	});

	it('the negative file fails with exactly the errors it expects', async () => {
		const file = path.join(TYPES, 'negative.mts');
		const want = [];
		fs.readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
			const m = /\/\/ expect (TS\d+)$/.exec(line);
			if (m)
				want.push(`${i + 1} ${m[1]}`);
		});
		assert.ok(want.length >= 10, `only ${want.length} expectations in ${file}`);
		const r = await tsc('-p', path.join(TYPES, 'tsconfig.negative.json'));
		assert.notEqual(r.code, 0, 'tsc accepted negative.mts');
		const got = [...r.out.matchAll(/negative\.mts\((\d+),\d+\): error (TS\d+)/g)].map((m) => `${m[1]} ${m[2]}`);
		assert.deepEqual(got, want, r.out);
	});

	it('the usage files compile; compiled, usage.mjs runs and its lists match the binding', async () => {
		/* Inside the package, so that `import 'libasp'` resolves to it by its own name. */
		const out = fs.mkdtempSync(path.join(TYPES, '.out-'));
		try {
			const c = await tsc('-p', path.join(TYPES, 'tsconfig.json'), '--noEmit', 'false',
				'--rootDir', TYPES, '--outDir', out);
			assert.equal(c.code, 0, c.out);
			const r = await run([process.execPath, path.join(out, 'usage.mjs'), fx.config]);
			assert.equal(r.code, 0, r.out);
			assert.equal(r.out, 'ok\n');
		} finally {
			fs.rmSync(out, { recursive: true, force: true });
		}
	});
});
