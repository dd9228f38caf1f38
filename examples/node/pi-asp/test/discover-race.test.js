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
import { createRequire } from 'node:module';
import { after, before, describe, it } from 'node:test';

import { createPiAspExtension } from '../index.js';

const require = createRequire(import.meta.url);
const { raceUser, startRace, TEST_USER } = require('../../../../bindings/node/test/discover-racer.js');
const LOADS = 1000;

const user = raceUser();
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
	let race;

	before(async () => {
		race = await startRace(user, 'asp-pirace.', '/victim-ws');
	});

	after(() => {
		race?.stop();
	});

	it(`never obeys the swapped-in file in ${LOADS} loads`, async () => {
		let victimRuns = 0, refused = 0, foreign = 0;
		for (let i = 0; i < LOADS; i++) {
			const told = [];
			const p = recordingPi();
			await createPiAspExtension({ startDir: race.victim, open: { connectTimeout: 5000 },
				report: (m) => told.push(m) })(p);
			/* Never opened (port 1): the tools fail closed, and the user is told why. */
			assert.ok(p.tools.bash, 'the tools fail closed');
			p.handlers.session_start?.({ type: 'session_start' }, {});
			const why = told.join('\n');
			if (/ECONNECT|127\.0\.0\.1|connect/i.test(why) && !/\.asp\.json/.test(why))
				victimRuns++;
			else
				refused++;
			foreign += race.foreignRan();
		}
		assert.equal(race.racer.exitCode, null, 'the racer stopped');
		process.stderr.write(`discover race (pi-asp): ${LOADS} loads: ${victimRuns} victim, ${refused} ` +
			`refused; the attacker's command ran ${foreign} times\n`);
		assert.equal(foreign, 0, `the attacker's x-asp-proxy-command ran ${foreign} of ${LOADS} times`);
		assert.ok(refused > 0, 'no load saw the attacker\'s directory: no race');
		assert.ok(victimRuns > 0, 'no load used the victim\'s file');
	});
});
