'use strict';
/* The Sandbox methods against a real sshd (test/sshd-fixture.js). */

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
	/*
	 * ioTimeout bounds a known libasp stall (see 'remove recursive does not
	 * stall' below): the default 30 s would make the suite slow, not wrong.
	 */
	sb = await asp.open({ config: fx.config, ioTimeout: 5000 });
});

after(async () => {
	if (sb)
		await sb.close();
	if (fx)
		await fx.stop();
});

/* Whether the mapping holding addr carries MADV_HUGEPAGE ("hg" in its VmFlags, /proc/self/smaps). */
function hugePageAdvice(addr) {
	let inside = false;
	for (const line of fs.readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
		const m = /^([0-9a-f]+)-([0-9a-f]+) /.exec(line);
		if (m)
			inside = BigInt('0x' + m[1]) <= addr && addr < BigInt('0x' + m[2]);
		else if (inside && line.startsWith('VmFlags:'))
			return / hg/.test(line);
	}
	throw new Error(`no mapping holds 0x${addr.toString(16)}`);
}

/* A local process (the fixture's sshd runs on this machine) exists and is not a zombie. */
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

async function waitDead(pid, ms = 10_000) {
	for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
		if (!procAlive(pid))
			return true;
	}
	return !procAlive(pid);
}

/*
 * The positive control of a kill check: an onData callback that reads the
 * command's "pids: A B ..." line and sees each of them alive as it comes,
 * then runs then() (which may abort or throw). Every process later asserted
 * dead was first seen alive.
 */
function groupWatch(then) {
	const w = { buf: '', pids: [], alive: [], seen: false };
	w.onData = (stream, chunk) => {
		if (stream !== 'stdout' || w.seen)
			return;
		w.buf += chunk.toString('latin1');
		const m = /pids:((?: \d+)+)\n/.exec(w.buf);
		if (!m)
			return;
		w.pids = m[1].trim().split(' ').map(Number);
		w.alive = w.pids.map(procAlive);
		w.seen = true;
		if (then)
			then();
	};
	w.assertAliveThenDead = async (n) => {
		assert.equal(w.pids.length, n, `pids line: ${JSON.stringify(w.buf)}`);
		assert.deepEqual(w.alive, Array(n).fill(true), `not all of ${w.pids} seen alive first`);
		for (const pid of w.pids)
			assert.ok(await waitDead(pid), `process ${pid} of the group survived`);
	};
	return w;
}

/* A name no other test (or other process of asp-test) uses. */
function unique(prefix) {
	return `${prefix}-${crypto.randomBytes(6).toString('hex')}`;
}

describe('module', () => {
	it('loads the library and reports its version', () => {
		assert.match(asp.version(), /^\d+\.\d+\.\d+$/);
		assert.ok(asp.libraryPath);
	});

	it('maps every code in asp.h by name, from asp_error_name', () => {
		const whole = fs.readFileSync(path.join(__dirname, '..', '..', '..', 'include', 'asp.h'), 'utf8');
		const header = whole.slice(whole.indexOf('typedef enum asp_error_code {'), whole.indexOf('} asp_error_code;'));
		const declared = {};
		for (const m of header.matchAll(/^\s*(ASP_[A-Z]+) = (-?\d+),?/gm))
			declared[m[1]] = Number(m[2]);
		assert.ok(Object.keys(declared).length >= 21);
		assert.deepEqual({ ...asp.codes }, declared);
		for (const [name, errno] of Object.entries(declared)) {
			const e = new asp.AspError(errno, 'x');
			assert.equal(e.code, name);
			assert.equal(e.errno, errno);
			assert.ok(e instanceof Error);
			assert.equal(e.name, 'AspError');
		}
	});

	it('findConfig and checkConfig', async () => {
		const sub = path.join(fx.dir, 'a', 'b');
		fs.mkdirSync(sub, { recursive: true });
		const saved = process.env.ASP_CONFIG;
		delete process.env.ASP_CONFIG;
		try {
			assert.equal(await asp.findConfig(sub), fx.config);
		} finally {
			if (saved !== undefined)
				process.env.ASP_CONFIG = saved;
		}
		await asp.checkConfig(fx.config);
	});
});

