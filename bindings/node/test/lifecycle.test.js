'use strict';
/*
 * A command dies with its harness: a Node harness that gets SIGINT and has
 * no handler for it exits at once, and the sandbox's watchdog kills the
 * command when the connection closes (the harness cannot). And messages
 * name this binding's options (maxReadBytes, stdin, timeout), not
 * libasp's C fields. Real sshd fixture; the sandbox's processes are local,
 * seen in /proc.
 */

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { describe, it, before, after } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

const HANG_MS = 30000; /* a hang detector, not a timing */
const C_WORDS = ['asp_open_options', 'asp_exec_options', 'stdin_data', 'timeout_ms'];

function alive(pid) {
	try {
		const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
		return !'ZX'.includes(stat.slice(stat.lastIndexOf(')') + 2)[0]);
	} catch {
		return false;
	}
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(what, test) {
	const until = Date.now() + HANG_MS;
	for (;;) {
		const v = test();
		if (v)
			return v;
		assert.ok(Date.now() < until, what);
		await sleep(20);
	}
}

function assertBindingWords(e, want) {
	assert.ok(e instanceof asp.AspError, String(e));
	assert.ok(e.message.includes(want), e.message);
	for (const w of C_WORDS)
		assert.ok(!e.message.includes(w), e.message);
}

describe('lifecycle', () => {
	let fx;
	before(async () => { fx = await startSshd(); });
	after(async () => { if (fx) await fx.stop(); });

	it('a harness ended by SIGINT (no handler) leaves no process of its command', async () => {
		const pidsFile = path.join(fx.workspace, 'node-sigint-pids');
		fs.rmSync(pidsFile, { force: true });
		const command = 'sleep 300 & a=$!; setsid sleep 301 & b=$!; echo "$$ $a $b" > node-sigint-pids.tmp; ' +
			'mv node-sigint-pids.tmp node-sigint-pids; wait; echo never';
		const script = `const asp = require(${JSON.stringify(path.join(__dirname, '..'))});
			(async () => { const sb = await asp.open({ config: process.argv[1] });
			await sb.exec(process.argv[2]); console.log('returned'); })();`;
		const child = spawn(process.execPath, ['-e', script, fx.config, command], { stdio: ['ignore', 'pipe', 'pipe'] });
		let out = '';
		child.stdout.on('data', (d) => { out += d; });
		child.stderr.on('data', (d) => { out += d; });
		const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve(sig)));
		const pids = await waitFor('the command never wrote its pids', () => {
			assert.equal(child.exitCode, null, `the harness ended early: ${out}`);
			try {
				const p = fs.readFileSync(pidsFile, 'utf8').trim().split(/\s+/).map(Number);
				return p.length === 3 ? p : null;
			} catch {
				return null;
			}
		});
		try {
			for (const pid of pids)
				assert.ok(alive(pid), `process ${pid} of the command is not running`);
			child.kill('SIGINT');
			assert.equal(await exited, 'SIGINT', out);
			for (const pid of pids)
				await waitFor(`process ${pid} outlived its harness`, () => !alive(pid));
		} finally {
			for (const pid of pids)
				if (alive(pid))
					process.kill(pid, 'SIGKILL');
		}
	});

	it('names maxReadBytes, stdin and timeout in messages', async () => {
		const sb = await asp.open({ config: fx.config, maxReadBytes: 4 });
		try {
			await sb.write('node-five.txt', '12345');
			await assert.rejects(sb.read('node-five.txt'), (e) => { assertBindingWords(e, 'maxReadBytes'); return true; });
			await assert.rejects(sb.exec('echo ' + 'x'.repeat(40000)), (e) => {
				assertBindingWords(e, 'stdin');
				return true;
			});
			await sb.exec('mkfifo node-fifo');
			await assert.rejects(sb.read('node-fifo', { timeout: 500 }), (e) => {
				assertBindingWords(e, 'timeout');
				return true;
			});
		} finally {
			await sb.close();
		}
	});
});
