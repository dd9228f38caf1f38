'use strict';
/*
 * exec without onData, stdin or deadline starts its command and then waits
 * for it on the process's one waiter (asp_proc_wait_any): what exec promised
 * must hold there too. Each command writes its pids to a file of the
 * workspace (the fixture's sshd runs on this machine), so every process
 * asserted dead is first seen alive, without onData (which takes the other
 * route).
 */

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { after, before, describe, it } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

let fx;
let sb;

before(async () => {
	fx = await startSshd();
	sb = await asp.open({ config: fx.config, maxConnections: 2 });
});

after(async () => {
	if (sb)
		await sb.close();
	if (fx)
		await fx.stop();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function stat(pid) {
	try {
		const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
		const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
		return { comm: s.slice(s.indexOf('(') + 1, s.lastIndexOf(')')), state: f[0], ppid: Number(f[1]) };
	} catch {
		return null;
	}
}

function alive(pid) {
	const s = stat(pid);
	return !!s && s.state !== 'Z' && s.state !== 'X';
}

/* The pids a command wrote to `file` of the workspace ("$$ $!"), once all are alive. */
async function pidsOf(file, n) {
	const local = path.join(fx.workspace, file);
	for (const end = Date.now() + 20_000; Date.now() < end; await sleep(20)) {
		let text = '';
		try {
			text = fs.readFileSync(local, 'utf8');
		} catch {
			continue;
		}
		if (!text.endsWith('\n'))
			continue;
		const pids = text.trim().split(' ').map(Number);
		assert.equal(pids.length, n, `pids file: ${JSON.stringify(text)}`);
		assert.deepEqual(pids.map(alive), Array(n).fill(true), `not all of ${pids} alive`);
		return pids;
	}
	throw new Error(`the command never wrote ${local}`);
}

async function assertDead(pids) {
	for (const pid of pids) {
		for (const end = Date.now() + 10_000; alive(pid) && Date.now() < end;)
			await sleep(50);
		assert.ok(!alive(pid), `process ${pid} of the group survived`);
	}
}

const unique = (p) => `${p}-${crypto.randomBytes(6).toString('hex')}`;
const group = (file) => `sleep 30 & echo "$$ $!" > ${file}; wait`;

describe('exec on the waiter', () => {
	it('a command that reads stdin, given none, reads end of input at once', { timeout: 20_000 }, async () => {
		const r = await sb.exec('cat; read -r x || echo eof; exit 3');
		assert.deepEqual([r.exitCode, r.stdout.toString()], [3, 'eof\n']);
	});

	it('timeout kills the whole group and reports timedOut', async () => {
		const file = unique('timeout');
		const run = sb.exec(group(file), { timeout: 3000, killGrace: 500 });
		const pids = await pidsOf(file, 2);
		const r = await run;
		assert.deepEqual([r.timedOut, r.cancelled, r.exitCode], [true, false, null]);
		assert.ok(r.signal);
		await assertDead(pids);
	});

	it('an AbortSignal kills the whole group and reports cancelled', async () => {
		const file = unique('abort');
		const ac = new AbortController();
		const run = sb.exec(group(file), { signal: ac.signal });
		const pids = await pidsOf(file, 2);
		ac.abort();
		const r = await run;
		assert.deepEqual([r.cancelled, r.timedOut, r.exitCode], [true, false, null]);
		await assertDead(pids);
	});

	it('more commands than maxConnections on one handle queue, and each gets its own result', async () => {
		const rs = await Promise.all(Array.from({ length: 9 }, (_, i) =>
			sb.exec(`sleep 0.2; echo ${i}; echo e${i} >&2; exit ${i}`)));
		assert.deepEqual(rs.map((r) => [r.exitCode, r.stdout.toString(), r.stderr.toString()]),
			Array.from({ length: 9 }, (_, i) => [i, `${i}\n`, `e${i}\n`]));
	});

	it('an AbortSignal ends the wait for a turn, and runs nothing', async () => {
		const one = await asp.open({ config: fx.config, maxConnections: 1 });
		const file = unique('queued');
		try {
			const ac = new AbortController();
			const first = one.exec('sleep 2; echo first');
			const queued = one.exec(`touch ${file}`, { signal: ac.signal });
			await sleep(300);
			ac.abort();
			/* Rejected by the queue itself ("its turn"), not by a start after the first ended. */
			await assert.rejects(queued, (e) => e.code === 'ASP_ECANCELLED' && /its turn/.test(e.message));
			assert.equal((await first).stdout.toString(), 'first\n');
			assert.ok(!fs.existsSync(path.join(fx.workspace, file)), 'the aborted command ran');
			assert.equal((await one.exec('echo next')).stdout.toString(), 'next\n');
		} finally {
			await one.close();
		}
	});

	it('close() waits for a running command', async () => {
		const other = await asp.open({ config: fx.config });
		const run = other.exec('sleep 1; echo done');
		await sleep(100);
		await other.close();
		assert.equal((await run).stdout.toString(), 'done\n');
	});

	it('a connection cut while the command runs rejects with ASP_ECONNLOST; the others go on', async () => {
		const file = unique('cut');
		const other = await asp.open({ config: fx.config, maxConnections: 1 });
		try {
			const calm = sb.exec('sleep 2; echo calm');
			const run = other.exec(group(file));
			const [shell] = await pidsOf(file, 2);
			/* This connection's own sshd processes: the session's and its monitor. */
			const sshds = [];
			for (let pid = stat(shell).ppid; pid > 1 && sshds.length < 2; pid = stat(pid).ppid) {
				if (stat(pid).comm === 'sshd')
					sshds.push(pid);
			}
			assert.equal(sshds.length, 2, 'the session sshd and its monitor');
			assert.ok(!sshds.includes(fx.pid), 'not the listener');
			assert.ok(sshds.every(alive), `sshd ${sshds} not alive before the kill`);
			/*
			 * Both were seen alive just now. The monitor ends by itself once its
			 * child is killed: on a busy machine it can be gone before its own
			 * kill, which has then nothing left to do (ESRCH).
			 */
			for (const pid of sshds) {
				try {
					process.kill(pid, 'SIGKILL');
				} catch (e) {
					if (e.code !== 'ESRCH')
						throw e;
				}
			}
			await assert.rejects(run, { code: 'ASP_ECONNLOST' });
			assert.equal((await calm).stdout.toString(), 'calm\n');
		} finally {
			await other.close();
		}
	});
});
