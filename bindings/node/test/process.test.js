'use strict';
/*
 * Sandbox.start and Process against a real sshd (test/sshd-fixture.js): stdin written while
 * the command runs, output as it comes, close of stdin, kill of the process group, wait with
 * a timeout, a terminal, several processes on one connection beside exec, close of a running
 * process, bad input.
 */

const assert = require('node:assert/strict');
const fs = require('node:fs');
const { describe, it } = require('node:test');

const asp = require('..');
const { sandboxPerFile } = require('./sshd-fixture.js');

const HANG = 30_000; // ms: a hang detector, not a timing

let fx;
let sb;

sandboxPerFile((f, s) => {
	fx = f;
	sb = s;
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function procAlive(pid) {
	let stat;
	try {
		stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
	} catch {
		return false;
	}
	const state = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
	return state !== 'Z' && state !== 'X';
}

async function waitDead(pid) {
	for (const end = Date.now() + HANG; Date.now() < end; await sleep(50))
		if (!procAlive(pid))
			return true;
	return !procAlive(pid);
}

/* The local pid of `sleep ARG` (the fixture's sandbox is this machine). */
async function findSleep(arg) {
	for (const end = Date.now() + HANG; Date.now() < end; await sleep(20)) {
		for (const d of fs.readdirSync('/proc')) {
			if (!/^\d+$/.test(d))
				continue;
			let cmd;
			try {
				cmd = fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').split('\0');
			} catch {
				continue;
			}
			if (cmd[0] === 'sleep' && cmd[1] === arg && procAlive(Number(d)))
				return Number(d);
		}
	}
	throw new Error(`no \`sleep ${arg}\` appeared`);
}

/* Read until the output holds needle; streams collects the streams seen. */
async function readUntil(p, needle, streams) {
	let out = Buffer.alloc(0);
	while (!out.includes(needle)) {
		const chunk = await p.read({ timeout: HANG });
		if (chunk === null)
			throw new Error(`the output ended without ${JSON.stringify(needle)}: ${out}`);
		if (streams)
			streams.add(chunk.stream);
		out = Buffer.concat([out, chunk.data]);
	}
	return out.toString();
}

describe('Process', () => {
	it('writes stdin while cat runs, reads it back, ends on closeStdin', async () => {
		const p = await sb.start('cat');
		await p.write('one\n');
		assert.equal(await readUntil(p, 'one\n'), 'one\n');
		await p.write(Buffer.from('two\n'));
		await p.write('three\n');
		assert.equal(await readUntil(p, 'three\n'), 'two\nthree\n');
		await p.closeStdin();
		const r = await p.wait({ timeout: HANG });
		assert.equal(r.exitCode, 0);
		assert.equal(r.stdout.toString(), 'one\ntwo\nthree\n');
		assert.equal(await p.wait(), r);
		assert.equal(await p.read({ timeout: 0 }), null);
		await p.close();
		assert.equal(p.closed, true);
	});

	it('reads output as it comes; wait and read time out while it runs', async () => {
		const go = `go-${process.pid}`;
		const p = await sb.start(`echo first; echo err >&2; while [ ! -e ${go} ]; do sleep 0.05; done; echo second; exit 3`);
		const streams = new Set();
		let out = await readUntil(p, 'err\n', streams);
		if (!out.includes('first\n'))
			out += await readUntil(p, 'first\n', streams);
		assert.deepEqual([...streams].sort(), ['stderr', 'stdout']);
		await assert.rejects(p.read({ timeout: 0 }), { code: 'ASP_ETIMEOUT' });
		await assert.rejects(p.wait({ timeout: 0 }), { code: 'ASP_ETIMEOUT' });
		await sb.write(go, '');
		await readUntil(p, 'second\n');
		const r = await p.wait({ timeout: HANG });
		assert.equal(r.exitCode, 3);
		assert.equal(r.stdout.toString(), 'first\nsecond\n');
		assert.equal(r.stderr.toString(), 'err\n');
		const rest = [];
		for await (const c of p)
			rest.push(c);
		assert.deepEqual(rest, []);
		await p.close();
		await sb.remove(go);
	});

	it('kill sends a signal to the whole process group', async () => {
		const arg = `51.${process.pid}`;
		const p = await sb.start(`sleep 1${arg} & sleep ${arg}`);
		const fg = await findSleep(arg);
		const bg = await findSleep(`1${arg}`);
		assert.ok(procAlive(fg) && procAlive(bg));
		await p.kill('SIGTERM');
		assert.ok(await waitDead(fg));
		assert.ok(await waitDead(bg));
		const r = await p.wait({ timeout: HANG });
		assert.equal(r.exitCode, null);
		assert.equal(r.signal, 'SIGTERM');
		await p.kill('KILL'); // ended: nothing to do
		await p.close();
	});

	it('close kills a running command', async () => {
		const arg = `52.${process.pid}`;
		const p = await sb.start(`sleep ${arg}`);
		const pid = await findSleep(arg);
		await p.close();
		assert.ok(await waitDead(pid));
		await assert.rejects(p.write('x'), { code: 'ASP_EINVAL' });
	});

	it('runs on a terminal: tty, TERM, size and resize, Ctrl-C', async () => {
		const p = await sb.start('while IFS= read -r l; do eval "$l"; done', { pty: true, term: 'vt100', cols: 91, rows: 17 });
		assert.equal(p.pty, true);
		await p.write('tty; echo TERM=$TERM; stty size\n');
		const out = await readUntil(p, '17 91\r\n');
		assert.match(out, /\/dev\/pts\//);
		assert.match(out, /TERM=vt100\r\n/);
		await p.resize(120, 40);
		await p.write('stty size\n');
		await readUntil(p, '40 120\r\n');
		const arg = `53.${process.pid}`;
		await p.write(`sleep ${arg}\n`);
		const pid = await findSleep(arg);
		await p.write('\x03');
		assert.ok(await waitDead(pid));
		const r = await p.wait({ timeout: HANG });
		assert.notEqual(r.exitCode, 0);
		assert.equal(r.stderr.length, 0);
		await p.close();
	});

	it('several processes share one connection with exec', async () => {
		const one = await asp.open({ config: fx.config, maxConnections: 1 });
		try {
			const procs = await Promise.all([0, 1, 2].map(() => one.start('cat')));
			assert.equal((await one.exec('echo beside')).stdout.toString(), 'beside\n');
			await Promise.all(procs.map((p, i) => p.write(`proc ${i}\n`)));
			for (const [i, p] of procs.entries())
				assert.equal(await readUntil(p, `proc ${i}\n`), `proc ${i}\n`);
			for (const p of procs) {
				await p.closeStdin();
				assert.equal((await p.wait({ timeout: HANG })).exitCode, 0);
				await p.close();
			}
			/* A Process left open is closed (killed) by the sandbox's close. */
			const arg = `54.${process.pid}`;
			await one.start(`sleep ${arg}`);
			const pid = await findSleep(arg);
			await one.close();
			assert.ok(await waitDead(pid));
		} finally {
			await one.close();
		}
	});

	it('refuses bad input', async () => {
		await assert.rejects(sb.start('true', { pty: true, term: 'xterm; rm -rf /' }), { code: 'ASP_EINVAL' });
		await assert.rejects(sb.start('true', { nope: 1 }), TypeError);
		const p = await sb.start('cat');
		await assert.rejects(p.kill('NOPE'), (e) => e.code === 'ASP_EINVAL' && /NOPE/.test(e.message));
		await assert.rejects(p.resize(80, 24), { code: 'ASP_EINVAL' });
		await assert.rejects(p.read({ timeout: -1 }), RangeError);
		await p.closeStdin();
		await assert.rejects(p.write('late'), { code: 'ASP_EINVAL' });
		await p.wait({ timeout: HANG });
		await p.close();
		const q = await sb.start('true', { cwd: 'no-such-dir-here' });
		await assert.rejects(q.wait({ timeout: HANG }), { code: 'ASP_ENOENT' });
		await q.close();
	});
});
