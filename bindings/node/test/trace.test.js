'use strict';
/*
 * ASP_DEBUG=1 in the environment: libasp writes its trace to stderr
 * ("asp: LEVEL: ..."), under Node as anywhere. A child node process
 * opens the sshd fixture's sandbox and runs a command; never the user name.
 */
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { after, before, it } = require('node:test');

const { startSshd } = require('./sshd-fixture.js');

let fx;

before(async () => {
	fx = await startSshd();
});

after(async () => {
	if (fx)
		await fx.stop();
});

function runChild(env) {
	const code = `const asp = require(${JSON.stringify(path.join(__dirname, '..'))});
(async () => {
	const sb = await asp.open({ config: ${JSON.stringify(fx.config)} });
	const r = await sb.exec('echo hi');
	process.stdout.write(r.stdout);
	await sb.close();
})().catch((e) => { console.error(e); process.exit(1); });`;
	return spawnSync(process.execPath, ['-e', code], { env, encoding: 'utf8', timeout: 120000 });
}

it('ASP_DEBUG=1 writes the trace to stderr', () => {
	const p = runChild({ ...process.env, ASP_DEBUG: '1' });
	assert.equal(p.status, 0, p.stderr);
	assert.equal(p.stdout, 'hi\n');
	assert.match(p.stderr, new RegExp(`asp: info: connected to 127\\.0\\.0\\.1:${fx.port} in \\d+ ms`));
	assert.match(p.stderr, /asp: debug: exec in \S+: ok in \d+ ms via exec channel/);
	assert.ok(!p.stderr.includes(fx.user), `the user name on stderr: ${p.stderr}`);
});

it('no trace without ASP_DEBUG', () => {
	const env = { ...process.env };
	delete env.ASP_DEBUG;
	const p = runChild(env);
	assert.equal(p.status, 0, p.stderr);
	assert.ok(!p.stderr.includes('asp: '), p.stderr);
});
