/*
 * Every export, option and result field of index.d.ts, used as the
 * declarations say. test/types.test.js type-checks this file (tsc --noEmit),
 * then compiles it and runs it against a real sshd: the key lists below are
 * checked by the compiler to name exactly the declared fields (satisfies
 * Record<keyof T, ...> refuses a missing or an extra key) and at run time to
 * be exactly what the binding returns or reads, so the declarations and
 * index.js cannot drift apart in either direction.
 *
 *   node usage.mjs CONFIG     prints "ok" or throws
 */
import assert from 'node:assert/strict';

import asp, {
	AspError, Process, READ_ALL, Sandbox, checkConfig, codes, findConfig, libraryPath, load, open, readConfig,
	version,
} from 'libasp';
import type {
	AspErrorCode, CString, CallOptions, DirEntry, ExecOptions, ExecResult, FileType, MkdirOptions,
	OpenOptions, OutputStream, ProcessChunk, ReadOptions, RemoveOptions, SandboxInfo, StartOptions, Stat,
	WriteOptions, BgStartOptions, BgReadOptions, BgStatus, BgOutput, BgProcess,
} from 'libasp';

type Keys<T> = Record<keyof T, true>;

const EXEC_RESULT = {
	exitCode: true, signal: true, stdout: true, stderr: true, timedOut: true, cancelled: true,
	durationMs: true, stdoutTotal: true, stderrTotal: true, truncated: true,
} satisfies Keys<ExecResult>;
const STAT = { type: true, size: true, mode: true, mtime: true, mtimeMs: true } satisfies Keys<Stat>;
const DIR_ENTRY = { ...STAT, name: true } satisfies Keys<DirEntry>;
const SANDBOX_INFO = {
	trust: true, auth: true, hostKeyType: true, hostKeyFingerprint: true, knownHosts: true,
	kex: true, cipher: true, mac: true, serverBanner: true, fileTransport: true,
} satisfies Keys<SandboxInfo>;
const MODULE = {
	open: true, findConfig: true, readConfig: true, checkConfig: true, AspError: true, Sandbox: true, Process: true, READ_ALL: true,
	version: true, libraryPath: true, codes: true, load: true,
} satisfies Keys<typeof asp>;
const SANDBOX_METHODS = {
	read: true, write: true, exec: true, stat: true, mkdir: true, list: true, remove: true,
	rename: true, warm: true, info: true, close: true, workspace: true, configPath: true, closed: true, start: true,
	bgStart: true, bgRead: true, bgSignal: true, bgWait: true, bgRemove: true, bgList: true,
} satisfies Keys<Sandbox>;

/*
 * For each declared option, a value of the wrong type that the binding must
 * refuse naming the option (so it does read it), or null for a flag the
 * binding reads as a boolean (any value is valid).
 */
const BAD_OPEN = {
	config: 5, startDir: 5, knownHosts: 5, maxConnections: -1, connectTimeout: -1, ioTimeout: -1,
	keepalive: -1, idleClose: -1, lazy: null, opTimeout: -1, maxReadBytes: -1, maxOutput: -1,
	maxListEntries: -1, fileTransport: 'ftp', configText: 5, maxListBytes: -1,
} satisfies Record<keyof OpenOptions, unknown>;
const BAD_CALL = { signal: 'abort', timeout: -1 } satisfies Record<keyof CallOptions, unknown>;
const BAD_READ = { ...BAD_CALL, offset: -1, limit: -1 } satisfies Record<keyof ReadOptions, unknown>;
const BAD_WRITE = { ...BAD_CALL, mode: -1, parents: null, atomic: null } satisfies Record<keyof WriteOptions, unknown>;
const BAD_MKDIR = { ...BAD_CALL, mode: -1, parents: null } satisfies Record<keyof MkdirOptions, unknown>;
const BAD_REMOVE = { ...BAD_CALL, recursive: null } satisfies Record<keyof RemoveOptions, unknown>;
const BAD_EXEC = {
	cwd: 5, env: 'A=1', stdin: 5, timeout: -1, signal: 'abort', onData: 'print', maxOutput: -1,
	killGrace: -1, deadline: -1,
} satisfies Record<keyof ExecOptions, unknown>;

