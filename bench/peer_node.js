'use strict';
/*
 * Node peers of bench/run.py:
 *   impl=ssh2  the `ssh2` package (bench/node_modules), exec per channel, one SFTP session
 *   impl=asp   the libasp Node binding (bindings/node, koffi)
 *
 *   node bench/peer_node.js impl=ssh2 workload=lat host=... port=... user=... key=... workspace=DIR
 *   node bench/peer_node.js impl=asp workload=lat config=.asp.json
 *
 * Workloads: lat, conc, bulk, cold (+ scale_conns for ssh2, many for asp). ssh2's writes are
 * plain SFTP writes (writeFile); the binding's are atomic (its default).
 * Each of the binding's calls holds a libuv worker thread while it runs,
 * except a plain exec's wait for its command (the binding's waiter); the
 * binding starts the pool with 64 threads unless UV_THREADPOOL_SIZE is set,
 * and the bench leaves it to the binding.
 */
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const crypto = require('node:crypto');

const ARGS = Object.fromEntries(process.argv.slice(2).filter((a) => a.includes('='))
	.map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]));
const arg = (k, d) => (k in ARGS ? ARGS[k] : d);
const argI = (k, d) => Number(arg(k, String(d)));
const argList = (k, d) => arg(k, d).split(',').filter(Boolean).map(Number);
const IMPL = arg('impl', 'ssh2');
const PEER = arg('peer', IMPL === 'asp' ? 'node libasp' : 'node ssh2');
const now = () => Number(process.hrtime.bigint()) / 1e6;
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const wsPath = (rel) => path.join(arg('workspace', ''), rel);

function emit(op, unit, samples, cpuS, wallS, extra = {}) {
	process.stdout.write(`${JSON.stringify({ peer: PEER, op, unit, cpu_s: cpuS, wall_s: wallS, ...extra,
		samples: samples.map((x) => Math.round(x * 1e4) / 1e4) })}\n`);
}

function rssKb() {
	if (global.gc) global.gc();
	return Math.round(process.memoryUsage().rss / 1024);
}

/*
 * Content check, outside every timed region: got and want (Buffers, or local file
 * paths: the workspace is the sandbox's side of the same bytes) must be equal byte
 * for byte, compared 1 MiB at a time. A mismatch ends the peer with "content
 * mismatch" (bench/run.py then fails the run).
 */
function verify(what, got, want) {
	const CH = 1 << 20;
	const reader = (src) => {
		if (src instanceof Uint8Array) { /* Buffers too */
			let off = 0;
			return {
				read: () => {
					const b = Buffer.from(src.buffer, src.byteOffset + off, Math.min(CH, src.length - off));
					off += b.length;
					return b;
				},
				close: () => {},
			};
		}
		const fd = fs.openSync(src, 'r'), buf = Buffer.alloc(CH);
		return {
			read: () => {
				let n = 0, k;
				while (n < CH && (k = fs.readSync(fd, buf, n, CH - n, null)) > 0) n += k;
				return buf.subarray(0, n);
			},
			close: () => fs.closeSync(fd),
		};
	};
	const a = reader(got), b = reader(want);
	try {
		for (let off = 0; ; ) {
			const x = a.read(), y = b.read();
			if (!x.equals(y)) {
				const how = x.length !== y.length ? 'lengths differ' : 'bytes differ';
				process.stderr.write(`bench: ${what}: content mismatch at or after byte ${off} (${how})\n`);
				process.exit(1);
			}
			if (!x.length) return;
			off += x.length;
		}
	} finally {
		a.close();
		b.close();
	}
}

/* check(result), when given, runs after every call, outside the samples, CPU and wall time. */
async function timed(fn, iters, warmup, check) {
	for (let i = 0; i < warmup; i++) {
		const r = await fn();
		if (check) check(r);
	}
	const s = [];
	const c0 = cpu(), w0 = now();
	let skipC = 0, skipW = 0;
	for (let i = 0; i < iters; i++) {
		const t = now();
		const r = await fn();
		s.push(now() - t);
		if (check) {
			const k0 = cpu(), t0 = now();
			check(r);
			skipC += cpu() - k0;
			skipW += now() - t0;
		}
	}
	return [s, cpu() - c0 - skipC, (now() - w0 - skipW) / 1e3];
}

function sizesReps() {
	const sizes = argList('sizes', '1,64,256'), reps = argList('reps', '5,3,3');
	return sizes.map((s, i) => [s, i < reps.length ? reps[i] : reps[reps.length - 1]]);
}

/* ------------------------------------------------------------ ssh2 */

