/*
 * The extension finds its .asp.json through the library's single-descriptor
 * discovery (readConfig) and opens only the text it judged. A second user
 * (asp-test, made by tools/setup-deps.sh) swaps the victim's project
 * directory with their own inside a shared directory whose group may rename
 * entries (mode 2775, listed in ASP_SAFE_DIRS), with renameat2
 * RENAME_EXCHANGE in a loop. The attacker's connection.x-asp-proxy-command
 * creates a marker file: through 1,000 loads of the extension it must never
 * run. Each load ends on the victim's file (its connect to port 1 is
 * refused) or in a refusal of the attacker's; both must be seen, or the race
 * never reached discovery. (docs/SECURITY.md, "Configuration trust"; the
 * same race against the C API, asp-exec, Python and Node: test_discover_race.c,
 * test_discover_race.py, bindings/node/test/discover-race.test.js.)
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { createPiAspExtension } from '../index.js';

const require = createRequire(import.meta.url);
const LOADS = 1000;
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
		return {
			uid: Number(execFileSync('id', ['-u', TEST_USER], { encoding: 'utf8' })),
			gid: Number(execFileSync('id', ['-g', TEST_USER], { encoding: 'utf8' })),
		};
	} catch {
		return null;
	}
}

const user = process.getuid() === 0 ? testUser() : null;
if (!user)
	process.stderr.write(`SKIP pi-asp discover-race: needs root and the user ${TEST_USER} (tools/setup-deps.sh)\n`);

/* What the extension registers, recorded: the race is in discovery, before pi's part begins. */
function recordingPi() {
	const tools = {};
	const handlers = {};
	return {
		tools, handlers,
		registerTool: (def) => { tools[def.name] = def; },
		on: (event, handler) => { handlers[event] = handler; },
	};
}

describe('pi-asp discovery under a racing renamer', { skip: !user && 'needs root and asp-test' }, () => {
	let base, victim, attacker, marker, racer;
	const saved = {};

	before(async () => {
		base = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-pirace.'));
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
			`{"version":"0","transport":"ssh","connection":{${conn('victim')}},"workspace":"/victim-ws"}`);
		const theirs = path.join(attacker, '.asp.json');
		fs.writeFileSync(theirs, `{"version":"0","transport":"ssh","connection":{${conn('attacker')},` +
			`"x-asp-proxy-command":"touch ${marker}; exit 1"},"workspace":"/w"}`);
		fs.chownSync(theirs, user.uid, user.gid);
		for (const k of ['ASP_CONFIG', 'ASP_SAFE_DIRS', 'ASP_KNOWN_HOSTS'])
			saved[k] = process.env[k];
		delete process.env.ASP_CONFIG;
		process.env.ASP_SAFE_DIRS = shared;
		process.env.ASP_KNOWN_HOSTS = path.join(base, 'kh');
		const koffi = require.resolve('koffi', { paths: [path.dirname(require.resolve('libasp'))] });
		racer = spawn(process.execPath, ['-e', RACER, koffi, victim, attacker],
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

	it(`never obeys the swapped-in file in ${LOADS} loads`, async () => {
		let victimRuns = 0, refused = 0, foreign = 0;
		for (let i = 0; i < LOADS; i++) {
			const told = [];
			const p = recordingPi();
			await createPiAspExtension({ startDir: victim, open: { connectTimeout: 5000 },
				report: (m) => told.push(m) })(p);
			/* Never opened (port 1): the tools fail closed, and the user is told why. */
			assert.ok(p.tools.bash, 'the tools fail closed');
			p.handlers.session_start?.({ type: 'session_start' }, {});
			const why = told.join('\n');
			if (/ECONNECT|127\.0\.0\.1|connect/i.test(why) && !/\.asp\.json/.test(why))
				victimRuns++;
			else
				refused++;
			if (fs.existsSync(marker)) {
				fs.unlinkSync(marker);
				foreign++;
			}
		}
		assert.equal(racer.exitCode, null, 'the racer stopped');
		process.stderr.write(`discover race (pi-asp): ${LOADS} loads: ${victimRuns} victim, ${refused} ` +
			`refused; the attacker's command ran ${foreign} times\n`);
		assert.equal(foreign, 0, `the attacker's x-asp-proxy-command ran ${foreign} of ${LOADS} times`);
		assert.ok(refused > 0, 'no load saw the attacker\'s directory: no race');
		assert.ok(victimRuns > 0, 'no load used the victim\'s file');
	});
});
