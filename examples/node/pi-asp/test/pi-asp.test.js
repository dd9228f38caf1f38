/*
 * pi's own read/write/edit/bash tools, loaded with this extension by pi's
 * resource loader (no LLM: the tools are executed directly), against the
 * same tools on a local copy of the workspace. Results must be equal once
 * the two root paths are written alike.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

import * as pi from '@mariozechner/pi-coding-agent';
import asp from 'libasp';

import { createAspToolDefinitions, createPiAspExtension, TOOL_NAMES } from '../index.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const extensionPath = path.resolve(here, '..', 'index.js');
const require = createRequire(import.meta.url);
const { startSshd } = require('../../../../bindings/node/test/sshd-fixture.js');

let fx;
let localDir;
let agentDir;
let session;
let localSession;
let remote; // name -> pi AgentTool running through the extension
let local;  // name -> pi AgentTool on the local copy
let posixSandbox; // a second sandbox, for the POSIX grep fallback
let localRg; // pi's own grep can run here (ripgrep on PATH)

/* A 2x2 RGB PNG, made here so the test ships no binary file. */
function png() {
	const crcTable = Array.from({ length: 256 }, (_, n) => {
		let c = n;
		for (let k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
		return c >>> 0;
	});
	const crc = (buf) => {
		let c = 0xffffffff;
		for (const b of buf)
			c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
		return (c ^ 0xffffffff) >>> 0;
	};
	const chunk = (type, data) => {
		const len = Buffer.alloc(4);
		len.writeUInt32BE(data.length);
		const td = Buffer.concat([Buffer.from(type), data]);
		const c = Buffer.alloc(4);
		c.writeUInt32BE(crc(td));
		return Buffer.concat([len, td, c]);
	};
	const ihdr = Buffer.from([0, 0, 0, 2, 0, 0, 0, 2, 8, 2, 0, 0, 0]);
	const raw = Buffer.from([0, 255, 0, 0, 0, 255, 0, 0, 0, 0, 255, 255, 255, 255]);
	return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk('IHDR', ihdr),
		chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

function populate(dir) {
	fs.writeFileSync(path.join(dir, 'hello.txt'), 'hello\nworld\n');
	fs.writeFileSync(path.join(dir, 'long.txt'),
		Array.from({ length: 2600 }, (_, i) => `line ${i + 1} ${'x'.repeat(i % 50)}`).join('\n'));
	fs.mkdirSync(path.join(dir, 'src'));
	fs.writeFileSync(path.join(dir, 'src', 'app.js'),
		'function greet(name) {\n\treturn "Hello, " + name;\n}\n\nmodule.exports = { greet };\n');
	fs.writeFileSync(path.join(dir, 'crlf.txt'), '\ufeffone\r\ntwo\r\nthree\r\n');
	fs.writeFileSync(path.join(dir, 'image.png'), png());
	fs.writeFileSync(path.join(dir, 'quote\'s $dir.txt'), 'hostile name\n');
}

function chownTree(dir, uid, gid) {
	fs.chownSync(dir, uid, gid);
	for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
		const p = path.join(dir, e.name);
		if (e.isDirectory())
			chownTree(p, uid, gid);
		else
			fs.lchownSync(p, uid, gid);
	}
}

/* Relative path -> content of every file under dir. */
function snapshot(dir) {
	const out = {};
	const walk = (d) => {
		for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
			const p = path.join(d, e.name);
			if (e.isDirectory())
				walk(p);
			else
				out[path.relative(dir, p)] = fs.readFileSync(p).toString('base64');
		}
	};
	walk(dir);
	return out;
}

/* Full-output files that pi's bash tools named (the local one's and the sandbox's), removed after the tests. */
const outputLogs = new Set();

