/*
 * The boundary, seen by a model: the real pi program (print mode, this
 * extension loaded with -e) talks to a scripted model on 127.0.0.1, and the
 * test reads what pi sent it. Nothing of the harness may show, and the
 * harness host must not be hurt (its /tmp, its processes, its files).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { makeAgentDir, piPackageDir, runPi, startModel } from './real-pi.js';

const require = createRequire(import.meta.url);
const { startSshd } = require('../../../../bindings/node/test/sshd-fixture.js');

let fx;
const cleanup = [];

function tempDir(prefix) {
	const d = fs.mkdtempSync(`/tmp/${prefix}.`);
	cleanup.push(d);
	return d;
}

/* A harness directory: pi's cwd, with a context file of its own that must not reach the model. */
function harnessDir() {
	const d = tempDir('pi-asp-harness');
	fs.writeFileSync(path.join(d, 'AGENTS.md'), 'HARNESS-ONLY-CONTEXT\n');
	return d;
}

/* pi once, with a scripted model; what it sent the model, and how it ended. */
async function piSession(steps, { cwd, env, tmp, agentFiles = {} }) {
	const model = await startModel(steps);
	const agentDir = makeAgentDir(model.url);
	cleanup.push(agentDir);
	for (const [name, text] of Object.entries(agentFiles)) {
		fs.mkdirSync(path.dirname(path.join(agentDir, name)), { recursive: true });
		fs.writeFileSync(path.join(agentDir, name), text);
	}
	try {
		const { done } = runPi({ cwd, agentDir, env: { TMPDIR: tmp ?? tempDir('pi-asp-tmp'), ...env } });
		const r = await done;
		return { ...r, model, agentDir };
	} finally {
		await model.close();
	}
}

/* Every place of the harness that must not show in what the model sees. */
function assertNoHarnessPath(text, { cwd, agentDir }) {
	for (const p of [cwd, agentDir, piPackageDir, 'node_modules', 'HARNESS-ONLY-CONTEXT'])
		assert.ok(!text.includes(p), `the model saw ${p}:\n${text}`);
}

async function closedPort() {
	const s = net.createServer();
	await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
	const { port } = s.address();
	await new Promise((resolve) => s.close(resolve));
	return port;
}

/* pi's output files in a temp directory (pi keeps its extension cache, jiti, there too). */
function outputFiles(dir) {
	return fs.readdirSync(dir).filter((n) => n.startsWith('pi-bash-'));
}

/* Output files in the sandbox's /tmp (this machine's here) that hold tag. */
function sandboxOutputFilesWith(tag) {
	return outputFiles('/tmp').filter((n) => {
		try {
			return fs.readFileSync(path.join('/tmp', n), 'utf8').includes(tag);
		} catch {
			return false;
		}
	});
}

/* Processes (not zombies) whose command line holds tag. */
function processesWith(tag) {
	const r = spawnSync('ps', ['-eo', 'stat=,args='], { encoding: 'utf8' });
	return r.stdout.split('\n').filter((l) => l.includes(tag) && !/^\s*Z/.test(l) && !l.includes('ps -eo'));
}

before(async () => {
	fx = await startSshd();
	if (process.getuid() === 0)
		fs.chownSync(fx.workspace, fx.uid, fx.gid);
});

after(async () => {
	for (const d of cleanup)
		fs.rmSync(d, { recursive: true, force: true });
	if (fx)
		await fx.stop();
});

