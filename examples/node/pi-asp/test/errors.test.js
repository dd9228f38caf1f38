/*
 * Every error text the extension lets pi show the model, from every way a
 * call can fail: missing config, wrong host key, missing file, permission
 * denied, timeout, abort, sandbox down. The model may see sandbox paths and
 * errno-like text; never the harness's config path, host, port, user, key
 * paths, nor the transport ("ASP", "SSH", "sandbox"). The full libasp
 * message must still reach the user (the report callback).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createPiAspExtension, TOOL_NAMES } from '../index.js';

const require = createRequire(import.meta.url);
const { startSshd } = require('../../../../bindings/node/test/sshd-fixture.js');

let fx;
let localDir;
const texts = []; // [case, tool, text]
const reports = []; // what the user was told

/* pi's ExtensionAPI, as far as the extension uses it. */
function fakePi() {
	const tools = {};
	const handlers = {};
	return {
		tools,
		handlers,
		registerTool: (def) => {
			tools[def.name] = def;
		},
		on: (event, handler) => {
			handlers[event] = handler;
		},
	};
}

const ctx = { hasUI: false, cwd: '/nowhere' };

/* Call a tool; collect its error text under `what` (a result is returned, not collected). */
async function call(what, p, name, params, signal) {
	try {
		return { ok: await p.tools[name].execute(`call-${what}-${name}`, params, signal, undefined, ctx) };
	} catch (e) {
		texts.push([what, name, e.message]);
		return { error: e.message };
	}
}

/* One call of each tool, on `file` (which should not matter: every one must fail). */
async function everyTool(what, p, file = 'hello.txt') {
	const out = {};
	out.read = await call(what, p, 'read', { path: file });
	out.write = await call(what, p, 'write', { path: file, content: 'x' });
	out.edit = await call(what, p, 'edit', { path: file, edits: [{ oldText: 'a', newText: 'b' }] });
	out.bash = await call(what, p, 'bash', { command: 'echo hi > made-by-bash.txt' });
	out.grep = await call(what, p, 'grep', { pattern: 'hello' });
	out.find = await call(what, p, 'find', { pattern: '*.txt' });
	out.ls = await call(what, p, 'ls', {});
	return out;
}

async function extension(options) {
	const p = fakePi();
	await createPiAspExtension({ startDir: localDir, report: (m) => reports.push(m), ...options })(p);
	return p;
}

/* The descendants of the sshd listener: its per-connection processes. */
function sshdChildren() {
	const parent = new Map();
	for (const name of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(name))
			continue;
		try {
			const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
			parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
		} catch {
			/* gone */
		}
	}
	const want = new Set([fx.pid]);
	for (let grew = true; grew;) {
		grew = false;
		for (const [p, pp] of parent)
			if (want.has(pp) && !want.has(p)) {
				want.add(p);
				grew = true;
			}
	}
	want.delete(fx.pid);
	return [...want];
}

before(async () => {
	fx = await startSshd();
	fs.writeFileSync(path.join(fx.workspace, 'hello.txt'), 'hello\n');
	fs.mkdirSync(path.join(fx.workspace, 'dir'));
	if (process.getuid() === 0) {
		fs.chownSync(path.join(fx.workspace, 'hello.txt'), fx.uid, fx.gid);
		fs.chownSync(path.join(fx.workspace, 'dir'), fx.uid, fx.gid);
	}
	localDir = fs.mkdtempSync('/tmp/pi-asp-errors-local.');
});

after(async () => {
	if (localDir)
		fs.rmSync(localDir, { recursive: true, force: true });
	if (fx)
		await fx.stop();
});