function normalize(value) {
	for (const m of JSON.stringify(value ?? null).matchAll(/\/tmp\/pi-bash-[0-9a-f]+\.log/g))
		outputLogs.add(m[0]);
	return JSON.parse(JSON.stringify(value ?? null)
		.replaceAll(fx.workspace, '<CWD>')
		.replaceAll(localDir, '<CWD>')
		.replace(/\/tmp\/pi-bash-[0-9a-f]+\.log/g, '<FULL-OUTPUT-LOG>'));
}

/* Run a tool; its result, or its error message, normalized. */
async function run(tool, params, { signal, updates } = {}) {
	try {
		const r = await tool.execute(`call-${crypto.randomUUID()}`, params, signal,
			updates ? (u) => updates.push(u) : undefined);
		return { ok: normalize(r) };
	} catch (e) {
		return { error: normalize(e.message) };
	}
}

async function same(name, params, opts) {
	const r = await run(remote[name], params, opts);
	const l = await run(local[name], params, opts);
	assert.deepEqual(r, l);
	return r;
}

/*
 * The sandbox here is this machine, so a file only the sandbox sees cannot
 * tell a local tool from a sandboxed one when pi runs as root; a directory
 * only root may read can: the sandbox user is refused.
 */
const rootOnly = process.getuid() === 0 ? false : 'needs root';
async function withRootOnlyDir(fn) {
	const token = `root-only-${crypto.randomInt(1e6, 1e7)}`;
	const dir = path.join(fx.workspace, token);
	fs.mkdirSync(dir, { mode: 0o700 });
	fs.writeFileSync(path.join(dir, `${token}.txt`), `${token}\n`);
	try {
		await fn(token);
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
	}
}

/* Only in the sandbox (not in pi's local working directory): proves a tool looked there. */
async function withSandboxOnlyFile(fn) {
	const token = `only-in-sandbox-${crypto.randomInt(1e6, 1e7)}`;
	const name = `${token}.txt`;
	const file = path.join(fx.workspace, name);
	fs.writeFileSync(file, `${token}\n`);
	try {
		assert.ok(!fs.existsSync(path.join(localDir, name)));
		await fn(name, token);
	} finally {
		fs.rmSync(file, { force: true });
	}
}

before(async () => {
	fx = await startSshd();
	populate(fx.workspace);
	if (process.getuid() === 0)
		chownTree(fx.workspace, fx.uid, fx.gid);
	localDir = fs.mkdtempSync('/tmp/pi-asp-local.');
	fs.cpSync(fx.workspace, localDir, { recursive: true });
	agentDir = fs.mkdtempSync('/tmp/pi-asp-agent.');

	/* As pi itself loads it: through its resource loader, from the extension's path. */
	process.env.ASP_CONFIG = fx.config;
	const loader = new pi.DefaultResourceLoader({
		cwd: localDir, agentDir, additionalExtensionPaths: [extensionPath],
	});
	await loader.reload();
	const loaded = loader.getExtensions();
	assert.deepEqual(loaded.errors, []);
	({ session } = await pi.createAgentSession({
		cwd: localDir,
		agentDir,
		resourceLoader: loader,
		sessionManager: pi.SessionManager.inMemory(localDir),
		settingsManager: pi.SettingsManager.inMemory(),
		authStorage: pi.AuthStorage.inMemory(),
	}));
	remote = Object.fromEntries(session.agent.state.tools.map((t) => [t.name, t]));
	/* The reference: the same pi, same tools, same wrapping, without the extension, on the copy. */
	const plainLoader = new pi.DefaultResourceLoader({ cwd: localDir, agentDir });
	await plainLoader.reload();
	({ session: localSession } = await pi.createAgentSession({
		cwd: localDir,
		agentDir,
		resourceLoader: plainLoader,
		sessionManager: pi.SessionManager.inMemory(localDir),
		settingsManager: pi.SettingsManager.inMemory(),
		authStorage: pi.AuthStorage.inMemory(),
	}));
	local = Object.fromEntries(localSession.agent.state.tools.map((t) => [t.name, t]));
	/* pi's ls/find/grep are not among its default tools: the reference gets them here. */
	for (const make of [pi.createLsTool, pi.createGrepTool])
		local[make(localDir).name] = make(localDir);
	posixSandbox = await asp.open({ config: fx.config });
	localRg = spawnSync('rg', ['--version']).status === 0;
});