function ssh2Impl() {
	const { Client } = require('ssh2');
	const key = fs.readFileSync(arg('key'));
	const pinned = Buffer.from(arg('host_key').split(' ')[1], 'base64');
	const p = (fn) => new Promise((res, rej) => fn((e, v) => (e ? rej(e) : res(v))));
	return {
		async connect() {
			/*
			 * ssh2 leaves Nagle on; with sshd's delayed ACKs that costs ~40 ms per
			 * exec on Linux. A user who cares passes a no-delay socket, so we do too.
			 */
			const sock = net.connect(argI('port', 22), arg('host'));
			sock.setNoDelay(true);
			await new Promise((res, rej) => sock.once('connect', res).once('error', rej));
			const c = new Client();
			await new Promise((res, rej) => {
				c.on('ready', res).on('error', rej).connect({
					sock, username: arg('user'), privateKey: key,
					hostVerifier: (k) => Buffer.compare(k, pinned) === 0,
				});
			});
			return c;
		},
		exec(c) {
			return new Promise((res, rej) => c.exec('true', (e, st) => {
				if (e) return rej(e);
				st.on('data', () => {}).stderr.on('data', () => {});
				st.on('close', (code) => (code === 0 ? res() : rej(new Error(`exit ${code}`))));
			}));
		},
		sftp: (c) => p((cb) => c.sftp(cb)),
		read: (sftp, f) => p((cb) => sftp.readFile(wsPath(f), cb)),
		write: (sftp, f, d) => p((cb) => sftp.writeFile(wsPath(f), d, cb)),
		stat: (sftp, f) => p((cb) => sftp.stat(wsPath(f), cb)),
		get: (sftp, f, local) => p((cb) => sftp.fastGet(wsPath(f), local, cb)),
		put: (sftp, local, f) => p((cb) => sftp.fastPut(local, wsPath(f), cb)),
		close: (c) => c.end(),
	};
}

async function ssh2Main(w) {
	const I = ssh2Impl();
	if (w === 'lat') {
		const c = await I.connect();
		const sftp = await I.sftp(c);
		const data = crypto.randomBytes(4096);
		const wname = `w-${arg('tag', 'node-ssh2')}.bin`;
		const ops = [
			['exec', () => I.exec(c)],
			['read4k', () => I.read(sftp, 'bench-4k.bin'), (got) => verify('read4k', got, wsPath('bench-4k.bin'))],
			['write4k', () => I.write(sftp, wname, data), () => verify('write4k', wsPath(wname), data)],
			['stat', async () => { if ((await I.stat(sftp, 'bench-4k.bin')).size !== 4096) throw new Error('size'); }],
		];
		for (const [name, fn, check] of ops) {
			const [s, c0, w0] = await timed(fn, argI('iters', 100), argI('warmup', 10), check);
			emit(name, 'ms', s, c0, w0);
		}
		I.close(c);
	} else if (w === 'conc') {
		const maxConn = argI('max_conn', 16), ops = argI('ops', 200);
		for (const callers of argList('callers', '1,4,16,64')) {
			const n = Math.min(callers, maxConn);
			const conns = [];
			for (let i = 0; i < n; i++) conns.push(await I.connect());
			const round = async (total) => {
				const lat = new Array(total).fill(0);
				let next = 0;
				await Promise.all(Array.from({ length: callers }, async (_, k) => {
					for (let i = next++; i < total; i = next++) {
						const t = now();
						await I.exec(conns[k % n]);
						lat[i] = now() - t;
					}
				}));
				return lat;
			};
			await round(callers * 2);
			const c0 = cpu(), w0 = now();
			const lat = await round(Math.max(ops, callers * 2));
			emit('conc_exec', 'ms', lat, cpu() - c0, (now() - w0) / 1e3, { callers, conns: n });
			conns.forEach(I.close);
		}
	} else if (w === 'bulk') {
		const c = await I.connect();
		const sftp = await I.sftp(c);
		const local = path.join(arg('localdir'), `get-${arg('tag', 'node-ssh2')}.bin`);
		const dst = `bw-${arg('tag', 'node-ssh2')}.bin`;
		await I.get(sftp, 'bench-4k.bin', local);
		for (const [size, reps] of sizesReps()) {
			const src = `bulk-${size}M.bin`;
			for (const [op, fn, got] of [['bulk_read', () => I.get(sftp, src, local), local],
				['bulk_write', () => I.put(sftp, wsPath(src), dst), wsPath(dst)]]) {
				const s = [];
				let cp = 0;
				for (let r = 0; r < reps; r++) {
					const t = now(), c0 = cpu();
					await fn();
					s.push((now() - t) / 1e3);
					cp += cpu() - c0;
					verify(op, got, wsPath(src));
				}
				emit(op, 's', s, cp, 0, { bytes: size * 1048576 });
			}
		}
		fs.unlinkSync(local);
		I.close(c);
	} else if (w === 'cold') {
		const s = [];
		let cp = 0, wall = 0;
		const warmup = argI('warmup', 1);
		for (let i = 0; i < warmup + argI('iters', 10); i++) {
			const t = now(), c0 = cpu();
			const c = await I.connect();
			await I.exec(c);
			const d = now() - t;
			if (i >= warmup) { s.push(d); cp += cpu() - c0; wall += d / 1e3; }
			I.close(c);
		}
		emit('cold', 'ms', s, cp, wall);
	} else if (w === 'scale_conns') {
		const n = argI('n', 10);
		const warm = await I.connect();
		await I.exec(warm);
		I.close(warm);
		await new Promise((r) => setTimeout(r, 100));
		const rss0 = rssKb();
		const conns = [];
		for (let i = 0; i < n; i++) {
			const c = await I.connect();
			await I.exec(c);
			conns.push(c);
		}
		const rss1 = rssKb();
		process.stdout.write(`${JSON.stringify({ peer: PEER, op: 'scale_conns', n, conns: n,
			rss_before_kb: rss0, rss_after_kb: rss1 })}\n`);
		conns.forEach(I.close);
	} else {
		throw new Error(`unknown workload ${w}`);
	}
}

