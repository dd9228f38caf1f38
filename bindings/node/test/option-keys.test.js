'use strict';
/*
 * An options object with a key the binding does not know is refused with a
 * TypeError naming the key, before anything runs: a misspelt `timeout` must
 * not run a command with no timeout at all, nor a misspelt
 * `maxConnections` open a pool of the default size. Against a real sshd.
 */

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { describe, it } = require('node:test');

const asp = require('..');
const { sandboxPerFile } = require('./sshd-fixture.js');

let fx;
let sb;

sandboxPerFile((f, s) => {
	fx = f;
	sb = s;
});

/* fn() rejects (or throws) a TypeError whose message names key. */
async function refuses(fn, key) {
	await assert.rejects(async () => fn(), (e) => {
		assert.ok(e instanceof TypeError, `expected a TypeError, got ${e && e.name}: ${e && e.message}`);
		assert.match(e.message, new RegExp(`\\b${key}\\b`), `the message names '${key}': ${e.message}`);
		return true;
	});
}

describe('unknown option keys', () => {
	it('exec refuses {timout} and does not run the command', async () => {
		await refuses(() => sb.exec('touch ran-with-timout', { timout: 500 }), 'timout');
		assert.equal(fs.existsSync(path.join(fx.workspace, 'ran-with-timout')), false,
			'the command ran although its options were refused');
		/* The right spelling still works. */
		const r = await sb.exec('echo ok', { timeout: 5000 });
		assert.equal(r.stdout.toString(), 'ok\n');
	});

	it('open refuses {maxConnection}', async () => {
		await refuses(() => asp.open({ config: fx.config, maxConnection: 1 }), 'maxConnection');
		const s = await asp.open({ config: fx.config, maxConnections: 1, lazy: true });
		await s.close();
	});

	it('every file call refuses a key it does not take', async () => {
		await refuses(() => sb.read('x', { ofset: 1 }), 'ofset');
		await refuses(() => sb.write('w', 'data', { mkdir: true }), 'mkdir');
		assert.equal(fs.existsSync(path.join(fx.workspace, 'w')), false, 'write ran although refused');
		await refuses(() => sb.stat('.', { timout: 1 }), 'timout');
		await refuses(() => sb.mkdir('d', { parent: true }), 'parent');
		assert.equal(fs.existsSync(path.join(fx.workspace, 'd')), false, 'mkdir ran although refused');
		await refuses(() => sb.list('.', { signl: null }), 'signl');
		await refuses(() => sb.remove('.', { recurse: true }), 'recurse');
		await refuses(() => sb.rename('a', 'b', { overwrite: true }), 'overwrite');
		await refuses(() => sb.warm(1, { connections: 2 }), 'connections');
	});

	it('a key of another call is refused too (read takes no mode)', async () => {
		await refuses(() => sb.read('x', { mode: 0o600 }), 'mode');
		await refuses(() => sb.exec('true', { parents: true }), 'parents');
	});
});