const sorted = (o: object): string[] => Object.keys(o).sort();

/* Each bad option is refused with a message naming it. */
async function refusesEach(what: string, bad: Record<string, unknown>, call: (o: never) => Promise<unknown>) {
	for (const [key, value] of Object.entries(bad)) {
		if (value === null)
			continue;
		await assert.rejects(call({ [key]: value } as never), (e: Error) => e.message.includes(key),
			`${what}: option ${key} = ${JSON.stringify(value)} was not refused naming it`);
	}
}

async function main(config: string): Promise<void> {
	/* module */
	assert.deepEqual(sorted(asp), sorted(MODULE));
	const where: string = load();
	assert.equal(where, libraryPath);
	const v: string = version();
	assert.match(v, /^\d+\.\d+\.\d+/);
	const enoent: number = codes.ASP_ENOENT;
	assert.equal(enoent, -12);
	const limit: bigint = READ_ALL;
	assert.equal(typeof limit, 'bigint');
	const found: string = await findConfig(config.slice(0, config.lastIndexOf('/')));
	assert.equal(found, config);
	const judged: { path: string; text: string } = await readConfig(config.slice(0, config.lastIndexOf('/')));
	assert.equal(judged.path, config);
	await checkConfig(config);
	const made = new AspError(-12);
	const code: AspErrorCode | (string & {}) = made.code;
	assert.equal(code, 'ASP_ENOENT');
	assert.equal(made.errno, -12);
	assert.equal(made.name, 'AspError');

	await refusesEach('open', BAD_OPEN, (o) => open(o));

	const opts: Required<OpenOptions> = {
		config, startDir: '/', knownHosts: Buffer.from('/nonexistent-known-hosts'), maxConnections: 2,
		connectTimeout: 10_000, ioTimeout: 30_000, keepalive: 15, idleClose: 300, lazy: true,
		opTimeout: 300_000, maxReadBytes: 1n << 28n, maxOutput: 1 << 20, maxListEntries: 1000,
		fileTransport: 'auto', configText: judged.text, maxListBytes: 1n << 20n,
	};
	const sb: Sandbox = await open(opts);
	try {
		assert.ok(sb instanceof Sandbox);
		for (const key of Object.keys(SANDBOX_METHODS))
			assert.ok(key in sb, `Sandbox.${key}`);
		const startOpts: StartOptions = { pty: false, timeout: 60000 };
		const proc: Process = await sb.start('cat', startOpts);
		assert.ok(proc instanceof Process);
		await proc.write('x\n');
		const chunk: ProcessChunk | null = await proc.read({ timeout: 30000 });
		assert.ok(chunk !== null && chunk.stream === 'stdout');
		await proc.closeStdin();
		const ended: ExecResult = await proc.wait({ timeout: 30000 });
		assert.equal(ended.exitCode, 0);
		await proc.close();
		const ws: string = sb.workspace;
		const cp: string = sb.configPath;
		const closed: boolean = sb.closed;
		assert.equal(cp, config);
		assert.ok(ws.startsWith('/'));
		assert.equal(closed, false);

		const ac = new AbortController();
		const call: Required<CallOptions> = { signal: ac.signal, timeout: 60_000 };
		const name: CString = Buffer.from('types-a.txt');

		const wo: Required<WriteOptions> = { ...call, mode: 0o640, parents: true, atomic: false };
		await sb.write('dir/types-a.txt', 'hello', wo);
		await sb.write(name, new Uint8Array([104, 105]));
		const ro: Required<ReadOptions> = { ...call, offset: 1n, limit: 3 };
		const part: Buffer = await sb.read('dir/types-a.txt', ro);
		assert.equal(part.toString(), 'ell');

		const st: Stat = await sb.stat('dir/types-a.txt', call);
		assert.deepEqual(sorted(st), sorted(STAT));
		const type: FileType = st.type;
		assert.equal(type, 'file');
		assert.equal(st.mode, 0o640);
		const when: Date = st.mtime;
		assert.equal(when.getTime(), st.mtimeMs);

		const mo: Required<MkdirOptions> = { ...call, mode: 0o700, parents: true };
		await sb.mkdir('dir/sub/deeper', mo);
		const entries: DirEntry[] = await sb.list('dir', call);
		assert.deepEqual(entries.map((e) => e.name), ['sub', 'types-a.txt']);
		for (const e of entries)
			assert.deepEqual(sorted(e), sorted(DIR_ENTRY));
		await sb.rename('dir/types-a.txt', 'dir/types-b.txt', call);
		const rm: Required<RemoveOptions> = { ...call, recursive: true };
		await sb.remove('dir', rm);
		await sb.remove(name);

		const seen: OutputStream[] = [];
		const eo: Required<ExecOptions> = {
			cwd: '.', env: { A: 'x', B: Buffer.from('y'), C: 3, D: true, E: undefined },
			stdin: 'in', timeout: 60_000, deadline: 120_000, signal: ac.signal,
			onData: (stream: OutputStream, chunk: Buffer) => { seen.push(stream); assert.ok(chunk.length > 0); },
			maxOutput: 1 << 20, killGrace: 2000,
		};
		const r: ExecResult = await sb.exec('printf "%s%s%s%s" "$A" "$B" "$C" "$D"; cat; echo err >&2; exit 3', eo);
		assert.deepEqual(sorted(r), sorted(EXEC_RESULT));
		const exit: number | null = r.exitCode;
		assert.equal(exit, 3);
		assert.equal(r.signal, null);
		assert.equal(r.stdout.toString(), 'xy3truein');
		assert.equal(r.stderr.toString(), 'err\n');
		assert.deepEqual([r.timedOut, r.cancelled, r.truncated], [false, false, false]);
		assert.equal(r.stdoutTotal + r.stderrTotal, 13);
		assert.ok(r.durationMs >= 0);
		assert.ok(seen.includes('stdout') && seen.includes('stderr'));
		await refusesEach('exec', BAD_EXEC, (o) => sb.exec('true', o));
		await refusesEach('read', BAD_READ, (o) => sb.read('x', o));
		await refusesEach('write', BAD_WRITE, (o) => sb.write('x', '', o));
		await refusesEach('mkdir', BAD_MKDIR, (o) => sb.mkdir('x', o));
		await refusesEach('remove', BAD_REMOVE, (o) => sb.remove('x', o));
		await refusesEach('stat', BAD_CALL, (o) => sb.stat('x', o));
		await refusesEach('list', BAD_CALL, (o) => sb.list('x', o));
		await refusesEach('rename', BAD_CALL, (o) => sb.rename('x', 'y', o));
		await refusesEach('warm', BAD_CALL, (o) => sb.warm(1, o));
		await sb.warm(1);

		const bso: Required<BgStartOptions> = { ...call, name: 'types', cwd: '.', env: { A: '1' }, keep: 4096 };
		const bid: string = await sb.bgStart('echo $A', bso);
		const bst: BgStatus = await sb.bgWait(bid, { timeout: 30_000 });
		assert.equal(bst.exitCode, 0);
		const bro: Required<BgReadOptions> = { ...call, offset: 0, limit: 100 };
		const bout: BgOutput = await sb.bgRead(bid, bro);
		assert.ok(bout.next >= bout.offset);
		const procs: BgProcess[] = await sb.bgList(call);
		assert.ok(procs.some((p) => p.id === bid));
		await sb.bgSignal(bid, 'SIGTERM', call);
		await sb.bgRemove(bid, call);

		const info: SandboxInfo = await sb.info();
		assert.deepEqual(sorted(info), sorted(SANDBOX_INFO));
		assert.equal(info.trust, 'pinned');
		assert.ok(info.serverBanner.startsWith('SSH-2.0-'));

		try {
			await sb.read('missing-types');
			assert.fail('read of a missing file resolved');
		} catch (e) {
			assert.ok(e instanceof AspError);
			assert.equal(e.code, 'ASP_ENOENT');
		}
	} finally {
		await sb.close();
	}
	assert.equal(sb.closed, true);
}

const config = process.argv[2];
if (!config)
	throw new Error('usage: node usage.mjs CONFIG');
await main(config);
process.stdout.write('ok\n');
