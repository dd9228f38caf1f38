'use strict';
/*
 * Background processes from Node: start with a name (a hostile one), list,
 * read from offsets (the bound reported), signal the group (seen alive,
 * then gone), wait with a timeout, remove; a process started by one Node
 * process that then exits, found by this one. Real sshd fixture; the
 * sandbox's processes are local, seen in /proc.
 */

const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { describe, it } = require('node:test');

const asp = require('..');
const { sandboxPerFile } = require('./sshd-fixture.js');

const HANG_MS = 30000; /* a hang detector, not a timing */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function alive(pid) {
	try {
		const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
		return !'ZX'.includes(stat.slice(stat.lastIndexOf(')') + 2)[0]);
	} catch {
		return false;
	}
}

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

function pidIn(file) {
	try {
		const n = parseInt(fs.readFileSync(file, 'utf8'), 10);
		return n > 0 ? n : 0;
	} catch {
		return 0;
	}
}

let fx;
let sb;

sandboxPerFile((f, s) => {
	fx = f;
	sb = s;
});

async function readAll(id, offset = 0) {
	const until = Date.now() + HANG_MS;
	for (;;) {
		const out = await sb.bgRead(id, { offset });
		if (!out.status.outputOpen || Date.now() > until)
			return out;
		await sleep(20);
	}
}

describe('background processes', () => {
	it('start, read, list, remove', async () => {
		const name = "it's $(touch njsinj1)\n`x`";
		const id = await sb.bgStart('echo hello; echo err >&2; exit 4', { name });
		const st = await sb.bgWait(id, { timeout: HANG_MS });
		assert.deepEqual([st.state, st.exitCode, st.signal], ['exited', 4, null]);
		const out = await readAll(id);
		assert.equal(out.data.toString(), 'hello\nerr\n');
		assert.deepEqual([out.offset, out.next], [0, 10]);
		assert.equal((await sb.bgRead(id, { offset: 6, limit: 2 })).data.toString(), 'er');
		const mine = (await sb.bgList()).filter((p) => p.id === id);
		assert.equal(mine.length, 1);
		assert.equal(mine[0].name, name);
		assert.equal(mine[0].command, 'echo hello; echo err >&2; exit 4');
		await sb.bgRemove(id);
		await assert.rejects(sb.bgRead(id), (e) => e.name === 'ASP_ENOENT' || e.code === 'ASP_ENOENT' || /no background process/.test(e.message));
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'njsinj1')));
	});

	it('keeps the newest output and says where it begins', async () => {
		const id = await sb.bgStart('seq 1 2000', { keep: 1000 });
		await sb.bgWait(id, { timeout: HANG_MS });
		let want = '';
		for (let i = 1; i <= 2000; i++)
			want += `${i}\n`;
		const out = await readAll(id);
		assert.equal(out.status.outputSize, want.length);
		assert.ok(out.offset > 0 && want.length - out.offset <= 1000, `kept from ${out.offset}`);
		assert.equal(out.data.toString(), want.slice(out.offset));
		await sb.bgRemove(id);
	});

	it('signals the group; wait times out first', async () => {
		const file = path.join(fx.workspace, 'njs-bg-pid');
		fs.rmSync(file, { force: true });
		const id = await sb.bgStart('sleep 300 & echo $! > njs-bg-pid; wait');
		const pid = await waitFor('the pid file', () => pidIn(file));
		assert.ok(alive(pid));
		await assert.rejects(sb.bgWait(id, { timeout: 100 }), /still running/);
		await sb.bgSignal(id, 'SIGTERM');
		await waitFor(`sleep ${pid} outlived SIGTERM`, () => !alive(pid));
		const st = await sb.bgWait(id, { timeout: HANG_MS });
		assert.deepEqual([st.state, st.signal], ['exited', 'SIGTERM']);
		await sb.bgRemove(id);
		fs.rmSync(file, { force: true });
	});

	it('outlives the Node process that started it', async () => {
		const file = path.join(fx.workspace, 'njs-bg-hpid');
		fs.rmSync(file, { force: true });
		const code = `const asp = require(${JSON.stringify(path.join(__dirname, '..'))});
			(async () => { const sb = await asp.open({ config: ${JSON.stringify(fx.config)} });
			console.log(await sb.bgStart('echo $$ > njs-bg-hpid; exec sleep 300', { name: 'harness' }));
			await sb.close(); })();`;
		const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: HANG_MS });
		assert.equal(r.status, 0, r.stderr);
		const id = r.stdout.trim();
		const pid = await waitFor('the pid file', () => pidIn(file));
		assert.ok(alive(pid), 'it died with the harness');
		const mine = (await sb.bgList()).filter((p) => p.id === id);
		assert.deepEqual([mine[0].name, mine[0].status.state, mine[0].pid], ['harness', 'running', pid]);
		await sb.bgSignal(id, 'SIGKILL');
		await waitFor(`${pid} outlived SIGKILL`, () => !alive(pid));
		assert.equal((await sb.bgWait(id, { timeout: HANG_MS })).signal, 'SIGKILL');
		await sb.bgRemove(id);
		fs.rmSync(file, { force: true });
	});
});
