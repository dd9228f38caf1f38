'use strict';
/*
 * A real OpenSSH sshd on 127.0.0.1 for the Node tests, after
 * tests/fixture/fixture.c: a temp dir with fresh ed25519 host and client
 * keys, a free port, `sshd -D -e -f CONFIG -E LOG`, the login user
 * `asp-test` when we are root (else ourselves) with a workspace it owns, and
 * a .asp.json pinning the host key.
 *
 *   const fx = await startSshd();
 *   fx.config      // DIR/.asp.json
 *   fx.workspace   // DIR/workspace
 *   await fx.stop();
 */

const { execFileSync, spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const SSHD = '/usr/sbin/sshd';
const SFTP_SERVER = '/usr/lib/openssh/sftp-server';
const TEST_USER = 'asp-test';
const SETPRIV = ['/usr/bin/setpriv', '/bin/setpriv'].find((p) => fs.existsSync(p));
const START_TIMEOUT_MS = 5000;
const STOP_TIMEOUT_MS = 5000;
const PORT_ATTEMPTS = 5;

const running = new Set();

function sleep(ms) {
	return new Promise((r) => setTimeout(r, ms));
}

function keygen(file) {
	execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', '', '-f', file], { stdio: 'ignore' });
}

/* "type base64" of an OpenSSH .pub file, without the comment. */
function pubLine(key) {
	const [type, b64] = fs.readFileSync(`${key}.pub`, 'utf8').trim().split(/\s+/);
	return `${type} ${b64}`;
}

function fingerprint(key) {
	return execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', `${key}.pub`], { encoding: 'utf8' })
		.split(/\s+/)[1];
}

/* uid/gid/name of the login user: asp-test as root, else ourselves. */
function loginUser() {
	if (process.getuid() !== 0) {
		const me = os.userInfo();
		return { name: me.username, uid: me.uid, gid: me.gid };
	}
	const line = fs.readFileSync('/etc/passwd', 'utf8').split('\n')
		.find((l) => l.startsWith(`${TEST_USER}:`));
	if (!line)
		throw new Error(`fixture: no login user ${TEST_USER}: run tools/setup-deps.sh (make deps)`);
	const f = line.split(':');
	return { name: f[0], uid: Number(f[2]), gid: Number(f[3]) };
}

function freePort() {
	return new Promise((resolve, reject) => {
		const srv = net.createServer();
		srv.unref();
		srv.on('error', reject);
		srv.listen(0, '127.0.0.1', () => {
			const { port } = srv.address();
			srv.close(() => resolve(port));
		});
	});
}

function configText(fx, extra = '') {
	return [
		'# written by bindings/node/test/sshd-fixture.js',
		extra,
		'ListenAddress 127.0.0.1',
		`Port ${fx.port}`,
		`HostKey ${fx.hostKey}`,
		'PidFile none',
		`AuthorizedKeysFile ${fx.dir}/authorized_keys`,
		'StrictModes no',
		'PasswordAuthentication no',
		'KbdInteractiveAuthentication no',
		'PubkeyAuthentication yes',
		'UsePAM no',
		'LogLevel VERBOSE',
		'MaxStartups 100:30:200',
		'MaxSessions 10',
		`AllowUsers ${fx.user}`,
		'PermitRootLogin no',
		'PrintMotd no',
		'X11Forwarding no',
		`Subsystem sftp ${SFTP_SERVER}`,
		'',
	].join('\n');
}

/* PerSourcePenalties (OpenSSH >= 9.8) would refuse tests that fail on purpose. */
let penalties = null;
function hasPenalties(cfg) {
	if (penalties === null) {
		try {
			execFileSync(SSHD, ['-t', '-f', cfg, '-o', 'PerSourcePenalties=no'], { stdio: 'ignore' });
			penalties = true;
		} catch {
			penalties = false;
		}
	}
	return penalties;
}

/* Every process whose parent chain leads to pid (from /proc). */
function descendants(pid) {
	const parent = new Map();
	for (const name of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(name))
			continue;
		try {
			const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
			const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
			parent.set(Number(name), Number(rest[1]));
		} catch {
			/* gone */
		}
	}
	const out = [];
	const want = new Set([pid]);
	let grew = true;
	while (grew) {
		grew = false;
		for (const [p, pp] of parent) {
			if (want.has(pp) && !want.has(p)) {
				want.add(p);
				out.push(p);
				grew = true;
			}
		}
	}
	return out;
}

function alive(pid) {
	try {
		const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
		const state = stat.slice(stat.lastIndexOf(')') + 2)[0];
		return state !== 'Z' && state !== 'X';
	} catch {
		return false;
	}
}

function killQuietly(pid, sig) {
	try {
		process.kill(pid, sig);
	} catch {
		/* gone */
	}
}