describe('what a real pi session shows the model', () => {
	it('a bash call runs in the sandbox', async () => {
		const cwd = harnessDir();
		const r = await piSession([{ tool: 'bash', args: { command: 'pwd' } }], { cwd, env: { ASP_CONFIG: fx.config } });
		assert.equal(r.code, 0, r.stderr);
		assert.deepEqual(r.model.toolResults(), [`${fx.workspace}\n`]);
	});

	it('truncated bash output: the full output is in the sandbox at the path the model is given', async () => {
		const cwd = harnessDir();
		const tmp = tempDir('pi-asp-tmp');
		let given;
		const r = await piSession([
			{ tool: 'bash', args: { command: 'seq 1 100000' } },
			(body) => {
				const text = body.messages.filter((m) => m.role === 'tool').pop().content;
				given = /Full output: (\S+?)\]/.exec(text)?.[1];
				return { tool: 'read', args: { path: given ?? 'none', offset: 99999 } };
			},
		], { cwd, tmp, env: { ASP_CONFIG: fx.config } });
		assert.equal(r.code, 0, r.stderr);
		const [bash, read] = r.model.toolResults();
		assert.match(bash, /\n100000\n\n\n\[Showing lines \d+-100001 of 100001\. Full output: \S+\]$/, bash);
		assert.ok(given, bash);
		/* The model's read of that path finds the whole output there. */
		assert.equal(read, '99999\n100000\n');
		/* Nothing of it on the harness: no output file in pi's temp directory. */
		assert.deepEqual(outputFiles(tmp), []);
		try {
			/* The sandbox made the file, as the sandbox user, 0600. */
			if (process.getuid() === 0)
				assert.equal(fs.statSync(given).uid, fx.uid);
			assert.equal(fs.statSync(given).mode & 0o777, 0o600);
			assert.equal(fs.readFileSync(given, 'utf8'), `${Array.from({ length: 100000 }, (_, i) => i + 1).join('\n')}\n`);
		} finally {
			fs.rmSync(given, { force: true });
		}
	});

	it('bash output that is not truncated leaves no file anywhere', async () => {
		const cwd = harnessDir();
		const tmp = tempDir('pi-asp-tmp');
		const tag = `small-${crypto.randomInt(1e6, 1e7)}`;
		/* Small, and 30 KB (too large for the wrapper to know it will not be truncated; 50 KB is the limit). */
		const r = await piSession([
			{ tool: 'bash', args: { command: `echo ${tag}` } },
			{ tool: 'bash', args: { command: `head -c 30000 /dev/zero | tr '\\0' y; echo; echo ${tag}` } },
		], { cwd, tmp, env: { ASP_CONFIG: fx.config } });
		assert.equal(r.code, 0, r.stderr);
		assert.deepEqual(r.model.toolResults(), [`${tag}\n`, `${'y'.repeat(30000)}\n${tag}\n`]);
		assert.deepEqual(outputFiles(tmp), []);
		/* The sandbox's /tmp (this machine's here) keeps no copy either. */
		assert.deepEqual(sandboxOutputFilesWith(tag), []);
	});

	for (const [what, over] of [
		['a wrong host key', async () => ({ connection: { host_key: 'SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } })],
		['the sandbox down', async () => ({ connection: { port: await closedPort() } })],
	]) {
		it(`fail-closed start (${what}): the prompt names the workspace, and nothing of the harness`, async () => {
			const cwd = harnessDir();
			const config = fx.writeConfig(path.join(tempDir('pi-asp-cfg'), '.asp.json'), await over());
			const r = await piSession([{ tool: 'bash', args: { command: 'echo x > leaked.txt' } }], { cwd, env: { ASP_CONFIG: config } });
			const prompt = r.model.systemPrompt();
			assert.match(prompt, new RegExp(`\nCurrent working directory: ${fx.workspace}$`));
			assertNoHarnessPath(prompt, { cwd, agentDir: r.agentDir });
			assert.deepEqual(r.model.toolResults(), ['bash cannot run: the environment is unavailable']);
			assert.deepEqual(fs.readdirSync(cwd), ['AGENTS.md']);
		});
	}

	it('context files come from the workspace, by sandbox path; no harness path in the prompt', async () => {
		const cwd = harnessDir();
		fs.writeFileSync(path.join(fx.workspace, 'AGENTS.md'), 'SANDBOX-CONTEXT\n');
		try {
			/* The user's global context file and a skill: files on the harness, under harness paths. */
			const agentFiles = {
				'AGENTS.md': 'HARNESS-ONLY-CONTEXT (global)\n',
				'skills/harness-skill/SKILL.md': '---\nname: harness-skill\ndescription: A skill whose file is on the harness.\n---\nHARNESS-ONLY-CONTEXT\n',
			};
			const r = await piSession([{ text: 'ok' }], { cwd, agentFiles, env: { ASP_CONFIG: fx.config } });
			assert.equal(r.code, 0, r.stderr);
			const prompt = r.model.systemPrompt();
			assert.ok(prompt.includes(`## ${fx.workspace}/AGENTS.md\n\nSANDBOX-CONTEXT\n`), prompt);
			assert.match(prompt, new RegExp(`\nCurrent working directory: ${fx.workspace}$`));
			assertNoHarnessPath(prompt, { cwd, agentDir: r.agentDir });
		} finally {
			fs.rmSync(path.join(fx.workspace, 'AGENTS.md'), { force: true });
		}
	});

	for (const signal of ['SIGTERM', 'SIGINT']) {
		/* The timeout only stops a hang (pi waiting for a command that never ends); nothing is timed. */
		it(`${signal} while a tool runs: pi exits, and the remote command is killed`, { timeout: 60_000 }, async () => {
			const cwd = harnessDir();
			const tag = `3600.${crypto.randomInt(1e6, 1e7)}`;
			const model = await startModel([{ tool: 'bash', args: { command: `echo started-${tag}; sleep ${tag}` } }]);
			const agentDir = makeAgentDir(model.url);
			cleanup.push(agentDir);
			try {
				const { child, done } = runPi({ cwd, agentDir, env: { ASP_CONFIG: fx.config, TMPDIR: tempDir('pi-asp-tmp') } });
				/* Wait for the remote command to be running (no deadline: the test's own timeout guards a hang). */
				while (!processesWith(tag).length)
					await new Promise((resolve) => setTimeout(resolve, 50));
				child.kill(signal);
				const r = await done;
				assert.ok(r.code !== 0 || r.signal, JSON.stringify(r));
				assert.deepEqual(processesWith(tag), []);
				/* The killed command's output file in the sandbox went with it. */
				assert.deepEqual(sandboxOutputFilesWith(`started-${tag}`), []);
			} finally {
				await model.close();
			}
		});
	}
});

describe('discovery, seen from pi', () => {
	it('ASP_CONFIG set but empty is refused: no tool runs locally', async () => {
		const cwd = harnessDir();
		const r = await piSession([{ tool: 'bash', args: { command: 'echo x > leaked.txt' } }], { cwd, env: { ASP_CONFIG: '' } });
		assert.deepEqual(r.model.toolResults(), ['bash cannot run: the environment is unavailable']);
		assert.deepEqual(fs.readdirSync(cwd), ['AGENTS.md']);
		assert.match(r.stderr, /pi-asp: .*ASP_CONFIG/);
	});

	it('no .asp.json anywhere: pi stays local, and says so once on stderr', async () => {
		const cwd = harnessDir();
		const r = await piSession([{ tool: 'bash', args: { command: 'echo local > here.txt' } }], { cwd, env: { ASP_CONFIG: undefined } });
		assert.equal(r.code, 0, r.stderr);
		assert.equal(fs.readFileSync(path.join(cwd, 'here.txt'), 'utf8'), 'local\n');
		const lines = r.stderr.split('\n').filter((l) => l.startsWith('pi-asp:'));
		assert.equal(lines.length, 1, r.stderr);
		assert.match(lines[0], /no \.asp\.json/);
	});
});