after(async () => {
	try {
		/* As pi does on quit: session_shutdown (the extension closes its sandbox), then dispose. */
		await session?.extensionRunner?.emit({ type: 'session_shutdown', reason: 'quit' });
		session?.dispose();
		await posixSandbox?.close();
		localSession?.dispose();
	} catch {
		/* best effort */
	}
	delete process.env.ASP_CONFIG;
	for (const f of outputLogs)
		fs.rmSync(f, { force: true });
	if (localDir)
		fs.rmSync(localDir, { recursive: true, force: true });
	if (agentDir)
		fs.rmSync(agentDir, { recursive: true, force: true });
	if (fx)
		await fx.stop();
});

describe('pi tools through pi-asp', () => {
	it('the extension replaced every pi tool (pi activates the ones an extension registers)', () => {
		assert.deepEqual(session.getActiveToolNames().sort(), ['bash', 'edit', 'find', 'grep', 'ls', 'read', 'write']);
		for (const name of TOOL_NAMES)
			assert.ok(remote[name], name);
	});

	it('bash runs in the sandbox, as the sandbox user, in the workspace', async () => {
		const r = await run(remote.bash, { command: 'pwd; id -un' });
		const me = process.getuid() === 0 ? 'asp-test' : fx.user;
		assert.deepEqual(r, { ok: { content: [{ type: 'text', text: `<CWD>\n${me}\n` }] } });
	});

	it('read: text, ranges, truncation, images, errors', async () => {
		await same('read', { path: 'hello.txt' });
		await same('read', { path: 'long.txt' });
		await same('read', { path: 'long.txt', offset: 2590 });
		await same('read', { path: 'long.txt', offset: 10, limit: 5 });
		await same('read', { path: 'long.txt', offset: 99999 });
		await same('read', { path: 'crlf.txt' });
		await same('read', { path: "quote's $dir.txt" });
		const img = await same('read', { path: 'image.png' });
		assert.equal(img.ok.content[1].type, 'image');
		const missing = await same('read', { path: 'missing.txt' });
		assert.match(missing.error, /ENOENT: no such file or directory, access '<CWD>\/missing.txt'/);
		const dir = await same('read', { path: 'src' });
		assert.match(dir.error, /EISDIR/);
		const abs = await run(remote.read, { path: path.join(fx.workspace, 'hello.txt') });
		assert.deepEqual(abs, await run(local.read, { path: path.join(localDir, 'hello.txt') }));
	});

	it('ls lists the sandbox, as pi lists a local directory', async () => {
		await same('ls', {});
		await same('ls', { path: 'src' });
		await same('ls', { path: 'src', limit: 0 });
		await same('ls', { limit: 2 });
		const missing = await same('ls', { path: 'nope' });
		assert.equal(missing.error, 'Path not found: <CWD>/nope');
		await same('ls', { path: 'hello.txt' });
		await withSandboxOnlyFile(async (name) => {
			const r = await run(remote.ls, {});
			assert.match(r.ok.content[0].text, new RegExp(`^${name}$`, 'm'));
		});
	});

	it('find searches the sandbox with pi\'s glob rules and limits', async () => {
		const text = async (params, tool = remote.find) => {
			const r = await run(tool, params);
			return r.ok ? r.ok.content[0].text : r.error;
		};
		assert.equal(await text({ pattern: '*.js' }), 'src/app.js');
		assert.equal(await text({ pattern: 'src/**/*.js' }), 'src/app.js');
		assert.equal(await text({ pattern: '*.{png,js}' }), 'image.png\nsrc/app.js');
		assert.equal(await text({ pattern: "quote's*" }), "quote's $dir.txt");
		assert.equal(await text({ pattern: '*.js', path: 'src' }), 'app.js');
		assert.equal(await text({ pattern: '*.none' }), 'No files found matching pattern');
		assert.equal(await text({ pattern: '*', path: 'nope' }), 'Path not found: <CWD>/nope');
		const limited = await run(remote.find, { pattern: '*.txt', limit: 2 });
		assert.match(limited.ok.content[0].text, /^[^\n]+\.txt\n[^\n]+\.txt\n\n\[2 results limit reached\]$/);
		assert.deepEqual(limited.ok.details, { resultLimitReached: 2 });
		await withSandboxOnlyFile(async (name) => {
			assert.equal(await text({ pattern: name }), name);
		});
	});

	it('grep searches the sandbox with pi\'s schema, output format and limits', async () => {
		assert.deepEqual(remote.grep.parameters, local.grep.parameters);
		/* rg prints files in no set order: compare the lines as sets. */
		const text = async (tool, params) => {
			const r = await run(tool, params);
			if (!r.ok)
				return r;
			const [body, ...notice] = r.ok.content[0].text.split('\n\n');
			return { lines: body.split('\n').sort(), notice, details: r.ok.details ?? null };
		};
		const cases = [
			[{ pattern: 'hello' }, ['hello.txt:1: hello']],
			[{ pattern: 'HELLO', ignoreCase: true }, ['hello.txt:1: hello', 'src/app.js:2: \treturn "Hello, " + name;']],
			[{ pattern: '$dir', literal: true, path: '.' }, null],
			[{ pattern: 'name', glob: '*.txt' }, ["quote's $dir.txt:1: hostile name"]],
			[{ pattern: 'greet', context: 1 }, ['src/app.js-2- \treturn "Hello, " + name;', 'src/app.js-4- ', 'src/app.js-6- ',
				'src/app.js:1: function greet(name) {', 'src/app.js:5: module.exports = { greet };']],
			[{ pattern: 'wor\\w+', path: 'hello.txt' }, ['hello.txt:2: world']],
			[{ pattern: '^line 1\\d\\d ', limit: 3 }, null],
			[{ pattern: 'no-such-text-anywhere' }, null],
		];
		const posix = Object.fromEntries(createAspToolDefinitions(posixSandbox, { grep: 'grep' }).map((d) => [d.name, d]));
		for (const [params, lines] of cases) {
			const r = await text(remote.grep, params);
			if (lines)
				assert.deepEqual(r.lines, lines, JSON.stringify(params));
			/* The POSIX grep fallback gives the same answer as ripgrep. */
			assert.deepEqual(await text(posix.grep, params), r, JSON.stringify(params));
			/* And pi's own grep (a local ripgrep) on the local copy, where there is one. */
			if (localRg)
				assert.deepEqual(await text(local.grep, params), r, JSON.stringify(params));
		}
		const limited = await run(remote.grep, { pattern: '^line 1\\d\\d ', limit: 3 });
		assert.match(limited.ok.content[0].text,
			/^long\.txt:\d+: line 1\d\d x*\nlong\.txt:\d+: .*\nlong\.txt:\d+: .*\n\n\[3 matches limit reached\. Use limit=6 for more, or refine pattern\]$/);
		assert.deepEqual(limited.ok.details, { matchLimitReached: 3 });
		assert.deepEqual((await run(remote.grep, { pattern: 'no-such-text-anywhere' })).ok.content,
			[{ type: 'text', text: 'No matches found' }]);
		assert.equal((await run(remote.grep, { pattern: 'x', path: 'nope' })).error, 'Path not found: <CWD>/nope');
		await withSandboxOnlyFile(async (name, token) => {
			assert.equal((await run(remote.grep, { pattern: token })).ok.content[0].text, `${name}:1: ${token}`);
			assert.equal((await run(posix.grep, { pattern: token })).ok.content[0].text, `${name}:1: ${token}`);
		});
	});

	it('ls, find and grep run as the sandbox user', { skip: rootOnly }, async () => {
		await withRootOnlyDir(async (token) => {
			assert.match((await run(remote.ls, { path: token })).error, /^Cannot read directory: EACCES: permission denied, scandir '<CWD>\/root-only-\d+'$/);
			assert.equal((await run(remote.find, { pattern: `${token}.txt` })).ok.content[0].text, 'No files found matching pattern');
			const g = await run(remote.grep, { pattern: token });
			assert.ok(!JSON.stringify(g).includes(`${token}.txt:1`), JSON.stringify(g));
			/* as root, pi's own tools see it */
			assert.equal((await run(local.ls, { path: path.join(fx.workspace, token) })).ok.content[0].text, `${token}.txt`);
		});
	});

	it('write: new files, new directories, overwrite', async () => {
		await same('write', { path: 'new.txt', content: 'brand new\n' });
		await same('write', { path: 'deep/er/file.md', content: '# title\n\nünïcødé ✓\n' });
		await same('write', { path: 'hello.txt', content: 'replaced\n' });
		await same('write', { path: 'src', content: 'x' });
		assert.equal(fs.readFileSync(path.join(fx.workspace, 'deep/er/file.md'), 'utf8'), '# title\n\nünïcødé ✓\n');
	});

	it('edit: replacements, diffs, line endings and BOM, failures', async () => {
		const r = await same('edit', {
			path: 'src/app.js',
			edits: [{ oldText: 'return "Hello, " + name;', newText: 'return `Hi, ${name}!`;' }],
		});
		assert.match(r.ok.details.diff, /Hi, \$\{name\}!/);
		await same('edit', { path: 'crlf.txt', edits: [{ oldText: 'two', newText: 'TWO' }, { oldText: 'three', newText: '3' }] });
		await same('edit', { path: 'src/app.js', edits: [{ oldText: 'not there', newText: 'x' }] });
		await same('edit', { path: 'src/app.js', edits: [{ oldText: '\n', newText: '' }] });
		const missing = await same('edit', { path: 'nope.js', edits: [{ oldText: 'a', newText: 'b' }] });
		assert.match(missing.error, /Could not edit file: nope.js. Error code: ENOENT/);
	});

	it('edit refuses a file the sandbox user cannot write', { skip: process.getuid() !== 0 && 'needs root' }, async () => {
		const ro = path.join(fx.workspace, 'readonly.txt');
		fs.writeFileSync(ro, 'locked\n', { mode: 0o644 });
		fs.chownSync(ro, 0, 0);
		const r = await run(remote.edit, { path: 'readonly.txt', edits: [{ oldText: 'locked', newText: 'open' }] });
		assert.match(r.error, /Could not edit file: readonly.txt. Error code: EACCES/);
		fs.rmSync(ro);
	});

	it('bash: output, exit codes, stderr, hostile quoting', async () => {
		await same('bash', { command: 'ls; cat hello.txt; echo to-stderr >&2' });
		await same('bash', { command: 'echo partial; exit 3' });
		await same('bash', { command: 'printf "%s\\n" "it\'s" \'$HOME\' "`echo tick`"' });
		await same('bash', { command: 'true' });
		await same('bash', { command: 'seq 1 5000' });
		await same('bash', { command: 'echo made > made.txt; mkdir -p m/n && echo x > m/n/o' });
		/* No input, as pi's local executor gives none: a command reading stdin sees its end at once. */
		await same('bash', { command: 'cat; wc -c; echo after-stdin' });
	});

	it('bash: streaming updates reach pi', async () => {
		const updates = [];
		const r = await run(remote.bash, { command: 'echo one; sleep 0.3; echo two' }, { updates });
		assert.deepEqual(r.ok.content, [{ type: 'text', text: 'one\ntwo\n' }]);
		const texts = updates.map((u) => u.content[0]?.text).filter(Boolean);
		assert.ok(texts.includes('one\n'), JSON.stringify(texts));
	});

	it('bash: timeout kills the command', async () => {
		const t0 = Date.now();
		const r = await same('bash', { command: 'echo before; sleep 30', timeout: 1 });
		assert.equal(r.error, 'before\n\n\nCommand timed out after 1 seconds');
		assert.ok(Date.now() - t0 < 15_000);
	});

	it('bash: abort kills the remote process group', async () => {
		const tag = `33.${crypto.randomInt(1e6, 1e7)}`;
		const ac = new AbortController();
		setTimeout(() => ac.abort(), 400);
		const r = await run(remote.bash, { command: `echo started; sleep ${tag} & sleep ${tag}` }, { signal: ac.signal });
		assert.equal(r.error, 'started\n\n\nCommand aborted');
		const ps = await run(remote.bash, { command: 'ps -u "$(id -un)" -o stat=,args=' });
		const alive = ps.ok.content[0].text.split('\n').filter((l) => l.includes(tag) && !/^\s*Z/.test(l));
		assert.deepEqual(alive, []);
		const pre = await run(remote.bash, { command: 'touch never.txt' }, { signal: AbortSignal.abort() });
		assert.match(pre.error, /aborted/);
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'never.txt')));
	});

	it('pi does not leak the local environment to the sandbox', async () => {
		process.env.PI_ASP_SECRET_TEST = 'sk-local-secret';
		try {
			const r = await run(remote.bash, { command: 'echo "[${PI_ASP_SECRET_TEST:-unset}]"' });
			assert.equal(r.ok.content[0].text, '[unset]\n');
		} finally {
			delete process.env.PI_ASP_SECRET_TEST;
		}
	});

	it('~ is the sandbox user\'s home', async () => {
		const home = (await run(remote.bash, { command: 'printf %s "$HOME"' })).ok.content[0].text;
		fs.mkdirSync(home, { recursive: true });
		const probe = path.join(home, `.pi-asp-probe-${process.pid}`);
		fs.writeFileSync(probe, 'remote home\n');
		try {
			const r = await run(remote.read, { path: `~/${path.basename(probe)}` });
			assert.deepEqual(r.ok.content, [{ type: 'text', text: 'remote home\n' }]);
		} finally {
			fs.rmSync(probe, { force: true });
		}
	});

	it('both trees end up identical', () => {
		assert.deepEqual(snapshot(fx.workspace), snapshot(localDir));
	});
});