describe('read and write', () => {
	it('round-trips text', async () => {
		await sb.write('hello.txt', 'hello, world\n');
		assert.equal((await sb.read('hello.txt')).toString(), 'hello, world\n');
		assert.equal(fs.readFileSync(path.join(fx.workspace, 'hello.txt'), 'utf8'), 'hello, world\n');
	});

	it('round-trips every byte value and a large random file', async () => {
		const all = Buffer.alloc(256 * 4);
		for (let i = 0; i < all.length; i++)
			all[i] = i & 0xff;
		await sb.write('bytes.bin', all);
		assert.deepEqual(await sb.read('bytes.bin'), all);
		const big = crypto.randomBytes(3 * 1024 * 1024 + 17);
		await sb.write('big.bin', big);
		const back = await sb.read('big.bin');
		assert.equal(back.length, big.length);
		assert.ok(back.equals(big));
		assert.ok(fs.readFileSync(path.join(fx.workspace, 'big.bin')).equals(big));
		/* a Uint8Array view into a larger buffer writes only its bytes */
		const view = new Uint8Array(all.buffer, all.byteOffset + 10, 20);
		await sb.write('view.bin', view);
		assert.deepEqual(await sb.read('view.bin'), all.subarray(10, 30));
	});

	it('returns a large read in a Buffer whose pages were asked to be huge', async () => {
		const big = crypto.randomBytes(9 * 1024 * 1024 + 5);
		fs.writeFileSync(path.join(fx.workspace, 'huge.bin'), big);
		const back = await sb.read('huge.bin');
		assert.ok(Buffer.isBuffer(back));
		assert.ok(back.equals(big));
		const { bufferAddress } = asp[Symbol.for('libasp.internals')]();
		const middle = (buf) => bufferAddress(buf) + BigInt(buf.length >> 1); /* in the aligned part */
		assert.ok(bufferAddress(back) > 0n);
		assert.equal(hugePageAdvice(middle(back)), true);
		assert.equal(hugePageAdvice(middle(big)), false); /* the control */
	});

	it('reads a range with offset and limit', async () => {
		await sb.write('range.txt', '0123456789');
		assert.equal((await sb.read('range.txt', { offset: 3, limit: 4 })).toString(), '3456');
		assert.equal((await sb.read('range.txt', { offset: 8 })).toString(), '89');
		assert.equal((await sb.read('range.txt', { offset: 20 })).length, 0);
		assert.equal((await sb.read('range.txt', { offset: 2n, limit: 1n })).toString(), '2');
	});

	it('writes empty files and NUL bytes in data', async () => {
		await sb.write('empty.txt', '');
		assert.equal((await sb.read('empty.txt')).length, 0);
		await sb.write('nul.txt', 'a\0b');
		assert.deepEqual(await sb.read('nul.txt'), Buffer.from('a\0b'));
	});

	it('creates parents with parents: true and sets the mode', async () => {
		await assert.rejects(sb.write('no/such/dir/f.txt', 'x'), { code: 'ASP_ENOENT' });
		await sb.write('no/such/dir/f.txt', 'x', { parents: true, mode: 0o600 });
		const st = await sb.stat('no/such/dir/f.txt');
		assert.equal(st.mode, 0o600);
		assert.equal(st.type, 'file');
	});

	it('writes in place with atomic: false and keeps the mode of an existing file', async () => {
		await sb.write('inplace.txt', 'first', { mode: 0o640 });
		await sb.write('inplace.txt', 'second!', { atomic: false });
		assert.equal((await sb.read('inplace.txt')).toString(), 'second!');
		await sb.write('inplace.txt', 'third');
		assert.equal((await sb.stat('inplace.txt')).mode, 0o640);
	});

	it('accepts absolute paths', async () => {
		const abs = path.join(fx.workspace, 'abs.txt');
		await sb.write(abs, 'abs');
		assert.equal((await sb.read(abs)).toString(), 'abs');
	});
});

