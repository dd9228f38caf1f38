'use strict';
/*
 * Every sandbox call holds a libuv worker thread while it runs. libuv's
 * default pool has 4, so without the binding's sizing a fifth concurrent
 * exec waits for one of the first four to end. Eight commands that each wait
 * until all eight have started show whether they really run at once: they
 * can only all succeed when eight calls hold threads together.
 */

const assert = require('node:assert/strict');
const { execFile } = require('node:child_process');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const { startSshd } = require('./sshd-fixture.js');

const N = 8;
let fx;

before(async () => {
	fx = await startSshd();
});

after(async () => {
	if (fx)
		await fx.stop();
});

/*
 * A fresh Node process (the pool size is fixed at its first job) runs N
 * rendezvous commands; each gives up after about giveUpS seconds.
 * Returns their exit codes.
 */
function rendezvous(tag, giveUpS, poolSize) {
	const script = `
		const asp = require(${JSON.stringify(path.resolve(__dirname, '..'))});
		(async () => {
			const sb = await asp.open({ config: process.argv[1], maxConnections: ${N} });
			const cmd = 'echo $$ >> ${tag}; i=0; ' +
				'while [ "$(wc -l < ${tag})" -lt ${N} ]; do ' +
				'i=$((i+1)); [ $i -gt ${giveUpS * 20} ] && exit 1; sleep 0.05; done';
			const rs = await Promise.all(Array.from({ length: ${N} }, () => sb.exec(cmd)));
			await sb.close();
			process.stdout.write(JSON.stringify(rs.map((r) => r.exitCode)));
		})().catch((e) => { console.error(e); process.exit(2); });`;
	const env = { ...process.env };
	delete env.UV_THREADPOOL_SIZE;
	if (poolSize)
		env.UV_THREADPOOL_SIZE = String(poolSize);
	return new Promise((resolve, reject) => {
		execFile(process.execPath, ['-e', script, fx.config], { env, timeout: 120_000 }, (err, stdout, stderr) =>
			(err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout))));
	});
}

describe('libuv thread pool', () => {
	it(`${N} concurrent execs run at once without UV_THREADPOOL_SIZE set`, async () => {
		assert.deepEqual(await rendezvous('arrived-default', 20), Array(N).fill(0));
	});

	/* The control: the first four, alone in the pool, give up; then four more arrive. */
	it('an explicit UV_THREADPOOL_SIZE wins (4 threads: the first four give up waiting)', async () => {
		const codes = await rendezvous('arrived-four', 2, 4);
		assert.deepEqual([...codes].sort(), [0, 0, 0, 0, 1, 1, 1, 1]);
	});
});
