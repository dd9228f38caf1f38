'use strict';
/*
 * tools/setup-deps.sh --check-node: the gate of the pi example's tests in
 * `make check-node`. A fake `node` first in PATH (a script that prints a
 * version) shows which way each version goes: new enough runs them, too old
 * skips them loudly (exit 3), and under the strict switch fails (exit 1).
 */

const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { after, describe, it } = require('node:test');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const SCRIPT = path.join(ROOT, 'tools', 'setup-deps.sh');
/* The pi example's minimum, from its package.json, e.g. '20.18.1'. */
const MIN = JSON.parse(fs.readFileSync(path.join(ROOT, 'examples', 'node', 'pi-asp', 'package.json'), 'utf8'))
	.engines.node.replace(/^>=\s*/, '');
const MIN_RE = MIN.replace(/\./g, '\\.');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'asp-node-fake-'));

after(() => fs.rmSync(dir, { recursive: true, force: true }));

/* Run the check with a node that says it is `version` (null: no node at all). */
function check(version, env = {}) {
	const bin = fs.mkdtempSync(path.join(dir, 'bin-'));
	if (version)
		fs.writeFileSync(path.join(bin, 'node'), `#!/bin/sh\necho ${version}\n`, { mode: 0o755 });
	const base = { ...process.env };
	delete base.CI;
	delete base.ASP_REQUIRE_NODE20;
	/* Without a node, PATH is only the tools the script runs (the system's directories have a node). */
	if (!version) {
		for (const tool of ['id', 'dirname', 'sed', 'sort', 'head'])
			fs.symlinkSync(path.join('/usr/bin', tool), path.join(bin, tool));
	}
	const PATH = version ? `${bin}:${process.env.PATH}` : bin;
	const r = spawnSync('/bin/sh', [SCRIPT, '--check-node'], { env: { ...base, PATH, ...env }, encoding: 'utf8' });
	return { code: r.status, out: r.stdout + r.stderr };
}

describe('setup-deps.sh --check-node', () => {
	it('takes this machine\'s node the way its version says', () => {
		const env = { ...process.env };
		delete env.CI;
		delete env.ASP_REQUIRE_NODE20;
		const r = spawnSync('/bin/sh', [SCRIPT, '--check-node'], { env, encoding: 'utf8' });
		const have = spawnSync('node', ['--version'], { encoding: 'utf8' }).stdout.trim().slice(1).split('.').map(Number);
		const min = MIN.split('.').map(Number);
		const newEnough = have[0] !== min[0] ? have[0] > min[0] : have[1] !== min[1] ? have[1] > min[1] : have[2] >= min[2];
		if (newEnough) {
			assert.equal(r.status, 0, r.stdout + r.stderr);
			assert.match(r.stdout, new RegExp(`^setup-deps: node v\\d+\\.\\d+\\.\\d+ \\(examples/node/pi-asp needs >= ${MIN_RE}\\): ok\n$`));
		} else {
			assert.equal(r.status, 3, r.stdout + r.stderr);
			assert.match(r.stderr, /^setup-deps: SKIPPED \(1 part\)/);
		}
	});

	it('Node 18 (Debian 12\'s) is a loud, counted skip', () => {
		const r = check('v18.19.0');
		assert.equal(r.code, 3, r.out);
		assert.match(r.out, new RegExp(`^setup-deps: SKIPPED \\(1 part\\): the examples/node/pi-asp tests: node v18\\.19\\.0 is older than ${MIN_RE}`));
	});

	it('Node 18 fails under ASP_REQUIRE_NODE20=1, and under CI=true unless ASP_REQUIRE_NODE20=0', () => {
		for (const env of [{ ASP_REQUIRE_NODE20: '1' }, { CI: 'true' }]) {
			const r = check('v18.19.0', env);
			assert.equal(r.code, 1, `${JSON.stringify(env)}: ${r.out}`);
			assert.match(r.out, new RegExp(`^setup-deps: FAILED: node v18\\.19\\.0 is older than ${MIN_RE}`));
		}
		assert.equal(check('v18.19.0', { CI: 'true', ASP_REQUIRE_NODE20: '0' }).code, 3);
	});

	it('compares whole version numbers, against the pi example\'s engines', () => {
		assert.equal(MIN, '20.18.1', 'the cases below are around 20.18.1: update them with the engines');
		assert.equal(check('v20.18.0').code, 3);
		assert.equal(check('v20.9.99').code, 3);
		assert.equal(check('v20.18.1').code, 0);
		assert.equal(check('v20.100.0').code, 0);
		assert.equal(check('v22.0.0').code, 0);
		assert.equal(check('v100.0.0').code, 0);
	});

	it('no node at all, or one that prints garbage, is not new enough', () => {
		const none = check(null);
		assert.equal(none.code, 3, none.out);
		assert.match(none.out, /SKIPPED \(1 part\).*no node/);
		assert.equal(check('garbage').code, 3);
	});
});