describe('filesystem', () => {
	it('stat: files, directories, missing paths', async () => {
		await sb.write('st.txt', '12345');
		const st = await sb.stat('st.txt');
		assert.equal(st.type, 'file');
		assert.equal(st.size, 5);
		assert.ok(st.mtime instanceof Date);
		assert.ok(Math.abs(st.mtimeMs - Date.now()) < 60_000);
		assert.equal((await sb.stat('.')).type, 'directory');
		await assert.rejects(sb.stat('missing'), { code: 'ASP_ENOENT', errno: -12 });
	});

	it('mkdir, list, rename, remove', async () => {
		await sb.mkdir('d1');
		await assert.rejects(sb.mkdir('d1'), { code: 'ASP_EEXIST' });
		await sb.mkdir('d1', { parents: true });
		await sb.mkdir('d2/x/y', { parents: true, mode: 0o700 });
		assert.equal((await sb.stat('d2/x/y')).mode, 0o700);
		await sb.write('d1/b.txt', 'b');
		await sb.write('d1/a.txt', 'aa');
		fs.symlinkSync('a.txt', path.join(fx.workspace, 'd1', 'link'));
		const entries = await sb.list('d1');
		assert.deepEqual(entries.map((e) => e.name), ['a.txt', 'b.txt', 'link']);
		assert.equal(entries[0].type, 'file');
		assert.equal(entries[0].size, 2);
		assert.equal(entries[2].type, 'symlink');
		assert.deepEqual(await sb.list('d2/x/y'), []);

		await sb.rename('d1/a.txt', 'd1/c.txt');
		await sb.rename('d1/c.txt', 'd1/b.txt'); // replaces a file
		assert.equal((await sb.read('d1/b.txt')).toString(), 'aa');
		await assert.rejects(sb.rename('d1/nope', 'd1/x'), { code: 'ASP_ENOENT' });

		await assert.rejects(sb.remove('d1'), { code: 'ASP_ENOTEMPTY' });
		await sb.remove('d1/link');
		await sb.remove('d1/b.txt');
		await sb.remove('d1');
		await sb.remove('d2', { recursive: true });
		await assert.rejects(sb.stat('d2'), { code: 'ASP_ENOENT' });
		await assert.rejects(sb.list('d2'), { code: 'ASP_ENOENT' });
		await assert.rejects(sb.remove('d2'), { code: 'ASP_ENOENT' });
	});

	it('remove recursive does not stall', async () => {
		/* A stall waits out ioTimeout and rejects with ASP_ETIMEOUT: no clock needed. */
		const quick = await asp.open({ config: fx.config, ioTimeout: 2000 });
		try {
			for (let i = 0; i < 8; i++) {
				await quick.mkdir(`tree-${i}/a/b`, { parents: true });
				await quick.write(`tree-${i}/a/b/f`, 'x');
				await quick.remove(`tree-${i}`, { recursive: true });
				await assert.rejects(quick.stat(`tree-${i}`), { code: 'ASP_ENOENT' });
			}
		} finally {
			await quick.close();
		}
	});

	it('info describes the pinned connection', async () => {
		const info = await sb.info();
		assert.equal(info.trust, 'pinned');
		assert.equal(info.auth, 'publickey');
		assert.equal(info.hostKeyType, 'ssh-ed25519');
		assert.equal(info.hostKeyFingerprint, fx.hostKeyFingerprint);
		assert.equal(info.knownHosts, '');
		assert.equal(sb.workspace, fx.workspace);
		assert.equal(sb.configPath, fx.config);
	});
});