class Sshd {
	constructor() {
		this.dir = fs.mkdtempSync('/tmp/asp-node-fx.');
		/* sshd's unprivileged side must reach authorized_keys in here. */
		fs.chmodSync(this.dir, 0o755);
		const u = loginUser();
		this.user = u.name;
		this.uid = u.uid;
		this.gid = u.gid;
		this.workspace = path.join(this.dir, 'workspace');
		fs.mkdirSync(this.workspace, { mode: 0o755 });
		fs.chmodSync(this.workspace, 0o755);
		if (process.getuid() === 0)
			fs.chownSync(this.workspace, this.uid, this.gid);
		this.hostKey = path.join(this.dir, 'ssh_host_ed25519_key');
		this.clientKey = path.join(this.dir, 'client_ed25519');
		keygen(this.hostKey);
		keygen(this.clientKey);
		this.hostKeyLine = pubLine(this.hostKey);
		fs.writeFileSync(path.join(this.dir, 'authorized_keys'), fs.readFileSync(`${this.clientKey}.pub`),
			{ mode: 0o644 });
		this.log = path.join(this.dir, 'sshd.log');
		this.sshdConfig = path.join(this.dir, 'sshd_config');
		this.config = path.join(this.dir, '.asp.json');
		this.port = 0;
		this.proc = null;
	}

	get hostKeyFingerprint() {
		return fingerprint(this.hostKey);
	}

	/*
	 * Write an .asp.json (default: this.config) for this server; `over`
	 * replaces connection fields (undefined removes one) or adds top-level ones.
	 */
	writeConfig(file = this.config, over = {}) {
		const connection = {
			host: '127.0.0.1',
			port: this.port,
			user: this.user,
			identity: this.clientKey,
			host_key: this.hostKeyLine,
			...(over.connection || {}),
		};
		for (const k of Object.keys(connection))
			if (connection[k] === undefined)
				delete connection[k];
		const doc = { version: '0', transport: 'ssh', connection, workspace: this.workspace, ...(over.top || {}) };
		fs.writeFileSync(file, `${JSON.stringify(doc, null, '\t')}\n`, { mode: 0o644 });
		return file;
	}

	async _launch(extra) {
		fs.writeFileSync(this.sshdConfig, configText(this, extra), { mode: 0o644 });
		if (process.getuid() === 0)
			fs.mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
		const from = fs.existsSync(this.log) ? fs.statSync(this.log).size : 0;
		const args = ['-D', '-e', '-f', this.sshdConfig, '-E', this.log];
		if (hasPenalties(this.sshdConfig))
			args.push('-o', 'PerSourcePenalties=no');
		/*
		 * If this process dies without running its exit handler (a crash),
		 * sshd gets SIGTERM from the kernel (PR_SET_PDEATHSIG, as fixture.c does).
		 */
		const proc = SETPRIV
			? spawn(SETPRIV, ['--pdeathsig', 'TERM', '--', SSHD, ...args], { stdio: 'ignore' })
			: spawn(SSHD, args, { stdio: 'ignore' });
		let exited = false;
		proc.on('exit', () => {
			exited = true;
		});
		this.proc = proc;
		running.add(this);
		const needle = `Server listening on 127.0.0.1 port ${this.port}.`;
		const deadline = Date.now() + START_TIMEOUT_MS;
		while (Date.now() < deadline) {
			const text = fs.existsSync(this.log) ? fs.readFileSync(this.log, 'utf8').slice(from) : '';
			if (text.includes(needle))
				return 'up';
			if (exited)
				return text.includes('Address already in use') ? 'busy' : 'failed';
			await sleep(10);
		}
		return 'failed';
	}

	async start(extra = '') {
		for (let i = 0; i < PORT_ATTEMPTS; i++) {
			this.port = await freePort();
			const state = await this._launch(extra);
			if (state === 'up') {
				this.writeConfig();
				return this;
			}
			await this._terminate();
			if (state !== 'busy')
				break;
		}
		const tail = fs.existsSync(this.log) ? fs.readFileSync(this.log, 'utf8').slice(-2000) : '(no log)';
		await this.stop();
		throw new Error(`fixture: sshd failed to start on 127.0.0.1 port ${this.port}; log tail:\n${tail}`);
	}

	logContains(needle) {
		return fs.existsSync(this.log) && fs.readFileSync(this.log, 'utf8').includes(needle);
	}

	/* SIGTERM the listener and its per-connection children, then SIGKILL what stays. */
	async _terminate() {
		const proc = this.proc;
		this.proc = null;
		if (!proc || proc.exitCode !== null || proc.signalCode !== null)
			return;
		const pids = [proc.pid, ...descendants(proc.pid)];
		for (const pid of pids)
			killQuietly(pid, 'SIGTERM');
		const deadline = Date.now() + STOP_TIMEOUT_MS;
		while (Date.now() < deadline && pids.some(alive))
			await sleep(10);
		for (const pid of pids)
			if (alive(pid))
				killQuietly(pid, 'SIGKILL');
	}

	/* Stop sshd and remove the directory. */
	async stop() {
		await this._terminate();
		running.delete(this);
		fs.rmSync(this.dir, { recursive: true, force: true });
	}
}

/* A test process that dies must not leave sshd listening. */
process.on('exit', () => {
	for (const fx of running) {
		if (fx.proc) {
			for (const pid of [fx.proc.pid, ...descendants(fx.proc.pid)])
				killQuietly(pid, 'SIGKILL');
		}
		try {
			fs.rmSync(fx.dir, { recursive: true, force: true });
		} catch {
			/* best effort */
		}
	}
});

async function startSshd(extraSshdConfig = '') {
	const fx = new Sshd();
	return fx.start(extraSshdConfig);
}

module.exports = { startSshd, Sshd, TEST_USER };
