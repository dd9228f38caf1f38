'use strict';
/*
 * A discovered .asp.json is judged and read through one descriptor. A
 * second user (asp-test, made by tools/setup-deps.sh) swaps the victim's
 * project directory with their own inside a shared directory whose group
 * may rename entries (mode 2775, listed in ASP_SAFE_DIRS), with renameat2
 * RENAME_EXCHANGE in a loop. The attacker's connection.x-asp-proxy-command
 * creates a marker file; through open({ startDir }) and through
 * readConfig() + open({ config, configText }) it must never run. Each open
 * ends on the victim's file (its connect to port 1 is refused) or in a
 * refusal; at least one refusal shows the swap reached discovery.
 * (docs/SECURITY.md, "Configuration trust"; the C side is
 * tests/integration/test_discover_race.c.)
 */

const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { describe, it, before, after } = require('node:test');

const asp = require('..');

const OPENS = 1000;
const TEST_USER = 'asp-test';

const RACER = `
const koffi = require(process.argv[1]);
const libc = koffi.load('libc.so.6');
const renameat2 = libc.func('int renameat2(int, const char *, int, const char *, unsigned int)');
const [a, b] = process.argv.slice(2);
process.stdout.write('swapping\\n');
while (renameat2(-100, a, -100, b, 2) === 0)
	;
process.exit(3);
`;

function testUser() {
	try {
		const uid = Number(execFileSync('id', ['-u', TEST_USER], { encoding: 'utf8' }));
		const gid = Number(execFileSync('id', ['-g', TEST_USER], { encoding: 'utf8' }));
		return { uid, gid };
	} catch {
		return null;
	}
}

const user = process.getuid() === 0 ? testUser() : null;
if (!user)
	process.stderr.write(`SKIP discover-race: needs root and the user ${TEST_USER} (tools/setup-deps.sh)\n`);

describe('discovery under a racing renamer', { skip: !user && 'needs root and asp-test' }, () => {
	let base, victim, attacker, marker, racer;
	const saved = {};

	before(async () => {
		base = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-noderace.'));
		fs.chmodSync(base, 0o755);
		const shared = path.join(base, 'shared');
		victim = path.join(shared, 'victim');
		attacker = path.join(shared, 'attacker');
		marker = path.join(base, 'foreign-command-ran');
		fs.mkdirSync(shared);
		fs.chownSync(shared, 0, user.gid);
		fs.chmodSync(shared, 0o2775);
		fs.mkdirSync(victim, { mode: 0o755 });
		fs.mkdirSync(attacker, { mode: 0o755 });
		fs.chownSync(attacker, user.uid, user.gid);
		const conn = (who) => `"host":"127.0.0.1","port":1,"user":"${who}"`;
		fs.writeFileSync(path.join(victim, '.asp.json'),
			`{"version":"0","transport":"ssh","connection":{${conn('victim')}},"workspace":"/w"}`);
		const theirs = path.join(attacker, '.asp.json');
		fs.writeFileSync(theirs, `{"version":"0","transport":"ssh","connection":{${conn('attacker')},` +
			`"x-asp-proxy-command":"touch ${marker}; exit 1"},"workspace":"/w"}`);
		fs.chownSync(theirs, user.uid, user.gid);
		for (const k of ['ASP_CONFIG', 'ASP_SAFE_DIRS', 'ASP_KNOWN_HOSTS'])
			saved[k] = process.env[k];
		delete process.env.ASP_CONFIG;
		process.env.ASP_SAFE_DIRS = shared;
		process.env.ASP_KNOWN_HOSTS = path.join(base, 'kh');
		racer = spawn(process.execPath, ['-e', RACER, require.resolve('koffi'), victim, attacker],
			{ uid: user.uid, gid: user.gid, stdio: ['ignore', 'pipe', 'inherit'] });
		const first = await new Promise((resolve) => racer.stdout.once('data', resolve));
		assert.equal(String(first), 'swapping\n');
	});

	after(() => {
		if (racer)
			racer.kill('SIGKILL');
		for (const [k, v] of Object.entries(saved))
			if (v === undefined)
				delete process.env[k];
			else
				process.env[k] = v;
		if (base)
			fs.rmSync(base, { recursive: true, force: true });
	});

	async function race(openOnce, what) {
		let victimRuns = 0, refused = 0, foreign = 0;
		for (let i = 0; i < OPENS; i++) {
			try {
				await (await openOnce()).close();
				assert.fail(`${what}: the sandbox opened`);
			} catch (e) {
				if (e.code === 'ASP_ECONNECT') {
					assert.match(e.message, /127\.0\.0\.1/);
					victimRuns++;
				} else if (e.code === 'ASP_ECONFIG' || e.code === 'ASP_ENOCONFIG') {
					refused++;
				} else {
					throw e;
				}
			}
			if (fs.existsSync(marker)) {
				fs.unlinkSync(marker);
				foreign++;
			}
		}
		assert.equal(racer.exitCode, null, 'the racer stopped');
		process.stderr.write(`discover race (node, ${what}): ${OPENS} opens: ${victimRuns} victim, ` +
			`${refused} refused; the attacker's command ran ${foreign} times\n`);
		assert.equal(foreign, 0, `${what}: the attacker's x-asp-proxy-command ran ${foreign} of ${OPENS} times`);
		assert.ok(refused > 0, 'no open saw the attacker\'s directory: no race');
		assert.ok(victimRuns > 0, 'no open used the victim\'s file');
	}

	it('open({ startDir }) never uses the swapped-in file', async () => {
		await race(() => asp.open({ startDir: victim, connectTimeout: 5000 }), 'open');
	});

	it('readConfig() + open({ configText }) never uses the swapped-in file', async () => {
		await race(async () => {
			const { path: file, text } = await asp.readConfig(victim);
			return asp.open({ config: file, configText: text, connectTimeout: 5000 });
		}, 'readConfig');
	});
});

describe('configText', () => {
	it('opens from the text alone; the name only labels it', async () => {
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-nodetext.'));
		try {
			const named = path.join(dir, 'nowhere', '.asp.json');
			const text = '{"version":"0","transport":"ssh","connection":{"host":"127.0.0.1","user":"u"},' +
				'"workspace":"/w"}';
			const sb = await asp.open({ config: named, configText: text, lazy: true, knownHosts: path.join(dir, 'kh') });
			assert.equal(sb.configPath, named);
			assert.equal(sb.workspace, '/w');
			await sb.close();
			await assert.rejects(asp.open({ config: named, configText: '{"version":"0"}', lazy: true }),
				(e) => e.code === 'ASP_ECONFIG' && e.message.startsWith(named));
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});
});