describe('errors', () => {
	it('ENOENT, EISDIR, ENOTDIR', async () => {
		const e = await sb.read('does-not-exist').catch((x) => x);
		assert.ok(e instanceof asp.AspError);
		assert.equal(e.code, 'ASP_ENOENT');
		assert.equal(e.errno, -12);
		assert.match(e.message, /does-not-exist/);
		await sb.mkdir('adir', { parents: true });
		await assert.rejects(sb.read('adir'), { code: 'ASP_EISDIR' });
		await assert.rejects(sb.write('adir', 'x'), { code: 'ASP_EISDIR' });
		await sb.write('afile', 'x');
		await assert.rejects(sb.stat('afile/below'), (err) => ['ASP_ENOTDIR', 'ASP_ENOENT'].includes(err.code));
	});

	it('EACCES on a root-owned 0600 file in the workspace', { skip: process.getuid() !== 0 && 'needs root' }, async () => {
		const secret = path.join(fx.workspace, 'secret.txt');
		fs.writeFileSync(secret, 'top secret', { mode: 0o600 });
		fs.chownSync(secret, 0, 0);
		const e = await sb.read('secret.txt').catch((x) => x);
		assert.ok(e instanceof asp.AspError);
		assert.equal(e.code, 'ASP_EACCES');
		assert.equal(e.errno, asp.codes.ASP_EACCES);
		/* a root-owned directory cannot be written into either */
		const locked = path.join(fx.workspace, 'locked');
		fs.mkdirSync(locked, { mode: 0o755 });
		await assert.rejects(sb.write('locked/f.txt', 'x'), { code: 'ASP_EACCES' });
	});

	it('EHOSTKEY: a wrong pinned key fails closed, naming both fingerprints', async () => {
		const other = path.join(fx.dir, 'other_host_key');
		require('node:child_process').execFileSync('ssh-keygen',
			['-q', '-t', 'ed25519', '-N', '', '-C', '', '-f', other]);
		const wrong = fs.readFileSync(`${other}.pub`, 'utf8').trim().split(/\s+/).slice(0, 2).join(' ');
		const cfg = fx.writeConfig(path.join(fx.dir, 'wrong-key.asp.json'), { connection: { host_key: wrong } });
		const e = await asp.open({ config: cfg }).catch((x) => x);
		assert.ok(e instanceof asp.AspError, String(e));
		assert.equal(e.code, 'ASP_EHOSTKEY');
		assert.equal(e.errno, -6);
		assert.ok(e.message.includes(fx.hostKeyFingerprint), e.message);
	});

	it('ECONFIG names the field and the expectation', async () => {
		const cfg = path.join(fx.dir, 'bad.asp.json');
		fs.writeFileSync(cfg, JSON.stringify({
			version: '0', transport: 'ssh',
			connection: { host: '127.0.0.1', port: '22', user: 'x' }, workspace: '/w',
		}));
		const e = await asp.open({ config: cfg }).catch((x) => x);
		assert.equal(e.code, 'ASP_ECONFIG');
		assert.match(e.message, /connection\.port/);
		await assert.rejects(asp.checkConfig(cfg), { code: 'ASP_ECONFIG' });
		/* a typo inside connection is an error, not trust-on-first-use */
		const typo = fx.writeConfig(path.join(fx.dir, 'typo.asp.json'),
			{ connection: { host_key: undefined, hostkey: fx.hostKeyLine } });
		await assert.rejects(asp.open({ config: typo }), { code: 'ASP_ECONFIG' });
	});

	it('ENOCONFIG when discovery finds nothing', async (t) => {
		const empty = fs.mkdtempSync('/tmp/asp-node-noconfig.');
		const saved = process.env.ASP_CONFIG;
		delete process.env.ASP_CONFIG;
		try {
			if (fs.existsSync('/tmp/.asp.json') || fs.existsSync('/.asp.json'))
				return t.skip('a .asp.json in /tmp or / would be found');
			const e = await asp.open({ startDir: empty }).catch((x) => x);
			assert.ok(e instanceof asp.AspError);
			assert.equal(e.code, 'ASP_ENOCONFIG');
			await assert.rejects(asp.findConfig(empty), { code: 'ASP_ENOCONFIG' });
		} finally {
			if (saved !== undefined)
				process.env.ASP_CONFIG = saved;
			fs.rmSync(empty, { recursive: true, force: true });
		}
	});

	it('ECONNECT on the first operation of a lazy sandbox', async () => {
		const net = require('node:net');
		const port = await new Promise((resolve) => {
			const s = net.createServer().listen(0, '127.0.0.1', () => {
				const p = s.address().port;
				s.close(() => resolve(p));
			});
		});
		const cfg = fx.writeConfig(path.join(fx.dir, 'closed-port.asp.json'), { connection: { port } });
		const lazy = await asp.open({ config: cfg, lazy: true, connectTimeout: 3000 });
		try {
			await assert.rejects(lazy.exec('true'), { code: 'ASP_ECONNECT' });
		} finally {
			await lazy.close();
		}
	});

	it('NUL bytes in strings are refused before C is called', async () => {
		const einval = { code: 'ASP_EINVAL', errno: -2 };
		await assert.rejects(sb.read('a\0b'), einval);
		await assert.rejects(sb.write('a\0b', 'x'), einval);
		await assert.rejects(sb.exec('echo a\0b'), einval);
		await assert.rejects(sb.exec('true', { cwd: 'x\0' }), einval);
		await assert.rejects(sb.exec('true', { env: { A: 'x\0y' } }), einval);
		await assert.rejects(sb.exec('true', { env: { 'A\0': 'y' } }), einval);
		await assert.rejects(sb.rename('a', 'b\0'), einval);
		await assert.rejects(sb.mkdir('a\0'), einval);
		await assert.rejects(sb.stat(Buffer.from('a\0')), einval);
		await assert.rejects(asp.open({ config: 'x\0y' }), einval);
		await assert.rejects(asp.checkConfig('x\0y'), einval);
		await assert.rejects(sb.read(42), TypeError);
		/* nothing reached the sandbox: a file named "a" was never created */
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'a')));
	});

	it('invalid env names and empty paths come back as ASP_EINVAL from C', async () => {
		await assert.rejects(sb.exec('true', { env: { 'BAD NAME': 'x' } }), { code: 'ASP_EINVAL' });
		await assert.rejects(sb.read(''), { code: 'ASP_EINVAL' });
	});
});

