'use strict';
/*
 * A call that lasts as long as its command (exec with onData, stdin or a
 * deadline; a Process's reads and waits) holds a libuv worker thread while
 * it runs. libuv's default pool has 4, so without the binding's sizing a
 * fifth such exec waits for one of the first four to end. A plain exec holds
 * none while its command runs: one waiter thread waits for all of them
 * (asp_proc_wait_any). Commands that each wait until all have started show
 * whether they really run at once.
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
function rendezvous(tag, giveUpS, poolSize, { n = N, handles = 1, held = true } = {}) {
	/* A deadline takes exec's thread-held route; without one it is the waiter's. */
	const opts = held ? '{ deadline: 600000 }' : '{}';
	const script = `
		const asp = require(${JSON.stringify(path.resolve(__dirname, '..'))});
		(async () => {
			const sbs = [];
			for (let i = 0; i < ${handles}; i++)
				sbs.push(await asp.open({ config: process.argv[1], maxConnections: ${n} }));
			const cmd = 'echo $$ >> ${tag}; i=0; ' +
				'while [ "$(wc -l < ${tag})" -lt ${n} ]; do ' +
				'i=$((i+1)); [ $i -gt ${giveUpS * 20} ] && exit 1; sleep 0.05; done';
			const rs = await Promise.all(Array.from({ length: ${n} }, (_, i) => sbs[i % ${handles}].exec(cmd, ${opts})));
			await Promise.all(sbs.map((sb) => sb.close()));
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

	/*
	 * Opens take at most half the pool: 8 opens of a server that accepts and
	 * never speaks (each ends at its connectTimeout) are started first, then
	 * an exec on a sandbox already open, with a pool of 4. The exec ends
	 * first; with every open let into libuv's queue, it waited behind them.
	 */
	it('opens take at most half the pool: a later exec does not wait behind them', async () => {
		const script = `
			const asp = require(${JSON.stringify(path.resolve(__dirname, '..'))});
			const fs = require('node:fs');
			const net = require('node:net');
			(async () => {
				const held = [];
				const silent = net.createServer((s) => held.push(s));
				await new Promise((r) => silent.listen(0, '127.0.0.1', r));
				const cfg = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'));
				cfg.connection.port = silent.address().port;
				const sb = await asp.open({ config: process.argv[1] });
				const order = [];
				const stalls = Array.from({ length: 8 }, () =>
					asp.open({ configText: JSON.stringify(cfg), connectTimeout: 3000 })
						.then(() => order.push('opened'), (e) => order.push(e.code)));
				const ex = sb.exec('echo hi').then((r) => order.push('exec ' + r.stdout.toString().trim()));
				await Promise.all([...stalls, ex]);
				await sb.close();
				held.forEach((s) => s.destroy());
				silent.close();
				process.stdout.write(JSON.stringify(order));
			})().catch((e) => { console.error(e); process.exit(2); });`;
		const env = { ...process.env, UV_THREADPOOL_SIZE: '4' };
		const order = await new Promise((resolve, reject) => {
			execFile(process.execPath, ['-e', script, fx.config], { env, timeout: 120_000 }, (err, stdout, stderr) =>
				(err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout))));
		});
		assert.equal(order.length, 9, JSON.stringify(order));
		assert.equal(order[0], 'exec hi', JSON.stringify(order));
		assert.ok(order.slice(1).every((c) => c === 'ASP_ECONNECT' || c === 'ASP_ETIMEOUT'), JSON.stringify(order));
	});

	/* With the same control's pool cut to 2, plain execs on 3 handles still all meet. */
	it('12 plain execs on 3 handles run at once with 2 threads in the pool', async () => {
		const codes = await rendezvous('arrived-waited', 10, 2, { n: 12, handles: 3, held: false });
		assert.deepEqual(codes, Array(12).fill(0));
	});
});
