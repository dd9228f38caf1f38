'use strict';
/*
 * koffi refuses an async call once max_async_calls are running or queued in
 * it ("Too many asynchronous calls are running"): a program that opened 500
 * sandboxes at once got that error from the 257th open. The binding queues
 * calls beyond its share of koffi's limit itself. A fresh process sets koffi's
 * limit to 8 before it loads libasp, then makes 40 calls at once (opens,
 * execs, closes): every one must succeed.
 */

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const { startSshd } = require('./sshd-fixture.js');

const LIMIT = 8;
const N = 40;
let fx;

before(async () => {
	fx = await startSshd();
});

after(async () => {
	if (fx)
		await fx.stop();
});

describe('koffi async call limit', () => {
	it(`${N} sandboxes opened at once with koffi's max_async_calls at ${LIMIT}`, async () => {
		const dir = path.resolve(__dirname, '..');
		const script = `
			const koffi = require(require.resolve('koffi', { paths: [${JSON.stringify(dir)}] }));
			koffi.config({ max_async_calls: ${LIMIT} });
			const asp = require(${JSON.stringify(dir)});
			(async () => {
				const one = async (i) => {
					const sb = await asp.open({ config: process.argv[1], maxConnections: 1 });
					const r = await sb.exec('echo ' + i);
					await sb.close();
					return r.stdout.toString();
				};
				const got = await Promise.all(Array.from({ length: ${N} }, (_, i) => one(i)));
				process.stdout.write(JSON.stringify(got));
			})().catch((e) => { console.error(e); process.exit(2); });`;
		const got = await new Promise((resolve, reject) => {
			execFile(process.execPath, ['-e', script, fx.config], { timeout: 300_000 }, (err, stdout, stderr) =>
				(err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout))));
		});
		assert.deepEqual(got, Array.from({ length: N }, (_, i) => `${i}\n`));
	});
});