describe('hostile strings', () => {
	const names = [
		"it's \"quoted\"",
		'$(touch pwned) `touch pwned2` ${HOME}',
		'new\nline\ttab',
		'semi;colon&amp|pipe>redir<in',
		'-leading-dash',
		'ünïcødé ✓ 日本',
		' spaces ',
		'*?[glob]',
	];

	it('file names pass through exactly', async () => {
		await sb.mkdir('hostile', { parents: true });
		for (const name of names) {
			const p = `hostile/${name}`;
			await sb.write(p, name);
			assert.equal((await sb.read(p)).toString(), name);
			assert.equal(fs.readFileSync(path.join(fx.workspace, 'hostile', name), 'utf8'), name);
		}
		const listed = (await sb.list('hostile')).map((e) => e.name).sort();
		assert.deepEqual(listed, [...names].sort());
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'pwned')));
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'pwned2')));
	});

	it('non-UTF-8 names as Buffers', async () => {
		const raw = Buffer.concat([Buffer.from('hostile/raw-'), Buffer.from([0xff, 0xfe, 0x80]), Buffer.from('.bin')]);
		await sb.write(raw, 'raw');
		assert.equal((await sb.read(raw)).toString(), 'raw');
		const local = Buffer.concat([Buffer.from(fx.workspace + '/'), raw]);
		assert.equal(fs.readFileSync(local, 'utf8'), 'raw');
	});

	it('commands, cwd and env values pass through exactly', async () => {
		for (const s of names) {
			const dir = `hostile-cwd/${s}`;
			await sb.mkdir(dir, { parents: true });
			const r = await sb.exec('printf "%s|%s" "$V" "$(basename "$PWD")"', { cwd: dir, env: { V: s } });
			assert.equal(r.exitCode, 0, r.stderr.toString());
			assert.equal(r.stdout.toString(), `${s}|${s}`);
		}
		const weird = "printf '%s' 'a'\"b\"'$c'`echo d`\"$(echo e)\"";
		const r = await sb.exec(weird);
		assert.equal(r.stdout.toString(), 'ab$cde');
		assert.ok(!fs.existsSync(path.join(fx.workspace, 'pwned')));
		/* non-UTF-8 bytes in a command (as a Buffer) and in an env value */
		const bytes = Buffer.from([0xc3, 0x28, 0xff, 0x01]);
		const cmd = Buffer.concat([Buffer.from("printf '%s' '"), bytes, Buffer.from("'")]);
		assert.deepEqual((await sb.exec(cmd)).stdout, bytes);
		assert.deepEqual((await sb.exec('printf "%s" "$B"', { env: { B: bytes } })).stdout, bytes);
	});
});