/* ------------------------------------------------------------ the binding */

async function aspMain(w) {
	let asp;
	try {
		asp = require(path.join(__dirname, '..', 'bindings', 'node'));
		asp.load();
	} catch (e) {
		process.stderr.write(`bench: the Node binding cannot be loaded: ${e.message}\n`);
		process.exit(3);
	}
	const openSb = (maxConnections, lazy = false) => asp.open({ config: arg('config'), maxConnections, lazy });
	const execTrue = async (sb) => {
		const r = await sb.exec('true');
		if (r.exitCode !== 0) throw new Error(`exit ${r.exitCode}`);
	};
	if (w === 'lat') {
		const sb = await openSb(1);
		const data = crypto.randomBytes(4096);
		const wname = `w-${arg('tag', 'node-asp')}.bin`;
		const ops = [
			['exec', () => execTrue(sb)],
			['read4k', () => sb.read('bench-4k.bin'), (got) => verify('read4k', got, wsPath('bench-4k.bin'))],
			['write4k', () => sb.write(wname, data), () => verify('write4k', wsPath(wname), data)],
			['write4k_nonatomic', () => sb.write(wname, data, { atomic: false }),
				() => verify('write4k_nonatomic', wsPath(wname), data)],
			['stat', async () => { if ((await sb.stat('bench-4k.bin')).size !== 4096) throw new Error('size'); }],
		];
		for (const [name, fn, check] of ops) {
			const [s, c0, w0] = await timed(fn, argI('iters', 100), argI('warmup', 10), check);
			emit(name, 'ms', s, c0, w0);
		}
		await sb.close();
	} else if (w === 'conc') {
		const maxConn = argI('max_conn', 16), ops = argI('ops', 200);
		for (const callers of argList('callers', '1,4,16,64')) {
			const n = Math.min(callers, maxConn);
			const sb = await openSb(n, true);
			const round = async (total) => {
				const lat = new Array(total).fill(0);
				let next = 0;
				await Promise.all(Array.from({ length: callers }, async () => {
					for (let i = next++; i < total; i = next++) {
						const t = now();
						await execTrue(sb);
						lat[i] = now() - t;
					}
				}));
				return lat;
			};
			await round(callers * 2);
			const c0 = cpu(), w0 = now();
			const lat = await round(Math.max(ops, callers * 2));
			emit('conc_exec', 'ms', lat, cpu() - c0, (now() - w0) / 1e3, { callers, conns: n });
			await sb.close();
		}
	} else if (w === 'bulk') {
		const sb = await openSb(1);
		const dst = `bw-${arg('tag', 'node-asp')}.bin`;
		await sb.read('bench-4k.bin');
		await sb.write(dst, Buffer.alloc(4096, 1));
		const big = crypto.randomBytes(Math.max(...sizesReps().map(([s]) => s)) * 1048576);
		for (const [size, reps] of sizesReps()) {
			const src = `bulk-${size}M.bin`, n = size * 1048576;
			const view = big.subarray(0, n);
			for (const [op, fn, check] of [['bulk_read', () => sb.read(src), (got) => verify('bulk_read', got, wsPath(src))],
				['bulk_write', () => sb.write(dst, view), () => verify('bulk_write', wsPath(dst), view)]]) {
				const s = [];
				let cp = 0;
				for (let r = 0; r < reps; r++) {
					const t = now(), c0 = cpu();
					const got = await fn();
					s.push((now() - t) / 1e3);
					cp += cpu() - c0;
					check(got);
				}
				emit(op, 's', s, cp, 0, { bytes: n });
			}
		}
		await sb.close();
	} else if (w === 'many') {
		// n sandboxes at once, each its own handle (one line of `configs` each).
		const n = argI('n', 10);
		const paths = fs.readFileSync(arg('configs'), 'utf8').split('\n').filter(Boolean).slice(0, n);
		const warm = await asp.open({ config: paths[0], maxConnections: 1 });
		await execTrue(warm);
		await warm.close();
		const threadsNow = () => Number(/^Threads:\s+(\d+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]);
		let peak = threadsNow();
		const sampler = setInterval(() => { peak = Math.max(peak, threadsNow()); }, 20);
		const ms = Array.from({ length: n }, () => ({}));
		let live = 0, peakOpen = 0; // sandboxes from the start of their open to the end of their close
		const one = async (i) => {
			const m = ms[i], name = `m-${i}.bin`;
			try { await oneSteps(i, m, name); } catch (e) {
				// Say which sandbox and phase failed: the stack alone names only this line.
				e.message = `sandbox ${i} (${paths[i]}), ${m.phase || 'open'}: ${e.message}`;
				throw e;
			}
		};
		const oneSteps = async (i, m, name) => {
			const data = Buffer.from(Array.from({ length: 4096 }, (_, k) => (i * 31 + k * 7) & 0xff));
			let t = now();
			peakOpen = Math.max(peakOpen, ++live);
			const sb = await asp.open({ config: paths[i], maxConnections: 1, connectTimeout: 120000 });
			m.open = now() - t; t = now(); m.phase = 'exec';
			const r = await sb.exec(`sleep 1; echo ${i}`);
			if (r.exitCode !== 0 || r.stdout.toString() !== `${i}\n`) throw new Error(`exec ${i}: exit ${r.exitCode}`);
			m.exec = now() - t; t = now(); m.phase = 'write';
			await sb.write(name, data);
			m.write = now() - t; t = now(); m.phase = 'read';
			if (!(await sb.read(name)).equals(data)) throw new Error(`read ${i}: not what was written`);
			m.read = now() - t; t = now(); m.phase = 'close';
			await sb.close();
			live--;
			m.close = now() - t;
		};
		const rss0 = Math.round(process.memoryUsage().rss / 1024);
		const c0 = cpu(), w0 = now();
		await Promise.all(Array.from({ length: n }, (_, i) => one(i)));
		const wall = (now() - w0) / 1e3, cp = cpu() - c0;
		clearInterval(sampler);
		peak = Math.max(peak, threadsNow());
		const phases = {};
		for (const p of ['open', 'exec', 'write', 'read', 'close']) {
			const col = ms.map((m) => m[p]).sort((a, b) => a - b);
			phases[p] = [Math.round(col[n >> 1] * 100) / 100, Math.round(col[n - 1] * 100) / 100];
		}
		process.stdout.write(`${JSON.stringify({ peer: PEER, op: 'many', unit: 's', n, wall_s: wall, cpu_s: cp,
			peak_threads: peak, rss0_kb: rss0, peak_open: peakOpen, samples: [wall], phases })}\n`);
	} else if (w === 'cold') {
		delete process.env.ASP_CONFIG;
		const s = [];
		let cp = 0, wall = 0;
		const warmup = argI('warmup', 1);
		for (let i = 0; i < warmup + argI('iters', 10); i++) {
			const t = now(), c0 = cpu();
			const sb = await asp.open({ startDir: arg('start_dir') });
			await execTrue(sb);
			const d = now() - t;
			if (i >= warmup) { s.push(d); cp += cpu() - c0; wall += d / 1e3; }
			await sb.close();
		}
		emit('cold', 'ms', s, cp, wall);
	} else {
		throw new Error(`unknown workload ${w}`);
	}
}

(IMPL === 'asp' ? aspMain : ssh2Main)(arg('workload', 'lat')).then(() => process.exit(0), (e) => {
	process.stderr.write(`bench: ${e.stack || e}\n`);
	process.exit(1);
});
