'use strict';
/*
 * A real OpenSSH sshd on 127.0.0.1 for the Node tests: a driver of
 * build/tests/sshd-fixture (tests/fixture/fixture_main.c, built by
 * `make tests`; $ASP_SSHD_FIXTURE names another build). The program runs
 * tests/fixture/fixture.c's server (fresh ed25519 keys, a free port, the
 * login user `asp-test` when we are root, else ourselves, with a workspace
 * it owns, a .asp.json pinning the host key), prints its facts as a JSON
 * line, obeys one command a line on stdin (stop, kill9, start, restart,
 * rotate-host-key) and answers each with the facts again. Closing its stdin
 * stops the server and everything under it and removes the directory; so
 * does this process's death.
 *
 *   const fx = await startSshd();            // or startSshd('MaxSessions 2\n')
 *   fx.config      // DIR/.asp.json
 *   fx.workspace   // DIR/workspace
 *   await fx.kill9(); await fx.startAgain();
 *   await fx.stop();
 */

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');

const TEST_USER = 'asp-test';
const ROOT = path.resolve(__dirname, '..', '..', '..');
const PROGRAM_ENV = 'ASP_SSHD_FIXTURE';

const running = new Set();

/* The sshd-fixture program: $ASP_SSHD_FIXTURE, else build/tests/sshd-fixture. */
function program() {
	const file = process.env[PROGRAM_ENV] || path.join(ROOT, 'build', 'tests', 'sshd-fixture');
	try {
		fs.accessSync(file, fs.constants.X_OK);
	} catch {
		throw new Error(`fixture: sshd fixture program ${file} is missing: build it with ` +
			`\`make -C ${ROOT} tests\` (or set $${PROGRAM_ENV})`);
	}
	return file;
}

/* JSON facts -> the fields the tests read (fx_sshd of tests/fixture/fixture.h). */
const FIELDS = {
	dir: 'dir', user: 'user', uid: 'uid', gid: 'gid', port: 'port', pid: 'pid',
	hostKey: 'host_key', hostKeyLine: 'host_key_line', hostKeyFingerprint: 'host_fingerprint',
	clientKey: 'client_key', workspace: 'workspace', config: 'config', log: 'log',
	sshdConfig: 'sshd_config',
};

class Sshd {
	/*
	 * extra: sshd_config lines put before the defaults (they win); from the
	 * first Match line on, at the end of the file. opts.subsystem:
	 * 'NAME COMMAND', replacing the default sftp subsystem.
	 */
	constructor(extra = '', opts = {}) {
		this.extra = extra;
		this.subsystem = opts.subsystem || '';
		this.child = null;
		this.lines = null;
		this.waiting = [];
		this.queue = Promise.resolve();
		for (const k of Object.keys(FIELDS))
			this[k] = null;
	}

	_take(facts) {
		for (const [k, v] of Object.entries(FIELDS))
			this[k] = facts[v];
	}

	/* The next JSON line of the program, as facts; rejects with its error. */
	_reply(what) {
		return new Promise((resolve, reject) => {
			this.waiting.push({ what, resolve, reject });
		});
	}

	_onLine(line) {
		const w = this.waiting.shift();
		if (!w)
			return;
		let facts;
		try {
			facts = JSON.parse(line);
		} catch {
			w.reject(new Error(`fixture ${w.what}: not JSON: ${line}`));
			return;
		}
		this._take(facts);
		if (facts.ok)
			w.resolve(this);
		else
			w.reject(new Error(`fixture ${w.what}: ${facts.error}`));
	}

	_onExit(code, signal) {
		for (const w of this.waiting.splice(0))
			w.reject(new Error(`fixture ${w.what}: the program exited (${code ?? signal}) ` +
				'without an answer; its stderr is above'));
	}

	async start() {
		const argv = [];
		if (this.extra)
			argv.push('--sshd-config', this.extra);
		if (this.subsystem)
			argv.push('--subsystem', this.subsystem);
		/* stderr is ours: what goes wrong shows in the test's output. */
		const child = spawn(program(), argv, { stdio: ['pipe', 'pipe', 'inherit'] });
		this.child = child;
		/* 'close': after the last line of stdout, unlike 'exit'. */
		this.exited = new Promise((resolve) => {
			child.on('close', (code, signal) => {
				this._onExit(code, signal);
				resolve();
			});
			child.on('error', (e) => {
				this._onExit(e.message, null);
				resolve();
			});
		});
		child.stdin.on('error', () => { /* the program is gone: _onExit says so */ });
		this.lines = readline.createInterface({ input: child.stdout });
		this.lines.on('line', (line) => this._onLine(line));
		running.add(this);
		try {
			await this._reply('start');
		} catch (e) {
			await this.stop();
			throw e;
		}
		return this;
	}

	/* One command; commands run one after another. */
	_command(cmd) {
		const run = async () => {
			if (!this.child || this.child.exitCode !== null || this.child.signalCode !== null)
				throw new Error(`fixture ${cmd}: the fixture is not started`);
			const reply = this._reply(cmd);
			this.child.stdin.write(`${cmd}\n`);
			return reply;
		};
		const p = this.queue.then(run, run);
		this.queue = p.catch(() => {});
		return p;
	}

	/* Stop sshd and everything under it; the directory stays (startAgain brings it back). */
	stopServer() {
		return this._command('stop');
	}

	/* Stop everything and start again on the same port with the same keys. */
	restart() {
		return this._command('restart');
	}

	/* A crash: SIGKILL the listener and every sshd under it; user commands are left running. */
	kill9() {
		return this._command('kill9');
	}

	/* Start after kill9 or stopServer (same port, keys, config). */
	startAgain() {
		return this._command('start');
	}

	/* A new host key and a restart; this.config still pins the old key. */
	rotateHostKey() {
		return this._command('rotate-host-key');
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

	logContains(needle) {
		return fs.existsSync(this.log) && fs.readFileSync(this.log, 'utf8').includes(needle);
	}

	/* Stop sshd and everything under it, and remove the directory (the program does, when its stdin closes). */
	async stop() {
		const child = this.child;
		running.delete(this);
		if (!child)
			return;
		this.child = null;
		if (child.exitCode === null && child.signalCode === null)
			child.stdin.end();
		await this.exited;
		this.lines.close();
		this.pid = 0;
	}
}

/* A test process that ends without stop(): its stdin closing does the same, SIGTERM is quicker. */
process.on('exit', () => {
	for (const fx of running)
		if (fx.child)
			fx.child.kill('SIGTERM');
});

async function startSshd(extraSshdConfig = '', opts = {}) {
	return new Sshd(extraSshdConfig, opts).start();
}

/*
 * One fixture and one sandbox for a whole test file: started before its first
 * test, closed after its last. set(fx, sb) hands them to the file's variables.
 */
function sandboxPerFile(set, openOptions = {}) {
	const { before, after } = require('node:test');
	const asp = require('..');
	let fx;
	let sb;

	before(async () => {
		fx = await startSshd();
		sb = await asp.open({ config: fx.config, ...openOptions });
		set(fx, sb);
	});
	after(async () => {
		if (sb)
			await sb.close();
		if (fx)
			await fx.stop();
	});
}

module.exports = { startSshd, Sshd, TEST_USER, program, sandboxPerFile };