describe('exec', () => {
	it('exit codes, signals, stdout and stderr apart, stdin', async () => {
		let r = await sb.exec('echo out; echo err >&2; exit 3');
		assert.equal(r.exitCode, 3);
		assert.equal(r.signal, null);
		assert.equal(r.stdout.toString(), 'out\n');
		assert.equal(r.stderr.toString(), 'err\n');
		assert.equal(r.timedOut, false);
		assert.equal(r.cancelled, false);
		assert.equal(typeof r.durationMs, 'number');

		r = await sb.exec('kill -TERM $$');
		assert.equal(r.exitCode, null);
		assert.equal(r.signal, 'SIGTERM');

		const input = crypto.randomBytes(200_000);
		r = await sb.exec('cat', { stdin: input });
		assert.ok(r.stdout.equals(input));
		r = await sb.exec('tr a-z A-Z', { stdin: 'shout' });
		assert.equal(r.stdout.toString(), 'SHOUT');
	});

	it('runs in the workspace by default, cwd relative to it; a missing cwd is ENOENT', async () => {
		assert.equal((await sb.exec('pwd')).stdout.toString().trim(), fx.workspace);
		await sb.mkdir('sub/dir', { parents: true });
		assert.equal((await sb.exec('pwd', { cwd: 'sub/dir' })).stdout.toString().trim(),
			path.join(fx.workspace, 'sub/dir'));
		await assert.rejects(sb.exec('true', { cwd: 'nope/nope' }), { code: 'ASP_ENOENT' });
	});

	it('maxOutput keeps head and tail', async () => {
		const r = await sb.exec('seq 1 30000; printf END', { maxOutput: 1000 });
		const full = Buffer.from(`${Array.from({ length: 30000 }, (_, k) => `${k + 1}\n`).join('')}END`);
		assert.equal(r.stdout.length, 1000);
		assert.equal(r.stdoutTotal, full.length);
		assert.equal(r.truncated, true);
		/* exactly the first 500 bytes and the last 500 */
		assert.deepEqual(r.stdout, Buffer.concat([full.subarray(0, 500), full.subarray(full.length - 500)]));
	});

	it('timeout kills the command and reports timedOut', async () => {
		const watch = groupWatch();
		const t0 = Date.now();
		/* 3 s: time to see the group alive first on two busy cores */
		const r = await sb.exec('sleep 20 & echo "pids: $$ $!"; sleep 20', { timeout: 3000, onData: watch.onData });
		assert.equal(r.timedOut, true);
		assert.equal(r.cancelled, false);
		assert.equal(r.exitCode, null);
		assert.ok(r.signal);
		assert.ok(Date.now() - t0 < 15_000);
		await watch.assertAliveThenDead(2);
	});

	it('deadline kills the command and rejects with ASP_ETIMEOUT (timeout stays the kill timer)', async () => {
		const watch = groupWatch();
		await assert.rejects(
			sb.exec('sleep 20 & echo "pids: $$ $!"; sleep 20; echo never',
				{ deadline: 3000, timeout: 60000, killGrace: 500, onData: watch.onData }),
			(e) => e.code === 'ASP_ETIMEOUT' && /exec's deadline option/.test(e.message) &&
				!/timeout_ms/.test(e.message));
		await watch.assertAliveThenDead(2);
	});

	it('the event loop keeps ticking during a long exec', async () => {
		let ticks = 0;
		const timer = setInterval(() => ticks++, 10);
		try {
			const r = await sb.exec('sleep 1');
			assert.equal(r.exitCode, 0);
		} finally {
			clearInterval(timer);
		}
		/* 100 ticks in an idle second; a blocked loop would give 0 or 1 */
		assert.ok(ticks >= 30, `only ${ticks} ticks`);
	});

	/* Each command waits until all four have started: they can only all finish when they run at once. */
	it('runs execs concurrently', async () => {
		const tag = `together.${crypto.randomInt(1e6, 1e7)}`;
		const rs = await Promise.all([0, 1, 2, 3].map((i) => sb.exec(`echo $$ >> ${tag}; n=0; ` +
			`while [ "$(wc -l < ${tag})" -lt 4 ]; do n=$((n+1)); [ $n -gt 400 ] && exit 1; sleep 0.05; done; ` +
			`echo ${i}`)));
		assert.deepEqual(rs.map((r) => r.exitCode), [0, 0, 0, 0]);
		assert.deepEqual(rs.map((r) => r.stdout.toString()), ['0\n', '1\n', '2\n', '3\n']);
		await sb.remove(tag);
	});
});

