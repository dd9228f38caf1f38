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
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { describe, it, before, after } = require('node:test');

const asp = require('..');
const { raceUser, startRace, TEST_USER } = require('./discover-racer.js');

const OPENS = 1000;

const user = raceUser();
if (!user)
	process.stderr.write(`SKIP discover-race: needs root and the user ${TEST_USER} (tools/setup-deps.sh)\n`);

describe('discovery under a racing renamer', { skip: !user && 'needs root and asp-test' }, () => {
	let race;

	before(async () => {
		race = await startRace(user, 'asp-noderace.');
	});

	after(() => {
		race?.stop();
	});

	async function run(openOnce, what) {
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
			foreign += race.foreignRan();
		}
		assert.equal(race.racer.exitCode, null, 'the racer stopped');
		process.stderr.write(`discover race (node, ${what}): ${OPENS} opens: ${victimRuns} victim, ` +
			`${refused} refused; the attacker's command ran ${foreign} times\n`);
		assert.equal(foreign, 0, `${what}: the attacker's x-asp-proxy-command ran ${foreign} of ${OPENS} times`);
		assert.ok(refused > 0, 'no open saw the attacker\'s directory: no race');
		assert.ok(victimRuns > 0, 'no open used the victim\'s file');
	}

	it('open({ startDir }) never uses the swapped-in file', async () => {
		await run(() => asp.open({ startDir: race.victim, connectTimeout: 5000 }), 'open');
	});

	it('readConfig() + open({ configText }) never uses the swapped-in file', async () => {
		await run(async () => {
			const { path: file, text } = await asp.readConfig(race.victim);
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
