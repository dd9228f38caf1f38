'use strict';
/*
 * The racing renamer of the discovery race tests (discover-race.test.js
 * here, examples/node/pi-asp/test/discover-race.test.js): a second user
 * (asp-test, made by tools/setup-deps.sh) swaps the victim's project
 * directory with their own inside a shared directory whose group may rename
 * entries (mode 2775, listed in ASP_SAFE_DIRS), with renameat2
 * RENAME_EXCHANGE in a loop. The victim's .asp.json connects to port 1
 * (refused); the attacker's x-asp-proxy-command creates `marker`.
 */
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

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

/* The second user, or null (not root, or no asp-test): the caller skips, loudly. */
function raceUser() {
	if (process.getuid() !== 0)
		return null;
	try {
		return {
			uid: Number(execFileSync('id', ['-u', TEST_USER], { encoding: 'utf8' })),
			gid: Number(execFileSync('id', ['-g', TEST_USER], { encoding: 'utf8' })),
		};
	} catch {
		return null;
	}
}

/*
 * Lay out the two projects, set the environment and start the racer; the
 * returned race's stop() undoes all of it. workspace: the victim's.
 */
async function startRace(user, prefix, workspace = '/w') {
	const base = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
	fs.chmodSync(base, 0o755);
	const shared = path.join(base, 'shared');
	const victim = path.join(shared, 'victim');
	const attacker = path.join(shared, 'attacker');
	const marker = path.join(base, 'foreign-command-ran');
	fs.mkdirSync(shared);
	fs.chownSync(shared, 0, user.gid);
	fs.chmodSync(shared, 0o2775);
	fs.mkdirSync(victim, { mode: 0o755 });
	fs.mkdirSync(attacker, { mode: 0o755 });
	fs.chownSync(attacker, user.uid, user.gid);
	const conn = (who) => `"host":"127.0.0.1","port":1,"user":"${who}"`;
	fs.writeFileSync(path.join(victim, '.asp.json'),
		`{"version":"0","transport":"ssh","connection":{${conn('victim')}},"workspace":"${workspace}"}`);
	const theirs = path.join(attacker, '.asp.json');
	fs.writeFileSync(theirs, `{"version":"0","transport":"ssh","connection":{${conn('attacker')},` +
		`"x-asp-proxy-command":"touch ${marker}; exit 1"},"workspace":"/w"}`);
	fs.chownSync(theirs, user.uid, user.gid);
	const saved = {};
	for (const k of ['ASP_CONFIG', 'ASP_SAFE_DIRS', 'ASP_KNOWN_HOSTS'])
		saved[k] = process.env[k];
	delete process.env.ASP_CONFIG;
	process.env.ASP_SAFE_DIRS = shared;
	process.env.ASP_KNOWN_HOSTS = path.join(base, 'kh');
	const racer = spawn(process.execPath, ['-e', RACER, require.resolve('koffi'), victim, attacker],
		{ uid: user.uid, gid: user.gid, stdio: ['ignore', 'pipe', 'inherit'] });
	const first = await new Promise((resolve) => racer.stdout.once('data', resolve));
	assert.equal(String(first), 'swapping\n');
	return {
		victim, attacker, marker, racer,
		/* 1 when the attacker's command ran since the last look (the marker is taken away). */
		foreignRan() {
			if (!fs.existsSync(marker))
				return 0;
			fs.unlinkSync(marker);
			return 1;
		},
		stop() {
			racer.kill('SIGKILL');
			for (const [k, v] of Object.entries(saved))
				if (v === undefined)
					delete process.env[k];
				else
					process.env[k] = v;
			fs.rmSync(base, { recursive: true, force: true });
		},
	};
}

module.exports = { raceUser, startRace, TEST_USER };