/* Live processes of the sandbox user whose command line contains tag (zombies ignored). */
async function survivors(tag) {
	const r = await sb.exec('ps -u "$(id -un)" -o stat=,args=');
	return r.stdout.toString().split('\n')
		.filter((l) => l.includes(tag) && !/^\s*Z/.test(l));
}

describe('cancel', () => {
	it('an AbortSignal kills the remote command and everything it started', async () => {
		const tag = `31.${crypto.randomInt(1e6, 1e7)}`;
		const ac = new AbortController();
		const watch = groupWatch(() => ac.abort()); /* abort once the group was seen alive */
		const t0 = Date.now();
		const r = await sb.exec(`sleep ${tag} & a=$!; sleep ${tag} & echo "pids: $$ $a $!"; wait`,
			{ signal: ac.signal, onData: watch.onData });
		assert.equal(r.cancelled, true);
		assert.equal(r.timedOut, false);
		assert.equal(r.exitCode, null);
		assert.ok(Date.now() - t0 < 30_000);
		await watch.assertAliveThenDead(3);
		assert.deepEqual(await survivors(tag), []);
	});

	it('a signal aborted before the call rejects with ASP_ECANCELLED and runs nothing', async () => {
		const file = unique('never');
		await assert.rejects(sb.exec(`touch ${file}`, { signal: AbortSignal.abort() }),
			{ code: 'ASP_ECANCELLED' });
		assert.ok(!fs.existsSync(path.join(fx.workspace, file)));
	});

	it('AbortSignal.timeout works too', async () => {
		const watch = groupWatch();
		/* 3 s: time to see the group alive first on two busy cores */
		const r = await sb.exec('sleep 20 & echo "pids: $$ $!"; sleep 20',
			{ signal: AbortSignal.timeout(3000), onData: watch.onData });
		assert.equal(r.cancelled, true);
		await watch.assertAliveThenDead(2);
	});
});