describe('error texts the model sees', () => {
	const saved = process.env.ASP_CONFIG;

	it('missing config ($ASP_CONFIG names no file)', async () => {
		const missing = path.join(fx.dir, 'missing', '.asp.json');
		process.env.ASP_CONFIG = missing;
		try {
			const p = await extension({});
			const out = await everyTool('missing config', p);
			for (const name of TOOL_NAMES)
				assert.ok(out[name].error, name);
			assert.ok(!fs.existsSync(path.join(localDir, 'made-by-bash.txt')));
			assert.ok(reports.some((m) => m.includes(missing)), 'the user is told which config');
		} finally {
			if (saved === undefined)
				delete process.env.ASP_CONFIG;
			else
				process.env.ASP_CONFIG = saved;
		}
	});

	it('wrong host key (a config pinning another key)', async () => {
		const bad = fx.writeConfig(path.join(fx.dir, 'bad-key.asp.json'),
			{ connection: { host_key: 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } });
		const before = reports.length;
		const p = await extension({ config: bad });
		const out = await everyTool('wrong host key', p);
		for (const name of TOOL_NAMES)
			assert.ok(out[name].error, name);
		assert.ok(reports.slice(before).some((m) => /host key/i.test(m)), reports.slice(before).join('\n'));
	});

	it('missing file, permission denied, abort, timeout, sandbox down', async () => {
		const before = reports.length;
		const p = await extension({ config: fx.config, open: { ioTimeout: 1000, connectTimeout: 1000 } });

		/* missing file */
		for (const name of ['read', 'edit'])
			assert.match((await call('missing file', p, name, { path: 'nope.txt', edits: [{ oldText: 'a', newText: 'b' }] })).error,
				/ENOENT|not found/);
		assert.match((await call('missing file', p, 'ls', { path: 'nope' })).error, /Path not found/);
		assert.match((await call('missing file', p, 'grep', { pattern: 'x', path: 'nope' })).error, /Path not found/);
		assert.match((await call('missing file', p, 'find', { pattern: '*', path: 'nope' })).error, /Path not found/);
		assert.match((await call('missing file', p, 'bash', { command: 'cat nope.txt' })).error, /No such file/);
		assert.match((await call('missing file', p, 'write', { path: 'hello.txt/x', content: 'x' })).error, /ENOTDIR|ENOENT|EEXIST/);

		/* permission denied (root-owned, so only as root can the sandbox user be refused) */
		if (process.getuid() === 0) {
			const secret = path.join(fx.workspace, 'secret');
			fs.mkdirSync(secret, { mode: 0o700 });
			fs.writeFileSync(path.join(fx.workspace, 'locked.txt'), 'locked\n', { mode: 0o600 });
			assert.match((await call('permission denied', p, 'read', { path: 'locked.txt' })).error, /EACCES/);
			assert.match((await call('permission denied', p, 'edit', { path: 'locked.txt', edits: [{ oldText: 'l', newText: 'o' }] })).error, /EACCES/);
			assert.match((await call('permission denied', p, 'write', { path: 'secret/x.txt', content: 'x' })).error, /EACCES/);
			assert.match((await call('permission denied', p, 'ls', { path: 'secret' })).error, /EACCES/);
			assert.match((await call('permission denied', p, 'grep', { pattern: 'x', path: 'secret' })).error, /denied/i);
			assert.match((await call('permission denied', p, 'bash', { command: 'cat locked.txt' })).error, /denied/i);
		}

		/* abort: before the call, and during it */
		for (const name of TOOL_NAMES) {
			const r = await call('abort', p, name, { path: 'hello.txt', content: 'x', command: 'sleep 5', pattern: 'x',
				edits: [{ oldText: 'a', newText: 'b' }] }, AbortSignal.abort());
			assert.ok(r.error, name);
		}
		const ac = new AbortController();
		setTimeout(() => ac.abort(), 300);
		assert.match((await call('abort', p, 'bash', { command: 'sleep 20' }, ac.signal)).error, /aborted/);

		/* timeout: a command's own, and a sandbox that stops answering */
		assert.match((await call('timeout', p, 'bash', { command: 'sleep 20', timeout: 1 })).error, /timed out/);
		assert.ok((await call('timeout', p, 'read', { path: 'hello.txt' })).ok, 'the sandbox works before it is stopped');
		/* The listener too: libasp would otherwise retry on a fresh connection. */
		const stopped = [fx.pid, ...sshdChildren()];
		assert.ok(stopped.length > 1, 'a connection to stop');
		for (const pid of stopped)
			assert.ok(fs.existsSync(`/proc/${pid}`), `sshd process ${pid} alive before it is stopped`);
		for (const pid of stopped)
			process.kill(pid, 'SIGSTOP');
		try {
			for (const name of TOOL_NAMES) {
				const r = await call('timeout', p, name, { path: 'hello.txt', content: 'x', command: 'true', pattern: 'x',
					edits: [{ oldText: 'a', newText: 'b' }] });
				assert.ok(r.error, name);
			}
		} finally {
			for (const pid of stopped)
				try {
					process.kill(pid, 'SIGCONT');
				} catch {
					/* gone */
				}
		}

		/* sandbox down: the server is killed */
		assert.ok(fs.existsSync(`/proc/${fx.pid}`), 'sshd is alive before it is killed');
		await fx.stopServer();
		const out = await everyTool('sandbox down', p);
		for (const name of TOOL_NAMES)
			assert.ok(out[name].error, name);
		assert.ok(!fs.existsSync(path.join(localDir, 'made-by-bash.txt')));
		assert.ok(reports.slice(before).length > 0, 'the user is told what libasp said');
		await p.handlers.session_shutdown?.();
	});

	it('none of them names the harness or the transport', () => {
		const cases = new Set(texts.map(([what]) => what));
		for (const what of ['missing config', 'wrong host key', 'missing file', 'abort', 'timeout', 'sandbox down'])
			assert.ok(cases.has(what), `no error text collected for ${what}`);
		if (process.getuid() === 0)
			assert.ok(cases.has('permission denied'));
		const forbidden = [fx.config, path.join(fx.dir, 'bad-key.asp.json'), '127.0.0.1', String(fx.port),
			fx.clientKey, fx.hostKey, fx.user, '.asp.json'];
		const words = [/\basp\b/i, /\bssh\b/i, /sandbox/i, /libasp/i];
		const bad = [];
		for (const [what, tool, text] of texts) {
			/* The sandbox workspace is the model's working directory: its path may be shown. */
			const shown = text.replaceAll(fx.workspace, '<CWD>');
			for (const s of forbidden)
				if (shown.includes(s))
					bad.push(`${what}/${tool}: ${JSON.stringify(s)} in ${JSON.stringify(text)}`);
			for (const w of words)
				if (w.test(shown))
					bad.push(`${what}/${tool}: ${w} in ${JSON.stringify(text)}`);
		}
		assert.deepEqual(bad, []);
	});
});