describe('extension wiring (a stand-in for pi\'s ExtensionAPI)', () => {
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

	it('does nothing without a .asp.json', async () => {
		const empty = fs.mkdtempSync('/tmp/pi-asp-none.');
		const saved = process.env.ASP_CONFIG;
		delete process.env.ASP_CONFIG;
		try {
			const p = fakePi();
			await createPiAspExtension({ startDir: empty })(p);
			assert.deepEqual(Object.keys(p.tools), []);
		} finally {
			process.env.ASP_CONFIG = saved;
			fs.rmSync(empty, { recursive: true, force: true });
		}
	});

	it('fails closed, in a real pi, when $ASP_CONFIG names no file', async () => {
		const cwd = fs.mkdtempSync('/tmp/pi-asp-noconfig.');
		const missing = path.join(fx.dir, 'gone', '.asp.json');
		const saved = process.env.ASP_CONFIG;
		process.env.ASP_CONFIG = missing;
		const told = [];
		const write = process.stderr.write;
		let s;
		try {
			const loader = new pi.DefaultResourceLoader({ cwd, agentDir, additionalExtensionPaths: [extensionPath] });
			await loader.reload();
			assert.deepEqual(loader.getExtensions().errors, []);
			({ session: s } = await pi.createAgentSession({
				cwd, agentDir, resourceLoader: loader,
				sessionManager: pi.SessionManager.inMemory(cwd),
				settingsManager: pi.SettingsManager.inMemory(),
				authStorage: pi.AuthStorage.inMemory(),
			}));
			/* Without a UI, the user is told on stderr; the model is not told at all. */
			process.stderr.write = (chunk, ...rest) => {
				told.push(String(chunk));
				return true;
			};
			try {
				await s.extensionRunner.emit({ type: 'session_start', reason: 'startup' });
			} finally {
				process.stderr.write = write;
			}
			assert.ok(told.some((t) => t.includes(missing)), told.join(''));
			const tools = Object.fromEntries(s.agent.state.tools.map((t) => [t.name, t]));
			const errors = {};
			for (const name of TOOL_NAMES) {
				assert.ok(tools[name], name);
				process.stderr.write = () => true;
				try {
					errors[name] = (await run(tools[name], { path: 'local.txt', content: 'x', command: 'echo local > local.txt',
						pattern: 'x', edits: [{ oldText: 'a', newText: 'b' }] })).error;
				} finally {
					process.stderr.write = write;
				}
				assert.equal(errors[name], `${name} cannot run: the environment is unavailable`);
			}
			assert.deepEqual(fs.readdirSync(cwd), [], 'nothing ran locally');
		} finally {
			process.stderr.write = write;
			s?.dispose();
			if (saved === undefined)
				delete process.env.ASP_CONFIG;
			else
				process.env.ASP_CONFIG = saved;
			fs.rmSync(cwd, { recursive: true, force: true });
		}
	});

	it('fails closed when the sandbox cannot be opened', async () => {
		const bad = fx.writeConfig(path.join(fx.dir, 'bad-key.asp.json'),
			{ connection: { host_key: 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } });
		const p = fakePi();
		await createPiAspExtension({ config: bad, report: () => {} })(p);
		assert.deepEqual(Object.keys(p.tools).sort(), [...TOOL_NAMES].sort());
		await assert.rejects(p.tools.bash.execute('id', { command: 'touch local-leak' }),
			/^Error: bash cannot run: the environment is unavailable$/);
		assert.ok(!fs.existsSync(path.join(process.cwd(), 'local-leak')));
	});

	it('rewrites the working directory in the system prompt, serves user_bash, closes on shutdown', async () => {
		const p = fakePi();
		await createPiAspExtension({ config: fx.config, startDir: '/some/local/dir' })(p);
		const out = await p.handlers.before_agent_start({ systemPrompt: 'x\nCurrent working directory: /some/local/dir', systemPromptOptions: {} });
		/* As if local: the sandbox's working directory, and not a word about how it is reached. */
		assert.equal(out.systemPrompt, `x\nCurrent working directory: ${fx.workspace}`);
		const { operations } = p.handlers.user_bash({ command: 'echo hi', cwd: '/some/local/dir' });
		const chunks = [];
		const r = await operations.exec('echo hi', fx.workspace, { onData: (c) => chunks.push(c) });
		assert.deepEqual(r, { exitCode: 0 });
		assert.equal(Buffer.concat(chunks).toString(), 'hi\n');
		await p.handlers.session_shutdown();
		/* reopened on demand after a shutdown */
		const again = await p.tools.bash.execute('id', { command: 'echo again' });
		assert.equal(again.content[0].text, 'again\n');
		await p.handlers.session_shutdown();
	});

	it('maps libasp errors to Node-style fs errors', async () => {
		const { toNodeError } = await import('../index.js');
		const e = toNodeError(new asp.AspError(asp.codes.ASP_ENOENT, 'x'), 'open', '/w/f');
		assert.equal(e.code, 'ENOENT');
		assert.equal(e.message, "ENOENT: no such file or directory, open '/w/f'");
		assert.ok(e.cause instanceof asp.AspError);
	});
});