describe('onData', () => {
	it('receives all output, in order, per stream', async () => {
		const chunks = { stdout: [], stderr: [] };
		const order = [];
		const r = await sb.exec('i=1; while [ $i -le 3000 ]; do echo "o$i"; echo "e$i" >&2; i=$((i+1)); done',
			{
				onData: (stream, chunk) => {
					assert.ok(Buffer.isBuffer(chunk));
					chunks[stream].push(chunk);
					order.push(stream);
				},
			});
		const out = Buffer.concat(chunks.stdout);
		const err = Buffer.concat(chunks.stderr);
		assert.ok(out.equals(r.stdout));
		assert.ok(err.equals(r.stderr));
		const want = (p) => Array.from({ length: 3000 }, (_, k) => `${p}${k + 1}\n`).join('');
		assert.equal(out.toString(), want('o'));
		assert.equal(err.toString(), want('e'));
		assert.ok(order.includes('stdout') && order.includes('stderr'));
	});

	it('streams large binary output', async () => {
		let n = 0;
		const hash = crypto.createHash('sha256');
		const r = await sb.exec('head -c 8000000 /dev/urandom | tee big.out', {
			onData: (stream, chunk) => {
				if (stream === 'stdout') {
					n += chunk.length;
					hash.update(chunk);
				}
			},
		});
		assert.equal(n, 8_000_000);
		assert.equal(r.stdout.length, 8_000_000);
		const digest = hash.digest('hex');
		assert.equal(crypto.createHash('sha256').update(r.stdout).digest('hex'), digest);
		const written = fs.readFileSync(path.join(fx.workspace, 'big.out'));
		assert.equal(crypto.createHash('sha256').update(written).digest('hex'), digest);
	});

	it('chunks arrive while the command is still running', async () => {
		let first = 0;
		const t0 = Date.now();
		await sb.exec('echo early; sleep 1; echo late', {
			onData: () => {
				first ||= Date.now() - t0;
			},
		});
		assert.ok(first > 0 && first < 900, `first chunk after ${first} ms`);
	});

	it('an exception in onData stops the command and rejects with it', async () => {
		const tag = `32.${crypto.randomInt(1e6, 1e7)}`;
		const boom = new Error('boom');
		const watch = groupWatch(() => {
			throw boom;
		});
		await assert.rejects(sb.exec(`sleep ${tag} & echo "pids: $$ $!"; sleep ${tag}`, {
			onData: watch.onData,
		}), (e) => e === boom);
		await watch.assertAliveThenDead(2);
		assert.deepEqual(await survivors(tag), []);
	});
});

describe('close', () => {
	it('waits for operations in flight, then refuses new ones', async () => {
		const other = await asp.open({ config: fx.config, maxConnections: 2 });
		const running = other.exec('sleep 0.5; echo done');
		const closing = other.close();
		await assert.rejects(other.read('hello.txt'), { code: 'ASP_EINVAL' });
		assert.equal((await running).stdout.toString(), 'done\n');
		await closing;
		await other.close(); // twice is fine
		await assert.rejects(other.exec('true'), { code: 'ASP_EINVAL' });
	});
});

describe('warm', () => {
	const accepted = () => (fs.readFileSync(fx.log, 'utf8').match(/Accepted publickey for /g) || []).length;

	it('makes the connections asked for, once', async () => {
		const before = accepted();
		const other = await asp.open({ config: fx.config, lazy: true, maxConnections: 3 });
		try {
			assert.equal(accepted(), before);
			assert.equal(await other.warm(3), undefined);
			assert.equal(accepted(), before + 3);
			await other.warm(2);
			await other.warm(0, { timeout: 5000 });
			assert.equal(accepted(), before + 3);
			await assert.rejects(other.warm(4), (e) => {
				assert.equal(e.code, 'ASP_EINVAL');
				assert.match(e.message, /maxConnections/);
				return true;
			});
			await assert.rejects(other.warm(-1), RangeError);
			await assert.rejects(other.warm(), TypeError);
			const ac = new AbortController();
			ac.abort();
			await assert.rejects(other.warm(3, { signal: ac.signal }), { code: 'ASP_ECANCELLED' });
			assert.equal(accepted(), before + 3);
		} finally {
			await other.close();
		}
	});
});

describe('trust on first use', () => {
	it('records the key, then knows it', async () => {
		const store = path.join(fx.dir, 'known_hosts');
		const cfg = fx.writeConfig(path.join(fx.dir, 'tofu.asp.json'), { connection: { host_key: undefined } });
		const first = await asp.open({ config: cfg, knownHosts: store });
		try {
			const info = await first.info();
			assert.equal(info.trust, 'first-use');
			assert.equal(info.knownHosts, store);
		} finally {
			await first.close();
		}
		assert.equal(fs.statSync(store).mode & 0o777, 0o600);
		const again = await asp.open({ config: cfg, knownHosts: store, ioTimeout: 5000, keepalive: 5, idleClose: 60 });
		try {
			assert.equal((await again.info()).trust, 'known');
		} finally {
			await again.close();
		}
	});
});
