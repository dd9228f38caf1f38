/*
 * `import` reaches the same binding as `require` (package.json "exports":
 * index.mjs for import, index.js for require), by the package's own name.
 */
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';

import asp, * as named from 'libasp';
import fixture from './sshd-fixture.js';

const require = createRequire(import.meta.url);
const cjs = require('libasp');

let fx;

before(async () => {
	fx = await fixture.startSshd();
});

after(async () => {
	if (fx)
		await fx.stop();
});

describe('ES module', () => {
	it('the default export is the module require returns', () => {
		assert.equal(asp, cjs);
		assert.equal(named.default, cjs);
	});

	it('has a named export for every property of the CommonJS module, the same object', () => {
		const names = Object.keys(cjs).sort();
		assert.deepEqual(Object.keys(named).filter((k) => k !== 'default').sort(), names);
		for (const name of names)
			assert.equal(named[name], cjs[name], name);
		assert.equal(named.libraryPath, cjs.libraryPath);
		assert.ok(named.AspError.prototype instanceof Error);
	});

	it('opens a sandbox and runs a command through the named exports', async () => {
		const sb = await named.open({ config: fx.config });
		try {
			const r = await sb.exec('printf esm');
			assert.equal(r.exitCode, 0);
			assert.equal(r.stdout.toString(), 'esm');
			assert.ok(sb instanceof named.Sandbox);
			await assert.rejects(sb.read('missing-esm'), (e) => e instanceof named.AspError && e.code === 'ASP_ENOENT');
		} finally {
			await sb.close();
		}
	});
});
